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
/// Gemma 3 27B's attention scale is 1/sqrt(hidden / heads) = 1/sqrt(168), not the other sizes'
/// 1/sqrt(head_dim) = 1/sqrt(128). GGUF has no key for HF's `query_pre_attn_scalar`, so
/// llama.cpp recognises the 27B by its layer count, as here.
const LAYERS_OF_27B: usize = 62;

pub fn config(gguf: &GgufFile) -> Result<DecoderConfig> {
    let n_head = gguf.count("gemma3.attention.head_count")?;
    let hidden = gguf.count("gemma3.embedding_length")?;
    let global_every = gguf.optional_count("gemma3.attention.sliding_window_pattern")?.unwrap_or(GLOBAL_EVERY);
    let local_rope_base = gguf.optional_f32("gemma3.rope.local_freq_base")?.unwrap_or(LOCAL_ROPE_BASE);
    let sliding_window = gguf.optional_count("gemma3.attention.sliding_window")?.map(|size| SlidingWindow {
        size,
        global_every,
        rope_base: local_rope_base,
    });
    let linear_scaling = gguf.string("gemma3.rope.scaling.type").is_ok_and(|t| t == "linear");
    let n_layer = gguf.count("gemma3.block_count")?;
    let head_dim = gguf.optional_count("gemma3.attention.key_length")?.unwrap_or(hidden / n_head);
    Ok(DecoderConfig {
        n_layer,
        n_head,
        n_kv_head: gguf.optional_count("gemma3.attention.head_count_kv")?.unwrap_or(n_head),
        head_dim,
        hidden,
        rms_eps: gguf.f32("gemma3.attention.layer_norm_rms_epsilon")?,
        rope_base: gguf.optional_f32("gemma3.rope.freq_base")?.unwrap_or(1_000_000.0),
        rope_style: RopeStyle::Neox,
        trained_context: gguf.count("gemma3.context_length")?,
        quirks: Quirks {
            activation: Activation::GeluTanh,
            embed_scale: Some((hidden as f32).sqrt()),
            sliding_window,
            rope_scale: if linear_scaling { gguf.optional_f32("gemma3.rope.scaling.factor")? } else { None },
            query_scale: (n_layer == LAYERS_OF_27B).then(|| query_scale(head_dim, hidden / n_head)),
        },
    })
}

/// What turns attention's 1/sqrt(head_dim) into 1/sqrt(query_pre_attn_scalar).
fn query_scale(head_dim: usize, query_pre_attn_scalar: usize) -> f32 {
    (head_dim as f32 / query_pre_attn_scalar as f32).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::gguf_file::{self, Value};

    /// A GGUF holding only the metadata of a Gemma 3 size.
    fn header(layers: u32, hidden: u32, heads: u32) -> tempfile::NamedTempFile {
        let metadata = [
            ("general.architecture", Value::String("gemma3".into())),
            ("gemma3.block_count", Value::U32(layers)),
            ("gemma3.embedding_length", Value::U32(hidden)),
            ("gemma3.attention.head_count", Value::U32(heads)),
            ("gemma3.attention.head_count_kv", Value::U32(16)),
            ("gemma3.attention.key_length", Value::U32(128)),
            ("gemma3.attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
            ("gemma3.context_length", Value::U32(131072)),
        ];
        let file = tempfile::NamedTempFile::new().unwrap();
        let metadata: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
        gguf_file::write(&mut file.reopen().unwrap(), &metadata, &[]).unwrap();
        file
    }

    #[test]
    fn only_the_27b_scales_its_queries_by_hidden_over_heads() {
        let big = config(&GgufFile::open(header(62, 5376, 32).path()).unwrap()).unwrap();
        // Attention then scales by 1/sqrt(128) * sqrt(128/168) = 1/sqrt(168).
        let scale = big.quirks.query_scale.unwrap();
        assert!((scale / (big.head_dim as f32).sqrt() - 1.0 / 168f32.sqrt()).abs() < 1e-7);
        let small = config(&GgufFile::open(header(34, 2560, 8).path()).unwrap()).unwrap();
        assert_eq!(small.quirks.query_scale, None);
    }
}
