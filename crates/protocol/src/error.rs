//! Errors as they cross a boundary (IPC, HTTP, a status report): a code from a closed set to
//! switch on, and the message to show.

use serde::{Deserialize, Serialize};
use specta::Type;

/// Declares [`ErrorCode`] with each code's wire name once: serde, `as_str` and [`ErrorCode::ALL`]
/// all come from the one list.
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $variant:ident = $name:literal,)*) => {
        /// Every code a Specula error may carry, in the engine, the store, the model library
        /// and the app.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Type)]
        pub enum ErrorCode {
            $($(#[doc = $doc])* #[serde(rename = $name)] $variant,)*
        }

        impl ErrorCode {
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code's wire name, as serde writes it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $name,)*
                }
            }
        }
    };
}

error_codes! {
    // The engine.
    /// A file could not be read.
    Io = "io",
    NotGguf = "not_gguf",
    Truncated = "truncated",
    BadHeader = "bad_header",
    UnsupportedArchitecture = "unsupported_architecture",
    BadMetadata = "bad_metadata",
    Tokenizer = "tokenizer",
    Template = "template",
    ContextOverflow = "context_overflow",
    ModelTooLarge = "model_too_large",
    IncompatibleDraft = "incompatible_draft",
    InvalidSetting = "invalid_setting",
    InvalidGrammar = "invalid_grammar",
    InvalidLogits = "invalid_logits",
    /// The engine's queue is full.
    Busy = "busy",
    NoModel = "no_model",
    EngineFailure = "engine_panic",
    Compute = "compute",
    // The history store.
    Storage = "storage",
    NotFound = "not_found",
    InvalidRequest = "invalid_request",
    // The model library (downloads).
    Http = "http",
    Checksum = "checksum",
    DiskFull = "disk_full",
    Cancelled = "cancelled",
    Interrupted = "interrupted",
    NoGguf = "no_gguf",
    BadName = "bad_name",
    Oversized = "oversized",
    // A remote engine (crates/remote).
    /// The remote could not be reached (refused, no such host, the connection dropped).
    Unreachable = "unreachable",
    /// The remote refused the API key (401 or 403).
    Unauthorized = "unauthorized",
    /// The remote sent nothing for too long.
    Timeout = "timeout",
    /// The remote answered with an error of its own.
    RemoteError = "remote_error",
    /// The remote's answer broke the protocol: malformed, oversized, endless, or a redirect.
    BadResponse = "bad_response",
    // The app.
    /// A failure with no better name (a task that could not be joined, a stopped engine).
    Internal = "internal",
    /// The history database could not be opened; this session's chats live in memory.
    HistoryInMemory = "history_in_memory",
    /// The history database was unreadable and was moved aside; a new one was started.
    HistorySetAside = "history_set_aside",
    /// A model path outside the model folders.
    PathNotAllowed = "path_not_allowed",
    /// Stored settings were unreadable and were reset.
    SettingsReset = "settings_reset",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A code equals its wire name: `code == "io"` reads as the JSON does.
impl PartialEq<&str> for ErrorCode {
    fn eq(&self, name: &&str) -> bool {
        self.as_str() == *name
    }
}

/// An error as it crosses a boundary. Cloneable, unlike the parts' own error types, so a
/// status can keep one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct ErrorInfo {
    pub code: ErrorCode,
    pub message: String,
}

impl ErrorInfo {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    pub fn invalid_setting(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidSetting, message)
    }
}

impl std::fmt::Display for ErrorInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ErrorInfo {}

/// A setting out of its range, found by the checks the contract's own types make
/// (`GenerateOptions::validate`, parsing a mode or a k): the engine reports it as its
/// `invalid_setting` error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSetting(pub String);

impl std::fmt::Display for InvalidSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidSetting {}

impl From<InvalidSetting> for ErrorInfo {
    fn from(e: InvalidSetting) -> Self {
        Self::invalid_setting(e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_written_as_its_wire_name() {
        for &code in ErrorCode::ALL {
            let written = serde_json::to_value(code).unwrap();
            assert_eq!(written, code.as_str());
            assert_eq!(serde_json::from_value::<ErrorCode>(written).unwrap(), code);
        }
    }
}
