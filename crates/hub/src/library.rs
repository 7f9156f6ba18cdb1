//! The local library: every .gguf in the Hugging Face cache (ours or another tool's) and in
//! a plain models folder.

use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocalModel {
    /// `org/name` for a cached Hub file, None for a file in a plain folder.
    pub repo: Option<String>,
    pub file: String,
    pub path: PathBuf,
    pub bytes: u64,
}

/// The .gguf files under `hub_cache` (snapshots of `models--org--name`) and in `folders`.
pub fn local_models(hub_cache: &Path, folders: &[PathBuf]) -> Vec<LocalModel> {
    let mut found = Vec::new();
    for entry in read_dir(hub_cache) {
        let name = entry.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let Some(repo) = name.strip_prefix("models--") else { continue };
        let repo = repo.replacen("--", "/", 1);
        for snapshot in read_dir(&entry.join("snapshots")) {
            for path in gguf_files(&snapshot) {
                let file = path.strip_prefix(&snapshot).unwrap_or(&path).to_string_lossy().into_owned();
                found.push(model(Some(repo.clone()), file, path));
            }
        }
    }
    for folder in folders {
        for path in gguf_files(folder) {
            let file = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            found.push(model(None, file, path));
        }
    }
    found.sort_by(|a, b| (&a.repo, &a.file).cmp(&(&b.repo, &b.file)));
    found.dedup_by(|a, b| a.path == b.path);
    found
}

fn model(repo: Option<String>, file: String, path: PathBuf) -> LocalModel {
    // A snapshot entry is a link to its blob: the size is the blob's.
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    LocalModel { repo, file, path, bytes }
}

fn read_dir(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.filter_map(|e| e.ok().map(|e| e.path())).collect()
}

/// .gguf files under `dir`, one level of subfolders deep, skipping broken links.
fn gguf_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for path in read_dir(dir) {
        if path.is_dir() {
            files.extend(read_dir(&path).into_iter().filter(|p| is_gguf(p)));
        } else if is_gguf(&path) {
            files.push(path);
        }
    }
    files
}

fn is_gguf(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gguf") && path.exists()
}
