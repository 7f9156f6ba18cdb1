//! Llama (Llama 2/3.x, Mistral, SmolLM2, TinyLlama): RMSNorm, grouped-query attention,
//! SwiGLU, interleaved rotary embeddings (llama.cpp's converter permutes q/k for them), and
//! tied embeddings when `output.weight` is absent. Reference: llama.cpp `LLM_ARCH_LLAMA`.

use super::decoder::{DecoderConfig, RopeStyle};
use crate::error::Result;
use crate::gguf::GgufFile;

pub fn config(gguf: &GgufFile) -> Result<DecoderConfig> {
    let n_head = gguf.count("llama.attention.head_count")?;
    let hidden = gguf.count("llama.embedding_length")?;
    Ok(DecoderConfig {
        n_layer: gguf.count("llama.block_count")?,
        n_head,
        n_kv_head: gguf.optional_count("llama.attention.head_count_kv")?.unwrap_or(n_head),
        head_dim: gguf.optional_count("llama.attention.key_length")?.unwrap_or(hidden / n_head),
        hidden,
        rms_eps: gguf.f32("llama.attention.layer_norm_rms_epsilon")?,
        rope_base: gguf.optional_f32("llama.rope.freq_base")?.unwrap_or(10_000.0),
        rope_style: RopeStyle::Interleaved,
        trained_context: gguf.count("llama.context_length")?,
        quirks: Default::default(),
    })
}
