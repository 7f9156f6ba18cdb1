//! The GGUF header (magic, metadata, tensor directory), parsed as hostile input: every count
//! and length is checked against the bytes left in the file and against fixed caps before
//! anything is allocated, all arithmetic is checked, and each failure says whether the file
//! ended early (a cut download) or is malformed. The result is candle's `Content`, whose
//! tensor reader then only ever sees extents that fit in the file.
//!
//! Format: <https://github.com/ggml-org/ggml/blob/master/docs/gguf.md>.

use candle_core::quantized::gguf_file::{Content, TensorInfo, Value, VersionedMagic};
use candle_core::quantized::GgmlDType;
use std::collections::HashMap;
use std::io::Read;

/// Caps far above any real model (the largest vocabularies have ~262k entries, the largest
/// models a few thousand tensors), small enough that what they admit fits in memory: a
/// metadata value costs about 32 bytes in memory however small on disk.
const MAX_TENSORS: u64 = 1 << 16;
const MAX_METADATA: u64 = 1 << 16;
const MAX_ARRAY: u64 = 1 << 22;
const MAX_STRING: u64 = 1 << 28;
const MAX_DEPTH: usize = 3;
const MAX_DIMS: u32 = 4;
/// Elements of one tensor: 2^40 is a 4 TB model in f32.
const MAX_ELEMENTS: u64 = 1 << 40;
const MAX_ALIGNMENT: u64 = 1 << 20;
const DEFAULT_ALIGNMENT: u64 = 32;

/// Why a header could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// The file ends before the header does, or before a tensor's data does.
    Truncated(String),
    /// The bytes are there but do not make a GGUF header we accept.
    Invalid(String),
}

type Parse<T> = std::result::Result<T, HeaderError>;

/// Parse the header of a file of `file_len` bytes; the reader starts at byte 0.
pub fn parse(reader: &mut impl Read, file_len: u64) -> Parse<Content> {
    let mut r = Counted { inner: reader, position: 0, file_len };
    let magic = r.magic()?;
    let tensor_count = r.count(&magic, "tensors", MAX_TENSORS, 4 + 4 + 8 + r.length_size(&magic))?;
    let metadata_count = r.count(&magic, "metadata entries", MAX_METADATA, 4 + 1 + r.length_size(&magic))?;
    let mut metadata = HashMap::new();
    for _ in 0..metadata_count {
        let key = r.string(&magic)?;
        let kind = r.u32()?;
        let value = r.value(&magic, kind, 0)?;
        if metadata.insert(key.clone(), value).is_some() {
            return invalid(format!("metadata key `{key}` appears twice"));
        }
    }
    let alignment = alignment(&metadata)?;
    let mut directory = Vec::new();
    for _ in 0..tensor_count {
        directory.push(r.tensor_entry(&magic)?);
    }
    let data_offset = r.position.div_ceil(alignment).checked_mul(alignment).ok_or_else(|| too_big("data offset"))?;
    let data_len = file_len.saturating_sub(data_offset);
    let mut tensor_infos = HashMap::new();
    for entry in directory {
        let info = entry.check(alignment, data_len, file_len, data_offset)?;
        if tensor_infos.insert(entry.name.clone(), info).is_some() {
            return invalid(format!("tensor `{}` appears twice", entry.name));
        }
    }
    Ok(Content { magic, metadata, tensor_infos, tensor_data_offset: data_offset })
}

fn invalid<T>(reason: String) -> Parse<T> {
    Err(HeaderError::Invalid(reason))
}

fn too_big(what: &str) -> HeaderError {
    HeaderError::Invalid(format!("the {what} overflows"))
}

/// `general.alignment`: a power of two (the data's offsets are multiples of it).
fn alignment(metadata: &HashMap<String, Value>) -> Parse<u64> {
    let value = match metadata.get("general.alignment") {
        None => return Ok(DEFAULT_ALIGNMENT),
        Some(Value::U32(v)) => *v as u64,
        Some(Value::U64(v)) => *v,
        Some(Value::I32(v)) if *v >= 0 => *v as u64,
        Some(other) => return invalid(format!("general.alignment is {other:?}, not a positive integer")),
    };
    if value == 0 || !value.is_power_of_two() || value > MAX_ALIGNMENT {
        return invalid(format!("general.alignment is {value}: it must be a power of two up to {MAX_ALIGNMENT}"));
    }
    Ok(value)
}

/// A tensor as the directory lists it, before its extent is checked.
struct Entry {
    name: String,
    /// Outermost first, as candle's shapes are.
    dims: Vec<usize>,
    dtype: GgmlDType,
    offset: u64,
}

impl Entry {
    fn check(&self, alignment: u64, data_len: u64, file_len: u64, data_offset: u64) -> Parse<TensorInfo> {
        let name = &self.name;
        let elements = self.dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
        let elements = match elements {
            Some(n) if n <= MAX_ELEMENTS => n,
            _ => return invalid(format!("tensor `{name}` of shape {:?} has too many elements", self.dims)),
        };
        let block = self.dtype.block_size() as u64;
        let row = *self.dims.last().unwrap_or(&0) as u64;
        if !row.is_multiple_of(block) {
            return invalid(format!(
                "tensor `{name}`: rows of {row} do not divide into {:?} blocks of {block}",
                self.dtype
            ));
        }
        if !self.offset.is_multiple_of(alignment) {
            return invalid(format!(
                "tensor `{name}` starts at {}, not a multiple of the alignment {alignment}",
                self.offset
            ));
        }
        let bytes = elements / block * self.dtype.type_size() as u64;
        match self.offset.checked_add(bytes) {
            Some(end) if end <= data_len => {}
            Some(end) if data_offset.checked_add(end).is_some() => {
                return Err(HeaderError::Truncated(format!(
                    "tensor `{name}` needs {} bytes but the file has {file_len}",
                    data_offset + end
                )))
            }
            _ => return invalid(format!("tensor `{name}` lies beyond any file")),
        }
        Ok(TensorInfo {
            ggml_dtype: self.dtype,
            shape: candle_core::Shape::from(self.dims.clone()),
            offset: self.offset,
        })
    }
}

/// ggml's type ids of the types candle can hold.
fn dtype(id: u32) -> Option<GgmlDType> {
    Some(match id {
        0 => GgmlDType::F32,
        1 => GgmlDType::F16,
        2 => GgmlDType::Q4_0,
        3 => GgmlDType::Q4_1,
        6 => GgmlDType::Q5_0,
        7 => GgmlDType::Q5_1,
        8 => GgmlDType::Q8_0,
        9 => GgmlDType::Q8_1,
        10 => GgmlDType::Q2K,
        11 => GgmlDType::Q3K,
        12 => GgmlDType::Q4K,
        13 => GgmlDType::Q5K,
        14 => GgmlDType::Q6K,
        15 => GgmlDType::Q8K,
        30 => GgmlDType::BF16,
        _ => return None,
    })
}

/// A reader that knows where it is and how much of the file is left.
struct Counted<'a, R: Read> {
    inner: &'a mut R,
    position: u64,
    file_len: u64,
}

impl<R: Read> Counted<'_, R> {
    fn remaining(&self) -> u64 {
        self.file_len.saturating_sub(self.position)
    }

    fn bytes<const N: usize>(&mut self) -> Parse<[u8; N]> {
        let mut buf = [0u8; N];
        self.fill(&mut buf)?;
        Ok(buf)
    }

    fn fill(&mut self, buf: &mut [u8]) -> Parse<()> {
        if (buf.len() as u64) > self.remaining() {
            return Err(self.ended());
        }
        self.inner.read_exact(buf).map_err(|_| self.ended())?;
        self.position += buf.len() as u64;
        Ok(())
    }

    fn ended(&self) -> HeaderError {
        HeaderError::Truncated(format!("the header ends early (at byte {} of {})", self.position, self.file_len))
    }

    fn u32(&mut self) -> Parse<u32> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> Parse<u64> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    fn magic(&mut self) -> Parse<VersionedMagic> {
        if &self.bytes::<4>()? != b"GGUF" {
            return invalid("it does not start with `GGUF`".into());
        }
        match self.u32()? {
            1 => Ok(VersionedMagic::GgufV1),
            2 => Ok(VersionedMagic::GgufV2),
            3 => Ok(VersionedMagic::GgufV3),
            v => invalid(format!("GGUF version {v} (this reads versions 1 to 3)")),
        }
    }

    fn length_size(&self, magic: &VersionedMagic) -> u64 {
        match magic {
            VersionedMagic::GgufV1 => 4,
            _ => 8,
        }
    }

    fn length(&mut self, magic: &VersionedMagic) -> Parse<u64> {
        match magic {
            VersionedMagic::GgufV1 => Ok(self.u32()? as u64),
            _ => self.u64(),
        }
    }

    /// A count of entries that take at least `min_bytes` each.
    fn count(&mut self, magic: &VersionedMagic, what: &str, max: u64, min_bytes: u64) -> Parse<u64> {
        let n = self.length(magic)?;
        if n > max {
            return invalid(format!("the header declares {n} {what}; at most {max} are accepted"));
        }
        self.check_room(n.saturating_mul(min_bytes), &format!("{n} {what}"))?;
        Ok(n)
    }

    /// `needed` bytes must be left; a claim the rest of the file cannot hold means the file was
    /// cut (claims no file could hold are refused by the caps before this).
    fn check_room(&self, needed: u64, what: &str) -> Parse<()> {
        if needed > self.remaining() {
            return Err(HeaderError::Truncated(format!(
                "{what} run past the end of the file (at byte {})",
                self.position
            )));
        }
        Ok(())
    }

    fn string(&mut self, magic: &VersionedMagic) -> Parse<String> {
        let len = self.length(magic)?;
        if len > MAX_STRING {
            return invalid(format!(
                "a string of {len} bytes at byte {}; at most {MAX_STRING} are accepted",
                self.position
            ));
        }
        self.check_room(len, "a string's bytes")?;
        let mut bytes = vec![0u8; len as usize];
        self.fill(&mut bytes)?;
        // Some writers add a terminating NUL; text that is not UTF-8 is kept, lossily.
        while bytes.last() == Some(&0) {
            bytes.pop();
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn value(&mut self, magic: &VersionedMagic, kind: u32, depth: usize) -> Parse<Value> {
        Ok(match kind {
            0 => Value::U8(self.bytes::<1>()?[0]),
            1 => Value::I8(self.bytes::<1>()?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.bytes()?)),
            3 => Value::I16(i16::from_le_bytes(self.bytes()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(self.u32()? as i32),
            6 => Value::F32(f32::from_le_bytes(self.bytes()?)),
            7 => match self.bytes::<1>()?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return invalid(format!("a boolean of value {b}")),
            },
            8 => Value::String(self.string(magic)?),
            9 => self.array(magic, depth)?,
            10 => Value::U64(self.u64()?),
            11 => Value::I64(self.u64()? as i64),
            12 => Value::F64(f64::from_le_bytes(self.bytes()?)),
            other => return invalid(format!("a metadata value of unknown type {other}")),
        })
    }

    fn array(&mut self, magic: &VersionedMagic, depth: usize) -> Parse<Value> {
        if depth >= MAX_DEPTH {
            return invalid(format!("arrays nested deeper than {MAX_DEPTH}"));
        }
        let kind = self.u32()?;
        let min_bytes = match kind {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            8 => self.length_size(magic),
            9 => 4 + self.length_size(magic),
            10..=12 => 8,
            other => return invalid(format!("an array of unknown type {other}")),
        };
        let len = self.count(magic, "array elements", MAX_ARRAY, min_bytes)?;
        let mut values = Vec::with_capacity(len as usize);
        for _ in 0..len {
            values.push(self.value(magic, kind, depth + 1)?);
        }
        Ok(Value::Array(values))
    }

    fn tensor_entry(&mut self, magic: &VersionedMagic) -> Parse<Entry> {
        let name = self.string(magic)?;
        if name.is_empty() {
            return invalid("a tensor without a name".into());
        }
        let n_dims = self.u32()?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return invalid(format!("tensor `{name}` has {n_dims} dimensions (1 to {MAX_DIMS} are accepted)"));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            let d = self.length(magic)?;
            if d == 0 || d > MAX_ELEMENTS {
                return invalid(format!("tensor `{name}` has a dimension of {d}"));
            }
            dims.push(d as usize);
        }
        // GGUF lists the innermost dimension first; candle's shapes put it last.
        dims.reverse();
        let id = self.u32()?;
        let dtype = dtype(id).ok_or_else(|| HeaderError::Invalid(format!("tensor `{name}` has unknown type {id}")))?;
        let offset = self.u64()?;
        Ok(Entry { name, dims, dtype, offset })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A little-endian GGUF v3 header writer for the tests.
    #[derive(Default)]
    struct Bytes(Vec<u8>);

    impl Bytes {
        fn header(tensors: u64, metadata: u64) -> Self {
            let mut b = Bytes(b"GGUF".to_vec());
            b.u32(3).u64(tensors).u64(metadata);
            b
        }
        fn u32(&mut self, v: u32) -> &mut Self {
            self.0.extend(v.to_le_bytes());
            self
        }
        fn u64(&mut self, v: u64) -> &mut Self {
            self.0.extend(v.to_le_bytes());
            self
        }
        fn string(&mut self, s: &str) -> &mut Self {
            self.u64(s.len() as u64);
            self.0.extend(s.as_bytes());
            self
        }
        fn tensor(&mut self, name: &str, dims: &[u64], dtype: u32, offset: u64) -> &mut Self {
            self.string(name).u32(dims.len() as u32);
            for &d in dims {
                self.u64(d);
            }
            self.u32(dtype).u64(offset)
        }
        fn parse(&self, padding: usize) -> Parse<Content> {
            let mut all = self.0.clone();
            all.resize(all.len() + padding, 0);
            parse(&mut all.as_slice(), all.len() as u64)
        }
    }

    fn is_invalid(result: Parse<Content>, needle: &str) {
        match result {
            Err(HeaderError::Invalid(reason)) => assert!(reason.contains(needle), "{reason}"),
            other => panic!("expected Invalid({needle}), got {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn a_valid_header_reads_with_its_tensor_extents() {
        let mut b = Bytes::header(1, 1);
        b.string("general.architecture").u32(8).string("llama");
        b.tensor("w", &[32, 2], 0, 0);
        let content = b.parse(64 + 256).unwrap();
        assert_eq!(content.tensor_infos["w"].shape.dims(), &[2, 32]);
        assert_eq!(content.tensor_data_offset % 32, 0);
    }

    #[test]
    fn zero_or_odd_alignment_is_refused_not_a_division_by_zero() {
        for alignment in [0u32, 3, 1 << 30] {
            let mut b = Bytes::header(0, 1);
            b.string("general.alignment").u32(4).u32(alignment);
            is_invalid(b.parse(0), "general.alignment");
        }
    }

    #[test]
    fn element_counts_that_wrap_are_refused() {
        let mut b = Bytes::header(1, 0);
        b.tensor("w", &[1 << 32, 1 << 32], 0, 0);
        is_invalid(b.parse(1024), "too many elements");
    }

    #[test]
    fn huge_counts_are_malformed_and_short_files_are_truncated() {
        is_invalid(Bytes::header(1 << 40, 0).parse(0), "declares 1099511627776 tensors");
        let cut = Bytes::header(3, 0).parse(10);
        assert!(matches!(cut, Err(HeaderError::Truncated(_))), "{:?}", cut.map(|_| ()));
        let mut b = Bytes::header(0, 1);
        b.string("k").u32(8).u64(u64::MAX);
        is_invalid(b.parse(0), "a string of");
    }

    #[test]
    fn a_tensor_past_the_end_is_truncated() {
        let mut b = Bytes::header(1, 0);
        b.tensor("w", &[32, 4], 0, 0);
        assert!(matches!(b.parse(100), Err(HeaderError::Truncated(r)) if r.contains("tensor `w` needs")));
    }

    #[test]
    fn deep_arrays_duplicate_keys_and_unknown_types_are_refused() {
        let mut b = Bytes::header(0, 1);
        b.string("a").u32(9).u32(9).u64(1).u32(9).u64(1).u32(9).u64(1).u32(4).u64(1).u32(0);
        is_invalid(b.parse(0), "nested deeper");
        let mut b = Bytes::header(0, 2);
        b.string("k").u32(4).u32(1).string("k").u32(4).u32(2);
        is_invalid(b.parse(0), "appears twice");
        let mut b = Bytes::header(0, 1);
        b.string("k").u32(77);
        is_invalid(b.parse(8), "unknown type 77");
    }
}
