//! A key/value cache for one attention layer, grown as it fills.
//!
//! Writes go in place at the current length, so appending never copies what is cached, and
//! rolling back is only a smaller length: positions past it are dead and are overwritten by
//! the next append. This is what lets speculative decoding forget rejected tokens for free.
//! The buffers start small and double when an append needs more room, up to the context's
//! limit: a model loaded for 32,768 positions takes memory for the positions a chat has used,
//! not for all of them at load (llama.cpp commits the whole context at start).

use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor};
use half::f16;
pub use specula_protocol::KvFormat;
use specula_protocol::{Q8_0_BLOCK, Q8_0_BLOCK_BYTES};

/// Positions allocated at first: a short chat never grows the buffers.
const FIRST_ALLOCATION: usize = 1024;

pub struct KvCache {
    /// `[n_kv_head, allocated, units]`, in the cache's format: a row is `head_dim` floats, or
    /// for q8_0 its blocks' bytes ([`row_units`]).
    k: Tensor,
    /// `[n_kv_head, allocated, units]`
    v: Tensor,
    head_dim: usize,
    len: usize,
    /// The most positions it may hold (the context).
    limit: usize,
}

fn dtype_of(format: KvFormat) -> DType {
    match format {
        KvFormat::F32 => DType::F32,
        KvFormat::F16 => DType::F16,
        KvFormat::Q8_0 => DType::U8,
    }
}

/// The elements of the cache's tensors that one row of `values` keys or values takes: the
/// floats themselves, or for q8_0 the bytes of their blocks.
pub fn row_units(format: KvFormat, values: usize) -> usize {
    match format {
        KvFormat::Q8_0 => format.bytes_for(values),
        _ => values,
    }
}

/// Rows of f32 as q8_0 blocks, the way llama.cpp rounds them (`quantize_row_q8_0_ref`): each
/// block of 32 scaled so its largest magnitude is 127, the scale kept as f16.
pub fn quantize_q8_0(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(KvFormat::Q8_0.bytes_for(values.len()));
    for block in values.chunks(Q8_0_BLOCK) {
        let largest = block.iter().fold(0f32, |m, x| m.max(x.abs()));
        let scale = largest / 127.0;
        let inverse = if scale == 0.0 { 0.0 } else { 1.0 / scale };
        out.extend(f16::from_f32(scale).to_le_bytes());
        out.extend(block.iter().map(|x| (x * inverse).round() as i8 as u8));
        out.resize(out.len() + Q8_0_BLOCK - block.len(), 0);
    }
    out
}

/// q8_0 blocks back to f32 (`values.len()` of them, whole blocks): each byte times its
/// block's scale. Attention reads the cache through this, so it has an AVX2 path; both paths
/// round once (the product), so they give the same bits.
#[inline(always)]
pub fn dequantize_q8_0(blocks: &[u8], values: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c") {
        // SAFETY: the CPU has AVX2 and F16C (checked above).
        return unsafe { dequantize_q8_0_avx2(blocks, values) };
    }
    for (block, out) in blocks.chunks_exact(Q8_0_BLOCK_BYTES).zip(values.chunks_exact_mut(Q8_0_BLOCK)) {
        let scale = f16::from_le_bytes([block[0], block[1]]).to_f32();
        for (o, &q) in out.iter_mut().zip(&block[2..]) {
            *o = f32::from(q as i8) * scale;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn dequantize_q8_0_avx2(blocks: &[u8], values: &mut [f32]) {
    use std::arch::x86_64::*;
    for (block, out) in blocks.chunks_exact(Q8_0_BLOCK_BYTES).zip(values.chunks_exact_mut(Q8_0_BLOCK)) {
        let bits = u16::from_le_bytes([block[0], block[1]]);
        let scale = _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16(bits as i16))));
        let (from, to) = (block.as_ptr().add(2), out.as_mut_ptr());
        for part in 0..Q8_0_BLOCK / 8 {
            let bytes = _mm_loadl_epi64(from.add(8 * part).cast());
            let floats = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
            _mm256_storeu_ps(to.add(8 * part), _mm256_mul_ps(floats, scale));
        }
    }
}

/// Whether keys and values of `head_dim` can be kept in `format` on `device`: a model is
/// refused before its weights are loaded, not after.
pub fn check_format(format: KvFormat, head_dim: usize, device: &Device) -> Result<()> {
    if format == KvFormat::Q8_0 && !device.is_cpu() {
        return Err(Error::InvalidSetting("the q8_0 KV format runs on the CPU only: choose f16 here".into()));
    }
    if format == KvFormat::Q8_0 && !head_dim.is_multiple_of(Q8_0_BLOCK) {
        let why = format!(
            "the q8_0 KV format needs heads of a multiple of 32 values, and this model's have {head_dim}: choose f16"
        );
        return Err(Error::InvalidSetting(why));
    }
    Ok(())
}

impl KvCache {
    /// An f32 cache (the reference format).
    pub fn new(n_kv_head: usize, limit: usize, head_dim: usize, device: &Device) -> Result<Self> {
        Self::with_format(n_kv_head, limit, head_dim, KvFormat::F32, device)
    }

    pub fn with_format(
        n_kv_head: usize,
        limit: usize,
        head_dim: usize,
        format: KvFormat,
        device: &Device,
    ) -> Result<Self> {
        check_format(format, head_dim, device)?;
        let shape = (n_kv_head, limit.min(FIRST_ALLOCATION), row_units(format, head_dim));
        let dtype = dtype_of(format);
        let (k, v) = (Tensor::zeros(shape, dtype, device)?, Tensor::zeros(shape, dtype, device)?);
        Ok(Self { k, v, head_dim, len: 0, limit })
    }

    pub fn format(&self) -> KvFormat {
        match self.k.dtype() {
            DType::F16 => KvFormat::F16,
            DType::U8 => KvFormat::Q8_0,
            _ => KvFormat::F32,
        }
    }

    /// Values a row of keys or values holds.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most positions it may hold.
    pub fn capacity(&self) -> usize {
        self.limit
    }

    /// Positions it holds memory for now.
    pub fn allocated(&self) -> usize {
        self.k.dims()[1]
    }

    /// Room for `needed` positions: the buffers doubled (at least), the live positions copied.
    fn reserve(&mut self, needed: usize) -> Result<()> {
        if needed <= self.allocated() {
            return Ok(());
        }
        let (heads, allocated, dim) = self.k.dims3()?;
        let grown = needed.max(allocated * 2).min(self.limit);
        let grow = |old: &Tensor| -> Result<Tensor> {
            let new = Tensor::zeros((heads, grown, dim), old.dtype(), old.device())?;
            if self.len > 0 {
                new.slice_set(&old.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
            }
            Ok(new)
        };
        // Both grown before either is replaced: a failed allocation leaves the cache as it was.
        let (k, v) = (grow(&self.k)?, grow(&self.v)?);
        (self.k, self.v) = (k, v);
        Ok(())
    }

    /// Append `k`, `v`: `[n_kv_head, n, head_dim]`, contiguous f32 (stored in the cache's format).
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<()> {
        let n = k.dims()[1];
        if self.len + n > self.capacity() {
            return Err(Error::ContextOverflow { prompt_tokens: self.len + n, context: self.capacity(), reserve: 0 });
        }
        self.reserve(self.len + n)?;
        self.k.slice_set(&self.stored(k)?, 1, self.len)?;
        self.v.slice_set(&self.stored(v)?, 1, self.len)?;
        self.len += n;
        Ok(())
    }

    /// f32 rows `[n_kv_head, n, head_dim]` in the cache's format. Each row is rounded on its
    /// own, so what a position stores never depends on the batch it came in.
    fn stored(&self, rows: &Tensor) -> Result<Tensor> {
        match self.format() {
            KvFormat::Q8_0 => {
                let (heads, n, _) = rows.dims3()?;
                let bytes = quantize_q8_0(&rows.flatten_all()?.to_vec1::<f32>()?);
                Ok(Tensor::from_vec(bytes, (heads, n, row_units(KvFormat::Q8_0, self.head_dim)), rows.device())?)
            }
            _ => Ok(rows.to_dtype(self.k.dtype())?),
        }
    }

    /// Forget every position from `len` on. Growing is not possible: it would expose stale rows.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// A copy of the live positions, in host memory: another sequence may use the cache
    /// meanwhile, and [`Self::restore`] brings these back bit for bit.
    pub fn save(&self) -> Result<KvSnapshot> {
        let copy = |t: &Tensor| -> Result<Values> {
            let live = t.narrow(1, 0, self.len)?.flatten_all()?;
            Ok(match t.dtype() {
                DType::F16 => Values::F16(live.to_vec1()?),
                DType::U8 => Values::Q8_0(live.to_vec1()?),
                _ => Values::F32(live.to_vec1()?),
            })
        };
        Ok(KvSnapshot { k: copy(&self.k)?, v: copy(&self.v)?, len: self.len })
    }

    /// Hold exactly what `snapshot` held (positions past it are dead, as after a truncate).
    pub fn restore(&mut self, snapshot: &KvSnapshot) -> Result<()> {
        // `units`: a row's elements in the cache's tensors (bytes for q8_0).
        let (heads, _, units) = self.k.dims3()?;
        let fits = snapshot.k.format() == self.format() && snapshot.k.len() == heads * snapshot.len * units;
        if snapshot.len > self.limit || !fits {
            return Err(Error::InvalidSetting("a saved cache does not fit this model's".into()));
        }
        self.reserve(snapshot.len)?;
        if snapshot.len > 0 {
            let device = self.k.device().clone();
            let shape = (heads, snapshot.len, units);
            self.k.slice_set(&snapshot.k.tensor(shape, &device)?, 1, 0)?;
            self.v.slice_set(&snapshot.v.tensor(shape, &device)?, 1, 0)?;
        }
        self.len = snapshot.len;
        Ok(())
    }

    /// Host or device memory its buffers take, as allocated.
    pub fn bytes(&self) -> usize {
        (self.k.elem_count() + self.v.elem_count()) * self.k.dtype().size_in_bytes()
    }

    /// Memory its live positions take.
    pub fn live_bytes(&self) -> usize {
        let (heads, _, units) = self.k.dims3().unwrap_or((0, 0, 0));
        2 * heads * self.len * units * self.k.dtype().size_in_bytes()
    }

    /// A cache holding a copy of this one's first `len` positions (at most its length), in
    /// buffers of just that size: a new sequence that shares a prefix with this one, or this
    /// one without its unused room. The rows are copied as stored, so they keep their bits.
    pub fn prefix(&self, len: usize) -> Result<Self> {
        let len = len.min(self.len);
        let (heads, _, units) = self.k.dims3()?;
        let copy = |t: &Tensor| -> Result<Tensor> {
            let new = Tensor::zeros((heads, len.max(1), units), t.dtype(), t.device())?;
            if len > 0 {
                new.slice_set(&t.narrow(1, 0, len)?.contiguous()?, 1, 0)?;
            }
            Ok(new)
        };
        Ok(Self { k: copy(&self.k)?, v: copy(&self.v)?, head_dim: self.head_dim, len, limit: self.limit })
    }

    /// The buffers as allocated; only the first `len()` positions are live.
    pub fn buffers(&self) -> (&Tensor, &Tensor) {
        (&self.k, &self.v)
    }
}

/// A layer's keys or values, in the cache's format.
#[derive(Debug, Clone, PartialEq)]
enum Values {
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// q8_0 blocks, as bytes.
    Q8_0(Vec<u8>),
}

impl Values {
    fn format(&self) -> KvFormat {
        match self {
            Values::F32(_) => KvFormat::F32,
            Values::F16(_) => KvFormat::F16,
            Values::Q8_0(_) => KvFormat::Q8_0,
        }
    }

    /// Elements: floats, or q8_0's bytes.
    fn len(&self) -> usize {
        match self {
            Values::F32(v) => v.len(),
            Values::F16(v) => v.len(),
            Values::Q8_0(v) => v.len(),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Values::F32(v) => v.len() * 4,
            Values::F16(v) => v.len() * 2,
            Values::Q8_0(v) => v.len(),
        }
    }

    fn tensor(&self, shape: (usize, usize, usize), device: &Device) -> Result<Tensor> {
        Ok(match self {
            Values::F32(v) => Tensor::from_slice(v, shape, device)?,
            Values::F16(v) => Tensor::from_slice(v, shape, device)?,
            Values::Q8_0(v) => Tensor::from_slice(v, shape, device)?,
        })
    }

    fn write_to(&self, out: &mut dyn std::io::Write) -> Result<()> {
        match self {
            Values::F32(v) => write_f32s(out, v),
            Values::F16(v) => write_le(out, v, |x| x.to_bits().to_le_bytes()),
            Values::Q8_0(v) => Ok(out.write_all(v)?),
        }
    }

    fn read_from(input: &mut dyn std::io::Read, format: KvFormat, count: usize) -> Result<Self> {
        Ok(match format {
            KvFormat::F32 => Values::F32(read_f32s(input, count)?),
            KvFormat::F16 => Values::F16(read_le(input, count, |b: [u8; 2]| f16::from_bits(u16::from_le_bytes(b)))?),
            KvFormat::Q8_0 => Values::Q8_0(read_le(input, count, |b: [u8; 1]| b[0])?),
        })
    }
}

/// The byte that names a format in a saved snapshot.
fn format_tag(format: KvFormat) -> u8 {
    match format {
        KvFormat::F32 => 0,
        KvFormat::F16 => 1,
        KvFormat::Q8_0 => 2,
    }
}

/// One layer's live keys and values, copied out by [`KvCache::save`].
pub struct KvSnapshot {
    k: Values,
    v: Values,
    len: usize,
}

impl KvSnapshot {
    /// Positions it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> usize {
        self.k.bytes() + self.v.bytes()
    }

    /// The snapshot as bytes: its format, its length, then keys and values, little-endian.
    pub fn write_to(&self, out: &mut dyn std::io::Write) -> Result<()> {
        out.write_all(&[format_tag(self.k.format())])?;
        out.write_all(&(self.len as u64).to_le_bytes())?;
        out.write_all(&(self.k.len() as u64).to_le_bytes())?;
        self.k.write_to(out)?;
        self.v.write_to(out)
    }

    /// A snapshot [`Self::write_to`] wrote, of a cache in `format` with `row` elements a
    /// position ([`row_units`] of its heads) and at most `limit` positions: anything else is
    /// refused before it is allocated.
    pub fn read_from(input: &mut dyn std::io::Read, format: KvFormat, row: usize, limit: usize) -> Result<Self> {
        let mut tag = [0u8];
        input.read_exact(&mut tag)?;
        let len = read_u64(input)? as usize;
        let values = read_u64(input)? as usize;
        let same_format = tag[0] == format_tag(format);
        if !same_format || len > limit || Some(values) != len.checked_mul(row) {
            return Err(Error::InvalidSetting("a saved cache does not fit this model's".into()));
        }
        let k = Values::read_from(input, format, values)?;
        let v = Values::read_from(input, format, values)?;
        Ok(Self { k, v, len })
    }
}

fn write_le<T: Copy, const N: usize>(
    out: &mut dyn std::io::Write,
    values: &[T],
    bytes: fn(T) -> [u8; N],
) -> Result<()> {
    let mut block = Vec::with_capacity((16 << 10) * N);
    for chunk in values.chunks(16 << 10) {
        block.clear();
        block.extend(chunk.iter().flat_map(|&x| bytes(x)));
        out.write_all(&block)?;
    }
    Ok(())
}

fn read_le<T, const N: usize>(input: &mut dyn std::io::Read, count: usize, value: fn([u8; N]) -> T) -> Result<Vec<T>> {
    let mut values = Vec::with_capacity(count);
    let mut block = vec![0u8; (16 << 10) * N];
    while values.len() < count {
        let n = (count - values.len()).min(16 << 10);
        input.read_exact(&mut block[..n * N])?;
        values.extend(block[..n * N].chunks_exact(N).map(|b| value(b.try_into().expect("N bytes"))));
    }
    Ok(values)
}

/// `values` little-endian, in blocks (no copy of the whole).
pub fn write_f32s(out: &mut dyn std::io::Write, values: &[f32]) -> Result<()> {
    write_le(out, values, f32::to_le_bytes)
}

pub fn read_f32s(input: &mut dyn std::io::Read, count: usize) -> Result<Vec<f32>> {
    read_le(input, count, f32::from_le_bytes)
}

pub fn read_u64(input: &mut dyn std::io::Read) -> Result<u64> {
    let mut b = [0u8; 8];
    input.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_truncate_and_overwrite() {
        let mut cache = KvCache::new(2, 4, 3, &Device::Cpu).unwrap();
        let ones = Tensor::ones((2, 3, 3), DType::F32, &Device::Cpu).unwrap();
        cache.append(&ones, &ones).unwrap();
        assert_eq!(cache.len(), 3);
        cache.truncate(1);
        assert_eq!(cache.len(), 1);
        cache.truncate(5);
        assert_eq!(cache.len(), 1, "truncate never grows");
        let twos = (ones.narrow(1, 0, 2).unwrap() * 2.0).unwrap().contiguous().unwrap();
        cache.append(&twos, &twos).unwrap();
        let k: Vec<Vec<Vec<f32>>> = cache.buffers().0.to_vec3().unwrap();
        assert_eq!(k[1][0], vec![1.0; 3]);
        assert_eq!(k[1][1], vec![2.0; 3]);
        assert_eq!(k[1][2], vec![2.0; 3]);
        let err = cache.append(&twos, &twos).unwrap_err();
        assert!(matches!(err, Error::ContextOverflow { .. }));
    }

    #[test]
    fn the_buffers_grow_as_they_fill_and_keep_what_they_held() {
        let limit = FIRST_ALLOCATION * 3;
        let mut cache = KvCache::new(1, limit, 2, &Device::Cpu).unwrap();
        assert_eq!((cache.allocated(), cache.capacity()), (FIRST_ALLOCATION, limit));
        let rows = |from: usize, n: usize| {
            let values: Vec<f32> = (from..from + n).flat_map(|p| [p as f32, -(p as f32)]).collect();
            Tensor::from_vec(values, (1, n, 2), &Device::Cpu).unwrap()
        };
        cache.append(&rows(0, FIRST_ALLOCATION), &rows(0, FIRST_ALLOCATION)).unwrap();
        assert_eq!(cache.allocated(), FIRST_ALLOCATION, "full, not grown");
        cache.append(&rows(FIRST_ALLOCATION, 1), &rows(FIRST_ALLOCATION, 1)).unwrap();
        assert_eq!(cache.allocated(), FIRST_ALLOCATION * 2, "doubled");
        cache
            .append(&rows(FIRST_ALLOCATION + 1, limit - FIRST_ALLOCATION - 1), &rows(0, limit - FIRST_ALLOCATION - 1))
            .unwrap();
        assert_eq!(cache.allocated(), limit, "never past the limit");
        let k: Vec<f32> = cache.buffers().0.flatten_all().unwrap().to_vec1().unwrap();
        let expected: Vec<f32> = (0..limit).flat_map(|p| [p as f32, -(p as f32)]).collect();
        assert_eq!(k, expected, "every row where it was written, across two growths");
        assert!(cache.append(&rows(0, 1), &rows(0, 1)).is_err());
        let saved = cache.save().unwrap();
        let mut fresh = KvCache::new(1, limit, 2, &Device::Cpu).unwrap();
        fresh.restore(&saved).unwrap();
        assert_eq!((fresh.len(), fresh.allocated()), (limit, limit), "a restore grows to what it brings back");
    }

    #[test]
    fn both_q8_0_readers_give_the_same_bits() {
        let values: Vec<f32> =
            (0..64 * 32).map(|i| ((i * 7919 % 2003) as f32 - 1001.0) * (1.0 + (i / 32) as f32)).collect();
        let blocks = quantize_q8_0(&values);
        let mut scalar = vec![0f32; values.len()];
        for (block, out) in blocks.chunks_exact(Q8_0_BLOCK_BYTES).zip(scalar.chunks_exact_mut(Q8_0_BLOCK)) {
            let scale = f16::from_le_bytes([block[0], block[1]]).to_f32();
            for (o, &q) in out.iter_mut().zip(&block[2..]) {
                *o = f32::from(q as i8) * scale;
            }
        }
        let mut dispatched = vec![0f32; values.len()];
        dequantize_q8_0(&blocks, &mut dispatched);
        assert_eq!(scalar, dispatched);
    }

    #[test]
    fn a_q8_0_cache_rounds_each_row_on_its_own_and_saves_and_restores_it_exactly() {
        let (heads, d) = (2, 64);
        let values: Vec<f32> = (0..heads * 3 * d).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let rows = Tensor::from_vec(values.clone(), (heads, 3, d), &Device::Cpu).unwrap();
        let mut batch = KvCache::with_format(heads, 8, d, KvFormat::Q8_0, &Device::Cpu).unwrap();
        batch.append(&rows, &rows).unwrap();
        let mut single = KvCache::with_format(heads, 8, d, KvFormat::Q8_0, &Device::Cpu).unwrap();
        for p in 0..3 {
            let row = rows.narrow(1, p, 1).unwrap().contiguous().unwrap();
            single.append(&row, &row).unwrap();
        }
        let saved = batch.save().unwrap();
        assert_eq!(saved.k, single.save().unwrap().k, "the same bytes whatever the batch");
        assert_eq!(saved.bytes(), 2 * heads * 3 * 2 * Q8_0_BLOCK_BYTES, "34 bytes a block of 32");
        let Values::Q8_0(bytes) = &saved.k else { panic!("q8_0 values") };
        let mut back = vec![0f32; values.len()];
        dequantize_q8_0(bytes, &mut back);
        for (block, (got, want)) in back.chunks(32).zip(values.chunks(32)).enumerate() {
            let largest = want.iter().fold(0f32, |m, x| m.max(x.abs()));
            let worst = got.iter().zip(want).map(|(g, w)| (g - w).abs()).fold(0f32, f32::max);
            assert!(worst <= largest / 127.0 * 0.51, "block {block}: off by {worst}");
        }
        let mut file = Vec::new();
        saved.write_to(&mut file).unwrap();
        let row = heads * row_units(KvFormat::Q8_0, d);
        let read = KvSnapshot::read_from(&mut file.as_slice(), KvFormat::Q8_0, row, 8).unwrap();
        let mut fresh = KvCache::with_format(heads, 8, d, KvFormat::Q8_0, &Device::Cpu).unwrap();
        fresh.restore(&read).unwrap();
        assert_eq!(fresh.save().unwrap().k, saved.k);
        assert!(KvSnapshot::read_from(&mut file.as_slice(), KvFormat::F16, row, 8).is_err(), "another format");
        let mut f16s = KvCache::with_format(heads, 8, d, KvFormat::F16, &Device::Cpu).unwrap();
        assert!(f16s.restore(&read).is_err(), "an f16 cache refuses it");
        assert!(KvCache::with_format(1, 8, 40, KvFormat::Q8_0, &Device::Cpu).is_err(), "heads not in blocks of 32");
    }

    #[test]
    fn an_f16_cache_holds_each_value_rounded_once_and_saves_and_restores_it_exactly() {
        let mut cache = KvCache::with_format(2, 8, 4, KvFormat::F16, &Device::Cpu).unwrap();
        let values: Vec<f32> = (0..24).map(|i| 1.0 + i as f32 / 3.0).collect();
        let rows = Tensor::from_vec(values.clone(), (2, 3, 4), &Device::Cpu).unwrap();
        cache.append(&rows, &rows).unwrap();
        let kept: Vec<f32> = cache
            .buffers()
            .0
            .narrow(1, 0, 3)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let rounded: Vec<f32> = values.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
        assert_eq!(kept, rounded);
        let saved = cache.save().unwrap();
        assert_eq!(saved.bytes(), 2 * 24 * 2, "two bytes a value");
        let mut bytes = Vec::new();
        saved.write_to(&mut bytes).unwrap();
        let back = KvSnapshot::read_from(&mut bytes.as_slice(), KvFormat::F16, 8, 8).unwrap();
        let mut fresh = KvCache::with_format(2, 8, 4, KvFormat::F16, &Device::Cpu).unwrap();
        fresh.restore(&back).unwrap();
        assert_eq!(fresh.save().unwrap().k, saved.k);
        assert!(KvCache::new(2, 8, 4, &Device::Cpu).unwrap().restore(&back).is_err(), "an f32 cache refuses it");
    }

    #[test]
    fn a_restored_cache_holds_what_was_saved_whatever_was_written_since() {
        let mut cache = KvCache::new(2, 6, 3, &Device::Cpu).unwrap();
        let rows = |x: f32, n| (Tensor::ones((2, n, 3), DType::F32, &Device::Cpu).unwrap() * x as f64).unwrap();
        cache.append(&rows(1.0, 3), &rows(-1.0, 3)).unwrap();
        let saved = cache.save().unwrap();
        assert_eq!(saved.bytes(), 2 * 2 * 3 * 3 * 4);
        cache.truncate(1);
        cache.append(&rows(7.0, 5), &rows(7.0, 5)).unwrap();
        cache.restore(&saved).unwrap();
        assert_eq!(cache.len(), 3);
        let (k, v) = cache.buffers();
        let live = |t: &Tensor| t.narrow(1, 0, 3).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(live(k), vec![1.0; 18]);
        assert_eq!(live(v), vec![-1.0; 18]);
        let other = KvCache::new(1, 6, 3, &Device::Cpu).unwrap().save().unwrap();
        assert!(KvCache::new(2, 2, 3, &Device::Cpu).unwrap().restore(&saved).is_err(), "too long");
        assert_eq!(other.bytes(), 0);
        let mut bytes = Vec::new();
        saved.write_to(&mut bytes).unwrap();
        let f32s = KvFormat::F32;
        let back = KvSnapshot::read_from(&mut bytes.as_slice(), f32s, 6, 6).unwrap();
        assert_eq!((back.k, back.v, back.len), (saved.k.clone(), saved.v.clone(), 3));
        assert!(KvSnapshot::read_from(&mut bytes.as_slice(), f32s, 6, 2).is_err(), "longer than the cache");
        assert!(KvSnapshot::read_from(&mut bytes.as_slice(), f32s, 5, 6).is_err(), "another shape");
        assert!(KvSnapshot::read_from(&mut bytes.as_slice(), KvFormat::F16, 6, 6).is_err(), "another format");
        assert!(KvSnapshot::read_from(&mut &bytes[..40], f32s, 6, 6).is_err(), "cut short");
    }

    #[test]
    fn a_prefix_holds_the_first_rows_bit_for_bit_in_buffers_of_its_size_and_grows_again() {
        for format in [KvFormat::F32, KvFormat::F16, KvFormat::Q8_0] {
            let mut cache = KvCache::with_format(2, 4096, 32, format, &Device::Cpu).unwrap();
            let rows = |n: usize, seed: f32| {
                Tensor::arange(0f32, (2 * n * 32) as f32, &Device::Cpu)
                    .unwrap()
                    .affine(0.01, seed as f64)
                    .unwrap()
                    .reshape((2, n, 32))
                    .unwrap()
            };
            cache.append(&rows(10, 0.5), &rows(10, -0.5)).unwrap();
            let mut prefix = cache.prefix(6).unwrap();
            assert_eq!((prefix.len(), prefix.allocated()), (6, 6));
            assert!(prefix.bytes() < cache.bytes());
            let live = |c: &KvCache, n: usize| {
                let (k, v) = c.buffers();
                let bits = |t: &Tensor| {
                    t.narrow(1, 0, n)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_dtype(DType::F32)
                        .unwrap()
                        .to_vec1::<f32>()
                        .unwrap()
                };
                (bits(k), bits(v))
            };
            assert_eq!(live(&prefix, 6), live(&cache, 6), "{format:?}");
            // Both go on alike: the same rows appended give the same bits.
            cache.truncate(6);
            cache.append(&rows(3, 1.5), &rows(3, 2.5)).unwrap();
            prefix.append(&rows(3, 1.5), &rows(3, 2.5)).unwrap();
            assert_eq!(live(&prefix, 9), live(&cache, 9), "{format:?}");
        }
    }
}
