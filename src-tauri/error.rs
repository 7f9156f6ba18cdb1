//! Every failure crosses IPC as `{ code, message }`, so the UI switches on `code` and shows
//! `message`; nothing panics on the way.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct ErrorDto {
    pub code: String,
    pub message: String,
}

impl ErrorDto {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self { code: code.to_string(), message: message.into() }
    }
}

impl From<specula_engine::Error> for ErrorDto {
    fn from(e: specula_engine::Error) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<specula_engine::ErrorInfo> for ErrorDto {
    fn from(e: specula_engine::ErrorInfo) -> Self {
        Self { code: e.code, message: e.message }
    }
}

impl From<specula_store::StoreError> for ErrorDto {
    fn from(e: specula_store::StoreError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

pub type CommandResult<T> = Result<T, ErrorDto>;
