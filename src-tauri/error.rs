//! Every failure crosses IPC as the contract's `ErrorInfo` (`{ code, message }`), so the UI
//! switches on `code` and shows `message`; nothing panics on the way.

pub use specula_engine::protocol::{ErrorCode, ErrorInfo};

pub type CommandResult<T> = Result<T, ErrorInfo>;
