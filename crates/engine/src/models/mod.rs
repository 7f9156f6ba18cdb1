//! Causal language models: the [`CausalLm`] contract, one file per architecture, and loading
//! from a GGUF file.
//!
//! Invariant: a model's weights never change while it runs; what a conversation leaves in it
//! is a [`crate::sequence::Sequence`] apart from them. [`decoder::Decoder`] runs any number of
//! sequences through `&self`, several in one pass (`forward_batch`) with each sequence's bits
//! those of its pass alone; [`decoder::LiveDecoder`], the weights and the one sequence they
//! run now, is the [`CausalLm`] the decoding loops drive, and parks and takes up sequences by
//! move.

pub mod decoder;
pub mod gemma3;
pub mod llama;
pub mod qwen2;
pub mod qwen3;

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::quant::{has_slow_cpu_kernel, with_fast_cpu_kernel};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use specula_protocol::{KvFormat, AUTO_CONTEXT};
use std::collections::{BTreeMap, HashMap};

/// Prompt tokens fed per target pass during prefill: between chunks the sink may cancel. Long
/// enough that the multi-row kernels run full tiles, short enough that a cancel is heard
/// within a fraction of a second on the CPU. The models size their scratch space for it.
pub const PREFILL_CHUNK: usize = 128;

/// A model with a KV cache that scores every new position and rolls back.
pub trait CausalLm: Send {
    /// Append `tokens` to the cache; logits for every new position, `[n, vocab]`.
    fn forward(&mut self, tokens: &[u32]) -> Result<Tensor>;
    /// Append `tokens` to the cache; logits for the last position only, `[1, vocab]`.
    /// Prompt prefill uses this: the lm_head is the largest matmul of a pass.
    fn forward_last(&mut self, tokens: &[u32]) -> Result<Tensor>;
    /// Forget cached positions from `len` on.
    fn truncate(&mut self, len: usize);
    /// Cached positions.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Positions the cache can hold.
    fn capacity(&self) -> usize;
    fn vocab_size(&self) -> usize;
    /// Where the weights live.
    fn device(&self) -> Device {
        Device::Cpu
    }
    /// Score only the tokens `ids` from now on (the others get -inf), and the tokens fed from
    /// then on (the conversation's own words), or all again with `None`: a draft's output
    /// layer cut down to the tokens worth proposing. Returns whether the model could.
    fn restrict_output(&mut self, _ids: Option<&[u32]>) -> Result<bool> {
        Ok(false)
    }
    /// Move out the sequence it runs (what the tokens fed so far left in it), leaving it an
    /// empty one, so that another conversation can run and this one resume later; `None` when
    /// it cannot.
    fn park(&mut self) -> Result<Option<SavedState>> {
        Ok(None)
    }
    /// Run from now on a copy of the first `len` positions of `from`, a sequence this model
    /// parked: a conversation that shares that prefix.
    fn fork(&mut self, _from: &SavedState, _len: usize) -> Result<()> {
        Err(Error::InvalidSetting("this model cannot start from a parked sequence".into()))
    }
    /// Run `state`, parked by this model (or read by [`CausalLm::read_state`]), from now on.
    fn restore(&mut self, _state: SavedState) -> Result<()> {
        Err(Error::InvalidSetting("this model cannot restore a saved state".into()))
    }
    /// Bytes the live positions of the sequence it runs hold (what a file of it takes).
    fn live_bytes(&self) -> usize {
        0
    }
    /// Write the sequence it runs for a file (a prompt kept across restarts); whether it could.
    fn write_live(&self, _out: &mut dyn std::io::Write) -> Result<bool> {
        Ok(false)
    }
    /// The same weights running an empty sequence of its own, its passes taken with other
    /// replies' by `passes` (`None`: alone): a model for another reply, on another thread.
    /// `None` when it cannot share its weights.
    fn share(&self, _passes: Option<std::sync::Arc<dyn Passes>>) -> Option<Box<dyn CausalLm>> {
        None
    }
    /// Replies whose passes are taken with this one's now (1: alone).
    fn sharing(&self) -> usize {
        1
    }
    /// Bytes one sequence takes once it fills the context (its keys and values).
    fn sequence_bytes(&self) -> usize {
        0
    }
    /// Take its passes with other replies' by `passes` from now on (`None`: alone).
    fn set_passes(&mut self, _passes: Option<std::sync::Arc<dyn Passes>>) {}
    /// A sequence [`CausalLm::write_live`] wrote, checked against this model's shapes as it is
    /// read: a file is never trusted.
    fn read_state(&self, _input: &mut dyn std::io::Read) -> Result<SavedState> {
        Err(Error::InvalidSetting("this model cannot read a saved state".into()))
    }
}

/// Where a model's passes run when several replies share its weights: `crate::step::Step`
/// takes each with the other replies' waiting at the time. A trait here, so that the models
/// know nothing of the step above them.
pub trait Passes: Send + Sync {
    /// Append `tokens` to `sequence`; logits as [`decoder::Decoder::forward`] gives them.
    fn forward(
        &self,
        decoder: &std::sync::Arc<decoder::Decoder>,
        sequence: &mut crate::sequence::Sequence,
        tokens: &[u32],
        all_positions: bool,
    ) -> Result<Tensor>;
    /// Replies taking their passes here now (at least 1).
    fn sharing(&self) -> usize;
}

/// A sequence a model parked or read ([`CausalLm::park`]): its own type inside, and its size.
pub struct SavedState {
    /// Positions it holds.
    pub len: usize,
    /// Host memory it takes.
    pub bytes: usize,
    inner: Box<dyn std::any::Any + Send + Sync>,
}

impl SavedState {
    pub fn new<T: std::any::Any + Send + Sync>(len: usize, bytes: usize, inner: T) -> Self {
        Self { len, bytes, inner: Box::new(inner) }
    }

    /// The model's own state, when this is one of its kind.
    pub fn get<T: std::any::Any>(&self) -> Option<&T> {
        self.inner.downcast_ref()
    }

    /// The model's own state, moved out, when this is one of its kind.
    pub fn take<T: std::any::Any>(self) -> Option<T> {
        self.inner.downcast::<T>().ok().map(|inner| *inner)
    }
}

/// Where a model's tensors come from: a GGUF file, or a map built in a test.
pub trait WeightSource {
    fn has(&self, name: &str) -> bool;
    /// A tensor's shape, outermost first, without reading it.
    fn shape(&self, name: &str) -> Option<Vec<usize>>;
    /// A weight to multiply by, in the type with the fastest kernel on `device`.
    fn quantized(&mut self, name: &str, device: &Device) -> Result<QTensor>;
    /// A small tensor (norms, biases), dequantized to f32.
    fn dense(&mut self, name: &str, device: &Device) -> Result<Tensor> {
        Ok(self.quantized(name, device)?.dequantize(device)?)
    }
}

impl WeightSource for GgufFile {
    fn has(&self, name: &str) -> bool {
        self.has_tensor(name)
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        GgufFile::shape(self, name).map(<[usize]>::to_vec)
    }

    fn quantized(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        let tensor = self.tensor(name, device)?;
        with_fast_cpu_kernel(tensor, device)
    }

    fn dense(&mut self, name: &str, device: &Device) -> Result<Tensor> {
        Ok(self.tensor(name, device)?.dequantize(device)?)
    }
}

/// Dense f32 tensors by llama.cpp name: how tests build small random models.
impl WeightSource for HashMap<String, Tensor> {
    fn has(&self, name: &str) -> bool {
        self.contains_key(name)
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.get(name).map(|t| t.dims().to_vec())
    }

    fn quantized(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        Ok(QTensor::quantize(&self.dense(name, device)?, GgmlDType::F32)?)
    }

    fn dense(&mut self, name: &str, device: &Device) -> Result<Tensor> {
        let t = self.get(name).ok_or_else(|| Error::BadMetadata(format!("tensor `{name}` is missing")))?;
        Ok(t.to_device(device)?)
    }
}

pub const SUPPORTED_ARCHITECTURES: &[&str] = &["qwen2", "qwen3", "llama", "gemma3"];

/// What a user sees about a model file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelInfo {
    pub name: String,
    pub architecture: String,
    pub parameters: u64,
    /// The weight type holding most of the bytes, e.g. `Q4K`.
    pub quantization: String,
    pub file_bytes: u64,
    pub vocab_size: usize,
    pub trained_context: usize,
    pub context: usize,
    /// How its KV cache stores keys and values.
    pub kv_format: KvFormat,
    /// Weight types requantized at load for a faster kernel, e.g. `["Q5_0 -> Q8_0 (133 tensors)"]`.
    pub requantized: Vec<String>,
}

/// Refuse, before anything else is read, a file whose architecture we cannot run.
pub fn check_architecture(gguf: &GgufFile) -> Result<()> {
    let arch = gguf.architecture()?;
    if SUPPORTED_ARCHITECTURES.contains(&arch.as_str()) {
        return Ok(());
    }
    Err(Error::UnsupportedArchitecture {
        path: gguf.path().to_path_buf(),
        arch,
        supported: SUPPORTED_ARCHITECTURES.join(", "),
    })
}

/// Build the model a GGUF file describes, with a KV cache of `context` positions
/// (capped at what the model was trained on), running one sequence.
pub fn load_model(
    gguf: &mut GgufFile,
    device: &Device,
    context: usize,
    kv_format: KvFormat,
) -> Result<(Box<dyn CausalLm>, ModelInfo)> {
    let (decoder, info) = load_decoder(gguf, device, context, kv_format)?;
    Ok((Box::new(decoder.live()?), info))
}

/// The weights a GGUF file describes, for sequences of at most `context` positions (capped at
/// what the model was trained on) storing keys and values as `kv_format`.
pub fn load_decoder(
    gguf: &mut GgufFile,
    device: &Device,
    context: usize,
    kv_format: KvFormat,
) -> Result<(decoder::Decoder, ModelInfo)> {
    check_architecture(gguf)?;
    let arch = gguf.architecture()?;
    let config = match arch.as_str() {
        "qwen2" => qwen2::config(gguf)?,
        "qwen3" => qwen3::config(gguf)?,
        "gemma3" => gemma3::config(gguf)?,
        _ => llama::config(gguf)?,
    };
    let (vocab, ffn) = config.check_shapes(gguf)?;
    crate::kv_cache::check_format(kv_format, config.head_dim, device)?;
    let context = match context {
        AUTO_CONTEXT => auto_context(gguf, &config, (vocab, ffn, kv_format), device),
        asked => asked.min(config.trained_context).max(1),
    };
    check_memory(gguf, &config, context, (vocab, ffn, kv_format), device)?;
    let requantized = describe_requantization(gguf, device);
    for line in &requantized {
        tracing::info!("requantized {line} at load: candle has no SIMD kernel for the original type");
    }
    let mut decoder = decoder::Decoder::load(config.clone(), gguf, device, context)?;
    decoder.set_kv_format(kv_format)?;
    let info = ModelInfo {
        name: gguf.string("general.name").unwrap_or_else(|_| file_stem(gguf)),
        architecture: arch,
        parameters: gguf.content().tensor_infos.values().map(|t| t.shape.elem_count() as u64).sum(),
        quantization: dominant_weight_type(gguf),
        file_bytes: std::fs::metadata(gguf.path()).map(|m| m.len()).unwrap_or(0),
        vocab_size: decoder.vocab_size(),
        trained_context: config.trained_context,
        context,
        kv_format,
        requantized,
    };
    Ok((decoder, info))
}

/// The context asked for as "auto": the positions the model was trained for, capped by the
/// memory free beside its weights. A third of that memory goes to this model's keys and
/// values; the rest stays for a draft model's, the prompt cache and everything else. The
/// cache commits memory only as a chat fills it, so the cap is what a full context would take.
fn auto_context(gguf: &GgufFile, config: &decoder::DecoderConfig, sizes: Sizes, device: &Device) -> usize {
    let trained = config.trained_context.max(1);
    // Where free memory cannot be read (not Linux), a context a chat fills without surprise.
    let Some(available) = crate::device::available_memory() else {
        return trained.min(specula_protocol::TYPICAL_CONTEXT);
    };
    let (vocab, ffn, kv_format) = sizes;
    let at = |positions: usize| config.runtime_bytes(positions, vocab, ffn, kv_format).unwrap_or(u64::MAX);
    let per_position = at(2).saturating_sub(at(1)).max(1);
    let spare = available.saturating_sub(loaded_weight_bytes(gguf, device)).saturating_sub(at(0));
    let fits = (spare / 3 / per_position).min(usize::MAX as u64) as usize;
    // Whole blocks of 256: a figure users can read, and the same on every load of one machine
    // state to within a block.
    let fits = fits / 256 * 256;
    trained.min(fits.max(MIN_AUTO_CONTEXT.min(trained)))
}

/// The vocabulary, the widest feed-forward layer and the KV format: what a load's memory
/// depends on besides the weights and the context.
type Sizes = (usize, usize, KvFormat);

/// The least context "auto" gives: below it a chat would not be worth starting, and a load
/// that cannot afford even this fails the memory check with the figures.
const MIN_AUTO_CONTEXT: usize = 2048;

/// Refuse a load whose weights, KV cache, rotary tables and working set would not fit in the
/// memory that is free, counted before any of it is allocated.
fn check_memory(
    gguf: &GgufFile,
    config: &decoder::DecoderConfig,
    context: usize,
    (vocab, ffn, kv_format): Sizes,
    device: &Device,
) -> Result<()> {
    let weights = loaded_weight_bytes(gguf, device);
    let needed = config.runtime_bytes(context, vocab, ffn, kv_format).and_then(|extra| weights.checked_add(extra));
    crate::device::check_fits_in_memory(gguf.path(), needed.unwrap_or(u64::MAX), 0)
}

/// Bytes the weights take once loaded: as stored, but a type requantized at load takes its
/// new type's size and a vector (norms, biases) is widened to f32.
fn loaded_weight_bytes(gguf: &GgufFile, device: &Device) -> u64 {
    gguf.content()
        .tensor_infos
        .values()
        .map(|t| {
            let elements = t.shape.elem_count() as u64;
            let dtype = match t.shape.rank() {
                1 => GgmlDType::F32,
                _ if device.is_cpu() && has_slow_cpu_kernel(t.ggml_dtype) => GgmlDType::Q8_0,
                _ => t.ggml_dtype,
            };
            elements / dtype.block_size() as u64 * dtype.type_size() as u64
        })
        .fold(0u64, u64::saturating_add)
}

fn file_stem(gguf: &GgufFile) -> String {
    gguf.path().file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

pub(crate) fn dominant_weight_type(gguf: &GgufFile) -> String {
    let mut bytes: BTreeMap<String, u64> = BTreeMap::new();
    for info in gguf.content().tensor_infos.values() {
        let size =
            info.shape.elem_count() as u64 / info.ggml_dtype.block_size() as u64 * info.ggml_dtype.type_size() as u64;
        *bytes.entry(format!("{:?}", info.ggml_dtype)).or_default() += size;
    }
    bytes.into_iter().max_by_key(|(_, b)| *b).map(|(t, _)| t).unwrap_or_default()
}

fn describe_requantization(gguf: &GgufFile, device: &Device) -> Vec<String> {
    if !device.is_cpu() {
        return Vec::new();
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for info in gguf.content().tensor_infos.values() {
        if has_slow_cpu_kernel(info.ggml_dtype) && info.shape.rank() == 2 {
            *counts.entry(format!("{:?}", info.ggml_dtype)).or_default() += 1;
        }
    }
    counts.into_iter().map(|(t, n)| format!("{t} -> {:?} ({n} tensors)", GgmlDType::Q8_0)).collect()
}
