//! Remote engines the user connected to (Library > Remote engines): their base URLs and the
//! models they had at the last check live in the settings table; their API keys do not. A key
//! is kept in a file of its own that only the user can read (`remote-keys.json` beside the
//! history, mode 0600), so that neither a copy of the history nor a log carries it, and it is
//! sent only to the host it was given for (specula-remote follows no redirect).

use crate::access::{blocking, with_store};
use crate::error::{CommandResult, ErrorCode, ErrorInfo};
use crate::notices::Notices;
use crate::private_file;
use crate::AppState;
use specula_engine::protocol::{Connection, ConnectionCheck};
use specula_remote::{Limits, Remote};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tauri::State;

pub const CONNECTIONS_KEY: &str = "connections";

/// The API keys, by base URL.
pub struct Keys {
    path: PathBuf,
    notices: Arc<Notices>,
}

type KeyMap = BTreeMap<String, String>;

impl Keys {
    pub fn new(data_dir: &Path, notices: Arc<Notices>) -> Self {
        Self { path: data_dir.join("remote-keys.json"), notices }
    }

    pub fn get(&self, base_url: &str) -> Option<String> {
        let _lock = private_file::lock(&self.path).map_err(|e| tracing::warn!("locking the API keys: {e}")).ok();
        self.read().remove(base_url)
    }

    /// Keep `key` for `base_url` (none: forget it). Read, changed and written under the file's
    /// lock, so that two saves at once cannot lose one another's key.
    pub fn set(&self, base_url: &str, key: Option<&str>) -> CommandResult<()> {
        let failed = |e: std::io::Error| ErrorInfo::internal(format!("keeping the API key: {e}"));
        let _lock = private_file::lock(&self.path).map_err(failed)?;
        let mut keys = self.read();
        match key {
            Some(key) => keys.insert(base_url.to_string(), key.to_string()),
            None => keys.remove(base_url),
        };
        let text = serde_json::to_string(&keys).map_err(|e| ErrorInfo::internal(e.to_string()))?;
        private_file::write(&self.path, text.as_bytes()).map_err(failed)
    }

    /// The keys on file. A file that does not read as keys is moved aside, kept, and the user
    /// told where (until they dismiss it): it is never written over, since it holds every
    /// other connection's key.
    fn read(&self) -> KeyMap {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return KeyMap::new(),
            Err(e) => {
                tracing::warn!("reading the API keys: {e}");
                return KeyMap::new();
            }
        };
        match serde_json::from_str(&text) {
            Ok(keys) => keys,
            Err(e) => {
                let message = match private_file::set_aside(&self.path) {
                    Ok(moved) => format!(
                        "The remote engines' API keys could not be read ({e}). The file was moved to {} and kept; add the keys again in Library > Remote engines.",
                        moved.display()
                    ),
                    Err(moved) => format!("The remote engines' API keys could not be read ({e}), nor moved aside ({moved})."),
                };
                tracing::error!("{message}");
                self.notices.keep(ErrorInfo::new(ErrorCode::SettingsReset, message));
                KeyMap::new()
            }
        }
    }
}

/// A client for the connection at `base_url`, with its key and its wait for a first token.
pub fn remote(state: &AppState, base_url: &str) -> CommandResult<Remote> {
    let first_token = saved(state)?.into_iter().find(|c| c.base_url == base_url).and_then(|c| c.first_token_secs);
    Remote::with_limits(base_url, state.keys.get(base_url), limits(first_token))
}

/// The remote's bounds, with the user's wait for a first token where they set one.
fn limits(first_token_secs: Option<u32>) -> Limits {
    match first_token_secs {
        Some(secs) => Limits::default().with_first_token(Duration::from_secs(secs.into())),
        None => Limits::default(),
    }
}

fn saved(state: &AppState) -> CommandResult<Vec<Connection>> {
    Ok(with_store(state, |s| s.setting(CONNECTIONS_KEY))?.unwrap_or_default())
}

fn save(state: &AppState, connections: &[Connection]) -> CommandResult<()> {
    with_store(state, |s| s.set_setting(CONNECTIONS_KEY, &connections))
}

/// Remember `check`'s findings for its connection (its wait for a first token: `Some` sets
/// it, `None` keeps what was set).
fn remember(
    state: &AppState,
    check: &ConnectionCheck,
    has_key: bool,
    first_token_secs: Option<u32>,
) -> CommandResult<()> {
    let mut connections = saved(state)?;
    let earlier = connections.iter().find(|c| c.base_url == check.base_url).and_then(|c| c.first_token_secs);
    connections.retain(|c| c.base_url != check.base_url);
    connections.push(Connection {
        base_url: check.base_url.clone(),
        has_key,
        models: check.models.clone(),
        kind: check.kind,
        first_token_secs: first_token_secs.or(earlier),
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
    first_token_secs: Option<u32>,
) -> CommandResult<ConnectionCheck> {
    if first_token_secs == Some(0) {
        return Err(ErrorInfo::invalid_setting("the wait for a first token is at least 1 second"));
    }
    let remote = Remote::with_limits(&base_url, api_key.clone(), limits(first_token_secs))?;
    let check = blocking(move || Ok(remote.check())).await?;
    if check.error.is_none() {
        let key = api_key.as_deref().map(str::trim).filter(|k| !k.is_empty());
        state.keys.set(&check.base_url, key)?;
        remember(&state, &check, key.is_some(), first_token_secs)?;
    }
    Ok(check)
}

/// Check a remembered connection again: its models, whether it answers, its round trip.
#[tauri::command]
#[specta::specta]
pub async fn check_connection(state: State<'_, AppState>, base_url: String) -> CommandResult<ConnectionCheck> {
    let remote = remote(&state, &base_url)?;
    let check = blocking(move || Ok(remote.check())).await?;
    if check.error.is_none() {
        remember(&state, &check, state.keys.get(&check.base_url).is_some(), None)?;
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
        let keys = Keys::new(dir.path(), Arc::new(Notices::new(dir.path())));
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

    #[test]
    fn saves_at_once_lose_no_key() {
        let dir = tempfile::tempdir().unwrap();
        let notices = Arc::new(Notices::new(dir.path()));
        std::thread::scope(|scope| {
            for t in 0..4 {
                let keys = Keys::new(dir.path(), notices.clone());
                scope.spawn(move || {
                    for i in 0..25 {
                        keys.set(&format!("http://host-{t}-{i}/v1"), Some("sk")).unwrap();
                    }
                });
            }
        });
        let keys = Keys::new(dir.path(), notices);
        assert_eq!(keys.read().len(), 100, "every save kept");
    }

    #[test]
    fn a_key_file_that_does_not_read_is_kept_aside_with_a_notice_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let notices = Arc::new(Notices::new(dir.path()));
        let keys = Keys::new(dir.path(), notices.clone());
        std::fs::write(dir.path().join("remote-keys.json"), "{\"http://a/v1\": \"sk-a\", oops").unwrap();
        keys.set("http://b/v1", Some("sk-b")).unwrap();
        assert_eq!(keys.get("http://b/v1").as_deref(), Some("sk-b"));
        let aside: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains("remote-keys.json.unreadable-"))
            .collect();
        assert_eq!(aside.len(), 1);
        assert!(std::fs::read_to_string(&aside[0]).unwrap().contains("sk-a"), "the old keys are kept");
        let said = notices.all();
        assert_eq!(said.len(), 1);
        assert!(said[0].message.contains("unreadable-"), "{}", said[0].message);
    }

    #[test]
    fn a_connections_wait_for_a_first_token_is_not_cut_short_by_the_silence_allowed() {
        let set = limits(Some(1200));
        assert_eq!(set.first_token, Duration::from_secs(1200));
        assert!(set.idle >= set.first_token && set.total >= set.first_token, "{set:?}");
        assert_eq!(limits(None).first_token, Limits::default().first_token);
    }
}
