//! The model library in the app: the catalogue of known pairs, downloads from Hugging Face Hub
//! streamed as progress events over a channel and cancellable by id, and the compatibility
//! doctor. The work is in specula-hub and the engine; this file only wires it to IPC.

use crate::error::{CommandResult, ErrorDto};
use crate::AppState;
use serde::Serialize;
use specula_engine::catalogue::{recommended, CatalogueModel, Family, CATALOGUE};
use specula_engine::inspect::available_memory;
use specula_engine::DEFAULT_CONTEXT;
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

#[derive(Serialize)]
pub struct CatalogueEntry {
    family: &'static str,
    role: &'static str,
    name: &'static str,
    repo: &'static str,
    file: &'static str,
    file_mb: u32,
    memory_mb: u64,
    /// The file in the Hugging Face cache, when it is there.
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<PathBuf>,
}

fn entry(hub: &Hub, family: &'static Family, role: &'static str, m: &'static CatalogueModel) -> CatalogueEntry {
    CatalogueEntry {
        family: family.name,
        role,
        name: m.name,
        repo: m.repo,
        file: m.file,
        file_mb: m.file_mb,
        memory_mb: m.expected_memory_mb(DEFAULT_CONTEXT),
        path: hub.cached(m.repo, "main", m.file),
    }
}

#[tauri::command]
pub fn catalogue() -> Vec<CatalogueEntry> {
    let hub = Hub::from_env();
    let mut entries = Vec::new();
    for family in CATALOGUE {
        let roles = family.targets.iter().map(|m| ("target", m)).chain(family.drafts.iter().map(|m| ("draft", m)));
        entries.extend(roles.map(|(role, m)| entry(&hub, family, role, m)));
    }
    entries
}

/// The pair a first run offers to download, with why it suits this machine.
#[derive(Serialize)]
pub struct RecommendedPair {
    target: CatalogueEntry,
    draft: CatalogueEntry,
    reason: String,
}

#[tauri::command]
pub fn recommended_pair() -> Option<RecommendedPair> {
    let available_mb = available_memory().unwrap_or(8 << 30) >> 20;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pick = recommended(available_mb, cores, DEFAULT_CONTEXT)?;
    let hub = Hub::from_env();
    let reason = format!(
        "{cores} CPU cores and {:.1} GB free: {} answers at a usable speed here, and {} drafts for it",
        available_mb as f64 / 1024.0,
        pick.target.name,
        pick.draft.name
    );
    Some(RecommendedPair {
        target: entry(&hub, pick.family, "target", pick.target),
        draft: entry(&hub, pick.family, "draft", pick.draft),
        reason,
    })
}

/// Every .gguf in the Hugging Face cache, for the settings' model lists.
pub fn cached_models() -> Vec<PathBuf> {
    local_models(Hub::from_env().cache_dir(), &[]).into_iter().map(|m| m.path).collect()
}

#[derive(Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PullEvent {
    Progress { done: u64, total: u64, bytes_per_second: f64, eta_seconds: Option<f64> },
    Done { path: PathBuf },
    Error { code: String, message: String },
}

/// Start downloading `file` of `repo`; progress, the end and any error arrive on `on_event`.
#[tauri::command]
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
            Err(e) => PullEvent::Error { code: e.code().into(), message: e.to_string() },
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
fn pull_allowed(file: &str, running: usize) -> Result<(), ErrorDto> {
    if !file.to_ascii_lowercase().ends_with(".gguf") {
        return Err(ErrorDto::new("path_not_allowed", format!("{file}: only .gguf model files are downloaded")));
    }
    if running >= PULLS_AT_ONCE {
        let message = format!("{PULLS_AT_ONCE} downloads are running; start this one when one of them ends");
        return Err(ErrorDto::new("busy", message));
    }
    Ok(())
}

#[tauri::command]
pub fn cancel_pull(state: State<'_, AppState>, id: u64) -> bool {
    let cancels = state.pulls.cancels.lock().expect("pulls lock");
    cancels.get(&id).map(|c| c.store(true, Ordering::Relaxed)).is_some()
}

#[derive(Serialize)]
pub struct DiagnosisDto {
    compatible: bool,
    text: String,
}

#[tauri::command]
pub async fn diagnose(target: String, draft: String) -> CommandResult<DiagnosisDto> {
    let (target, draft) = (crate::paths::model_path(&target)?, crate::paths::model_path(&draft)?);
    let work = move || {
        let d = specula_engine::doctor::diagnose(&target, &draft)?;
        Ok::<_, ErrorDto>(DiagnosisDto { compatible: d.compatible, text: d.to_string() })
    };
    tauri::async_runtime::spawn_blocking(work).await.map_err(|e| ErrorDto::new("internal", e.to_string()))?
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
