//! How commands reach what the app holds: the history under its lock, and blocking work off
//! the IPC thread.

use crate::error::{CommandResult, ErrorInfo};
use crate::AppState;
use specula_store::Store;

pub(crate) fn with_store<T>(
    state: &AppState,
    f: impl FnOnce(&mut Store) -> specula_store::Result<T>,
) -> CommandResult<T> {
    let mut store = state.store.lock().map_err(|_| ErrorInfo::internal("the history database is unavailable"))?;
    Ok(f(&mut store)?)
}

/// Blocking work (loading models, reading model headers) off the IPC thread.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> CommandResult<T> + Send + 'static,
) -> CommandResult<T> {
    tauri::async_runtime::spawn_blocking(f).await.map_err(|e| ErrorInfo::internal(e.to_string()))?
}
