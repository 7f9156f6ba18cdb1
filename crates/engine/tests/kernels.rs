//! The multi-row kernels against candle's reference on the real weights of every model the
//! tests use: for each weight type with a kernel, a few of its matrices, at the row counts of
//! decoding, verification and prefill. Q4_K, Q6_K and Q8_0 must agree bit for bit; Q5_0 sums
//! its exact block products in another float order.

mod common;

use candle_core::quantized::gguf_file::Content;
use candle_core::quantized::GgmlDType;
use common::*;
use specula_engine::{kernels, quant};

/// candle's generic matmul, the reference.
fn reference(dtype: GgmlDType, bytes: &[u8], mkn: (usize, usize, usize), lhs: &[f32]) -> Vec<f32> {
    let mut dst = vec![0f32; mkn.0 * mkn.2];
    quant::candle_matmul(dtype, mkn, lhs, bytes, &mut dst).unwrap();
    dst
}

fn activations(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) as f32 / (1u64 << 31) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn check_model(name: &str) {
    if !kernels::available() {
        eprintln!("no AVX2 + FMA + F16C here: the kernels are not used");
        return;
    }
    let mut file = std::fs::File::open(model(name)).unwrap();
    let content = Content::read(&mut file).unwrap();
    let mut per_type = std::collections::BTreeMap::<String, usize>::new();
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    for tensor in names {
        let info = &content.tensor_infos[tensor];
        let seen = per_type.entry(format!("{:?}", info.ggml_dtype)).or_default();
        // Two matrices of each type, and the output layer (or the tied embedding).
        let output = matches!(tensor.as_str(), "output.weight" | "token_embd.weight");
        if !kernels::has_kernel(info.ggml_dtype) || info.shape.rank() != 2 || (*seen >= 2 && !output) {
            continue;
        }
        *seen += 1;
        let w = content.tensor(&mut file, tensor, &candle_core::Device::Cpu).unwrap();
        let (n, k) = w.shape().dims2().unwrap();
        // The first rows of an output layer (up to 262144 of them) are enough.
        let n = n.min(2048);
        let bytes = w.data().unwrap();
        let bytes = &bytes[..bytes.len() / w.shape().dims()[0] * n];
        for m in [1, 5, 9, 40] {
            let lhs = activations(m * k, m as u64);
            let mut ours = vec![0f32; m * n];
            assert!(kernels::matmul(info.ggml_dtype, (m, k, n), &lhs, bytes, &mut ours).unwrap());
            let theirs = reference(info.ggml_dtype, bytes, (m, k, n), &lhs);
            if info.ggml_dtype == GgmlDType::Q5_0 {
                for (a, b) in ours.iter().zip(&theirs) {
                    assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{name} {tensor} m = {m}: {a} vs {b}");
                }
            } else {
                assert_eq!(ours, theirs, "{name} {tensor} ({:?}) m = {m}", info.ggml_dtype);
            }
        }
        eprintln!("{name} {tensor} {:?} [{n}, {k}]: agrees at m = 1, 5, 9, 40", info.ggml_dtype);
    }
}

#[test]
fn kernels_agree_with_candle_on_the_target() {
    check_model(TARGET);
}

#[test]
fn kernels_agree_with_candle_on_the_draft() {
    check_model(DRAFT);
}

#[test]
fn kernels_agree_with_candle_on_gemma3() {
    check_model(GEMMA);
}
