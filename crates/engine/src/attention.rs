//! Causal attention of new queries over a [`KvCache`].
//!
//! On the CPU a custom op computes each query row on its own, in a fixed order, so a row's
//! output is the same whether it is verified in a batch of k+1 or decoded alone (see
//! `quant.rs` for why that matters). It also reads the cache in place, with grouped-query
//! heads mapped by index instead of materialised copies. Other devices use candle's ops.

use crate::error::Result;
use crate::kv_cache::KvCache;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor, D};

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
        let out_ptr = out.as_mut_ptr() as usize;
        // Output row-major [n, n_head, head_dim]: item `idx` is one (query, head) pair.
        let attend = |items: std::ops::Range<usize>| {
            for idx in items {
                let (i, h) = (idx / n_head, idx % n_head);
                let kv_head = h / group;
                let query = &q[(h * n + i) * head_dim..][..head_dim];
                let p = self.pos + i;
                let start = window_start(p, self.window);
                let keys = &k[(kv_head * capacity + start) * head_dim..];
                let values = &v[(kv_head * capacity + start) * head_dim..];
                // SAFETY: each item owns its `head_dim` floats of `out`, inside its n · n_head · head_dim.
                let dst =
                    unsafe { std::slice::from_raw_parts_mut((out_ptr as *mut f32).add(idx * head_dim), head_dim) };
                attend_one(query, keys, values, p + 1 - start, scale, dst);
            }
        };
        // On the matmuls' pool (whose worker is spinning between them; rayon's sleeping
        // threads had to be woken three times a layer), unless the work is too small to share.
        let items = n * n_head;
        match items * (self.kv_len - self.pos) * head_dim >= PARALLEL_WORK {
            true => crate::kernels::parallel_items(items, 1, attend),
            false => attend(0..items),
        }
        Ok((CpuStorage::F32(out), Shape::from((n, n_head * head_dim))))
    }
}

/// Multiply-adds from which attention is split over threads.
const PARALLEL_WORK: usize = 1 << 16;

/// One query over the first `len` cached positions: softmax(q·k / sqrt(d)) · v into `dst`.
/// With FMA (checked once per process) the same arithmetic in fused multiply-adds on AVX2
/// registers; a process keeps one path, so a row's result still never depends on its batch.
fn attend_one(query: &[f32], keys: &[f32], values: &[f32], len: usize, scale: f32, dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::lanes::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { attend_one_fma(query, keys, values, len, scale, dst) };
    }
    attend_one_with::<false>(query, keys, values, len, scale, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_one_fma(query: &[f32], keys: &[f32], values: &[f32], len: usize, scale: f32, dst: &mut [f32]) {
    attend_one_with::<true>(query, keys, values, len, scale, dst)
}

#[inline(always)]
fn attend_one_with<const FMA: bool>(
    query: &[f32],
    keys: &[f32],
    values: &[f32],
    len: usize,
    scale: f32,
    dst: &mut [f32],
) {
    let d = query.len();
    // Plain loops, no closures: a closure is compiled without the caller's target features,
    // and `mul_add` there becomes a call to libm's `fmaf`.
    let mut scores = vec![0f32; len];
    for (j, score) in scores.iter_mut().enumerate() {
        *score = dot::<FMA>(query, &keys[j * d..][..d]) * scale;
    }
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    dst.fill(0.0);
    for (j, &w) in scores.iter().enumerate() {
        for (o, &x) in dst.iter_mut().zip(&values[j * d..][..d]) {
            *o = crate::lanes::multiply_add::<FMA>(w, x, *o);
        }
    }
    let inv = 1.0 / sum;
    for o in dst.iter_mut() {
        *o *= inv;
    }
}

/// A dot product, summed in a fixed order, which keeps results reproducible.
#[inline(always)]
fn dot<const FMA: bool>(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if FMA {
        // SAFETY: `FMA` is true only on the path `has_avx2_fma` chose.
        return unsafe { dot_fma(a, b) };
    }
    // Eight independent accumulators, so the compiler vectorizes it.
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

/// Four registers of eight products in flight (so the fused adds do not wait on one another),
/// then one fixed tree of adds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_fma(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (r, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 8 * r)), _mm256_loadu_ps(pb.add(i + 8 * r)), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc[0]);
        i += 8;
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let h = _mm_add_ps(q, _mm_movehl_ps(q, q));
    let mut sum = _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps::<1>(h, h)));
    while i < n {
        sum = a[i].mul_add(b[i], sum);
        i += 1;
    }
    sum
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
    fn the_fused_dot_product_agrees_with_the_plain_one_at_every_length() {
        #[cfg(target_arch = "x86_64")]
        if crate::lanes::has_avx2_fma() {
            let a = random((1, 1, 200), 11).flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let b = random((1, 1, 200), 12).flatten_all().unwrap().to_vec1::<f32>().unwrap();
            for len in [1, 7, 8, 31, 32, 33, 64, 127, 128, 200] {
                let (fused, plain) = (dot::<true>(&a[..len], &b[..len]), dot::<false>(&a[..len], &b[..len]));
                assert!((fused - plain).abs() < 1e-5, "length {len}: {fused} vs {plain}");
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
