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

    // Opens with OpenAI's words, by which clients (litellm, LangChain) recognise it.
    #[error(
        "This model's maximum context length is {context} tokens. However, the prompt is \
         {prompt_tokens} tokens (with room for {reserve} generated): shorten it or raise the context length"
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

    /// Reading or writing a saved prompt cache (decode/disk_cache.rs): logged, and the cache
    /// file ignored; the reply goes on without it.
    #[error("a saved prompt cache: {0}")]
    SavedCache(#[from] std::io::Error),
}

/// candle appends a backtrace to its messages when RUST_BACKTRACE is set; users get the
/// message, one line.
pub(crate) fn first_line(error: &impl std::fmt::Display) -> String {
    error.to_string().lines().next().unwrap_or_default().to_string()
}

/// What a caught panic said, for the error that replaces it.
pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (_, Some(s)) => s.clone(),
        _ => "a panic without a message".into(),
    }
}

pub use specula_protocol::{ErrorCode, ErrorInfo};

impl From<&Error> for ErrorInfo {
    fn from(e: &Error) -> Self {
        Self::new(e.error_code(), e.to_string())
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
        self.error_code().as_str()
    }

    pub fn error_code(&self) -> ErrorCode {
        match self {
            Error::Io { .. } => ErrorCode::Io,
            Error::NotGguf { .. } => ErrorCode::NotGguf,
            Error::Truncated { .. } => ErrorCode::Truncated,
            Error::BadHeader { .. } => ErrorCode::BadHeader,
            Error::UnsupportedArchitecture { .. } => ErrorCode::UnsupportedArchitecture,
            Error::BadMetadata(_) => ErrorCode::BadMetadata,
            Error::Tokenizer(_) => ErrorCode::Tokenizer,
            Error::Template(_) => ErrorCode::Template,
            Error::ContextOverflow { .. } => ErrorCode::ContextOverflow,
            Error::ModelTooLarge { .. } => ErrorCode::ModelTooLarge,
            Error::IncompatibleDraft(_) => ErrorCode::IncompatibleDraft,
            Error::InvalidSetting(_) => ErrorCode::InvalidSetting,
            Error::Grammar(_) => ErrorCode::InvalidGrammar,
            Error::InvalidLogits(_) => ErrorCode::InvalidLogits,
            Error::Busy { .. } => ErrorCode::Busy,
            Error::NoModel(_) => ErrorCode::NoModel,
            Error::JobPanicked(_) => ErrorCode::EngineFailure,
            Error::Candle(_) => ErrorCode::Compute,
            Error::SavedCache(_) => ErrorCode::Io,
        }
    }
}

impl From<specula_protocol::InvalidSetting> for Error {
    fn from(e: specula_protocol::InvalidSetting) -> Self {
        Error::InvalidSetting(e.0)
    }
}
