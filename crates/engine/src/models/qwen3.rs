//! Qwen3: the Llama layout with per-head RMSNorm of queries and keys before rotation, no
//! attention biases, NEOX-style rotary embeddings, and a head size of its own (`key_length`,
//! not hidden / heads). Reference: llama.cpp `LLM_ARCH_QWEN3`; HF `modeling_qwen3.py`.

use super::decoder::{DecoderConfig, RopeStyle};
use crate::error::Result;
use crate::gguf::GgufFile;

pub fn config(gguf: &GgufFile) -> Result<DecoderConfig> {
    let n_head = gguf.count("qwen3.attention.head_count")?;
    let hidden = gguf.count("qwen3.embedding_length")?;
    Ok(DecoderConfig {
        n_layer: gguf.count("qwen3.block_count")?,
        n_head,
        n_kv_head: gguf.count("qwen3.attention.head_count_kv")?,
        head_dim: gguf.optional_count("qwen3.attention.key_length")?.unwrap_or(hidden / n_head),
        hidden,
        rms_eps: gguf.f32("qwen3.attention.layer_norm_rms_epsilon")?,
        rope_base: gguf.optional_f32("qwen3.rope.freq_base")?.unwrap_or(1_000_000.0),
        rope_style: RopeStyle::Neox,
        trained_context: gguf.count("qwen3.context_length")?,
        quirks: Default::default(),
    })
}
