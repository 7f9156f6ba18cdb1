//! One-row (decoding) matmul speed with the weights streamed from memory, as in a real decode
//! step: several copies of a matrix, together far larger than the CPU's caches, multiplied in
//! turn. Prints GB/s of weights read (the fastest of several sweeps).
//! `cargo run --release -p specula-engine --example decode_bandwidth -- q4k|q6k|q5_0|q8_0`
//! (`CANDLE_NUM_THREADS=1` for one thread.)

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use std::time::Instant;

fn main() {
    let (dtype, n, k) = match std::env::args().nth(1).as_deref() {
        Some("q6k") => (GgmlDType::Q6K, 1536, 8960),
        Some("q5_0") => (GgmlDType::Q5_0, 4864, 896),
        Some("q8_0") => (GgmlDType::Q8_0, 4864, 896),
        _ => (GgmlDType::Q4K, 8960, 1536),
    };
    let weights = Tensor::randn(0f32, 0.02, (n, k), &Device::Cpu).and_then(|w| QTensor::quantize(&w, dtype)).unwrap();
    let bytes = weights.data().unwrap();
    let megabytes: usize = std::env::var("MB").ok().and_then(|s| s.parse().ok()).unwrap_or(512);
    let copies = (megabytes << 20) / bytes.len() + 1;
    let packed: Vec<_> =
        (0..copies).map(|_| specula_engine::kernels::Packed::new(dtype, n, k, &bytes).unwrap().unwrap()).collect();
    let lhs: Vec<f32> = (0..k).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let mut dst = vec![0f32; n];
    let sweeps = (4096 / megabytes).clamp(8, 200);
    let best = (0..sweeps)
        .map(|_| {
            let t = Instant::now();
            for p in &packed {
                p.matmul(1, &lhs, &mut dst).unwrap();
            }
            t.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min);
    let total = (bytes.len() * copies) as f64;
    println!("{}", specula_engine::kernels::cpu_description());
    println!(
        "{dtype:?} {n}x{k}, {copies} copies ({:.0} MB): {:.2} ms per matrix, {:.1} GB/s",
        total / 1e6,
        best / copies as f64 * 1e3,
        total / best / 1e9
    );
}
