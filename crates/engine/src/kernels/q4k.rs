//! Q4_K in groups of 8 rows: per block, the 4-bit quants of the 8 rows interleaved 4 bytes at
//! a time (the bytes as the file has them, so a load gives two sub-blocks' nibbles for 8
//! lanes), the 6-bit scales and mins unpacked to a byte each, and the two f16 factors.

use super::reference::q4k_scales_and_mins;
use super::{word, Path, ZeroBlock, COLS, Q4K, Q8K};
use half::f16;

#[derive(Clone)]
#[repr(C)]
pub struct Group {
    /// `[sub-block pair p][k-group g][lane c · 4 + t]` = byte `qs[32p + 4g + t]` of row c: its
    /// low nibble is quant `4g + t` of sub-block 2p, its high nibble that of sub-block 2p + 1.
    pub qs: [[[u8; 32]; 8]; 4],
    /// `[sub-block j][lane c]`.
    pub scales: [[u8; COLS]; 8],
    pub mins: [[u8; COLS]; 8],
    pub d: [f16; COLS],
    pub dmin: [f16; COLS],
}

/// A Q8_K activation block with the sums the mins multiply, packed as the kernels read them.
pub struct Act {
    pub d: f32,
    pub qs: [i8; 256],
    /// `(Σ y of sub-block 2p) | (Σ y of sub-block 2p + 1) << 16`, as two i16.
    pub bsum_pairs: [i32; 4],
}

impl ZeroBlock for Q4K {
    const ELEMENTS: usize = 256;
    fn zero() -> Self {
        Q4K { d: f16::ZERO, dmin: f16::ZERO, scales: [0; 12], qs: [0; 128] }
    }
}

pub fn pack(rows: &[&Q4K; COLS]) -> Group {
    let mut group = Group {
        qs: [[[0; 32]; 8]; 4],
        scales: [[0; COLS]; 8],
        mins: [[0; COLS]; 8],
        d: [f16::ZERO; COLS],
        dmin: [f16::ZERO; COLS],
    };
    for (c, row) in rows.iter().enumerate() {
        for p in 0..4 {
            for g in 0..8 {
                group.qs[p][g][4 * c..4 * c + 4].copy_from_slice(&row.qs[32 * p + 4 * g..][..4]);
            }
        }
        let (scales, mins) = q4k_scales_and_mins(&row.scales);
        for j in 0..8 {
            group.scales[j][c] = scales[j];
            group.mins[j][c] = mins[j];
        }
        group.d[c] = row.d;
        group.dmin[c] = row.dmin;
    }
    group
}

/// Row `lane`'s block back in the file's layout.
pub fn unpack(group: &Group, lane: usize) -> Q4K {
    let mut qs = [0u8; 128];
    for p in 0..4 {
        for g in 0..8 {
            qs[32 * p + 4 * g..][..4].copy_from_slice(&group.qs[p][g][4 * lane..4 * lane + 4]);
        }
    }
    let scales: [u8; 8] = std::array::from_fn(|j| group.scales[j][lane]);
    let mins: [u8; 8] = std::array::from_fn(|j| group.mins[j][lane]);
    Q4K { d: group.d[lane], dmin: group.dmin[lane], scales: pack_scales_and_mins(&scales, &mins), qs }
}

/// The inverse of ggml's `get_scale_min_k4`: eight 6-bit scales and mins into 12 bytes.
fn pack_scales_and_mins(scales: &[u8; 8], mins: &[u8; 8]) -> [u8; 12] {
    let mut packed = [0u8; 12];
    for j in 0..4 {
        packed[j] = (scales[j] & 63) | ((scales[j + 4] >> 4) << 6);
        packed[j + 4] = (mins[j] & 63) | ((mins[j + 4] >> 4) << 6);
        packed[j + 8] = (scales[j + 4] & 0xF) | ((mins[j + 4] & 0xF) << 4);
    }
    packed
}

pub fn prepare(y: &Q8K) -> Act {
    let sum32 = |j: usize| i32::from(y.bsums[2 * j]) + i32::from(y.bsums[2 * j + 1]);
    let bsum_pairs =
        std::array::from_fn(|p| ((sum32(2 * p) as u16 as u32) | ((sum32(2 * p + 1) as u16 as u32) << 16)) as i32);
    Act { d: y.d, qs: y.qs, bsum_pairs }
}

pub fn dot(path: Path, groups: &[Group], acts: &[Act], blocks: usize, out: &mut [[f32; COLS]]) {
    #[cfg(target_arch = "x86_64")]
    if path != Path::Scalar {
        return super::x86::q4k(path, groups, acts, blocks, out);
    }
    let _ = path;
    dot_scalar(groups, acts, blocks, out)
}

/// The canonical arithmetic of `reference::q4k_row`, lane by lane over the packed layout.
fn dot_scalar(groups: &[Group], acts: &[Act], blocks: usize, out: &mut [[f32; COLS]]) {
    for (r, out) in out.iter_mut().enumerate() {
        let mut acc = [0f32; COLS];
        for (b, w) in groups.iter().enumerate() {
            let y = &acts[r * blocks + b];
            for (c, acc) in acc.iter_mut().enumerate() {
                let mut isum = 0i32;
                for j in 0..8 {
                    let mut t = 0i32;
                    for g in 0..8 {
                        let quants = &w.qs[j / 2][g][4 * c..4 * c + 4];
                        let ys = word(&y.qs, 32 * j + 4 * g).to_le_bytes();
                        for (q, y) in quants.iter().zip(ys) {
                            let q = if j % 2 == 0 { q & 0xF } else { q >> 4 };
                            t += i32::from(q) * i32::from(y as i8);
                        }
                    }
                    isum += i32::from(w.scales[j][c]) * t;
                }
                let imin: i32 = (0..4)
                    .map(|p| {
                        let (lo, hi) = (y.bsum_pairs[p] as i16, (y.bsum_pairs[p] >> 16) as i16);
                        i32::from(w.mins[2 * p][c]) * i32::from(lo) + i32::from(w.mins[2 * p + 1][c]) * i32::from(hi)
                    })
                    .sum();
                *acc = (w.d[c].to_f32() * y.d).mul_add(isum as f32, *acc);
                *acc = (-(w.dmin[c].to_f32() * y.d)).mul_add(imin as f32, *acc);
            }
        }
        *out = acc;
    }
}
