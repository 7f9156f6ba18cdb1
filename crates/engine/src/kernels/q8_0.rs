//! Q8_0 in groups of 8 rows: per block of 32, the quants of the 8 rows interleaved 4 bytes at
//! a time and offset by 128 (VNNI multiplies unsigned by signed bytes; the offset's product
//! is taken back out with the activations' sum), and the 8 f16 factors.

use super::{Path, ZeroBlock, COLS, Q8_0};
use half::f16;

#[derive(Clone)]
#[repr(C)]
pub struct Group {
    /// `[k-group g][lane c · 4 + t]` = quant `4g + t` of row c, plus 128, as a byte.
    pub qs: [[u8; 32]; 8],
    pub d: [f16; COLS],
}

/// A Q8_0 activation block with its factor in f32 and the sum of its quants.
pub struct Act {
    pub d: f32,
    pub qs: [i8; 32],
    pub sum: i32,
}

impl ZeroBlock for Q8_0 {
    const ELEMENTS: usize = 32;
    fn zero() -> Self {
        Q8_0 { d: f16::ZERO, qs: [0; 32] }
    }
}

pub fn pack(rows: &[&Q8_0; COLS]) -> Group {
    let mut group = Group { qs: [[0; 32]; 8], d: [f16::ZERO; COLS] };
    for (c, row) in rows.iter().enumerate() {
        for g in 0..8 {
            for t in 0..4 {
                group.qs[g][4 * c + t] = (row.qs[4 * g + t] as u8) ^ 0x80;
            }
        }
        group.d[c] = row.d;
    }
    group
}

pub fn unpack(group: &Group, lane: usize) -> Q8_0 {
    Q8_0 { d: group.d[lane], qs: std::array::from_fn(|i| (group.qs[i / 4][4 * lane + i % 4] ^ 0x80) as i8) }
}

pub fn prepare(y: &Q8_0) -> Act {
    Act { d: y.d.to_f32(), qs: y.qs, sum: y.qs.iter().map(|&q| i32::from(q)).sum() }
}

pub fn dot(path: Path, groups: &[Group], acts: &[Act], blocks: usize, out: &mut [[f32; COLS]]) {
    #[cfg(target_arch = "x86_64")]
    if path != Path::Scalar {
        return super::x86::q8_0(path, groups, acts, blocks, out);
    }
    let _ = path;
    dot_scalar(groups, acts, blocks, out)
}

/// The canonical arithmetic of `reference::q8_0_row` over the packed layout.
fn dot_scalar(groups: &[Group], acts: &[Act], blocks: usize, out: &mut [[f32; COLS]]) {
    for (r, out) in out.iter_mut().enumerate() {
        let mut acc = [0f32; COLS];
        for (b, w) in groups.iter().enumerate() {
            let y = &acts[r * blocks + b];
            for (c, acc) in acc.iter_mut().enumerate() {
                let isum: i32 =
                    (0..32).map(|i| i32::from((w.qs[i / 4][4 * c + i % 4] ^ 0x80) as i8) * i32::from(y.qs[i])).sum();
                *acc = (w.d[c].to_f32() * y.d).mul_add(isum as f32, *acc);
            }
        }
        *out = acc;
    }
}
