//! What a GGUF file is, read from its header alone (no weights): for model pickers, which list
//! many files and must not load them, and for the memory check before a load.

use crate::error::Result;
use crate::gguf::GgufFile;
use crate::models;
use crate::tokenizer::check_vocabularies;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The memory checks live with the machine's other facts; these paths stay for callers.
pub use crate::device::{available_memory, check_fits_in_memory};

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

pub fn card(gguf: &GgufFile) -> ModelCard {
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
