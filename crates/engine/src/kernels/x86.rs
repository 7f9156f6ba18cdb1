//! The x86 kernels. Each type's kernel is written once, as a macro, and instantiated for each
//! instruction set with its multiply-add primitives spliced in (so they inline under that
//! set's `target_feature`):
//! - `dpbusd(acc, u8 × 32, i8 × 32)`: per 32-bit lane, acc + the sum of 4 byte products. One
//!   `vpdpbusd` with VNNI; `vpmaddubsw` + `vpmaddwd` + `vpaddd` on AVX2, exact because no
//!   pair of products here reaches the 16-bit saturation of `vpmaddubsw`.
//! - `dpwssd(acc, i16 × 16, i16 × 16)`: per lane, acc + the sum of 2 word products.
//!
//! A lane is one output row of the group of 8, a register of accumulators one activation row:
//! `R` rows (a const generic, so loops over rows unroll into registers) share every weight
//! load and unpack. Integer sums are exact; the float steps are `reference`'s, lane by lane.

use super::{q4k, q5_0, q6k, q8_0, Path, COLS};
use std::arch::x86_64::*;

macro_rules! dpbusd_avx2 {
    ($acc:expr, $u:expr, $s:expr) => {
        _mm256_add_epi32($acc, _mm256_madd_epi16(_mm256_maddubs_epi16($u, $s), _mm256_set1_epi16(1)))
    };
}
macro_rules! dpwssd_avx2 {
    ($acc:expr, $a:expr, $b:expr) => {
        _mm256_add_epi32($acc, _mm256_madd_epi16($a, $b))
    };
}
macro_rules! dpbusd_avx512 {
    ($acc:expr, $u:expr, $s:expr) => {
        _mm256_dpbusd_epi32($acc, $u, $s)
    };
}
macro_rules! dpwssd_avx512 {
    ($acc:expr, $a:expr, $b:expr) => {
        _mm256_dpwssd_epi32($acc, $a, $b)
    };
}
macro_rules! dpbusd_avxvnni {
    ($acc:expr, $u:expr, $s:expr) => {
        _mm256_dpbusd_avx_epi32($acc, $u, $s)
    };
}
macro_rules! dpwssd_avxvnni {
    ($acc:expr, $a:expr, $b:expr) => {
        _mm256_dpwssd_avx_epi32($acc, $a, $b)
    };
}

/// Four activation bytes at `at`, broadcast to every lane.
///
/// # Safety
/// `at + 4 <= bytes.len()`.
#[inline(always)]
unsafe fn broadcast(bytes: &[i8], at: usize) -> __m256i {
    debug_assert!(at + 4 <= bytes.len());
    _mm256_set1_epi32(bytes.as_ptr().add(at).cast::<i32>().read_unaligned())
}

/// How far ahead of the block being multiplied its weights are asked for, in bytes.
const PREFETCH_DISTANCE: usize = 8192;

/// Ask for the cache lines that lie `PREFETCH_DISTANCE` bytes past block `b`, into L2 (`T1`).
/// The hardware's prefetcher alone left the kernels waiting on memory, the multi-row ones most
/// (they spend longest on each block): from memory (`row_cost`, 1536x8960), 5 rows of Q4_K took
/// 0.64 ms without and 0.35 ms with, of Q6_K 0.91 and 0.48 ms; one row 0.24 -> 0.19 and
/// 0.28 -> 0.22 ms. `T0` (into L1) gained half as much, distances of 4-16 KB the same.
#[inline(always)]
unsafe fn prefetch_ahead<G>(groups: &[G], b: usize) {
    let size = std::mem::size_of::<G>();
    let ahead = groups.as_ptr().cast::<i8>().wrapping_add(b * size + PREFETCH_DISTANCE);
    for line in (0..size).step_by(64) {
        // A prefetch never faults, so an address past the slice's end is harmless (and it is
        // where the next column group's weights usually are).
        _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(line));
    }
}

/// Run `$kernel::<R>` for the number of rows in `out`.
macro_rules! for_rows {
    ($kernel:ident, $groups:expr, $acts:expr, $blocks:expr, $out:expr) => {
        match $out.len() {
            1 => $kernel::<1>($groups, $acts, $blocks, $out),
            2 => $kernel::<2>($groups, $acts, $blocks, $out),
            3 => $kernel::<3>($groups, $acts, $blocks, $out),
            4 => $kernel::<4>($groups, $acts, $blocks, $out),
            5 => $kernel::<5>($groups, $acts, $blocks, $out),
            6 => $kernel::<6>($groups, $acts, $blocks, $out),
            7 => $kernel::<7>($groups, $acts, $blocks, $out),
            8 => $kernel::<8>($groups, $acts, $blocks, $out),
            _ => unreachable!("row groups hold 1 to 8 rows"),
        }
    };
}

/// The entry point of one type: checks the sizes once, then calls the path's kernel (its
/// one-row kernel for a single row, where the type has one).
macro_rules! entry {
    ($name:ident, $module:ident, $avx2:ident, $avx512:ident, $avxvnni:ident
     $(, one row: $one_avx2:ident, $one_avx512:ident, $one_avxvnni:ident)?) => {
        pub fn $name(
            path: Path,
            groups: &[$module::Group],
            acts: &[$module::Act],
            blocks: usize,
            out: &mut [[f32; COLS]],
        ) {
            assert!(groups.len() == blocks && acts.len() == out.len() * blocks && (1..=8).contains(&out.len()));
            // SAFETY: `Packed::matmul_on` runs a path only where `Path::available` says the
            // CPU has its features; the sizes the kernels index by were checked above.
            unsafe {
                match (path, out) {
                    $(
                        (Path::Avx2, [out]) => $one_avx2(groups, acts, out),
                        (Path::Avx512Vnni, [out]) => $one_avx512(groups, acts, out),
                        (Path::AvxVnni, [out]) => $one_avxvnni(groups, acts, out),
                    )?
                    (Path::Avx2, out) => for_rows!($avx2, groups, acts, blocks, out),
                    (Path::Avx512Vnni, out) => for_rows!($avx512, groups, acts, blocks, out),
                    (Path::AvxVnni, out) => for_rows!($avxvnni, groups, acts, blocks, out),
                    (Path::Scalar, _) => unreachable!("the scalar path is not SIMD"),
                }
            }
        }
    };
}

// ----- Q4_K -----

macro_rules! q4k_kernel {
    ($name:ident, $features:expr, $dpbusd:ident, $dpwssd:ident) => {
        #[target_feature(enable = $features)]
        unsafe fn $name<const R: usize>(
            groups: &[q4k::Group],
            acts: &[q4k::Act],
            blocks: usize,
            out: &mut [[f32; COLS]],
        ) {
            let low = _mm256_set1_epi8(0x0F);
            let mut acc = [_mm256_setzero_ps(); R];
            for (b, w) in groups.iter().enumerate() {
                prefetch_ahead(groups, b);
                let ys: [&q4k::Act; R] = std::array::from_fn(|r| acts.get_unchecked(r * blocks + b));
                let mut isum = [_mm256_setzero_si256(); R];
                for p in 0..4 {
                    // Sub-blocks 2p (low nibbles) and 2p + 1 (high nibbles) of one load, with no
                    // branch on which (a `match` on the nibble cost 1.7 times one row for two).
                    let (mut even, mut odd) = ([_mm256_setzero_si256(); R], [_mm256_setzero_si256(); R]);
                    for g in 0..8 {
                        let bytes = _mm256_loadu_si256(w.qs[p][g].as_ptr().cast());
                        let lo = _mm256_and_si256(bytes, low);
                        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(bytes), low);
                        for r in 0..R {
                            even[r] = $dpbusd!(even[r], lo, broadcast(&ys[r].qs, 64 * p + 4 * g));
                            odd[r] = $dpbusd!(odd[r], hi, broadcast(&ys[r].qs, 64 * p + 32 + 4 * g));
                        }
                    }
                    let scale_even = _mm256_cvtepu8_epi32(_mm_loadl_epi64(w.scales[2 * p].as_ptr().cast()));
                    let scale_odd = _mm256_cvtepu8_epi32(_mm_loadl_epi64(w.scales[2 * p + 1].as_ptr().cast()));
                    for r in 0..R {
                        isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(even[r], scale_even));
                        isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(odd[r], scale_odd));
                    }
                }
                // Lane c: (mins[2p][c], mins[2p + 1][c]) as two words, against the pair of sums.
                let mins: [__m256i; 4] = std::array::from_fn(|p| {
                    let (a, b) = (
                        _mm_loadl_epi64(w.mins[2 * p].as_ptr().cast()),
                        _mm_loadl_epi64(w.mins[2 * p + 1].as_ptr().cast()),
                    );
                    _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b))
                });
                let xd = _mm256_cvtph_ps(_mm_loadu_si128(w.d.as_ptr().cast()));
                let xdmin = _mm256_cvtph_ps(_mm_loadu_si128(w.dmin.as_ptr().cast()));
                for r in 0..R {
                    let mut imin = _mm256_setzero_si256();
                    for p in 0..4 {
                        imin = $dpwssd!(imin, mins[p], _mm256_set1_epi32(ys[r].bsum_pairs[p]));
                    }
                    let yd = _mm256_set1_ps(ys[r].d);
                    acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(xd, yd), _mm256_cvtepi32_ps(isum[r]), acc[r]);
                    acc[r] = _mm256_fnmadd_ps(_mm256_mul_ps(xdmin, yd), _mm256_cvtepi32_ps(imin), acc[r]);
                }
            }
            for r in 0..R {
                _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
            }
        }
    };
}

/// One activation row (decoding): each weight vector loaded once for its two sub-blocks, the
/// two sums in registers, no branches (see `q6k_one_row_kernel`).
macro_rules! q4k_one_row_kernel {
    ($name:ident, $features:expr, $dpbusd:ident, $dpwssd:ident) => {
        #[target_feature(enable = $features)]
        unsafe fn $name(groups: &[q4k::Group], acts: &[q4k::Act], out: &mut [f32; COLS]) {
            let low = _mm256_set1_epi8(0x0F);
            let mut acc = _mm256_setzero_ps();
            for (b, (w, y)) in groups.iter().zip(acts).enumerate() {
                prefetch_ahead(groups, b);
                let mut isum = _mm256_setzero_si256();
                let mut imin = _mm256_setzero_si256();
                for p in 0..4 {
                    // Sub-blocks 2p (low nibbles) and 2p + 1 (high nibbles).
                    let (mut even, mut odd) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                    for g in 0..8 {
                        let bytes = _mm256_loadu_si256(w.qs[p][g].as_ptr().cast());
                        let (lo, hi) =
                            (_mm256_and_si256(bytes, low), _mm256_and_si256(_mm256_srli_epi16::<4>(bytes), low));
                        even = $dpbusd!(even, lo, broadcast(&y.qs, 64 * p + 4 * g));
                        odd = $dpbusd!(odd, hi, broadcast(&y.qs, 64 * p + 32 + 4 * g));
                    }
                    let scale_even = _mm256_cvtepu8_epi32(_mm_loadl_epi64(w.scales[2 * p].as_ptr().cast()));
                    let scale_odd = _mm256_cvtepu8_epi32(_mm_loadl_epi64(w.scales[2 * p + 1].as_ptr().cast()));
                    isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(even, scale_even));
                    isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(odd, scale_odd));
                    let (a, b) = (
                        _mm_loadl_epi64(w.mins[2 * p].as_ptr().cast()),
                        _mm_loadl_epi64(w.mins[2 * p + 1].as_ptr().cast()),
                    );
                    let mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b));
                    imin = $dpwssd!(imin, mins, _mm256_set1_epi32(y.bsum_pairs[p]));
                }
                let xd = _mm256_cvtph_ps(_mm_loadu_si128(w.d.as_ptr().cast()));
                let xdmin = _mm256_cvtph_ps(_mm_loadu_si128(w.dmin.as_ptr().cast()));
                let yd = _mm256_set1_ps(y.d);
                acc = _mm256_fmadd_ps(_mm256_mul_ps(xd, yd), _mm256_cvtepi32_ps(isum), acc);
                acc = _mm256_fnmadd_ps(_mm256_mul_ps(xdmin, yd), _mm256_cvtepi32_ps(imin), acc);
            }
            _mm256_storeu_ps(out.as_mut_ptr(), acc);
        }
    };
}

q4k_kernel!(q4k_avx2, "avx2,fma,f16c", dpbusd_avx2, dpwssd_avx2);
q4k_one_row_kernel!(q4k_one_row_avx2, "avx2,fma,f16c", dpbusd_avx2, dpwssd_avx2);
q4k_one_row_kernel!(q4k_one_row_avx512, "avx2,fma,f16c,avx512vnni,avx512vl", dpbusd_avx512, dpwssd_avx512);
q4k_one_row_kernel!(q4k_one_row_avxvnni, "avx2,fma,f16c,avxvnni", dpbusd_avxvnni, dpwssd_avxvnni);
q4k_kernel!(q4k_avx512, "avx2,fma,f16c,avx512vnni,avx512vl", dpbusd_avx512, dpwssd_avx512);
q4k_kernel!(q4k_avxvnni, "avx2,fma,f16c,avxvnni", dpbusd_avxvnni, dpwssd_avxvnni);
entry!(q4k, q4k, q4k_avx2, q4k_avx512, q4k_avxvnni, one row: q4k_one_row_avx2, q4k_one_row_avx512, q4k_one_row_avxvnni);

// ----- Q6_K -----

/// The four quarters of a Q6_K k-group (`q6k::KGroup`) as bytes 0..63: the low or high
/// nibbles of one of the two nibble vectors, with the quarter's two high bits moved to bits 4
/// and 5. Straight-line code: a `match` on the quarter inside a loop left branches in it.
macro_rules! q6k_quarters {
    ($vectors:expr, $low:expr, $high:expr) => {{
        let first = _mm256_loadu_si256($vectors.nibbles[0].as_ptr().cast());
        let second = _mm256_loadu_si256($vectors.nibbles[1].as_ptr().cast());
        let bits = _mm256_loadu_si256($vectors.bits.as_ptr().cast());
        [
            _mm256_or_si256(_mm256_and_si256(first, $low), _mm256_and_si256(_mm256_slli_epi16::<4>(bits), $high)),
            _mm256_or_si256(_mm256_and_si256(second, $low), _mm256_and_si256(_mm256_slli_epi16::<2>(bits), $high)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(first), $low), _mm256_and_si256(bits, $high)),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(second), $low),
                _mm256_and_si256(_mm256_srli_epi16::<2>(bits), $high),
            ),
        ]
    }};
}

macro_rules! q6k_kernel {
    ($name:ident, $features:expr, $dpbusd:ident, $dpwssd:ident) => {
        #[target_feature(enable = $features)]
        unsafe fn $name<const R: usize>(
            groups: &[q6k::Group],
            acts: &[q6k::Act],
            blocks: usize,
            out: &mut [[f32; COLS]],
        ) {
            let low = _mm256_set1_epi8(0x0F);
            let high = _mm256_set1_epi8(0x30);
            let mut acc = [_mm256_setzero_ps(); R];
            for (b, w) in groups.iter().enumerate() {
                prefetch_ahead(groups, b);
                let ys: [&q6k::Act; R] = std::array::from_fn(|r| acts.get_unchecked(r * blocks + b));
                let mut isum = [_mm256_setzero_si256(); R];
                for n in 0..2 {
                    for s in 0..2 {
                        // The sub-block pair's quants unpacked once, `[k-group][quarter]`, in
                        // straight-line code (a `match` on the quarter in the loop below left
                        // branches in it, and two rows cost 2.6 times one).
                        let mut quarters = [[_mm256_setzero_si256(); 4]; 4];
                        for (i, quarters) in quarters.iter_mut().enumerate() {
                            let vectors = &w.quants[n][4 * s + i];
                            *quarters = q6k_quarters!(vectors, low, high);
                        }
                        for q in 0..4 {
                            let mut t = [_mm256_setzero_si256(); R];
                            for (i, quarters) in quarters.iter().enumerate() {
                                let g = 4 * s + i;
                                for r in 0..R {
                                    t[r] = $dpbusd!(t[r], quarters[q], broadcast(&ys[r].qs, 128 * n + 32 * q + 4 * g));
                                }
                            }
                            let scale =
                                _mm256_cvtepi8_epi32(_mm_loadl_epi64(w.scales[8 * n + 2 * q + s].as_ptr().cast()));
                            for r in 0..R {
                                isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(t[r], scale));
                            }
                        }
                    }
                }
                // The -32 offset: 32 · Σ_j scale_j · Σ y over sub-block j, in pairs of sub-blocks.
                let scales: [__m256i; 8] = std::array::from_fn(|i| {
                    let (a, b) = (
                        _mm_loadl_epi64(w.scales[2 * i].as_ptr().cast()),
                        _mm_loadl_epi64(w.scales[2 * i + 1].as_ptr().cast()),
                    );
                    _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b))
                });
                let xd = _mm256_cvtph_ps(_mm_loadu_si128(w.d.as_ptr().cast()));
                for r in 0..R {
                    let mut offsets = _mm256_setzero_si256();
                    for i in 0..8 {
                        offsets = $dpwssd!(offsets, scales[i], _mm256_set1_epi32(ys[r].bsum_pairs[i]));
                    }
                    let isum = _mm256_sub_epi32(isum[r], _mm256_slli_epi32::<5>(offsets));
                    let d = _mm256_mul_ps(xd, _mm256_set1_ps(ys[r].d));
                    acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc[r]);
                }
            }
            for r in 0..R {
                _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
            }
        }
    };
}

/// One activation row (decoding, where the weights stream from memory once per token): each
/// weight vector is loaded once and unpacked into its four quarters in straight-line code,
/// a register per sub-block's sum, the activations read straight from the block (the
/// multi-row kernel keeps the unpacked quarters of a sub-block pair for its rows). Integer
/// sums are exact in any order, so the result is the same bits.
macro_rules! q6k_one_row_kernel {
    ($name:ident, $features:expr, $dpbusd:ident, $dpwssd:ident) => {
        #[target_feature(enable = $features)]
        unsafe fn $name(groups: &[q6k::Group], acts: &[q6k::Act], out: &mut [f32; COLS]) {
            let low = _mm256_set1_epi8(0x0F);
            let high = _mm256_set1_epi8(0x30);
            let mut acc = _mm256_setzero_ps();
            for (b, (w, y)) in groups.iter().zip(acts).enumerate() {
                prefetch_ahead(groups, b);
                let mut isum = _mm256_setzero_si256();
                for n in 0..2 {
                    for s in 0..2 {
                        // t[q]: quarter q's sub-block s (k-groups 4s..4s + 3), in registers.
                        let mut t = [_mm256_setzero_si256(); 4];
                        for g in 4 * s..4 * s + 4 {
                            let vectors = &w.quants[n][g];
                            let quarters = q6k_quarters!(vectors, low, high);
                            for (q, quants) in quarters.into_iter().enumerate() {
                                t[q] = $dpbusd!(t[q], quants, broadcast(&y.qs, 128 * n + 32 * q + 4 * g));
                            }
                        }
                        for (q, t) in t.into_iter().enumerate() {
                            let scale =
                                _mm256_cvtepi8_epi32(_mm_loadl_epi64(w.scales[8 * n + 2 * q + s].as_ptr().cast()));
                            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(t, scale));
                        }
                    }
                }
                let mut offsets = _mm256_setzero_si256();
                for i in 0..8 {
                    let (a, b) = (
                        _mm_loadl_epi64(w.scales[2 * i].as_ptr().cast()),
                        _mm_loadl_epi64(w.scales[2 * i + 1].as_ptr().cast()),
                    );
                    let scales = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));
                    offsets = $dpwssd!(offsets, scales, _mm256_set1_epi32(y.bsum_pairs[i]));
                }
                let isum = _mm256_sub_epi32(isum, _mm256_slli_epi32::<5>(offsets));
                let xd = _mm256_cvtph_ps(_mm_loadu_si128(w.d.as_ptr().cast()));
                let d = _mm256_mul_ps(xd, _mm256_set1_ps(y.d));
                acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc);
            }
            _mm256_storeu_ps(out.as_mut_ptr(), acc);
        }
    };
}

q6k_kernel!(q6k_avx2, "avx2,fma,f16c", dpbusd_avx2, dpwssd_avx2);
q6k_kernel!(q6k_avx512, "avx2,fma,f16c,avx512vnni,avx512vl", dpbusd_avx512, dpwssd_avx512);
q6k_kernel!(q6k_avxvnni, "avx2,fma,f16c,avxvnni", dpbusd_avxvnni, dpwssd_avxvnni);
q6k_one_row_kernel!(q6k_one_row_avx2, "avx2,fma,f16c", dpbusd_avx2, dpwssd_avx2);
q6k_one_row_kernel!(q6k_one_row_avx512, "avx2,fma,f16c,avx512vnni,avx512vl", dpbusd_avx512, dpwssd_avx512);
q6k_one_row_kernel!(q6k_one_row_avxvnni, "avx2,fma,f16c,avxvnni", dpbusd_avxvnni, dpwssd_avxvnni);
entry!(q6k, q6k, q6k_avx2, q6k_avx512, q6k_avxvnni, one row: q6k_one_row_avx2, q6k_one_row_avx512, q6k_one_row_avxvnni);

// ----- Q8_0 -----

/// With VNNI the weights are multiplied unsigned (quant + 128) and the offset's product taken
/// back out; AVX2's `vpmaddubsw` would saturate on those, so it moves the weights' signs onto
/// the activations instead. Both give Σ x·y exactly.
macro_rules! q8_0_kernel {
    ($name:ident, $features:expr, vnni: $dpbusd:ident) => {
        #[target_feature(enable = $features)]
        unsafe fn $name<const R: usize>(
            groups: &[q8_0::Group],
            acts: &[q8_0::Act],
            blocks: usize,
            out: &mut [[f32; COLS]],
        ) {
            let mut acc = [_mm256_setzero_ps(); R];
            for (b, w) in groups.iter().enumerate() {
                prefetch_ahead(groups, b);
                let ys: [&q8_0::Act; R] = std::array::from_fn(|r| acts.get_unchecked(r * blocks + b));
                let mut t = [_mm256_setzero_si256(); R];
                for g in 0..8 {
                    let quants = _mm256_loadu_si256(w.qs[g].as_ptr().cast());
                    for r in 0..R {
                        t[r] = $dpbusd!(t[r], quants, broadcast(&ys[r].qs, 4 * g));
                    }
                }
                let xd = _mm256_cvtph_ps(_mm_loadu_si128(w.d.as_ptr().cast()));
                for r in 0..R {
                    let isum = _mm256_sub_epi32(t[r], _mm256_set1_epi32(128 * ys[r].sum));
                    let d = _mm256_mul_ps(xd, _mm256_set1_ps(ys[r].d));
                    acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc[r]);
                }
            }
            for r in 0..R {
                _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
            }
        }
    };
    ($name:ident, $features:expr, signs) => {
        #[target_feature(enable = $features)]
        unsafe fn $name<const R: usize>(
            groups: &[q8_0::Group],
            acts: &[q8_0::Act],
            blocks: usize,
            out: &mut [[f32; COLS]],
        ) {
            let flip = _mm256_set1_epi8(-128);
            let mut acc = [_mm256_setzero_ps(); R];
            for (b, w) in groups.iter().enumerate() {
                prefetch_ahead(groups, b);
                let ys: [&q8_0::Act; R] = std::array::from_fn(|r| acts.get_unchecked(r * blocks + b));
                let mut t = [_mm256_setzero_si256(); R];
                for g in 0..8 {
                    let quants = _mm256_xor_si256(_mm256_loadu_si256(w.qs[g].as_ptr().cast()), flip);
                    let magnitudes = _mm256_abs_epi8(quants);
                    for r in 0..R {
                        let signed = _mm256_sign_epi8(broadcast(&ys[r].qs, 4 * g), quants);
                        t[r] = dpbusd_avx2!(t[r], magnitudes, signed);
                    }
                }
                let xd = _mm256_cvtph_ps(_mm_loadu_si128(w.d.as_ptr().cast()));
                for r in 0..R {
                    let d = _mm256_mul_ps(xd, _mm256_set1_ps(ys[r].d));
                    acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(t[r]), acc[r]);
                }
            }
            for r in 0..R {
                _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
            }
        }
    };
}

q8_0_kernel!(q8_0_avx2, "avx2,fma,f16c", signs);
q8_0_kernel!(q8_0_avx512, "avx2,fma,f16c,avx512vnni,avx512vl", vnni: dpbusd_avx512);
q8_0_kernel!(q8_0_avxvnni, "avx2,fma,f16c,avxvnni", vnni: dpbusd_avxvnni);
entry!(q8_0, q8_0, q8_0_avx2, q8_0_avx512, q8_0_avxvnni);

// ----- Q5_0 -----

/// The fifth bits of a k-group (one bit per byte, `Group::fifth`) as 0x10 or 0 per byte: AVX2
/// copies byte i / 8 of the word to byte i, keeps bit i % 8 and compares.
macro_rules! fifth_bits_avx2 {
    ($word:expr) => {{
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32($word as i32),
            _mm256_setr_epi64x(0, 0x0101_0101_0101_0101, 0x0202_0202_0202_0202, 0x0303_0303_0303_0303),
        );
        let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
        _mm256_and_si256(set, _mm256_set1_epi8(0x10))
    }};
}
/// AVX-512: the word is a byte mask.
macro_rules! fifth_bits_avx512 {
    ($word:expr) => {
        _mm256_maskz_mov_epi8($word, _mm256_set1_epi8(0x10))
    };
}

macro_rules! q5_0_kernel {
    ($name:ident, $features:expr, $dpbusd:ident, $fifth:ident) => {
        #[target_feature(enable = $features)]
        unsafe fn $name<const R: usize>(
            groups: &[q5_0::Group],
            acts: &[q5_0::Act],
            blocks: usize,
            out: &mut [[f32; COLS]],
        ) {
            let low = _mm256_set1_epi8(0x0F);
            let mut acc = [_mm256_setzero_ps(); R];
            for (b, w) in groups.iter().enumerate() {
                prefetch_ahead(groups, b);
                let ys: [&q5_0::Act; R] = std::array::from_fn(|r| acts.get_unchecked(r * blocks + b));
                // Two sums a row, so one row is two chains of 4 multiply-adds, not one of 8.
                let (mut t_low, mut t_high) = ([_mm256_setzero_si256(); R], [_mm256_setzero_si256(); R]);
                // One load gives k-groups g (low nibbles) and g + 4 (high), with no branch.
                for g in 0..4 {
                    let nibbles = _mm256_loadu_si256(w.qs[g].as_ptr().cast());
                    let first = _mm256_or_si256(_mm256_and_si256(nibbles, low), $fifth!(w.fifth[g]));
                    let second = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(nibbles), low),
                        $fifth!(w.fifth[g + 4]),
                    );
                    for r in 0..R {
                        t_low[r] = $dpbusd!(t_low[r], first, broadcast(&ys[r].qs, 4 * g));
                        t_high[r] = $dpbusd!(t_high[r], second, broadcast(&ys[r].qs, 16 + 4 * g));
                    }
                }
                let xd = _mm256_cvtph_ps(_mm_loadu_si128(w.d.as_ptr().cast()));
                for r in 0..R {
                    let t = _mm256_add_epi32(t_low[r], t_high[r]);
                    let isum = _mm256_sub_epi32(t, _mm256_set1_epi32(16 * ys[r].sum));
                    let d = _mm256_mul_ps(xd, _mm256_set1_ps(ys[r].d));
                    acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc[r]);
                }
            }
            for r in 0..R {
                _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
            }
        }
    };
}

q5_0_kernel!(q5_0_avx2, "avx2,fma,f16c", dpbusd_avx2, fifth_bits_avx2);
q5_0_kernel!(q5_0_avx512, "avx2,fma,f16c,avx512vnni,avx512vl,avx512bw", dpbusd_avx512, fifth_bits_avx512);
q5_0_kernel!(q5_0_avxvnni, "avx2,fma,f16c,avxvnni", dpbusd_avxvnni, fifth_bits_avx2);
entry!(q5_0, q5_0, q5_0_avx2, q5_0_avx512, q5_0_avxvnni);
