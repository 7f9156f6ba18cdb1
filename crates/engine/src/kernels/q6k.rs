//! Q6_K in groups of 8 rows: per block, the low-nibble bytes and the high-bit bytes of the 8
//! rows interleaved 4 bytes at a time (as the file has them: one load gives two quarters'
//! nibbles for 8 lanes, another four quarters' high bits), the 16 scales per lane, and d.

use super::{Path, ZeroBlock, COLS, Q6K, Q8K};
use half::f16;

#[derive(Clone)]
#[repr(C)]
pub struct Group {
    /// `[n][k-group g]`: the three vectors of one k-group of half n, side by side, so a kernel
    /// reads the block from start to end. (Kept as six separate arrays, one per vector kind,
    /// a decoding step jumped between six streams and the hardware prefetcher fell behind:
    /// Q6_K streamed at 40% of Q4_K's speed.)
    pub quants: [[KGroup; 8]; 2],
    /// `[sub-block j][lane c]`, sub-blocks of 16 quants.
    pub scales: [[i8; COLS]; 16],
    pub d: [f16; COLS],
}

/// 4 quants of each of 4 quarters, for the 8 lanes.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct KGroup {
    /// `[h][lane c · 4 + t]` = byte `ql[64n + 32h + 4g + t]` of row c: its low nibble is
    /// quant `128n + 32h + 4g + t`'s low bits, its high nibble those of quant
    /// `128n + 64 + 32h + 4g + t`.
    pub nibbles: [[u8; 32]; 2],
    /// `[lane c · 4 + t]` = byte `qh[32n + 4g + t]`: bits 2q, 2q + 1 are the high bits of
    /// quant `128n + 32q + 4g + t`.
    pub bits: [u8; 32],
}

/// A Q8_K activation block with its 16-sums in pairs (the quants' `-32` offset multiplies them).
pub struct Act {
    pub d: f32,
    pub qs: [i8; 256],
    /// `bsums[2i] | bsums[2i + 1] << 16`.
    pub bsum_pairs: [i32; 8],
}

impl ZeroBlock for Q6K {
    const ELEMENTS: usize = 256;
    fn zero() -> Self {
        Q6K { ql: [0; 128], qh: [0; 64], scales: [0; 16], d: f16::ZERO }
    }
}

pub fn pack(rows: &[&Q6K; COLS]) -> Group {
    let empty = KGroup { nibbles: [[0; 32]; 2], bits: [0; 32] };
    let mut group = Group { quants: [[empty; 8]; 2], scales: [[0; COLS]; 16], d: [f16::ZERO; COLS] };
    for (c, row) in rows.iter().enumerate() {
        for g in 0..8 {
            for half in 0..4 {
                let (n, h) = (half / 2, half % 2);
                group.quants[n][g].nibbles[h][4 * c..4 * c + 4]
                    .copy_from_slice(&row.ql[64 * n + 32 * h + 4 * g..][..4]);
            }
            for n in 0..2 {
                group.quants[n][g].bits[4 * c..4 * c + 4].copy_from_slice(&row.qh[32 * n + 4 * g..][..4]);
            }
        }
        for j in 0..16 {
            group.scales[j][c] = row.scales[j];
        }
        group.d[c] = row.d;
    }
    group
}

pub fn unpack(group: &Group, lane: usize) -> Q6K {
    let mut block = Q6K::zero();
    for g in 0..8 {
        for half in 0..4 {
            let (n, h) = (half / 2, half % 2);
            block.ql[64 * n + 32 * h + 4 * g..][..4]
                .copy_from_slice(&group.quants[n][g].nibbles[h][4 * lane..4 * lane + 4]);
        }
        for n in 0..2 {
            block.qh[32 * n + 4 * g..][..4].copy_from_slice(&group.quants[n][g].bits[4 * lane..4 * lane + 4]);
        }
    }
    block.scales = std::array::from_fn(|j| group.scales[j][lane]);
    block.d = group.d[lane];
    block
}

pub fn prepare(y: &Q8K) -> Act {
    let pair = |i: usize| ((y.bsums[2 * i] as u16 as u32) | ((y.bsums[2 * i + 1] as u16 as u32) << 16)) as i32;
    Act { d: y.d, qs: y.qs, bsum_pairs: std::array::from_fn(pair) }
}

/// Quant of lane `c` at quarter `q` (0..4) of half `n`, k-group `g`, byte `t`: 0..63.
pub fn quant(w: &Group, n: usize, q: usize, g: usize, c: usize, t: usize) -> u8 {
    let low = w.quants[n][g].nibbles[q % 2][4 * c + t];
    let low = if q < 2 { low & 0xF } else { low >> 4 };
    let high = (w.quants[n][g].bits[4 * c + t] >> (2 * q)) & 3;
    low | (high << 4)
}

pub fn dot(path: Path, groups: &[Group], acts: &[Act], blocks: usize, out: &mut [[f32; COLS]]) {
    #[cfg(target_arch = "x86_64")]
    if path != Path::Scalar {
        return super::x86::q6k(path, groups, acts, blocks, out);
    }
    let _ = path;
    dot_scalar(groups, acts, blocks, out)
}

/// The canonical arithmetic of `reference::q6k_row`, lane by lane over the packed layout:
/// `Σ_j sc_j · (Σ q·y - 32 · Σ y)` per block.
fn dot_scalar(groups: &[Group], acts: &[Act], blocks: usize, out: &mut [[f32; COLS]]) {
    for (r, out) in out.iter_mut().enumerate() {
        let mut acc = [0f32; COLS];
        for (b, w) in groups.iter().enumerate() {
            let y = &acts[r * blocks + b];
            for (c, acc) in acc.iter_mut().enumerate() {
                let mut isum = 0i32;
                for n in 0..2 {
                    for q in 0..4 {
                        for s in 0..2 {
                            let j = 8 * n + 2 * q + s;
                            let mut t = 0i32;
                            for g in 4 * s..4 * s + 4 {
                                for i in 0..4 {
                                    let y = i32::from(y.qs[128 * n + 32 * q + 4 * g + i]);
                                    t += i32::from(quant(w, n, q, g, c, i)) * y;
                                }
                            }
                            isum += i32::from(w.scales[j][c]) * t;
                        }
                    }
                }
                let offsets: i32 = (0..8)
                    .map(|i| {
                        let (lo, hi) = (y.bsum_pairs[i] as i16, (y.bsum_pairs[i] >> 16) as i16);
                        i32::from(w.scales[2 * i][c]) * i32::from(lo)
                            + i32::from(w.scales[2 * i + 1][c]) * i32::from(hi)
                    })
                    .sum();
                let isum = isum - 32 * offsets;
                *acc = (w.d[c].to_f32() * y.d).mul_add(isum as f32, *acc);
            }
        }
        *out = acc;
    }
}
