//! Opening GGUF files with clear errors: a foreign file, a truncated download and a
//! missing metadata key each get their own message before any weight is read.

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
        let file = File::open(&path).map_err(io_err)?;
        let file_len = file.metadata().map_err(io_err)?.len();
        let mut reader = BufReader::new(file);
        check_magic(&path, &mut reader, file_len)?;
        let content = gguf_file::Content::read(&mut reader).map_err(|e| {
            let reason = crate::error::first_line(&e);
            if looks_like_eof(&reason) {
                Error::Truncated { path: path.clone(), reason: format!("the header ends early ({reason})") }
            } else {
                Error::NotGguf { path: path.clone(), reason: format!("unreadable header: {reason}") }
            }
        })?;
        check_tensor_extents(&path, &content, file_len)?;
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

    pub fn u32(&self, key: &str) -> Result<u32> {
        let value = self.value(key)?;
        value
            .to_u32()
            .or_else(|_| value.to_u64().map(|v| v as u32))
            .or_else(|_| value.to_i32().map(|v| v as u32))
            .map_err(|_| Error::BadMetadata(format!("`{key}` is not an integer: {value:?}")))
    }

    pub fn f32(&self, key: &str) -> Result<f32> {
        let value = self.value(key)?;
        value
            .to_f32()
            .or_else(|_| value.to_f64().map(|v| v as f32))
            .map_err(|_| Error::BadMetadata(format!("`{key}` is not a number: {value:?}")))
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

fn looks_like_eof(reason: &str) -> bool {
    let reason = reason.to_lowercase();
    ["fill whole buffer", "eof", "exceeds", "end of file", "remaining"].iter().any(|needle| reason.contains(needle))
}

/// A download cut short keeps a valid header; the loss shows only in the tensor data.
/// Catch it here, with the numbers, rather than as an I/O error halfway through loading.
fn check_tensor_extents(path: &Path, content: &gguf_file::Content, file_len: u64) -> Result<()> {
    let data_len = file_len.saturating_sub(content.tensor_data_offset);
    for (name, info) in &content.tensor_infos {
        let elems = info.shape.elem_count() as u64;
        let block = info.ggml_dtype.block_size() as u64;
        let bytes = elems / block * info.ggml_dtype.type_size() as u64;
        let end = info.offset + bytes;
        if end > data_len {
            return Err(Error::Truncated {
                path: path.to_path_buf(),
                reason: format!(
                    "tensor `{name}` needs {} bytes but the file has {file_len}",
                    content.tensor_data_offset + end
                ),
            });
        }
    }
    Ok(())
}
