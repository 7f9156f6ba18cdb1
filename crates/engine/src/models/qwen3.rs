//! Qwen3: the Llama layout with per-head RMSNorm of queries and keys before rotation, no
//! attention biases, NEOX-style rotary embeddings, and a head size of its own (`key_length`,
//! not hidden / heads). Reference: llama.cpp `LLM_ARCH_QWEN3`; HF `modeling_qwen3.py`.

use super::decoder::{DecoderConfig, RopeStyle};
use crate::error::Result;
use crate::gguf::GgufFile;

pub fn config(gguf: &GgufFile) -> Result<DecoderConfig> {
    let n_head = gguf.u32("qwen3.attention.head_count")? as usize;
    let hidden = gguf.u32("qwen3.embedding_length")? as usize;
    Ok(DecoderConfig {
        n_layer: gguf.u32("qwen3.block_count")? as usize,
        n_head,
        n_kv_head: gguf.u32("qwen3.attention.head_count_kv")? as usize,
        head_dim: gguf.u32("qwen3.attention.key_length").map(|d| d as usize).unwrap_or(hidden / n_head),
        hidden,
        rms_eps: gguf.f32("qwen3.attention.layer_norm_rms_epsilon")?,
        rope_base: gguf.f32("qwen3.rope.freq_base").unwrap_or(1_000_000.0),
        rope_style: RopeStyle::Neox,
        trained_context: gguf.u32("qwen3.context_length")? as usize,
        quirks: Default::default(),
    })
}
