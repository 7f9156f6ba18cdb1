//! Q5_0 × Q8_0, AVX2. candle has only a scalar kernel for Q5_0 (so the draft model used to be
//! requantized to Q8_0 at load, which costs 55% more memory traffic per token). Per weight
//! block the 5-bit quants are assembled once, unsigned (0..31); each row then costs a
//! `maddubs`, a `madd`, a `sub` of its precomputed `16 · Σ y` and an `fma`, like llama.cpp's
//! `ggml_vec_dot_q5_0_q8_0` but with the `-16` taken out of the inner loop. The integer
//! products are exact; only the float summation order differs from candle's scalar kernel.

use super::{Q5_0, Q8_0};
use std::arch::x86_64::*;

/// An activation block with its scale in f32 and the terms of the quants' `-16` offset.
pub(super) struct Q8_0Sums {
    d: f32,
    qs: [i8; 32],
    /// `16 · (y[4l] + .. + y[4l+3])`: lane l of `madd(1, maddubs(16, y))`.
    offsets: [i32; 8],
}

pub(super) fn prepare(y: &Q8_0) -> Q8_0Sums {
    let offsets = std::array::from_fn(|l| 16 * y.qs[4 * l..4 * l + 4].iter().map(|&q| q as i32).sum::<i32>());
    Q8_0Sums { d: y.d.to_f32(), qs: y.qs, offsets }
}

/// 0xFF in byte i where bit i of `bits` is set.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bytes_from_bits_32(bits: u32) -> __m256i {
    let spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), spread);
    let all_but_own_bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    _mm256_cmpeq_epi8(_mm256_or_si256(bytes, all_but_own_bit), _mm256_set1_epi64x(-1))
}

/// The block's 32 quants plus 16 (0..31, unsigned), in the order of the activations.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quants(x: &Q5_0) -> __m256i {
    let packed = _mm_loadu_si128(x.qs.as_ptr().cast());
    let nibbles = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0xF));
    let fifth_bit = _mm256_and_si256(bytes_from_bits_32(u32::from_le_bytes(x.qh)), _mm256_set1_epi8(0x10));
    _mm256_or_si256(nibbles, fifth_bit)
}

super::dot_rows_in_groups!(Q5_0, Q8_0Sums);

/// [`dot_rows`] for a group of `R` rows, each weight block unpacked once for all of them.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_group<const R: usize>(column: &[Q5_0], acts: &[Q8_0Sums], blocks_per_row: usize, out: &mut [f32]) {
    debug_assert!(out.len() == R && acts.len() == R * blocks_per_row && column.len() == blocks_per_row);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); R];
    for (b, x) in column.iter().enumerate() {
        let xd = super::f32_of(x.d);
        let qx = quants(x);
        for r in 0..R {
            let y = &acts[r * blocks_per_row + b];
            let qy = _mm256_loadu_si256(y.qs.as_ptr().cast());
            let biased = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(qx, qy));
            let products = _mm256_sub_epi32(biased, _mm256_loadu_si256(y.offsets.as_ptr().cast()));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(xd * y.d), _mm256_cvtepi32_ps(products), acc[r]);
        }
    }
    for (r, out) in out.iter_mut().enumerate() {
        *out = super::hsum_float_8(acc[r]);
    }
}
