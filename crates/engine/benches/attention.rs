//! Attention over the KV cache at depth: one decoded position and a verification of five, over
//! 1,500 cached positions, with the heads of Qwen2.5-Coder-1.5B (12 query heads sharing 2 kv
//! heads of 128) and of the 0.5B draft (14 sharing 2, of 64); and a prefill chunk of 512
//! positions over 4,096 and 16,384 cached ones in f16, the 1.5B's heads.
//! `cargo bench -p specula-engine --bench attention`.

use candle_core::{Device, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use specula_engine::attention::causal_attention;
use specula_engine::kv_cache::{KvCache, KvFormat};

const DEPTH: usize = 1500;

fn bench(c: &mut Criterion) {
    for (name, n_head, n_kv_head, head_dim) in [("1.5b", 12, 2, 128), ("0.5b", 14, 2, 64)] {
        let mut group = c.benchmark_group(format!("attention {name} at {DEPTH}"));
        group.sample_size(30);
        for n in [1usize, 5] {
            let mut cache = KvCache::new(n_kv_head, DEPTH + n, head_dim, &Device::Cpu).unwrap();
            let rows = |len| Tensor::randn(0f32, 1.0, (n_kv_head, len, head_dim), &Device::Cpu).unwrap();
            cache.append(&rows(DEPTH + n), &rows(DEPTH + n)).unwrap();
            let q = Tensor::randn(0f32, 1.0, (n_head, n, head_dim), &Device::Cpu).unwrap();
            group.bench_with_input(BenchmarkId::new("queries", n), &q, |b, q| {
                b.iter(|| causal_attention(q, &cache, DEPTH, None).unwrap())
            });
        }
        group.finish();
    }
    let mut group = c.benchmark_group("attention 1.5b, a prefill chunk of 512 in f16");
    group.sample_size(10);
    for depth in [4096usize, 16384] {
        let (n, n_kv_head, head_dim) = (512, 2, 128);
        let mut cache = KvCache::with_format(n_kv_head, depth + n, head_dim, KvFormat::F16, &Device::Cpu).unwrap();
        let rows = || Tensor::randn(0f32, 1.0, (n_kv_head, depth + n, head_dim), &Device::Cpu).unwrap();
        cache.append(&rows(), &rows()).unwrap();
        let q = Tensor::randn(0f32, 1.0, (12, n, head_dim), &Device::Cpu).unwrap();
        group.bench_with_input(BenchmarkId::new("depth", depth), &q, |b, q| {
            b.iter(|| causal_attention(q, &cache, depth, None).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
