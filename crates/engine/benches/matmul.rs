//! Quantized matmul: Specula's multi-row kernels (`kernels`) against candle's own `QMatMul`, per weight
//! type of the Qwen pair, at the row counts of decoding (1) and verification (2 to 17), on the
//! shapes of Qwen2.5-Coder-1.5B's MLP. `cargo bench -p specula-engine --bench matmul`.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use specula_engine::quant::QLinear;

fn weights(dtype: GgmlDType, out: usize, inp: usize) -> QTensor {
    let w = Tensor::randn(0f32, 0.02, (out, inp), &Device::Cpu).unwrap();
    QTensor::quantize(&w, dtype).unwrap()
}

fn bench(c: &mut Criterion) {
    // The target's MLP (Q4_K up, Q6_K down) and the draft's (Q5_0 up, Q8_0 output layer shape).
    let shapes = [
        (GgmlDType::Q4K, 8960, 1536),
        (GgmlDType::Q6K, 1536, 8960),
        (GgmlDType::Q5_0, 4864, 896),
        (GgmlDType::Q8_0, 4864, 896),
    ];
    for (dtype, out, inp) in shapes {
        let mut group = c.benchmark_group(format!("{dtype:?} {out}x{inp}"));
        group.sample_size(20);
        let ours = QLinear::new(weights(dtype, out, inp), None).unwrap();
        let candle = QMatMul::from_qtensor(weights(dtype, out, inp)).unwrap();
        for m in [1usize, 2, 5, 9, 17] {
            let x = Tensor::randn(0f32, 1.0, (m, inp), &Device::Cpu).unwrap();
            group.bench_with_input(BenchmarkId::new("specula", m), &x, |b, x| b.iter(|| ours.forward(x).unwrap()));
            group.bench_with_input(BenchmarkId::new("candle", m), &x, |b, x| b.iter(|| candle.forward(x).unwrap()));
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
