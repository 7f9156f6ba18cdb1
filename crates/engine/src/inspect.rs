//! What a GGUF file is, read from its header alone (no weights): for model pickers, which list
//! many files and must not load them, and for the memory check before a load.

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::models;
use crate::speculative::check_vocabularies;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    pub path: PathBuf,
    pub name: String,
    pub architecture: String,
    pub parameters: u64,
    pub quantization: String,
    pub file_bytes: u64,
}

/// The card of a GGUF file we can run; a foreign, truncated or unsupported file is an error.
pub fn inspect(path: impl AsRef<Path>) -> Result<ModelCard> {
    let gguf = GgufFile::open(path)?;
    models::check_architecture(&gguf)?;
    Ok(card(&gguf))
}

pub(crate) fn card(gguf: &GgufFile) -> ModelCard {
    let stem = gguf.path().file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    ModelCard {
        path: gguf.path().to_path_buf(),
        name: gguf.string("general.name").unwrap_or(stem),
        architecture: gguf.architecture().unwrap_or_default(),
        parameters: gguf.content().tensor_infos.values().map(|t| t.shape.elem_count() as u64).sum(),
        quantization: models::dominant_weight_type(gguf),
        file_bytes: std::fs::metadata(gguf.path()).map(|m| m.len()).unwrap_or(0),
    }
}

/// Whether `draft` can draft for `target`: their vocabularies must be equal token for token.
/// Reads the vocabularies from the headers only: building tokenizers (Gemma's 262k-piece
/// SentencePiece one takes a second) is not needed to compare them.
pub fn check_draft_for(target: impl AsRef<Path>, draft: impl AsRef<Path>) -> Result<()> {
    let vocab = |p: &Path| GgufFile::open(p)?.string_array("tokenizer.ggml.tokens");
    check_vocabularies(&vocab(target.as_ref())?, &vocab(draft.as_ref())?)
}

/// Refuse a load that would not fit in the memory the system has free, rather than let the
/// operating system kill the process halfway through. Weights are read into memory whole;
/// `extra_bytes` is what else the load allocates (the KV cache).
pub fn check_fits_in_memory(path: &Path, file_bytes: u64, extra_bytes: u64) -> Result<()> {
    let Some(available) = available_memory() else { return Ok(()) };
    let needed = file_bytes + extra_bytes;
    if needed > available {
        return Err(Error::ModelTooLarge { path: path.to_path_buf(), needed, available });
    }
    Ok(())
}

/// MemAvailable from /proc/meminfo, in bytes; None where the system does not say.
/// `SPECULA_MEMORY_LIMIT` (bytes) overrides it, for tests and for users who want a cap.
pub fn available_memory() -> Option<u64> {
    if let Some(limit) = std::env::var("SPECULA_MEMORY_LIMIT").ok().and_then(|v| v.parse().ok()) {
        return Some(limit);
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&meminfo)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mem_available_in_bytes() {
        let meminfo = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(meminfo), Some(2048 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
    }
}
