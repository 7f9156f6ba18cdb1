//! Llama (Llama 2/3.x, Mistral, SmolLM2, TinyLlama): RMSNorm, grouped-query attention,
//! SwiGLU, interleaved rotary embeddings (llama.cpp's converter permutes q/k for them), and
//! tied embeddings when `output.weight` is absent. Reference: llama.cpp `LLM_ARCH_LLAMA`.

use super::decoder::{DecoderConfig, RopeStyle};
use crate::error::Result;
use crate::gguf::GgufFile;

pub fn config(gguf: &GgufFile) -> Result<DecoderConfig> {
    let n_head = gguf.u32("llama.attention.head_count")? as usize;
    let hidden = gguf.u32("llama.embedding_length")? as usize;
    Ok(DecoderConfig {
        n_layer: gguf.u32("llama.block_count")? as usize,
        n_head,
        n_kv_head: gguf.u32("llama.attention.head_count_kv").map(|n| n as usize).unwrap_or(n_head),
        head_dim: gguf.u32("llama.attention.key_length").map(|d| d as usize).unwrap_or(hidden / n_head),
        hidden,
        rms_eps: gguf.f32("llama.attention.layer_norm_rms_epsilon")?,
        rope_base: gguf.f32("llama.rope.freq_base").unwrap_or(10_000.0),
        rope_style: RopeStyle::Interleaved,
        trained_context: gguf.u32("llama.context_length")? as usize,
        quirks: Default::default(),
    })
}
