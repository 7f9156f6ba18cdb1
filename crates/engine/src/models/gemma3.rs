//! Gemma 3: per-head q/k norms, norms after attention and after the MLP, GeGLU (tanh), token
//! embeddings scaled by sqrt(hidden), tied embeddings, and sliding-window attention on five
//! layers out of six, whose rotary base is 10 000 while the global layers' is 1 000 000.
//! llama.cpp's converter already adds Gemma's `+1` to the norm weights, so the norms are plain
//! RMSNorm here. Reference: llama.cpp `LLM_ARCH_GEMMA3`; HF `modeling_gemma3.py`.

use super::decoder::{Activation, DecoderConfig, Quirks, RopeStyle, SlidingWindow};
use crate::error::Result;
use crate::gguf::GgufFile;

/// llama.cpp's values when the file does not say.
const GLOBAL_EVERY: usize = 6;
const LOCAL_ROPE_BASE: f32 = 10_000.0;

pub fn config(gguf: &GgufFile) -> Result<DecoderConfig> {
    let n_head = gguf.u32("gemma3.attention.head_count")? as usize;
    let hidden = gguf.u32("gemma3.embedding_length")? as usize;
    let sliding_window = gguf.u32("gemma3.attention.sliding_window").ok().map(|size| SlidingWindow {
        size: size as usize,
        global_every: gguf.u32("gemma3.attention.sliding_window_pattern").map_or(GLOBAL_EVERY, |n| n as usize),
        rope_base: gguf.f32("gemma3.rope.local_freq_base").unwrap_or(LOCAL_ROPE_BASE),
    });
    let linear_scaling = gguf.string("gemma3.rope.scaling.type").is_ok_and(|t| t == "linear");
    Ok(DecoderConfig {
        n_layer: gguf.u32("gemma3.block_count")? as usize,
        n_head,
        n_kv_head: gguf.u32("gemma3.attention.head_count_kv").map(|n| n as usize).unwrap_or(n_head),
        head_dim: gguf.u32("gemma3.attention.key_length").map(|d| d as usize).unwrap_or(hidden / n_head),
        hidden,
        rms_eps: gguf.f32("gemma3.attention.layer_norm_rms_epsilon")?,
        rope_base: gguf.f32("gemma3.rope.freq_base").unwrap_or(1_000_000.0),
        rope_style: RopeStyle::Neox,
        trained_context: gguf.u32("gemma3.context_length")? as usize,
        quirks: Quirks {
            activation: Activation::GeluTanh,
            embed_scale: Some((hidden as f32).sqrt()),
            sliding_window,
            rope_scale: linear_scaling.then(|| gguf.f32("gemma3.rope.scaling.factor").ok()).flatten(),
        },
    })
}
