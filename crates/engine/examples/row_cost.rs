//! What each extra activation row costs in a multi-row kernel, relative to one row: the
//! fastest of many runs, so the machine's noise mostly drops out (criterion reports medians).
//! Twice: with the matrix in cache (the kernel's arithmetic), and cycling through copies that
//! together far exceed the last-level cache (weights from memory, as in a real pass).
//! `cargo run --release -p specula-engine --example row_cost -- q4k|q6k|q5_0|q8_0`

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use specula_engine::kernels::Packed;
use std::time::Instant;

/// Bytes of copies of the matrix for the cold figures: past any last-level cache these hosts
/// have (up to 260 MB of L3 on the Intel Xeon ones).
const COLD_BYTES: usize = 1 << 30;

fn fastest(runs: usize, mut f: impl FnMut()) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min)
}

/// Seconds for one matrix times `m` rows, the fastest of `runs` passes over `mats`.
fn time_rows(mats: &[Packed], m: usize, runs: usize) -> f64 {
    let (n, k) = mats[0].shape();
    let lhs: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let mut dst = vec![0f32; m * n];
    fastest(runs, || {
        for mat in mats {
            mat.matmul(m, &lhs, &mut dst).unwrap();
        }
    }) / mats.len() as f64
}

fn report(label: &str, mats: &[Packed], runs: usize) {
    let one = time_rows(mats, 1, runs);
    let ratios: Vec<String> = (1..=17).map(|m| format!("{m}: {:.2}", time_rows(mats, m, runs) / one)).collect();
    println!("{label}: one row {:.3} ms; m rows / one row: {}", one * 1e3, ratios.join(", "));
}

fn main() {
    // The shapes of the Qwen pair: the target's MLP (Q4_K up, Q6_K down), the draft's (Q5_0,
    // and Q8_0 as its output layer's type).
    let (dtype, n, k) = match std::env::args().nth(1).as_deref() {
        Some("q6k") => (GgmlDType::Q6K, 1536, 8960),
        Some("q5_0") => (GgmlDType::Q5_0, 4864, 896),
        Some("q8_0") => (GgmlDType::Q8_0, 4864, 896),
        _ => (GgmlDType::Q4K, 8960, 1536),
    };
    let weights = Tensor::randn(0f32, 0.02, (n, k), &Device::Cpu).and_then(|w| QTensor::quantize(&w, dtype)).unwrap();
    let bytes = weights.data().unwrap();
    let pack = || Packed::new(dtype, n, k, &bytes).unwrap().unwrap();
    println!("{}", specula_engine::kernels::cpu_description());
    report(&format!("{dtype:?} {n}x{k} in cache"), &[pack()], 100);
    let copies: Vec<Packed> = (0..COLD_BYTES.div_ceil(bytes.len())).map(|_| pack()).collect();
    report(&format!("{dtype:?} {n}x{k} from memory"), &copies, 8);
}
