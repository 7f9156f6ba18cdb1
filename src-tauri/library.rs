//! The model library in the app: the catalogue of known pairs, downloads from Hugging Face Hub
//! streamed as progress events over a channel and cancellable by id, and the compatibility
//! doctor. The work is in specula-hub and the engine; this file only wires it to IPC.

use crate::error::{CommandResult, ErrorCode, ErrorInfo};
use crate::AppState;
use specula_engine::inspect::available_memory;
use specula_engine::protocol::TYPICAL_CONTEXT;
use specula_engine::protocol::{CatalogueEntry, Diagnosis, ModelRole, PullEvent, RecommendedPair};
use specula_hub::catalogue::{recommended, CatalogueModel, Family, CATALOGUE};
use specula_hub::{local_models, Hub};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tauri::ipc::Channel;
use tauri::State;

/// Downloads in flight, by id, with their cancel flags.
#[derive(Default)]
pub struct Pulls {
    next: AtomicU64,
    cancels: Mutex<HashMap<u64, Arc<AtomicBool>>>,
}

fn entry(hub: &Hub, family: &'static Family, role: ModelRole, m: &'static CatalogueModel) -> CatalogueEntry {
    CatalogueEntry {
        family: family.name.into(),
        role,
        name: m.name.into(),
        repo: m.repo.into(),
        file: m.file.into(),
        file_mb: m.file_mb,
        memory_mb: m.expected_memory_mb(TYPICAL_CONTEXT),
        path: hub.cached(m.repo, "main", m.file),
    }
}

#[tauri::command]
#[specta::specta]
pub fn catalogue() -> Vec<CatalogueEntry> {
    let hub = Hub::from_env();
    let mut entries = Vec::new();
    for family in CATALOGUE {
        let roles = family
            .targets
            .iter()
            .map(|m| (ModelRole::Target, m))
            .chain(family.drafts.iter().map(|m| (ModelRole::Draft, m)));
        entries.extend(roles.map(|(role, m)| entry(&hub, family, role, m)));
    }
    entries
}

#[tauri::command]
#[specta::specta]
pub fn recommended_pair() -> Option<RecommendedPair> {
    let available_mb = available_memory().unwrap_or(8 << 30) >> 20;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pick = recommended(available_mb, cores, TYPICAL_CONTEXT)?;
    let hub = Hub::from_env();
    let reason = format!(
        "{cores} CPU cores and {:.1} GB free: {} answers at a usable speed here, and {} drafts for it",
        available_mb as f64 / 1024.0,
        pick.target.name,
        pick.draft.name
    );
    Some(RecommendedPair {
        target: entry(&hub, pick.family, ModelRole::Target, pick.target),
        draft: entry(&hub, pick.family, ModelRole::Draft, pick.draft),
        reason,
    })
}

/// Every .gguf in the Hugging Face cache, for the settings' model lists.
pub fn cached_models() -> Vec<PathBuf> {
    local_models(Hub::from_env().cache_dir(), &[]).into_iter().map(|m| m.path).collect()
}

/// Start downloading `file` of `repo`; progress, the end and any error arrive on `on_event`.
#[tauri::command]
#[specta::specta]
pub fn pull_model(state: State<'_, AppState>, repo: String, file: String, on_event: Channel<PullEvent>) -> u64 {
    let id = state.pulls.next.fetch_add(1, Ordering::Relaxed);
    let cancel = Arc::new(AtomicBool::new(false));
    {
        let mut cancels = state.pulls.cancels.lock().expect("pulls lock");
        if let Err(e) = pull_allowed(&file, cancels.len()) {
            let _ = on_event.send(PullEvent::Error { code: e.code, message: e.message });
            return id;
        }
        cancels.insert(id, cancel.clone());
    }
    let pulls = state.pulls.clone();
    std::thread::spawn(move || {
        let hub = Hub::from_env();
        let mut last_sent = std::time::Instant::now() - std::time::Duration::from_secs(1);
        let mut report = |p: specula_hub::Progress| {
            // A few events a second are enough for a bar; a channel message per chunk is not.
            if last_sent.elapsed().as_millis() >= 100 || p.done == p.total {
                last_sent = std::time::Instant::now();
                let (done, total, bytes_per_second, eta_seconds) = (p.done, p.total, p.bytes_per_second, p.eta_seconds);
                let _ = on_event.send(PullEvent::Progress { done, total, bytes_per_second, eta_seconds });
            }
        };
        let event = match hub.download(&repo, "main", &file, &mut report, &cancel) {
            Ok(path) => PullEvent::Done { path },
            Err(e) => PullEvent::Error { code: e.error_code(), message: e.to_string() },
        };
        pulls.cancels.lock().expect("pulls lock").remove(&id);
        let _ = on_event.send(event);
    });
    id
}

/// Downloads at once: each is hundreds of megabytes or more, and more at once only share the
/// same bandwidth (and the disk space each was promised, crates/hub).
const PULLS_AT_ONCE: usize = 2;

/// Only model files are fetched (the window asks for catalogue entries; anything else asking
/// is refused), and a few at a time.
fn pull_allowed(file: &str, running: usize) -> Result<(), ErrorInfo> {
    if !file.to_ascii_lowercase().ends_with(".gguf") {
        return Err(ErrorInfo::new(
            ErrorCode::PathNotAllowed,
            format!("{file}: only .gguf model files are downloaded"),
        ));
    }
    if running >= PULLS_AT_ONCE {
        let message = format!("{PULLS_AT_ONCE} downloads are running; start this one when one of them ends");
        return Err(ErrorInfo::new(ErrorCode::Busy, message));
    }
    Ok(())
}

#[tauri::command]
#[specta::specta]
pub fn cancel_pull(state: State<'_, AppState>, id: u64) -> bool {
    let cancels = state.pulls.cancels.lock().expect("pulls lock");
    cancels.get(&id).map(|c| c.store(true, Ordering::Relaxed)).is_some()
}

#[tauri::command]
#[specta::specta]
pub async fn diagnose(target: String, draft: String) -> CommandResult<Diagnosis> {
    let (target, draft) = (crate::paths::model_path(&target)?, crate::paths::model_path(&draft)?);
    let work = move || {
        let d = specula_hub::doctor::diagnose(&target, &draft)?;
        Ok::<_, ErrorInfo>(Diagnosis { compatible: d.compatible, text: d.to_string() })
    };
    tauri::async_runtime::spawn_blocking(work).await.map_err(|e| ErrorInfo::internal(e.to_string()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_model_files_and_a_few_at_a_time() {
        assert!(pull_allowed("qwen2.5-0.5b-instruct-q4_k_m.gguf", 0).is_ok());
        assert!(pull_allowed("sub/Model.GGUF", 1).is_ok());
        assert_eq!(pull_allowed("model.safetensors", 0).unwrap_err().code, "path_not_allowed");
        assert_eq!(pull_allowed("../../.bashrc", 0).unwrap_err().code, "path_not_allowed");
        assert_eq!(pull_allowed("model.gguf", PULLS_AT_ONCE).unwrap_err().code, "busy");
    }
}
