//! Q4_K × Q8_K, AVX2: per weight block the scales are decoded and the 4-bit quants unpacked
//! once, then each activation row costs one `maddubs` + `madd` + `add` per 32 weights.
//! Per row, the float operations are those of candle's `avx::vec_dot_q4k_q8k`, in its order.

use super::{Q4K, Q8K};
use std::arch::x86_64::*;

const KMASK1: u32 = 0x3f3f3f3f;
const KMASK2: u32 = 0x0f0f0f0f;
const KMASK3: u32 = 0x03030303;

/// The 8 sub-block scales and 8 mins of a block, unpacked from their 6-bit packing
/// (ggml's `utmp` shuffle): bytes 0..8 are the scales, 8..16 the mins.
fn scales_and_mins(packed: &[u8; 12]) -> [u8; 16] {
    let word = |i: usize| u32::from_le_bytes([packed[4 * i], packed[4 * i + 1], packed[4 * i + 2], packed[4 * i + 3]]);
    let (w0, w1, w2) = (word(0), word(1), word(2));
    let utmp = [
        w0 & KMASK1,
        (w2 & KMASK2) | (((w0 >> 6) & KMASK3) << 4),
        w1 & KMASK1,
        ((w2 >> 4) & KMASK2) | (((w1 >> 6) & KMASK3) << 4),
    ];
    let mut out = [0u8; 16];
    for (chunk, word) in out.chunks_exact_mut(4).zip(utmp) {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    out
}

super::dot_rows_in_groups!(Q4K, Q8K);

/// [`dot_rows`] for a group of `R` rows, each weight block unpacked once for all of them.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_group<const R: usize>(column: &[Q4K], acts: &[Q8K], blocks_per_row: usize, out: &mut [f32]) {
    debug_assert!(out.len() == R && acts.len() == R * blocks_per_row && column.len() == blocks_per_row);
    let m4 = _mm256_set1_epi8(0xF);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut acc_m = [_mm_setzero_ps(); R];
    for (b, x) in column.iter().enumerate() {
        let (xd, xdmin) = (super::f32_of(x.d), super::f32_of(x.dmin));
        let sm = scales_and_mins(&x.scales);
        let mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(sm[8..].as_ptr().cast()));
        let mut quants = [_mm256_setzero_si256(); 8];
        for j in 0..4 {
            let bits = _mm256_loadu_si256(x.qs.as_ptr().add(32 * j).cast());
            quants[2 * j] = _mm256_and_si256(bits, m4);
            quants[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        }
        let scales: [__m256i; 8] = std::array::from_fn(|i| _mm256_set1_epi16(sm[i] as i16));
        for r in 0..R {
            let y = &acts[r * blocks_per_row + b];
            let d = y.d * xd;
            let dmin = -y.d * xdmin;
            let bsums = _mm256_loadu_si256(y.bsums.as_ptr().cast());
            let q8s = _mm_hadd_epi16(_mm256_extracti128_si256(bsums, 0), _mm256_extracti128_si256(bsums, 1));
            let prod = _mm_madd_epi16(mins, q8s);
            acc_m[r] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[r]);
            let mut sumi = _mm256_setzero_si256();
            for i in 0..8 {
                let q8 = _mm256_loadu_si256(y.qs.as_ptr().add(32 * i).cast());
                let p16 = _mm256_madd_epi16(scales[i], _mm256_maddubs_epi16(quants[i], q8));
                sumi = _mm256_add_epi32(sumi, p16);
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
    for (r, out) in out.iter_mut().enumerate() {
        let m = _mm_add_ps(acc_m[r], _mm_movehl_ps(acc_m[r], acc_m[r]));
        let m = _mm_add_ss(m, _mm_movehdup_ps(m));
        *out = super::hsum_float_8(acc[r]) + _mm_cvtss_f32(m);
    }
}
