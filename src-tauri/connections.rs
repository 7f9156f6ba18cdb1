//! Remote engines the user connected to (Library > Remote engines): their base URLs and the
//! models they had at the last check live in the settings table; their API keys do not. A key
//! is kept in a file of its own that only the user can read (`remote-keys.json` beside the
//! history, mode 0600), so that neither a copy of the history nor a log carries it, and it is
//! sent only to the host it was given for (specula-remote follows no redirect).

use crate::commands::{blocking, with_store};
use crate::error::{CommandResult, ErrorInfo};
use crate::AppState;
use specula_engine::protocol::{Connection, ConnectionCheck};
use specula_remote::Remote;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tauri::State;

pub const CONNECTIONS_KEY: &str = "connections";

/// The API keys, by base URL.
pub struct Keys {
    path: PathBuf,
}

impl Keys {
    pub fn new(data_dir: &Path) -> Self {
        Self { path: data_dir.join("remote-keys.json") }
    }

    pub fn get(&self, base_url: &str) -> Option<String> {
        self.read().remove(base_url)
    }

    /// Keep `key` for `base_url` (none: forget it).
    pub fn set(&self, base_url: &str, key: Option<&str>) -> CommandResult<()> {
        let mut keys = self.read();
        match key {
            Some(key) => keys.insert(base_url.to_string(), key.to_string()),
            None => keys.remove(base_url),
        };
        self.write(&keys)
    }

    fn read(&self) -> BTreeMap<String, String> {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        serde_json::from_str(&text).unwrap_or_default()
    }

    /// Written whole to a file created readable by the user alone, then moved into place.
    fn write(&self, keys: &BTreeMap<String, String>) -> CommandResult<()> {
        use std::io::Write;
        let failed = |e: std::io::Error| ErrorInfo::internal(format!("keeping the API key: {e}"));
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(failed)?;
        }
        let temp = self.path.with_extension("json.tmp");
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&temp).map_err(failed)?;
        let text = serde_json::to_string(keys).map_err(|e| ErrorInfo::internal(e.to_string()))?;
        file.write_all(text.as_bytes()).and_then(|()| file.sync_all()).map_err(failed)?;
        std::fs::rename(&temp, &self.path).map_err(failed)
    }
}

/// A client for the connection at `base_url`, with its key.
pub fn remote(keys: &Keys, base_url: &str) -> CommandResult<Remote> {
    Remote::new(base_url, keys.get(base_url))
}

fn saved(state: &AppState) -> CommandResult<Vec<Connection>> {
    Ok(with_store(state, |s| s.setting(CONNECTIONS_KEY))?.unwrap_or_default())
}

fn save(state: &AppState, connections: &[Connection]) -> CommandResult<()> {
    with_store(state, |s| s.set_setting(CONNECTIONS_KEY, &connections))
}

/// Remember `check`'s findings for its connection.
fn remember(state: &AppState, check: &ConnectionCheck, has_key: bool) -> CommandResult<()> {
    let mut connections = saved(state)?;
    connections.retain(|c| c.base_url != check.base_url);
    connections.push(Connection {
        base_url: check.base_url.clone(),
        has_key,
        models: check.models.clone(),
        kind: check.kind,
    });
    save(state, &connections)
}

#[tauri::command]
#[specta::specta]
pub fn list_connections(state: State<'_, AppState>) -> CommandResult<Vec<Connection>> {
    saved(&state)
}

/// Check a remote and, when it answers, remember it (and its key); one that does not answer
/// is not kept, and the check says why.
#[tauri::command]
#[specta::specta]
pub async fn add_connection(
    state: State<'_, AppState>,
    base_url: String,
    api_key: Option<String>,
) -> CommandResult<ConnectionCheck> {
    let remote = Remote::new(&base_url, api_key.clone())?;
    let check = blocking(move || Ok(remote.check())).await?;
    if check.error.is_none() {
        let key = api_key.as_deref().map(str::trim).filter(|k| !k.is_empty());
        state.keys.set(&check.base_url, key)?;
        remember(&state, &check, key.is_some())?;
    }
    Ok(check)
}

/// Check a remembered connection again: its models, whether it answers, its round trip.
#[tauri::command]
#[specta::specta]
pub async fn check_connection(state: State<'_, AppState>, base_url: String) -> CommandResult<ConnectionCheck> {
    let remote = remote(&state.keys, &base_url)?;
    let check = blocking(move || Ok(remote.check())).await?;
    if check.error.is_none() {
        remember(&state, &check, state.keys.get(&check.base_url).is_some())?;
    }
    Ok(check)
}

#[tauri::command]
#[specta::specta]
pub fn remove_connection(state: State<'_, AppState>, base_url: String) -> CommandResult<()> {
    let mut connections = saved(&state)?;
    connections.retain(|c| c.base_url != base_url);
    save(&state, &connections)?;
    state.keys.set(&base_url, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_live_in_a_file_only_the_user_can_read_and_can_be_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let keys = Keys::new(dir.path());
        keys.set("http://a/v1", Some("sk-a")).unwrap();
        keys.set("http://b/v1", Some("sk-b")).unwrap();
        assert_eq!(keys.get("http://a/v1").as_deref(), Some("sk-a"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("remote-keys.json")).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        keys.set("http://a/v1", None).unwrap();
        assert_eq!(keys.get("http://a/v1"), None);
        assert_eq!(keys.get("http://b/v1").as_deref(), Some("sk-b"));
    }
}
