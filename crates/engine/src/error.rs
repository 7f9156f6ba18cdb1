//! The engine's one error type. Every variant carries what a user needs to act on it;
//! shells map [`Error::code`] to their own boundary (exit codes, `{ code, message }` DTOs).

use std::path::PathBuf;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}: not a GGUF model file ({reason})")]
    NotGguf { path: PathBuf, reason: String },

    #[error("{path}: the file is truncated: {reason}")]
    Truncated { path: PathBuf, reason: String },

    #[error("{path}: unsupported model architecture `{arch}` (supported: {supported})")]
    UnsupportedArchitecture { path: PathBuf, arch: String, supported: String },

    #[error("model metadata is invalid: {0}")]
    BadMetadata(String),

    #[error("tokenizer: {0}")]
    Tokenizer(String),

    #[error("chat template: {0}")]
    Template(String),

    #[error(
        "the prompt is {prompt_tokens} tokens but the context holds {context} \
         (with room for {reserve} generated); shorten the prompt or raise the context length"
    )]
    ContextOverflow { prompt_tokens: usize, context: usize, reserve: usize },

    #[error(
        "{path}: the model needs about {} MiB of memory but only {} MiB is free; \
         close other programs or pick a smaller model",
        .needed / (1 << 20), .available / (1 << 20)
    )]
    ModelTooLarge { path: PathBuf, needed: u64, available: u64 },

    #[error("the draft cannot pair with the target: {0}")]
    IncompatibleDraft(String),

    #[error("invalid setting: {0}")]
    InvalidSetting(String),

    #[error("tensor computation failed: {}", first_line(.0))]
    Candle(#[from] candle_core::Error),
}

/// candle appends a backtrace to its messages when RUST_BACKTRACE is set; users get the
/// message, one line.
pub(crate) fn first_line(error: &impl std::fmt::Display) -> String {
    error.to_string().lines().next().unwrap_or_default().to_string()
}

impl Error {
    /// A stable machine-readable code, for the IPC and HTTP boundaries.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Io { .. } => "io",
            Error::NotGguf { .. } => "not_gguf",
            Error::Truncated { .. } => "truncated",
            Error::UnsupportedArchitecture { .. } => "unsupported_architecture",
            Error::BadMetadata(_) => "bad_metadata",
            Error::Tokenizer(_) => "tokenizer",
            Error::Template(_) => "template",
            Error::ContextOverflow { .. } => "context_overflow",
            Error::ModelTooLarge { .. } => "model_too_large",
            Error::IncompatibleDraft(_) => "incompatible_draft",
            Error::InvalidSetting(_) => "invalid_setting",
            Error::Candle(_) => "compute",
        }
    }
}
