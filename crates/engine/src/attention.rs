//! Causal attention of new queries over a [`KvCache`].
//!
//! On the CPU a custom op computes each query row on its own, in a fixed order, so a row's
//! output is the same whether it is verified in a batch of k+1 or decoded alone (see
//! `quant.rs` for why that matters). It also reads the cache in place, with grouped-query
//! heads mapped by index instead of materialised copies. Other devices use candle's ops.

use crate::error::Result;
use crate::kv_cache::KvCache;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor, D};
use rayon::prelude::*;

/// `q`: `[n_head, n, head_dim]` for positions `pos .. pos + n`, whose keys and values are
/// already in `cache`. With a sliding `window`, position p sees only the `window` positions
/// ending at p (llama.cpp's standard SWA). Returns `[n, n_head * head_dim]`.
pub fn causal_attention(q: &Tensor, cache: &KvCache, pos: usize, window: Option<usize>) -> Result<Tensor> {
    let (k, v) = cache.buffers();
    let window = window.unwrap_or(usize::MAX);
    if q.device().is_cpu() {
        let op = RowExactAttention { pos, kv_len: cache.len(), window };
        Ok(q.contiguous()?.apply_op3_no_bwd(k, v, &op)?)
    } else {
        tensor_attention(q, k, v, pos, cache.len(), window)
    }
}

/// The first position that query position `p` attends to.
fn window_start(p: usize, window: usize) -> usize {
    (p + 1).saturating_sub(window)
}

/// The same computation in candle's tensor ops, for devices without the custom op.
pub fn tensor_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pos: usize,
    kv_len: usize,
    window: usize,
) -> Result<Tensor> {
    let (n_head, n, head_dim) = q.dims3()?;
    let n_kv_head = k.dims()[0];
    let group = n_head / n_kv_head;
    let repeat = |t: &Tensor| -> candle_core::Result<Tensor> {
        let t = t.narrow(1, 0, kv_len)?;
        // [n_kv, kv, d] -> [n_kv, group, kv, d] -> [n_head, kv, d]
        t.unsqueeze(1)?.broadcast_as((n_kv_head, group, kv_len, head_dim))?.reshape((n_head, kv_len, head_dim))
    };
    let (k, v) = (repeat(k)?, repeat(v)?);
    let scale = 1.0 / (head_dim as f64).sqrt();
    let scores = (q.contiguous()?.matmul(&k.t()?)? * scale)?;
    let visible = |i: usize, j: usize| j <= pos + i && j >= window_start(pos + i, window);
    let mask: Vec<f32> =
        (0..n).flat_map(|i| (0..kv_len).map(move |j| if visible(i, j) { 0.0 } else { f32::NEG_INFINITY })).collect();
    let mask = Tensor::from_vec(mask, (1, n, kv_len), q.device())?.to_dtype(DType::F32)?;
    let probs = candle_nn::ops::softmax(&scores.broadcast_add(&mask)?, D::Minus1)?;
    let out = probs.matmul(&v.contiguous()?)?; // [n_head, n, d]
    Ok(out.transpose(0, 1)?.reshape((n, n_head * head_dim))?)
}

struct RowExactAttention {
    pos: usize,
    kv_len: usize,
    window: usize,
}

impl CustomOp3 for RowExactAttention {
    fn name(&self) -> &'static str {
        "row-exact-attention"
    }

    fn cpu_fwd(
        &self,
        q: &CpuStorage,
        lq: &Layout,
        k: &CpuStorage,
        lk: &Layout,
        v: &CpuStorage,
        lv: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n_head, n, head_dim) = lq.shape().dims3()?;
        let (n_kv_head, capacity, _) = lk.shape().dims3()?;
        if !lk.is_contiguous() || !lv.is_contiguous() || self.pos + n > self.kv_len || self.kv_len > capacity {
            candle_core::bail!("attention: bad cache layout or length")
        }
        let q = &q.as_slice::<f32>()?[lq.start_offset()..];
        let k = &k.as_slice::<f32>()?[lk.start_offset()..];
        let v = &v.as_slice::<f32>()?[lv.start_offset()..];
        let group = n_head / n_kv_head;
        let scale = 1.0 / (head_dim as f32).sqrt();
        let mut out = vec![0f32; n * n_head * head_dim];
        // Output row-major [n, n_head, head_dim]: each chunk is one (query, head) pair.
        out.par_chunks_mut(head_dim).enumerate().with_min_len(4).for_each(|(idx, dst)| {
            let (i, h) = (idx / n_head, idx % n_head);
            let kv_head = h / group;
            let query = &q[(h * n + i) * head_dim..][..head_dim];
            let p = self.pos + i;
            let start = window_start(p, self.window);
            let keys = &k[(kv_head * capacity + start) * head_dim..];
            let values = &v[(kv_head * capacity + start) * head_dim..];
            attend_one(query, keys, values, p + 1 - start, scale, dst);
        });
        Ok((CpuStorage::F32(out), Shape::from((n, n_head * head_dim))))
    }
}

/// One query over the first `len` cached positions: softmax(q·k / sqrt(d)) · v into `dst`.
fn attend_one(query: &[f32], keys: &[f32], values: &[f32], len: usize, scale: f32, dst: &mut [f32]) {
    let d = query.len();
    let mut scores: Vec<f32> = (0..len).map(|j| dot(query, &keys[j * d..][..d]) * scale).collect();
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    dst.fill(0.0);
    for (j, &w) in scores.iter().enumerate() {
        for (o, &x) in dst.iter_mut().zip(&values[j * d..][..d]) {
            *o += w * x;
        }
    }
    let inv = 1.0 / sum;
    dst.iter_mut().for_each(|o| *o *= inv);
}

/// A dot product with eight independent accumulators, so the compiler vectorizes it;
/// the summation order is fixed, which keeps results reproducible.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn random(shape: (usize, usize, usize), seed: u64) -> Tensor {
        let mut state = seed;
        let n = shape.0 * shape.1 * shape.2;
        let data: Vec<f32> = (0..n)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
            })
            .collect();
        Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
    }

    fn filled_cache(len: usize) -> KvCache {
        let mut cache = KvCache::new(2, 16, 8, &Device::Cpu).unwrap();
        cache.append(&random((2, len, 8), 1), &random((2, len, 8), 2)).unwrap();
        cache
    }

    #[test]
    fn custom_op_matches_tensor_ops() {
        let cache = filled_cache(9);
        let q = random((4, 3, 8), 3); // positions 6, 7, 8
        for window in [None, Some(1), Some(3), Some(100)] {
            let ours: Vec<f32> =
                causal_attention(&q, &cache, 6, window).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let (k, v) = cache.buffers();
            let theirs: Vec<f32> = tensor_attention(&q, k, v, 6, 9, window.unwrap_or(usize::MAX))
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            for (a, b) in ours.iter().zip(&theirs) {
                assert!((a - b).abs() < 1e-5, "window {window:?}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn a_window_of_one_sees_only_its_own_position() {
        let mut cache = KvCache::new(1, 4, 8, &Device::Cpu).unwrap();
        let v = random((1, 3, 8), 8);
        cache.append(&random((1, 3, 8), 9), &v).unwrap();
        let out: Vec<Vec<f32>> =
            causal_attention(&random((1, 3, 8), 10), &cache, 0, Some(1)).unwrap().to_vec2().unwrap();
        let v: Vec<Vec<f32>> = v.squeeze(0).unwrap().to_vec2().unwrap();
        assert_eq!(out, v);
    }

    #[test]
    fn a_row_is_the_same_alone_or_in_a_batch() {
        let cache = filled_cache(9);
        let q = random((4, 3, 8), 4);
        let batched: Vec<Vec<f32>> = causal_attention(&q, &cache, 6, None).unwrap().to_vec2().unwrap();
        for (i, expected) in batched.iter().enumerate() {
            let mut alone = filled_cache(9);
            alone.truncate(7 + i);
            let qi = q.narrow(1, i, 1).unwrap();
            let row: Vec<Vec<f32>> = causal_attention(&qi, &alone, 6 + i, None).unwrap().to_vec2().unwrap();
            assert_eq!(&row[0], expected);
        }
    }

    #[test]
    fn a_single_position_returns_its_value() {
        let mut cache = KvCache::new(1, 4, 8, &Device::Cpu).unwrap();
        let v = random((1, 1, 8), 5);
        cache.append(&random((1, 1, 8), 6), &v).unwrap();
        let out: Vec<f32> =
            causal_attention(&random((2, 1, 8), 7), &cache, 0, None).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let v: Vec<f32> = v.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(&out[..8], &v[..]);
        assert_eq!(&out[8..], &v[..]);
    }
}
