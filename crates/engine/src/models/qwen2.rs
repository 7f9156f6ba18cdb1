//! Qwen2 (Qwen2.5, Qwen2.5-Coder): the Llama layout with biases on q, k and v, and NEOX-style
//! rotary embeddings. Reference: llama.cpp `LLM_ARCH_QWEN2`; HF `modeling_qwen2.py`.

use super::decoder::{DecoderConfig, RopeStyle};
use crate::error::Result;
use crate::gguf::GgufFile;

pub fn config(gguf: &GgufFile) -> Result<DecoderConfig> {
    let n_head = gguf.count("qwen2.attention.head_count")?;
    let hidden = gguf.count("qwen2.embedding_length")?;
    Ok(DecoderConfig {
        n_layer: gguf.count("qwen2.block_count")?,
        n_head,
        n_kv_head: gguf.count("qwen2.attention.head_count_kv")?,
        head_dim: hidden / n_head,
        hidden,
        rms_eps: gguf.f32("qwen2.attention.layer_norm_rms_epsilon")?,
        rope_base: gguf.optional_f32("qwen2.rope.freq_base")?.unwrap_or(1_000_000.0),
        rope_style: RopeStyle::Neox,
        trained_context: gguf.count("qwen2.context_length")?,
        quirks: Default::default(),
    })
}
