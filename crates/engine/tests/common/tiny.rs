//! Tiny random-weight models built in the test: real decoders (the same code as the GGUF
//! models) small enough that thousands of replies take seconds. A draft can be a noisy
//! relative of the target, as real drafts are, or a stranger.

use candle_core::{Device, Tensor};
use specula_engine::models::decoder::{Decoder, DecoderConfig, LiveDecoder, RopeStyle};
use specula_engine::{CachedModel, CausalLm, ChatTemplate, LoadedModel, ModelInfo, Tokenizer};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Shape and weights of a tiny model: `seed` draws the weights, `noise` perturbs them with a
/// second stream (a relative of the seed's model), `layers` and `hidden` size it.
#[derive(Debug, Clone, Copy)]
pub struct Tiny {
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub seed: u64,
    pub noise: f32,
    pub context: usize,
}

impl Tiny {
    /// The model of the sampling statistics: vocabulary 16, one layer of width 16.
    pub fn stats(seed: u64, noise: f32) -> Self {
        Self { vocab: 16, hidden: 16, layers: 1, seed, noise, context: 16 }
    }

    /// A larger vocabulary and two layers, for replies long enough to draft in.
    pub fn chat(seed: u64, noise: f32) -> Self {
        Self { vocab: 96, hidden: 32, layers: 2, seed, noise, context: 512 }
    }

    fn config(&self) -> DecoderConfig {
        DecoderConfig {
            n_layer: self.layers,
            n_head: 2,
            n_kv_head: 1,
            head_dim: self.hidden / 2,
            hidden: self.hidden,
            rms_eps: 1e-5,
            rope_base: 10_000.0,
            rope_style: RopeStyle::Neox,
            trained_context: 4096,
            quirks: Default::default(),
        }
    }

    pub fn decoder(&self) -> LiveDecoder {
        let h = self.hidden;
        let mut state = self.seed;
        let mut noise_state = self.seed ^ 0xABCD_EF01;
        let noise = self.noise;
        let mut random = |shape: (usize, usize), scale: f32, state: &mut u64| -> Tensor {
            let base = random(shape, scale, state);
            if noise == 0.0 {
                return base;
            }
            (base + random(shape, scale * noise, &mut noise_state)).unwrap()
        };
        let ones = Tensor::ones(h, candle_core::DType::F32, &Device::Cpu).unwrap();
        let mut w: HashMap<String, Tensor> = HashMap::new();
        w.insert("token_embd.weight".into(), random((self.vocab, h), 2.0, &mut state));
        w.insert("output.weight".into(), random((self.vocab, h), 3.0, &mut state));
        w.insert("output_norm.weight".into(), ones.clone());
        for layer in 0..self.layers {
            w.insert(format!("blk.{layer}.attn_norm.weight"), ones.clone());
            w.insert(format!("blk.{layer}.ffn_norm.weight"), ones.clone());
            for (name, shape) in [
                ("attn_q", (h, h)),
                ("attn_k", (h / 2, h)),
                ("attn_v", (h / 2, h)),
                ("attn_output", (h, h)),
                ("ffn_gate", (2 * h, h)),
                ("ffn_up", (2 * h, h)),
                ("ffn_down", (h, 2 * h)),
            ] {
                w.insert(format!("blk.{layer}.{name}.weight"), random(shape, 1.0, &mut state));
            }
        }
        Decoder::load(self.config(), &mut w, &Device::Cpu, self.context).unwrap().live().unwrap()
    }

    pub fn model(&self) -> CachedModel {
        CachedModel::new(Box::new(self.decoder()))
    }

    pub fn tokenizer(&self) -> Tokenizer {
        Tokenizer::from_vocab((0..self.vocab).map(|i| format!("t{i}")).collect()).unwrap()
    }

    /// The model as a loaded file would give it, around any `CausalLm` (a faulty one, say).
    pub fn loaded_with(&self, model: Box<dyn CausalLm>) -> LoadedModel {
        let template = ChatTemplate::new("{{ messages[0]['content'] }}".into(), None, None, false).unwrap();
        let info = ModelInfo {
            name: format!("tiny-{}", self.seed),
            architecture: "tiny".into(),
            parameters: 0,
            quantization: "F32".into(),
            file_bytes: 0,
            vocab_size: self.vocab,
            trained_context: 4096,
            context: self.context,
            kv_format: Default::default(),
            requantized: Vec::new(),
        };
        LoadedModel {
            model: CachedModel::new(model),
            tokenizer: self.tokenizer().into(),
            template: template.into(),
            info,
        }
    }

    pub fn loaded(&self) -> LoadedModel {
        self.loaded_with(Box::new(self.decoder()))
    }
}

pub fn random(shape: (usize, usize), scale: f32, state: &mut u64) -> Tensor {
    let data: Vec<f32> = (0..shape.0 * shape.1)
        .map(|_| {
            *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (((*state >> 33) as f32 / (1u64 << 31) as f32) - 0.5) * scale
        })
        .collect();
    Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
}

/// A model that misbehaves on demand: it panics in `forward` while `panics` is set, and
/// takes `delay_per_token` per token fed (a slow model, to cancel during its prefill).
pub struct Faulty {
    pub inner: LiveDecoder,
    pub panics: Arc<AtomicBool>,
    pub delay_per_token: Duration,
}

impl Faulty {
    fn misbehave(&self, tokens: &[u32]) {
        std::thread::sleep(self.delay_per_token * tokens.len() as u32);
        if self.panics.load(Ordering::SeqCst) {
            panic!("the test model was told to panic");
        }
    }
}

impl CausalLm for Faulty {
    fn forward(&mut self, tokens: &[u32]) -> specula_engine::Result<Tensor> {
        self.misbehave(tokens);
        self.inner.forward(tokens)
    }
    fn forward_last(&mut self, tokens: &[u32]) -> specula_engine::Result<Tensor> {
        self.misbehave(tokens);
        self.inner.forward_last(tokens)
    }
    fn truncate(&mut self, len: usize) {
        self.inner.truncate(len)
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn capacity(&self) -> usize {
        self.inner.capacity()
    }
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }
}
