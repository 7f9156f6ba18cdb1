//! The kernels on the real weights of every model the tests use: for each weight type with a
//! kernel, a few of its matrices and the output layer, at the row counts of decoding,
//! verification and prefill, every path this CPU has against the oracle (`reference`), bit
//! for bit; and the oracle within activation rounding of candle's own generic matmul.

mod common;

use candle_core::quantized::gguf_file::Content;
use common::*;
use specula_engine::kernels::{self, Packed, Path};
use specula_engine::quant;

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
    let paths: Vec<Path> = Path::ALL.into_iter().filter(|p| p.available()).collect();
    eprintln!("{}: paths {:?}", kernels::cpu_description(), paths);
    let mut file = std::fs::File::open(model(name)).unwrap();
    let content = Content::read(&mut file).unwrap();
    let mut per_type = std::collections::BTreeMap::<String, usize>::new();
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    for tensor in names {
        let info = &content.tensor_infos[tensor];
        let seen = per_type.entry(format!("{:?}", info.ggml_dtype)).or_default();
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
        let packed = Packed::new(info.ggml_dtype, n, k, bytes).unwrap().unwrap();
        for m in [1, 5, 9, 40] {
            let lhs = activations(m * k, m as u64);
            let mut results = Vec::new();
            for &path in &paths {
                let mut out = vec![0f32; m * n];
                packed.matmul_on(path, m, &lhs, &mut out).unwrap();
                results.push(out);
            }
            for (path, out) in paths.iter().zip(&results) {
                assert_eq!(
                    out,
                    &results[0],
                    "{name} {tensor} m = {m}: {} differs from {}",
                    path.name(),
                    paths[0].name()
                );
            }
            let mut candle = vec![0f32; m * n];
            quant::candle_matmul(info.ggml_dtype, (m, k, n), &lhs, bytes, &mut candle).unwrap();
            for (a, b) in results[0].iter().zip(&candle) {
                assert!((a - b).abs() <= 1e-3 * (1.0 + b.abs()), "{name} {tensor} m = {m}: {a} vs candle's {b}");
            }
        }
        eprintln!("{name} {tensor} {:?} [{n}, {k}]: every path agrees at m = 1, 5, 9, 40", info.ggml_dtype);
    }
}

#[test]
fn kernels_agree_on_the_target() {
    check_model(TARGET);
}

#[test]
fn kernels_agree_on_the_draft() {
    check_model(DRAFT);
}

#[test]
fn kernels_agree_on_gemma3() {
    check_model(GEMMA);
}
