//! The activations' quantization before a matmul (Q8_K for Q4_K and Q6_K weights, Q8_0 for
//! Q5_0 and Q8_0), on AVX2 registers where the CPU has them. candle's `from_float` rounds each
//! value with a call to libm's `roundf` on one thread: 4% of a decoding step, while the pool's
//! other threads wait. These give the same bits as candle's, value for value (tested below),
//! so the kernels' results do not change.

use super::{current_path, Path, Q8K, Q8_0};
use candle_core::quantized::k_quants::{BlockQ8K, BlockQ8_0, GgmlType};

/// `candle`'s `BlockQ8K::from_float`, faster.
pub fn q8k(xs: &[f32], ys: &mut [BlockQ8K]) {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        let ys = super::cast_blocks_mut::<BlockQ8K, Q8K>(ys);
        assert_eq!(xs.len(), ys.len() * 256, "a row of whole blocks");
        // SAFETY: `simd` checked the CPU's features.
        return unsafe { x86::q8k(xs, ys) };
    }
    BlockQ8K::from_float(xs, ys)
}

/// `candle`'s `BlockQ8_0::from_float`, faster.
pub fn q8_0(xs: &[f32], ys: &mut [BlockQ8_0]) {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        let ys = super::cast_blocks_mut::<BlockQ8_0, Q8_0>(ys);
        assert_eq!(xs.len(), ys.len() * 32, "a row of whole blocks");
        // SAFETY: `simd` checked the CPU's features.
        return unsafe { x86::q8_0(xs, ys) };
    }
    BlockQ8_0::from_float(xs, ys)
}

/// Whether to use the AVX2 code: the CPU has it and the scalar path was not forced (which
/// keeps candle's code as the reference).
fn simd() -> bool {
    current_path() != Path::Scalar && Path::Avx2.available()
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use super::{Q8K, Q8_0};
    use half::f16;
    use std::arch::x86_64::*;

    /// Largest |x| of `xs` (a multiple of 8 long), NaNs skipped as candle's comparisons skip them.
    #[inline(always)]
    unsafe fn max_abs(xs: &[f32]) -> f32 {
        let sign = _mm256_set1_ps(-0.0);
        let mut acc = _mm256_setzero_ps();
        for chunk in xs.chunks_exact(8) {
            let abs = _mm256_andnot_ps(sign, _mm256_loadu_ps(chunk.as_ptr()));
            // `maxps` returns its second operand when the first is NaN.
            acc = _mm256_max_ps(abs, acc);
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
        lanes.into_iter().fold(0f32, f32::max)
    }

    /// `(x · scale).round().clamp(-128, 127) as i8` for 8 values: `round` is half away from
    /// zero (the fraction `v - trunc(v)` is exact), and NaN becomes 0 as Rust's cast makes it.
    #[inline(always)]
    unsafe fn quantize8(xs: *const f32, scale: __m256) -> __m256i {
        let v = _mm256_mul_ps(_mm256_loadu_ps(xs), scale);
        let truncated = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
        let sign = _mm256_set1_ps(-0.0);
        let fraction = _mm256_andnot_ps(sign, _mm256_sub_ps(v, truncated));
        let away = _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_GE_OQ>(fraction, _mm256_set1_ps(0.5)),
            _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0)),
        );
        let rounded = _mm256_add_ps(truncated, away);
        // `maxps`/`minps` keep a NaN in their second operand; the mask then zeroes it.
        let clamped = _mm256_min_ps(_mm256_set1_ps(127.0), _mm256_max_ps(_mm256_set1_ps(-128.0), rounded));
        let ordered = _mm256_cmp_ps::<_CMP_ORD_Q>(v, v);
        _mm256_cvtps_epi32(_mm256_and_ps(clamped, ordered))
    }

    /// 32 values quantized into 32 bytes in order.
    #[inline(always)]
    unsafe fn quantize32(xs: &[f32], scale: __m256, out: &mut [i8]) {
        let p = xs.as_ptr();
        let (a, b, c, d) =
            (quantize8(p, scale), quantize8(p.add(8), scale), quantize8(p.add(16), scale), quantize8(p.add(24), scale));
        // The packs work within 128-bit halves; the permute puts the 4-byte pieces back in order.
        let bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
        let bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(out.as_mut_ptr().cast(), bytes);
    }

    /// # Safety
    /// The CPU has AVX2; `xs.len() == 256 · ys.len()`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn q8k(xs: &[f32], ys: &mut [Q8K]) {
        for (xs, y) in xs.chunks_exact(256).zip(ys) {
            let amax = max_abs(xs);
            if amax == 0.0 {
                y.d = 0.0;
                y.qs = [0; 256];
                y.bsums = [0; 16];
                continue;
            }
            // The value of largest magnitude, the first of equals, as candle's scan finds it.
            let max = xs.iter().copied().find(|x| x.abs() == amax).unwrap_or(amax);
            let iscale = -127f32 / max;
            let scale = _mm256_set1_ps(iscale);
            for (xs, qs) in xs.chunks_exact(32).zip(y.qs.chunks_exact_mut(32)) {
                quantize32(xs, scale, qs);
            }
            for (sum, qs) in y.bsums.iter_mut().zip(y.qs.chunks_exact(16)) {
                *sum = qs.iter().map(|&q| i32::from(q)).sum::<i32>() as i16;
            }
            y.d = 1.0 / iscale;
        }
    }

    /// # Safety
    /// The CPU has AVX2; `xs.len() == 32 · ys.len()`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn q8_0(xs: &[f32], ys: &mut [Q8_0]) {
        for (xs, y) in xs.chunks_exact(32).zip(ys) {
            let d = max_abs(xs) / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            y.d = f16::from_f32(d);
            quantize32(xs, _mm256_set1_ps(id), &mut y.qs);
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::super::{cast_blocks, Q8K, Q8_0};
    use super::*;

    /// Values that test every branch: ties of magnitude with both signs, exact halves after
    /// scaling (a maximum of -127 makes the scale 1), zeros of both signs, NaN, infinities,
    /// huge and tiny magnitudes, and plain noise.
    fn awkward_rows(len: usize) -> Vec<Vec<f32>> {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut noise = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let halves: Vec<f32> = (0..len).map(|i| if i == 3 { -127.0 } else { (i % 255) as f32 / 2.0 - 63.5 }).collect();
        let ties: Vec<f32> = (0..len)
            .map(|i| {
                if i % 7 == 0 {
                    2.0
                } else if i % 11 == 0 {
                    -2.0
                } else {
                    noise()
                }
            })
            .collect();
        let mut specials: Vec<f32> = (0..len).map(|_| noise() * 1e-3).collect();
        specials[1] = f32::NAN;
        specials[5] = -0.0;
        specials[9] = f32::INFINITY;
        let mut nan_max: Vec<f32> = (0..len).map(|_| noise()).collect();
        nan_max[0] = f32::NAN;
        vec![
            halves,
            ties,
            specials,
            nan_max,
            vec![0.0; len],
            vec![-0.0; len],
            (0..len).map(|_| noise() * 3e38).collect(),
            (0..len).map(|_| noise() * 1e-38).collect(),
            (0..len).map(|_| noise() * 10.0).collect(),
        ]
    }

    fn same_q8k(a: &Q8K, b: &Q8K) -> bool {
        a.d.to_bits() == b.d.to_bits() && a.qs == b.qs && a.bsums == b.bsums
    }

    #[test]
    fn q8k_gives_candles_bits() {
        if !Path::Avx2.available() {
            eprintln!("avx2: this CPU lacks it, so the SIMD quantization is not tested here");
            return;
        }
        for (i, row) in awkward_rows(512).iter().enumerate() {
            let mut expected = vec![BlockQ8K::zeros(); 2];
            BlockQ8K::from_float(row, &mut expected);
            let mut ours = vec![BlockQ8K::zeros(); 2];
            // SAFETY: the CPU has AVX2 (checked above); 512 values make 2 blocks.
            unsafe { x86::q8k(row, super::super::cast_blocks_mut::<BlockQ8K, Q8K>(&mut ours)) };
            let (ours, expected) = (cast_blocks::<_, Q8K>(&ours), cast_blocks::<_, Q8K>(&expected));
            for (a, b) in ours.iter().zip(expected) {
                assert!(
                    same_q8k(a, b),
                    "row {i}: d {} against {}, qs {:?} against {:?}",
                    a.d,
                    b.d,
                    &a.qs[..16],
                    &b.qs[..16]
                );
            }
        }
    }

    #[test]
    fn q8_0_gives_candles_bits() {
        if !Path::Avx2.available() {
            eprintln!("avx2: this CPU lacks it, so the SIMD quantization is not tested here");
            return;
        }
        for (i, row) in awkward_rows(256).iter().enumerate() {
            let mut expected = vec![BlockQ8_0::zeros(); 8];
            BlockQ8_0::from_float(row, &mut expected);
            let mut ours = vec![BlockQ8_0::zeros(); 8];
            // SAFETY: the CPU has AVX2 (checked above); 256 values make 8 blocks.
            unsafe { x86::q8_0(row, super::super::cast_blocks_mut::<BlockQ8_0, Q8_0>(&mut ours)) };
            let (ours, expected) = (cast_blocks::<_, Q8_0>(&ours), cast_blocks::<_, Q8_0>(&expected));
            for (b, (x, y)) in ours.iter().zip(expected).enumerate() {
                assert!(
                    x.d.to_bits() == y.d.to_bits() && x.qs == y.qs,
                    "row {i} block {b}: {:?} against {:?}",
                    x.qs,
                    y.qs
                );
            }
        }
    }
}
