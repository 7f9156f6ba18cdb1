//! Opening GGUF files with clear errors: a foreign file, a truncated download, a malformed
//! header and a missing metadata key each get their own message before any weight is read.

mod header;

pub use header::HeaderError;

/// Parse a GGUF header held in memory: the fuzz and property tests' entry point.
pub fn parse_header(bytes: &[u8]) -> std::result::Result<gguf_file::Content, HeaderError> {
    header::parse(&mut &bytes[..], bytes.len() as u64)
}

use crate::error::{Error, Result};
use candle_core::quantized::{gguf_file, QTensor};
use candle_core::Device;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

const GGUF_MAGIC: &[u8; 4] = b"GGUF";

/// A GGUF file whose header has been read and whose tensor extents fit in the file.
pub struct GgufFile {
    path: PathBuf,
    content: gguf_file::Content,
    reader: BufReader<File>,
}

impl GgufFile {
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let io_err = |source| Error::Io { path: path.clone(), source };
        let file = open_regular(&path)?;
        let file_len = file.metadata().map_err(io_err)?.len();
        let mut reader = BufReader::new(file);
        check_magic(&path, &mut reader, file_len)?;
        let content = header::parse(&mut reader, file_len).map_err(|e| match e {
            HeaderError::Truncated(reason) => Error::Truncated { path: path.clone(), reason },
            HeaderError::Invalid(reason) => Error::BadHeader { path: path.clone(), reason },
        })?;
        Ok(Self { path, content, reader })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn content(&self) -> &gguf_file::Content {
        &self.content
    }

    pub fn architecture(&self) -> Result<String> {
        self.string("general.architecture")
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    pub fn tensor(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        if !self.has_tensor(name) {
            return Err(Error::BadMetadata(format!("{}: tensor `{name}` is missing", self.path.display())));
        }
        Ok(self.content.tensor(&mut self.reader, name, device)?)
    }

    fn value(&self, key: &str) -> Result<&gguf_file::Value> {
        self.content.metadata.get(key).ok_or_else(|| Error::BadMetadata(format!("metadata key `{key}` is missing")))
    }

    /// A count that must be at least 1 (heads, layers, lengths): zero would divide by zero
    /// or build an empty model.
    pub fn count(&self, key: &str) -> Result<usize> {
        match self.u32(key)? {
            0 => Err(Error::BadMetadata(format!("`{key}` is 0; it must be at least 1"))),
            n => Ok(n as usize),
        }
    }

    /// A tensor's shape (outermost first) from the directory, without reading it.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.content.tensor_infos.get(name).map(|t| t.shape.dims())
    }

    pub fn u32(&self, key: &str) -> Result<u32> {
        let value = self.value(key)?;
        match unsigned(value).and_then(|v| u32::try_from(v).ok()) {
            Some(v) => Ok(v),
            None => Err(Error::BadMetadata(format!("`{key}` is not an integer from 0 to 2^32: {value:?}"))),
        }
    }

    /// An optional number: `None` when the key is absent, an error when it is there but not a
    /// finite number (a bad value must not silently become the default).
    pub fn optional_f32(&self, key: &str) -> Result<Option<f32>> {
        match self.content.metadata.contains_key(key) {
            true => self.f32(key).map(Some),
            false => Ok(None),
        }
    }

    /// An optional count, as [`Self::optional_f32`]: absent is `None`, present must be >= 1.
    pub fn optional_count(&self, key: &str) -> Result<Option<usize>> {
        match self.content.metadata.contains_key(key) {
            true => self.count(key).map(Some),
            false => Ok(None),
        }
    }

    /// A finite number (NaN and infinities are refused: no hyper-parameter means them).
    pub fn f32(&self, key: &str) -> Result<f32> {
        let value = self.value(key)?;
        match value.to_f32().or_else(|_| value.to_f64().map(|v| v as f32)) {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(Error::BadMetadata(format!("`{key}` is not a finite number: {value:?}"))),
        }
    }

    pub fn string(&self, key: &str) -> Result<String> {
        let value = self.value(key)?;
        value.to_string().cloned().map_err(|_| Error::BadMetadata(format!("`{key}` is not a string")))
    }

    pub fn bool(&self, key: &str) -> Result<bool> {
        let value = self.value(key)?;
        value.to_bool().map_err(|_| Error::BadMetadata(format!("`{key}` is not a boolean")))
    }

    pub fn f32_array(&self, key: &str) -> Result<Vec<f32>> {
        let values = self.value(key)?.to_vec().map_err(|_| Error::BadMetadata(format!("`{key}` is not an array")))?;
        values.iter().map(|v| v.to_f32().map_err(|_| Error::BadMetadata(format!("`{key}` holds a non-f32")))).collect()
    }

    pub fn i32_array(&self, key: &str) -> Result<Vec<i32>> {
        let values = self.value(key)?.to_vec().map_err(|_| Error::BadMetadata(format!("`{key}` is not an array")))?;
        values
            .iter()
            .map(|v| v.to_i32().or_else(|_| v.to_u32().map(|u| u as i32)))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| Error::BadMetadata(format!("`{key}` holds a non-integer")))
    }

    pub fn string_array(&self, key: &str) -> Result<Vec<String>> {
        let values = self.value(key)?.to_vec().map_err(|_| Error::BadMetadata(format!("`{key}` is not an array")))?;
        values
            .iter()
            .map(|v| v.to_string().cloned().map_err(|_| Error::BadMetadata(format!("`{key}` holds a non-string"))))
            .collect()
    }
}

/// An integer value of any width, if it is not negative.
fn unsigned(value: &gguf_file::Value) -> Option<u64> {
    use gguf_file::Value::*;
    match *value {
        U8(v) => Some(v.into()),
        U16(v) => Some(v.into()),
        U32(v) => Some(v.into()),
        U64(v) => Some(v),
        I8(v) => u64::try_from(v).ok(),
        I16(v) => u64::try_from(v).ok(),
        I32(v) => u64::try_from(v).ok(),
        I64(v) => u64::try_from(v).ok(),
        _ => None,
    }
}

fn check_magic(path: &Path, reader: &mut BufReader<File>, file_len: u64) -> Result<()> {
    let mut magic = [0u8; 4];
    if file_len < 4 || reader.read_exact(&mut magic).is_err() {
        return Err(Error::NotGguf { path: path.to_path_buf(), reason: format!("only {file_len} bytes") });
    }
    if &magic != GGUF_MAGIC {
        return Err(Error::NotGguf {
            path: path.to_path_buf(),
            reason: format!("it starts with {magic:02x?}, not `GGUF`"),
        });
    }
    use std::io::Seek;
    reader.rewind().map_err(|source| Error::Io { path: path.to_path_buf(), source })
}

/// Open `path` for reading and check the open file, not the name: a name checked and then
/// opened can be swapped in between (a FIFO put in its place would hang the reader). Opened
/// without blocking, since opening a FIFO waits for a writer; reads of a regular file are
/// unaffected by the flag.
fn open_regular(path: &Path) -> Result<File> {
    let io_err = |source| Error::Io { path: path.to_path_buf(), source };
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(io_err)?;
    if !file.metadata().map_err(io_err)?.is_file() {
        return Err(Error::NotGguf { path: path.to_path_buf(), reason: "not a regular file".into() });
    }
    Ok(file)
}
