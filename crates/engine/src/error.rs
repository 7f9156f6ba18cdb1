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

    #[error("{path}: not a usable GGUF file: {reason}")]
    BadHeader { path: PathBuf, reason: String },

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

    #[error("the grammar or JSON schema cannot be used: {0}")]
    Grammar(String),

    #[error("the model produced unusable scores ({0}); its weights may be corrupt")]
    InvalidLogits(String),

    #[error("the engine is busy: {queued} requests are waiting; retry shortly")]
    Busy { queued: usize },

    #[error("no model is loaded: {0}")]
    NoModel(String),

    #[error("the engine failed on this request ({0}); it keeps serving the next ones")]
    JobPanicked(String),

    #[error("tensor computation failed: {}", first_line(.0))]
    Candle(#[from] candle_core::Error),
}

/// candle appends a backtrace to its messages when RUST_BACKTRACE is set; users get the
/// message, one line.
pub(crate) fn first_line(error: &impl std::fmt::Display) -> String {
    error.to_string().lines().next().unwrap_or_default().to_string()
}

/// An error as it crosses a boundary (IPC, HTTP, a status report): a stable code to switch
/// on and the message to show. Cloneable, unlike [`Error`], so a status can keep one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ErrorInfo {
    pub code: String,
    pub message: String,
}

impl ErrorInfo {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code: code.into(), message: message.into() }
    }
}

impl From<&Error> for ErrorInfo {
    fn from(e: &Error) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<Error> for ErrorInfo {
    fn from(e: Error) -> Self {
        Self::from(&e)
    }
}

impl Error {
    /// A stable machine-readable code, for the IPC and HTTP boundaries.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Io { .. } => "io",
            Error::NotGguf { .. } => "not_gguf",
            Error::Truncated { .. } => "truncated",
            Error::BadHeader { .. } => "bad_header",
            Error::UnsupportedArchitecture { .. } => "unsupported_architecture",
            Error::BadMetadata(_) => "bad_metadata",
            Error::Tokenizer(_) => "tokenizer",
            Error::Template(_) => "template",
            Error::ContextOverflow { .. } => "context_overflow",
            Error::ModelTooLarge { .. } => "model_too_large",
            Error::IncompatibleDraft(_) => "incompatible_draft",
            Error::InvalidSetting(_) => "invalid_setting",
            Error::Grammar(_) => "invalid_grammar",
            Error::InvalidLogits(_) => "invalid_logits",
            Error::Busy { .. } => "busy",
            Error::NoModel(_) => "no_model",
            Error::JobPanicked(_) => "engine_panic",
            Error::Candle(_) => "compute",
        }
    }
}
