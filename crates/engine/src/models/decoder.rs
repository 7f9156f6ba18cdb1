//! The pre-norm decoder-only transformer shared by the Llama family (Llama, Mistral,
//! SmolLM2, TinyLlama), Qwen2, Qwen3 and Gemma 3: RMSNorm, rotary embeddings, grouped-query
//! attention and a gated MLP. Each architecture file reads its hyperparameters and quirks
//! (rotary layout, activation, sliding windows) into a [`DecoderConfig`]. Optional tensors
//! switch on the rest: attention biases (Qwen2), per-head q/k norms (Qwen3, Gemma 3), and
//! norms after attention and MLP (Gemma 3). The tensor names are llama.cpp's.
//!
//! Unlike candle-transformers' quantized models, `forward` scores every new position and the
//! KV cache rolls back, which is what speculative verification needs.

use super::{CausalLm, Passes, SavedState, WeightSource, PREFILL_CHUNK};
use crate::attention::causal_attention;
use crate::error::{Error, Result};
use crate::kv_cache::{KvCache, KvFormat, KvSnapshot};
use crate::quant::QLinear;
use crate::sequence::{Conversation, Sequence};
use candle_core::quantized::GgmlDType;
use candle_core::{DType, Device, Tensor};
use std::sync::Arc;

/// How rotary embeddings pair the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(i, i + d/2)`: Qwen2 (llama.cpp's NEOX mode).
    Neox,
    /// Pairs `(2i, 2i + 1)`: Llama; llama.cpp's converter permutes q/k weights for it.
    Interleaved,
}

/// The MLP's gate activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    /// SwiGLU: Llama, Qwen.
    #[default]
    Silu,
    /// GeGLU with the tanh approximation: Gemma.
    GeluTanh,
}

/// Local attention on most layers (Gemma 3): a layer attends to the last `size` positions,
/// with its own rotary base, except every `global_every`-th layer, which sees everything.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlidingWindow {
    pub size: usize,
    pub global_every: usize,
    pub rope_base: f32,
}

/// What sets an architecture apart from Llama, beyond its tensors.
#[derive(Debug, Clone, Default)]
pub struct Quirks {
    pub activation: Activation,
    /// Multiplies the token embeddings (Gemma: sqrt(hidden)).
    pub embed_scale: Option<f32>,
    pub sliding_window: Option<SlidingWindow>,
    /// Linear rotary scaling of the global layers: positions are divided by it.
    pub rope_scale: Option<f32>,
    /// Multiplies the queries before attention, on top of attention's 1/sqrt(head_dim)
    /// (Gemma 3 27B, whose attention scale is 1/sqrt(hidden / heads)).
    pub query_scale: Option<f32>,
}

#[derive(Debug, Clone)]
pub struct DecoderConfig {
    pub n_layer: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub hidden: usize,
    pub rms_eps: f32,
    pub rope_base: f32,
    pub rope_style: RopeStyle,
    /// Positions the model was trained on.
    pub trained_context: usize,
    pub quirks: Quirks,
}

/// Layers beyond any real model (the largest have about 130).
const MAX_LAYERS: usize = 1024;

impl DecoderConfig {
    /// Hyper-parameters a model can be built from: every count positive, heads that group,
    /// an even head size for the rotary pairs, finite positive constants. A file that says
    /// otherwise gets an error here rather than a division by zero or a bad slice later.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::BadMetadata(what));
        let counts = [
            ("layers", self.n_layer),
            ("heads", self.n_head),
            ("kv heads", self.n_kv_head),
            ("hidden size", self.hidden),
        ];
        if let Some((what, _)) = counts.iter().find(|(_, n)| *n == 0) {
            return bad(format!("the model has 0 {what}"));
        }
        if self.n_layer > MAX_LAYERS {
            return bad(format!("{} layers: at most {MAX_LAYERS} are accepted", self.n_layer));
        }
        if !self.n_head.is_multiple_of(self.n_kv_head) {
            return bad(format!("{} heads do not divide into {} kv heads", self.n_head, self.n_kv_head));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(format!("a head size of {} (it must be even and positive)", self.head_dim));
        }
        if self.n_head.checked_mul(self.head_dim).is_none() {
            return bad("heads times head size overflows".into());
        }
        if !(self.rms_eps > 0.0 && self.rope_base > 0.0) {
            return bad(format!("rms epsilon {} and rotary base {} must be positive", self.rms_eps, self.rope_base));
        }
        if let Some(w) = self.quirks.sliding_window {
            if w.size == 0 || !(w.rope_base > 0.0 && w.rope_base.is_finite()) {
                return bad(format!("a sliding window of {} with rotary base {}", w.size, w.rope_base));
            }
        }
        if self.quirks.rope_scale.is_some_and(|s| !(s > 0.0 && s.is_finite())) {
            return bad("a rotary scaling factor that is not positive".into());
        }
        Ok(())
    }

    /// The shape each weight must have, outermost first, for a vocabulary of `vocab` and an
    /// MLP of `ffn`: checked for every tensor before any is read.
    fn expected_shapes(&self, vocab: usize, ffn: usize, layer: usize) -> Vec<(String, Vec<usize>)> {
        let (h, q, kv) = (self.hidden, self.n_head * self.head_dim, self.n_kv_head * self.head_dim);
        let blk = |name: &str| format!("blk.{layer}.{name}");
        vec![
            (blk("attn_norm.weight"), vec![h]),
            (blk("ffn_norm.weight"), vec![h]),
            (blk("attn_q.weight"), vec![q, h]),
            (blk("attn_k.weight"), vec![kv, h]),
            (blk("attn_v.weight"), vec![kv, h]),
            (blk("attn_output.weight"), vec![h, q]),
            (blk("ffn_gate.weight"), vec![ffn, h]),
            (blk("ffn_up.weight"), vec![ffn, h]),
            (blk("ffn_down.weight"), vec![h, ffn]),
            (blk("attn_q.bias"), vec![q]),
            (blk("attn_k.bias"), vec![kv]),
            (blk("attn_v.bias"), vec![kv]),
            (blk("attn_q_norm.weight"), vec![self.head_dim]),
            (blk("attn_k_norm.weight"), vec![self.head_dim]),
            (blk("post_attention_norm.weight"), vec![h]),
            (blk("post_ffw_norm.weight"), vec![h]),
        ]
        .into_iter()
        .chain(
            (layer == 0)
                .then(|| {
                    [
                        ("token_embd.weight".to_string(), vec![vocab, h]),
                        ("output.weight".to_string(), vec![vocab, h]),
                        ("output_norm.weight".to_string(), vec![h]),
                        ("rope_freqs.weight".to_string(), vec![self.head_dim / 2]),
                    ]
                })
                .into_iter()
                .flatten(),
        )
        .collect()
    }

    /// Check the file's tensors against the config before any is read: the required ones
    /// present, every one of the shape the config implies. Returns (vocabulary, MLP width).
    pub fn check_shapes(&self, weights: &dyn WeightSource) -> Result<(usize, usize)> {
        self.validate()?;
        let shape =
            |name: &str| weights.shape(name).ok_or_else(|| Error::BadMetadata(format!("tensor `{name}` is missing")));
        let vocab = match shape("token_embd.weight")?.as_slice() {
            [vocab, h] if *h == self.hidden && *vocab > 0 => *vocab,
            other => {
                return Err(Error::BadMetadata(format!("token_embd.weight is {other:?}, not [vocab, {}]", self.hidden)))
            }
        };
        let ffn = shape("blk.0.ffn_gate.weight")?.first().copied().unwrap_or(0);
        const REQUIRED: [&str; 9] =
            ["attn_norm", "ffn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"];
        for layer in 0..self.n_layer {
            for name in REQUIRED {
                shape(&format!("blk.{layer}.{name}.weight"))?;
            }
            for (name, expected) in self.expected_shapes(vocab, ffn, layer) {
                if let Some(actual) = weights.shape(&name) {
                    if actual != expected {
                        return Err(Error::BadMetadata(format!(
                            "tensor `{name}` is {actual:?}, the config implies {expected:?}"
                        )));
                    }
                }
            }
        }
        shape("output_norm.weight")?;
        Ok((vocab, ffn))
    }

    /// Bytes the model allocates beyond its weights for a cache of `capacity` positions: the
    /// KV cache, the rotary tables and the working set of a prefill chunk. `None` when it
    /// would not even fit in a `u64`.
    pub fn runtime_bytes(&self, capacity: usize, vocab: usize, ffn: usize, kv_format: KvFormat) -> Option<u64> {
        let f32s = |n: u64| n.checked_mul(4);
        let row = kv_format.bytes_for(self.n_kv_head * self.head_dim) as u64;
        let kv_cache = (self.n_layer as u64).checked_mul(2)?.checked_mul(row)?.checked_mul(capacity as u64)?;
        let tables = 1 + u64::from(self.quirks.sliding_window.is_some());
        let rotary = f32s(tables.checked_mul(capacity as u64)?.checked_mul(self.head_dim as u64)?)?;
        // A prefill chunk holds a few activations of the widest layer at once, and a
        // verification pass scores up to MAX_K + 1 positions over the vocabulary.
        let widest = self.hidden.max(ffn).max(self.n_head * self.head_dim) as u64;
        let chunk = f32s((PREFILL_CHUNK as u64).checked_mul(widest)?.checked_mul(8)?)?;
        let logits = f32s((specula_protocol::MAX_K as u64 + 1).checked_mul(vocab as u64)?)?;
        kv_cache.checked_add(rotary)?.checked_add(chunk)?.checked_add(logits)
    }

    fn window(&self, layer: usize) -> Option<SlidingWindow> {
        self.quirks.sliding_window.filter(|w| w.global_every == 0 || !(layer + 1).is_multiple_of(w.global_every))
    }
}

/// Rotary tables `[capacity, head_dim / 2]`.
struct Rotary {
    cos: Tensor,
    sin: Tensor,
}

struct Layer {
    attn_norm: Tensor,
    /// Per-head RMSNorm of queries and keys before rotation (Qwen3, Gemma 3).
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    /// Norms of the attention and MLP outputs before the residual add (Gemma 3).
    post_attn_norm: Option<Tensor>,
    post_ffn_norm: Option<Tensor>,
    window: Option<usize>,
    /// Index into the decoder's rotary tables: 0 global, 1 local.
    rotary: usize,
    q: QLinear,
    k: QLinear,
    v: QLinear,
    o: QLinear,
    ffn_norm: Tensor,
    gate: QLinear,
    up: QLinear,
    down: QLinear,
    span: tracing::Span,
}

/// A decoder's weights: read through `&self`, they serve any number of [`Sequence`]s, each
/// handed to [`Decoder::forward`]. [`LiveDecoder`] pairs it with the one sequence it runs now.
pub struct Decoder {
    config: DecoderConfig,
    /// `[vocab, hidden]`, quantized; rows are dequantized per token. A tied output layer
    /// multiplies by it too.
    embed: QLinear,
    layers: Vec<Layer>,
    norm: Tensor,
    /// `None` when the embeddings are tied.
    lm_head: Option<QLinear>,
    /// The output layer cut to some tokens: the others score -inf.
    pruned: Option<PrunedHead>,
    /// The global layers' tables, then the local layers' when their base differs.
    rotary: Vec<Rotary>,
    /// Positions a sequence may hold (the rotary tables' length).
    capacity: usize,
    /// How new sequences store keys and values.
    kv_format: KvFormat,
    vocab_size: usize,
}

/// One sequence's part of a pass: the tokens to append to it, and whether it wants the logits
/// of every one of them (verification) or of the last (decoding, prefill).
pub struct Rows<'a> {
    pub sequence: &'a mut Sequence,
    pub tokens: &'a [u32],
    pub all_positions: bool,
}

/// Where a sequence's rows sit in a pass's input, how many, and the position of the first.
struct Span {
    start: usize,
    n: usize,
    pos: usize,
}

impl Decoder {
    /// Load the weights named as llama.cpp names them, with room for `capacity` positions.
    pub fn load(
        config: DecoderConfig,
        weights: &mut dyn WeightSource,
        device: &Device,
        capacity: usize,
    ) -> Result<Self> {
        config.check_shapes(weights)?;
        let embed = weights.quantized("token_embd.weight", device)?;
        let vocab_size = embed.shape().dims2()?.0;
        let embed = QLinear::new(embed, None)?;
        let lm_head = match weights.has("output.weight") {
            true => Some(QLinear::new(weights.quantized("output.weight", device)?, None)?),
            false => None,
        };
        let layers =
            (0..config.n_layer).map(|i| Layer::load(weights, i, &config, device)).collect::<Result<Vec<_>>>()?;
        let rope_freqs = match weights.has("rope_freqs.weight") {
            true => Some(weights.dense("rope_freqs.weight", device)?.to_vec1::<f32>()?),
            false => None,
        };
        let scale = config.quirks.rope_scale.unwrap_or(1.0);
        let mut rotary =
            vec![rotary_tables(&config, config.rope_base, scale, rope_freqs.as_deref(), capacity, device)?];
        if let Some(window) = config.quirks.sliding_window {
            rotary.push(rotary_tables(&config, window.rope_base, 1.0, None, capacity, device)?);
        }
        Ok(Self {
            norm: weights.dense("output_norm.weight", device)?,
            config,
            embed,
            layers,
            lm_head,
            pruned: None,
            rotary,
            capacity,
            kv_format: KvFormat::F32,
            vocab_size,
        })
    }

    /// These weights with an empty sequence to run.
    pub fn live(self) -> Result<LiveDecoder> {
        let sequence = self.new_sequence()?;
        Ok(LiveDecoder { decoder: Arc::new(self), sequence, passes: None })
    }

    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn device(&self) -> Device {
        self.norm.device().clone()
    }

    /// Store keys and values as `format` in the sequences made from now on.
    pub fn set_kv_format(&mut self, format: KvFormat) -> Result<()> {
        crate::kv_cache::check_format(format, self.config.head_dim, &self.device())?;
        self.kv_format = format;
        Ok(())
    }

    /// An empty sequence for these weights.
    pub fn new_sequence(&self) -> Result<Sequence> {
        let device = self.device();
        let (heads, dim) = (self.config.n_kv_head, self.config.head_dim);
        let caches = (0..self.config.n_layer)
            .map(|_| KvCache::with_format(heads, self.capacity, dim, self.kv_format, &device))
            .collect::<Result<Vec<_>>>()?;
        Ok(Sequence::new(caches))
    }

    /// Whether `sequence` was made by these weights (or ones of the same shapes and format).
    fn fits(&self, sequence: &Sequence) -> bool {
        let layer = sequence.layers().first();
        sequence.layers().len() == self.layers.len()
            && sequence.capacity() == self.capacity
            && layer.is_none_or(|c| c.format() == self.kv_format && c.head_dim() == self.config.head_dim)
    }

    /// Append `tokens` to `sequence`; logits for every new position (`all_positions`) or the
    /// last. A failure part-way leaves the sequence as it was.
    pub fn forward(&self, sequence: &mut Sequence, tokens: &[u32], all_positions: bool) -> Result<Tensor> {
        let mut rows = [Rows { sequence, tokens, all_positions }];
        let mut out = self.forward_batch(&mut rows)?;
        out.pop().expect("one sequence, one result")
    }

    /// One pass over several sequences' rows: each sequence's `tokens` are appended to it, and
    /// its logits (every new position, or its last) come back in its place. The matmuls run
    /// over all rows together; rotation, the cache and attention are each sequence's own. As
    /// every operation gives a row the same bits whatever rows share its pass (the row-exact
    /// kernels), each sequence gets the bits of its pass alone.
    ///
    /// A sequence that cannot take its rows (none, or past its room) gets its error and is
    /// left out, the others run; a pass that fails part-way leaves every sequence as it was
    /// and fails all (`Err`).
    pub fn forward_batch(&self, batch: &mut [Rows]) -> Result<Vec<Result<Tensor>>> {
        let checked: Vec<Result<()>> = batch.iter().map(|rows| self.check_room(rows)).collect();
        let mut running: Vec<&mut Rows> =
            batch.iter_mut().zip(&checked).filter(|(_, ok)| ok.is_ok()).map(|(rows, _)| rows).collect();
        let before: Vec<usize> = running.iter().map(|rows| rows.sequence.len()).collect();
        let mut logits = match running.is_empty() {
            true => Vec::new(),
            false => match self.run(&mut running) {
                Ok(logits) => logits,
                Err(e) => {
                    // Some layers may be longer than others: forget the attempt, everywhere.
                    running.iter_mut().zip(&before).for_each(|(rows, &len)| rows.sequence.truncate(len));
                    return Err(e);
                }
            },
        }
        .into_iter();
        Ok(checked.into_iter().map(|ok| ok.map(|()| logits.next().expect("one result a running sequence"))).collect())
    }

    fn check_room(&self, rows: &Rows) -> Result<()> {
        let (pos, n) = (rows.sequence.len(), rows.tokens.len());
        if n == 0 {
            return Err(Error::InvalidSetting("forward needs at least one token".into()));
        }
        if pos + n > self.capacity {
            return Err(Error::ContextOverflow { prompt_tokens: pos + n, context: self.capacity, reserve: 0 });
        }
        if !self.fits(rows.sequence) {
            return Err(Error::InvalidSetting("a sequence of another model".into()));
        }
        Ok(())
    }

    fn run(&self, batch: &mut [&mut Rows]) -> Result<Vec<Tensor>> {
        let device = self.device();
        // Where each sequence's rows sit in the pass, and the position of its first.
        let mut spans = Vec::with_capacity(batch.len());
        let mut start = 0;
        for rows in batch.iter() {
            spans.push(Span { start, n: rows.tokens.len(), pos: rows.sequence.len() });
            start += rows.tokens.len();
        }
        if let Some(pruned) = &self.pruned {
            let full = self.lm_head.as_ref().unwrap_or(&self.embed);
            for (rows, span) in batch.iter_mut().zip(&spans) {
                pruned.score_also(rows.sequence.conversation_mut(), rows.tokens, span.pos, full)?;
            }
        }
        let tokens: Vec<u32> = batch.iter().flat_map(|rows| rows.tokens.iter().copied()).collect();
        let mut x = self.embed.rows(&tokens, &device)?;
        if let Some(scale) = self.config.quirks.embed_scale {
            x = (x * scale as f64)?;
        }
        // Each sequence's rows of each rotary table.
        let rotary = spans
            .iter()
            .map(|span| {
                let at = |t: &Tensor| t.narrow(0, span.pos, span.n);
                self.rotary
                    .iter()
                    .map(|r| Ok(Rotary { cos: at(&r.cos)?, sin: at(&r.sin)? }))
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        for (index, layer) in self.layers.iter().enumerate() {
            let mut caches: Vec<&mut KvCache> =
                batch.iter_mut().map(|rows| &mut rows.sequence.layers_mut()[index]).collect();
            let tables: Vec<&Rotary> = rotary.iter().map(|tables| &tables[layer.rotary]).collect();
            x = layer.forward(&x, &mut caches, &spans, &tables, &self.config)?;
        }
        self.output(&x, batch, &spans)
    }

    /// The logits each sequence asked for from the last layer's rows `x`: the output layer
    /// runs only on those rows (its largest matmul), all together where it is the full layer.
    fn output(&self, x: &Tensor, batch: &[&mut Rows], spans: &[Span]) -> Result<Vec<Tensor>> {
        let wanted: Vec<(usize, usize)> = batch
            .iter()
            .zip(spans)
            .map(|(rows, span)| match rows.all_positions {
                true => (span.start, span.n),
                false => (span.start + span.n - 1, 1),
            })
            .collect();
        let mut parts = wanted.iter().map(|&(at, n)| x.narrow(0, at, n)).collect::<candle_core::Result<Vec<_>>>()?;
        let picked = match parts.len() {
            1 => parts.pop().expect("one"),
            _ => Tensor::cat(&parts, 0)?,
        };
        let picked = candle_nn::ops::rms_norm(&picked, &self.norm, self.config.rms_eps)?;
        // Each sequence's rows of `picked`: where they start, and how many.
        let mut offsets = Vec::with_capacity(wanted.len());
        let mut at = 0;
        for &(_, n) in &wanted {
            offsets.push((at, n));
            at += n;
        }
        match &self.pruned {
            Some(pruned) => batch
                .iter()
                .zip(&offsets)
                .map(|(rows, &(at, n))| {
                    pruned.forward(rows.sequence.conversation(), &picked.narrow(0, at, n)?, self.vocab_size)
                })
                .collect(),
            None => {
                let logits = self.lm_head.as_ref().unwrap_or(&self.embed).forward(&picked)?;
                match offsets.len() {
                    1 => Ok(vec![logits]),
                    _ => offsets.iter().map(|&(at, n)| Ok(logits.narrow(0, at, n)?)).collect(),
                }
            }
        }
    }

    /// Write `sequence`'s live positions and conversation for a file, a layer at a time.
    pub fn write_sequence(&self, sequence: &Sequence, out: &mut dyn std::io::Write) -> Result<()> {
        out.write_all(&(sequence.layers().len() as u64).to_le_bytes())?;
        for layer in sequence.layers() {
            layer.save()?.write_to(out)?;
        }
        let conversation = sequence.conversation();
        out.write_all(&(conversation.tokens.len() as u64).to_le_bytes())?;
        for &(id, at) in &conversation.tokens {
            out.write_all(&u64::from(id).to_le_bytes())?;
            out.write_all(&(at as u64).to_le_bytes())?;
        }
        let rows = match &conversation.rows {
            Some(rows) => rows.flatten_all()?.to_vec1::<f32>()?,
            None => Vec::new(),
        };
        out.write_all(&(rows.len() as u64).to_le_bytes())?;
        crate::kv_cache::write_f32s(out, &rows)
    }

    /// A sequence [`Self::write_sequence`] wrote, checked against these weights' shapes as it
    /// is read: a file is never trusted.
    pub fn read_sequence(&self, input: &mut dyn std::io::Read) -> Result<Sequence> {
        use crate::kv_cache::{read_f32s, read_u64};
        let misfit = || Error::InvalidSetting("a saved state of another model".into());
        if read_u64(input)? != self.layers.len() as u64 {
            return Err(misfit());
        }
        let row = self.config.n_kv_head * crate::kv_cache::row_units(self.kv_format, self.config.head_dim);
        let mut sequence = self.new_sequence()?;
        for cache in sequence.layers_mut() {
            cache.restore(&KvSnapshot::read_from(input, self.kv_format, row, self.capacity)?)?;
        }
        let len = sequence.layers().first().map_or(0, KvCache::len);
        if sequence.layers().iter().any(|l| l.len() != len) {
            return Err(misfit());
        }
        let count = read_u64(input)? as usize;
        if count > MAX_CONVERSATION_TOKENS {
            return Err(misfit());
        }
        let mut tokens = Vec::with_capacity(count);
        for _ in 0..count {
            let (id, at) = (read_u64(input)?, read_u64(input)? as usize);
            let rising = tokens.last().is_none_or(|&(_, last)| last <= at);
            if id >= self.vocab_size as u64 || at >= len.max(1) || !rising {
                return Err(misfit());
            }
            tokens.push((id as u32, at));
        }
        let values = read_u64(input)? as usize;
        if values != count * self.config.hidden {
            return Err(misfit());
        }
        let rows = read_f32s(input, values)?;
        // The pruned head's conversation only where this model has a pruned head.
        if self.pruned.is_some() && count > 0 {
            let rows = Tensor::from_vec(rows, (count, self.config.hidden), &Device::Cpu)?;
            *sequence.conversation_mut() = Conversation { tokens, rows: Some(rows) };
        }
        Ok(sequence)
    }

    /// Score only `ids` from now on (`None`: all again); whether it could. Sequences fed
    /// before carry the conversation of the output layer of their time: their owner drops them.
    pub fn restrict_output(&mut self, ids: Option<&[u32]>) -> Result<bool> {
        let Some(ids) = ids else {
            self.pruned = None;
            return Ok(true);
        };
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(Error::InvalidSetting(format!("token {bad} is outside the vocabulary of {}", self.vocab_size)));
        }
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        match head.gather_rows(ids, Some(PRUNED_HEAD_TYPE))? {
            Some(cut) => {
                self.pruned = Some(PrunedHead::new(cut, ids, self.vocab_size));
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Tokens of the conversation a pruned head scores beyond its own: a long chat's worth of
/// rare words, at 4 bytes a weight (3.5 MB for the Qwen 0.5B).
const MAX_CONVERSATION_TOKENS: usize = 1024;

/// The output layer cut to the tokens worth proposing (a draft's): the most frequent ones,
/// packed as the full layer is, and the tokens of the conversation the model has been fed
/// (each sequence's own, in its [`Conversation`]), whose rows are dequantized as they arrive.
/// A frequency ranking misses the conversation's own rare words (" palindrome", "fib" and
/// "onacci" in a reply about Fibonacci numbers), which a reply repeats: cut to 32k tokens
/// without them, the draft's greedy acceptance on code fell from 0.96 to 0.90; with them, to
/// 0.93.
/// The type a pruned output layer is stored in where that is smaller than the layer's own:
/// the Qwen 0.5B's Q8_0 head in 35% fewer bytes, with the same acceptance in `specula bench
/// --k 4` (PROFILE.md, "Prefetching the weights").
const PRUNED_HEAD_TYPE: GgmlDType = GgmlDType::Q5_0;

struct PrunedHead {
    head: QLinear,
    /// The token of each of `head`'s rows.
    ids: Vec<u32>,
    /// By token id: whether `head` scores it.
    in_head: Vec<bool>,
}

impl PrunedHead {
    fn new(head: QLinear, ids: &[u32], vocab: usize) -> Self {
        let mut in_head = vec![false; vocab];
        ids.iter().for_each(|&id| in_head[id as usize] = true);
        Self { head, ids: ids.to_vec(), in_head }
    }

    /// Make `conversation` score the tokens fed at `pos..` too, taking their rows from the
    /// full layer `full`.
    fn score_also(&self, conversation: &mut Conversation, tokens: &[u32], pos: usize, full: &QLinear) -> Result<()> {
        let room = MAX_CONVERSATION_TOKENS.saturating_sub(conversation.tokens.len());
        let mut new: Vec<u32> = Vec::new();
        for (i, &id) in tokens.iter().enumerate() {
            let scored = self.in_head.get(id as usize).copied().unwrap_or(true) || conversation.contains(id);
            if new.len() < room && !scored {
                conversation.tokens.push((id, pos + i));
                new.push(id);
            }
        }
        if new.is_empty() {
            return Ok(());
        }
        let rows = full.rows(&new, &Device::Cpu)?;
        conversation.rows = Some(match conversation.rows.take() {
            Some(old) => Tensor::cat(&[&old, &rows], 0)?,
            None => rows,
        });
        Ok(())
    }

    /// Scores `[n, vocab]` of `x` `[n, hidden]`: -inf for the tokens neither it nor the
    /// conversation scores.
    fn forward(&self, conversation: &Conversation, x: &Tensor, vocab: usize) -> Result<Tensor> {
        let frequent: Vec<Vec<f32>> = self.head.forward(x)?.to_vec2()?;
        let extra: Option<Vec<Vec<f32>>> = match &conversation.rows {
            Some(rows) => Some(x.matmul(&rows.t()?)?.to_vec2()?),
            None => None,
        };
        let mut all = vec![f32::NEG_INFINITY; frequent.len() * vocab];
        for (row, out) in all.chunks_exact_mut(vocab).enumerate() {
            for (&score, &id) in frequent[row].iter().zip(&self.ids) {
                out[id as usize] = score;
            }
            for (&score, &(id, _)) in extra.iter().flat_map(|c| c[row].iter()).zip(&conversation.tokens) {
                out[id as usize] = score;
            }
        }
        Ok(Tensor::from_vec(all, (frequent.len(), vocab), x.device())?)
    }
}

/// A decoder and the one sequence it runs now: the [`CausalLm`] the decoding loops drive. A
/// parked sequence leaves by move and comes back by move. Its passes run alone, or with other
/// replies' (the weights shared, each reply its own `LiveDecoder`, its passes through a
/// [`Passes`]: the step).
pub struct LiveDecoder {
    decoder: Arc<Decoder>,
    /// Empty of layers (no allocation) after a park, until the next pass needs one.
    sequence: Sequence,
    passes: Option<Arc<dyn Passes>>,
}

impl LiveDecoder {
    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    /// The sequence it runs now.
    pub fn sequence(&self) -> &Sequence {
        &self.sequence
    }

    fn run(&mut self, tokens: &[u32], all_positions: bool) -> Result<Tensor> {
        if self.sequence.layers().is_empty() {
            // Parked away: a fresh sequence only once one is needed (a fork or a restore
            // usually comes first and brings its own).
            self.sequence = self.decoder.new_sequence()?;
        }
        match &self.passes {
            Some(passes) => passes.forward(&self.decoder, &mut self.sequence, tokens, all_positions),
            None => self.decoder.forward(&mut self.sequence, tokens, all_positions),
        }
    }
}

impl CausalLm for LiveDecoder {
    fn forward(&mut self, tokens: &[u32]) -> Result<Tensor> {
        self.run(tokens, true)
    }

    fn forward_last(&mut self, tokens: &[u32]) -> Result<Tensor> {
        self.run(tokens, false)
    }

    fn truncate(&mut self, len: usize) {
        self.sequence.truncate(len);
    }

    fn len(&self) -> usize {
        self.sequence.len()
    }

    fn park(&mut self) -> Result<Option<SavedState>> {
        let parked = std::mem::replace(&mut self.sequence, Sequence::new(Vec::new())).parked();
        Ok(Some(SavedState::new(parked.len(), parked.bytes(), parked)))
    }

    fn fork(&mut self, from: &SavedState, len: usize) -> Result<()> {
        let Some(parked) = from.get::<Sequence>().filter(|s| self.decoder.fits(s)) else {
            return Err(Error::InvalidSetting("a saved state of another model".into()));
        };
        self.sequence = parked.prefix(len)?;
        Ok(())
    }

    fn restore(&mut self, state: SavedState) -> Result<()> {
        let sequence = state.take::<Sequence>().filter(|s| self.decoder.fits(s));
        let Some(sequence) = sequence else {
            return Err(Error::InvalidSetting("a saved state of another model".into()));
        };
        self.sequence = sequence;
        Ok(())
    }

    fn live_bytes(&self) -> usize {
        self.sequence.live_bytes()
    }

    fn write_live(&self, out: &mut dyn std::io::Write) -> Result<bool> {
        self.decoder.write_sequence(&self.sequence, out)?;
        Ok(true)
    }

    fn read_state(&self, input: &mut dyn std::io::Read) -> Result<SavedState> {
        let sequence = self.decoder.read_sequence(input)?;
        Ok(SavedState::new(sequence.len(), sequence.bytes(), sequence))
    }

    fn capacity(&self) -> usize {
        self.decoder.capacity
    }

    fn vocab_size(&self) -> usize {
        self.decoder.vocab_size
    }

    fn device(&self) -> Device {
        self.decoder.device()
    }

    fn share(&self, passes: Option<Arc<dyn Passes>>) -> Option<Box<dyn CausalLm>> {
        let sequence = Sequence::new(Vec::new());
        Some(Box::new(LiveDecoder { decoder: self.decoder.clone(), sequence, passes }))
    }

    fn set_passes(&mut self, passes: Option<Arc<dyn Passes>>) {
        self.passes = passes;
    }

    fn sharing(&self) -> usize {
        self.passes.as_ref().map_or(1, |p| p.sharing())
    }

    fn sequence_bytes(&self) -> usize {
        let config = &self.decoder.config;
        let row = self.decoder.kv_format.bytes_for(config.n_kv_head * config.head_dim);
        config.n_layer * 2 * row * self.decoder.capacity
    }

    fn restrict_output(&mut self, ids: Option<&[u32]>) -> Result<bool> {
        let Some(decoder) = Arc::get_mut(&mut self.decoder) else {
            return Err(Error::InvalidSetting("the output layer changes only while no other reply shares it".into()));
        };
        let done = decoder.restrict_output(ids)?;
        // The conversation was scored beside the old layer: the new one starts its own with
        // the next tokens fed (the keys and values stay; the owner drops parked sequences).
        if done {
            *self.sequence.conversation_mut() = Conversation::default();
        }
        Ok(done)
    }
}

impl Layer {
    fn load(weights: &mut dyn WeightSource, index: usize, cfg: &DecoderConfig, device: &Device) -> Result<Self> {
        let prefix = &format!("blk.{index}");
        let mut optional = |name: &str| -> Result<Option<Tensor>> {
            let name = format!("{prefix}.{name}.weight");
            match weights.has(&name) {
                true => Ok(Some(weights.dense(&name, device)?)),
                false => Ok(None),
            }
        };
        let (q_norm, k_norm) = (optional("attn_q_norm")?, optional("attn_k_norm")?);
        let (post_attn_norm, post_ffn_norm) = (optional("post_attention_norm")?, optional("post_ffw_norm")?);
        let window = cfg.window(index);
        let mut linear = |name: &str, bias: bool| -> Result<QLinear> {
            let weight = weights.quantized(&format!("{prefix}.{name}.weight"), device)?;
            let bias_name = format!("{prefix}.{name}.bias");
            let bias = match bias && weights.has(&bias_name) {
                true => Some(weights.dense(&bias_name, device)?),
                false => None,
            };
            QLinear::new(weight, bias)
        };
        let (q, k, v, o) =
            (linear("attn_q", true)?, linear("attn_k", true)?, linear("attn_v", true)?, linear("attn_output", false)?);
        let (gate, up, down) = (linear("ffn_gate", false)?, linear("ffn_up", false)?, linear("ffn_down", false)?);
        Ok(Self {
            attn_norm: weights.dense(&format!("{prefix}.attn_norm.weight"), device)?,
            ffn_norm: weights.dense(&format!("{prefix}.ffn_norm.weight"), device)?,
            q_norm,
            k_norm,
            post_attn_norm,
            post_ffn_norm,
            window: window.map(|w| w.size),
            rotary: usize::from(window.is_some()),
            q,
            k,
            v,
            o,
            gate,
            up,
            down,
            span: tracing::trace_span!("layer", prefix),
        })
    }

    /// `x`: `[rows, hidden]`, the rows of every sequence of the pass, each sequence's at its
    /// span, with its cache and rotary rows; appends each one's keys and values to its cache.
    /// The projections and the MLP run over all rows at once; rotation and attention per
    /// sequence.
    fn forward(
        &self,
        x: &Tensor,
        caches: &mut [&mut KvCache],
        spans: &[Span],
        rotary: &[&Rotary],
        cfg: &DecoderConfig,
    ) -> Result<Tensor> {
        let _enter = self.span.enter();
        let h = candle_nn::ops::rms_norm(x, &self.attn_norm, cfg.rms_eps)?;
        let [q, k, v] = QLinear::forward_many([&self.q, &self.k, &self.v], &h)?;
        let whole = spans.len() == 1;
        let mut attended = Vec::with_capacity(spans.len());
        for ((span, cache), rotary) in spans.iter().zip(caches.iter_mut()).zip(rotary) {
            let rows = |t: &Tensor| if whole { Ok(t.clone()) } else { t.narrow(0, span.start, span.n) };
            attended.push(self.attend(rows(&q)?, rows(&k)?, rows(&v)?, cache, span.pos, rotary, cfg)?);
        }
        let attn = match attended.len() {
            1 => attended.pop().expect("one"),
            _ => Tensor::cat(&attended, 0)?,
        };
        let x = (x + norm(self.o.forward(&attn)?, &self.post_attn_norm, cfg)?)?;
        let h = candle_nn::ops::rms_norm(&x, &self.ffn_norm, cfg.rms_eps)?;
        let [gate, up] = QLinear::forward_many([&self.gate, &self.up], &h)?;
        let hidden = match cfg.quirks.activation {
            Activation::Silu => crate::lanes::silu_mul(&gate, &up)?,
            Activation::GeluTanh => (gate.gelu()? * up)?,
        };
        let out = self.down.forward(&hidden)?;
        Ok((x + norm(out, &self.post_ffn_norm, cfg)?)?)
    }

    /// One sequence's attention: `q`, `k`, `v` `[n, heads * d]` for positions `pos .. pos + n`
    /// rotated, their keys and values appended to `cache`, attended over it; `[n, heads * d]`.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cache: &mut KvCache,
        pos: usize,
        rotary: &Rotary,
        cfg: &DecoderConfig,
    ) -> Result<Tensor> {
        let n = q.dims2()?.0;
        let heads = |t: Tensor, count: usize| -> Result<Tensor> {
            // [n, count * d] -> [count, n, d]
            Ok(t.reshape((n, count, cfg.head_dim))?.transpose(0, 1)?.contiguous()?)
        };
        let q = norm(heads(q, cfg.n_head)?, &self.q_norm, cfg)?;
        let k = norm(heads(k, cfg.n_kv_head)?, &self.k_norm, cfg)?;
        let mut q = rotate(&q, &rotary.cos, &rotary.sin, cfg.rope_style)?;
        if let Some(scale) = cfg.quirks.query_scale {
            q = (q * scale as f64)?;
        }
        let k = rotate(&k, &rotary.cos, &rotary.sin, cfg.rope_style)?;
        let v = heads(v, cfg.n_kv_head)?;
        cache.append(&k, &v)?;
        causal_attention(&q, cache, pos, self.window)
    }
}

/// RMSNorm by `weight` where there is one (the optional norms of some architectures).
fn norm(t: Tensor, weight: &Option<Tensor>, cfg: &DecoderConfig) -> Result<Tensor> {
    match weight {
        Some(w) => Ok(candle_nn::ops::rms_norm(&t, w, cfg.rms_eps)?),
        None => Ok(t),
    }
}

/// `x`: `[heads, n, d]`; `cos`, `sin`: `[n, d / 2]` for the same positions.
fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor, style: RopeStyle) -> Result<Tensor> {
    if x.device().is_cpu() && x.dtype() == DType::F32 {
        return rotate_on_cpu(x, cos, sin, style);
    }
    let x = x.unsqueeze(0)?;
    let rotated = match style {
        RopeStyle::Neox => candle_nn::rotary_emb::rope(&x, cos, sin)?,
        RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&x, cos, sin)?,
    };
    Ok(rotated.squeeze(0)?)
}

/// [`rotate`] on the calling thread, with candle's arithmetic (so the same bits). candle's
/// CPU rope hands a pass over more than one position to rayon's pool, whose threads sleep:
/// two wake-ups a layer in every verification, 24,000 context switches in a 20-second bench.
fn rotate_on_cpu(x: &Tensor, cos: &Tensor, sin: &Tensor, style: RopeStyle) -> Result<Tensor> {
    let (heads, n, d) = x.dims3()?;
    let half = d / 2;
    let mut out = x.flatten_all()?.to_vec1::<f32>()?;
    let (cos, sin) = (cos.flatten_all()?.to_vec1::<f32>()?, sin.flatten_all()?.to_vec1::<f32>()?);
    if cos.len() != n * half || sin.len() != n * half {
        return Err(Error::InvalidSetting(format!("rotary tables of {} values for {n} positions", cos.len())));
    }
    for (row, v) in out.chunks_exact_mut(d).enumerate() {
        let at = (row % n) * half;
        let (cos, sin) = (&cos[at..at + half], &sin[at..at + half]);
        for i in 0..half {
            let (a, b) = match style {
                RopeStyle::Neox => (i, i + half),
                RopeStyle::Interleaved => (2 * i, 2 * i + 1),
            };
            let (x1, x2) = (v[a], v[b]);
            v[a] = x1 * cos[i] - x2 * sin[i];
            v[b] = x1 * sin[i] + x2 * cos[i];
        }
    }
    Ok(Tensor::from_vec(out, (heads, n, d), x.device())?)
}

fn rotary_tables(
    cfg: &DecoderConfig,
    rope_base: f32,
    linear_scale: f32,
    freq_factors: Option<&[f32]>,
    capacity: usize,
    device: &Device,
) -> Result<Rotary> {
    let half = cfg.head_dim / 2;
    let inv_freq: Vec<f32> = (0..half)
        .map(|i| {
            let base = 1f32 / rope_base.powf(2.0 * i as f32 / cfg.head_dim as f32) / linear_scale;
            // Llama 3.1's long-context scaling ships as per-frequency divisors.
            base / freq_factors.and_then(|f| f.get(i)).copied().unwrap_or(1.0)
        })
        .collect();
    let inv_freq = Tensor::from_vec(inv_freq, (1, half), device)?;
    let positions = Tensor::arange(0u32, capacity as u32, device)?.to_dtype(DType::F32)?.reshape((capacity, 1))?;
    let angles = positions.matmul(&inv_freq)?;
    Ok(Rotary { cos: angles.cos()?.contiguous()?, sin: angles.sin()?.contiguous()? })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Our rotation gives candle's bits, for one position and several, in both layouts.
    #[test]
    fn rotation_on_the_cpu_matches_candles_rope() {
        let (heads, d, positions) = (3, 16, 40);
        let config = DecoderConfig {
            n_layer: 1,
            n_head: heads,
            n_kv_head: 1,
            head_dim: d,
            hidden: heads * d,
            rms_eps: 1e-6,
            rope_base: 10_000.0,
            rope_style: RopeStyle::Neox,
            trained_context: positions,
            quirks: Quirks::default(),
        };
        let tables = rotary_tables(&config, 10_000.0, 1.0, None, positions, &Device::Cpu).unwrap();
        for n in [1, 5] {
            let values: Vec<f32> = (0..heads * n * d).map(|i| ((i * 7919) % 1000) as f32 / 97.0 - 5.0).collect();
            let x = Tensor::from_vec(values, (heads, n, d), &Device::Cpu).unwrap();
            let (cos, sin) = (tables.cos.narrow(0, 30, n).unwrap(), tables.sin.narrow(0, 30, n).unwrap());
            for style in [RopeStyle::Neox, RopeStyle::Interleaved] {
                let ours = rotate_on_cpu(&x, &cos, &sin, style).unwrap().flatten_all().unwrap();
                let x4 = x.unsqueeze(0).unwrap();
                let theirs = match style {
                    RopeStyle::Neox => candle_nn::rotary_emb::rope(&x4, &cos, &sin),
                    RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&x4, &cos, &sin),
                };
                let theirs = theirs.unwrap().flatten_all().unwrap();
                let bits = |t: &Tensor| t.to_vec1::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&ours), bits(&theirs), "{style:?}, {n} positions");
            }
        }
    }
}
