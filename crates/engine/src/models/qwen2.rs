//! Qwen2 (Qwen2.5, Qwen2.5-Coder): the Llama layout with biases on q, k and v, and NEOX-style
//! rotary embeddings. Reference: llama.cpp `LLM_ARCH_QWEN2`; HF `modeling_qwen2.py`.

use super::decoder::{DecoderConfig, RopeStyle};
use crate::error::Result;
use crate::gguf::GgufFile;

pub fn config(gguf: &GgufFile) -> Result<DecoderConfig> {
    let n_head = gguf.u32("qwen2.attention.head_count")? as usize;
    let hidden = gguf.u32("qwen2.embedding_length")? as usize;
    Ok(DecoderConfig {
        n_layer: gguf.u32("qwen2.block_count")? as usize,
        n_head,
        n_kv_head: gguf.u32("qwen2.attention.head_count_kv")? as usize,
        head_dim: hidden / n_head,
        hidden,
        rms_eps: gguf.f32("qwen2.attention.layer_norm_rms_epsilon")?,
        rope_base: gguf.f32("qwen2.rope.freq_base").unwrap_or(1_000_000.0),
        rope_style: RopeStyle::Neox,
        trained_context: gguf.u32("qwen2.context_length")? as usize,
        quirks: Default::default(),
    })
}
