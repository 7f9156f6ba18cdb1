//! Paths that come from the webview are hostile: a compromised or tricked page must not make
//! the app open `~/.ssh/id_rsa` as a "model" and report its size and first bytes. Model paths
//! are accepted only as `.gguf` files inside the model folders (Specula's own and the
//! Hugging Face cache), without `..`, or as one of the files the user added by path, each of
//! which was checked to be a readable GGUF model when it was added.

use crate::error::{ErrorCode, ErrorInfo};
use std::path::{Component, Path, PathBuf};
use std::sync::RwLock;

/// The model files added by path, as the history database remembers them.
static ADDED: RwLock<Vec<PathBuf>> = RwLock::new(Vec::new());

/// The files added by path, loaded from the store at start.
pub fn set_added(paths: Vec<PathBuf>) {
    *ADDED.write().unwrap_or_else(|e| e.into_inner()) = paths;
}

pub fn added() -> Vec<PathBuf> {
    ADDED.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Check a file the user names as a model: a plain absolute `.gguf` path to a regular file
/// whose header reads as a model (the header only; nothing of a non-GGUF file is reported).
/// Returns the list of added files with it, to be remembered.
pub fn add(path: &str) -> Result<Vec<PathBuf>, ErrorInfo> {
    let candidate = Path::new(path);
    let refuse = |why: &str| ErrorInfo::new(ErrorCode::PathNotAllowed, format!("{path}: {why}"));
    if !candidate.is_absolute() || candidate.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(refuse("not a plain absolute path"));
    }
    if !candidate.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        return Err(refuse("not a .gguf file"));
    }
    if !std::fs::metadata(candidate).is_ok_and(|m| m.is_file()) {
        return Err(refuse("no such file"));
    }
    specula_engine::inspect(candidate)?;
    let mut paths = added();
    if !paths.iter().any(|p| p == candidate) {
        paths.push(candidate.to_path_buf());
    }
    Ok(paths)
}

/// The folders models may be read from.
pub fn model_roots() -> Vec<PathBuf> {
    vec![specula_engine::protocol::app::models_dir(), specula_hub::Hub::from_env().cache_dir().to_path_buf()]
}

/// `path` if it names a `.gguf` file inside one of `roots`; the error says where models go.
pub fn confine(path: &str, roots: &[PathBuf]) -> Result<PathBuf, ErrorInfo> {
    let candidate = Path::new(path);
    let refuse = |why: &str| {
        let places: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        ErrorInfo::new(
            ErrorCode::PathNotAllowed,
            format!("{path}: {why}; models are read from {}", places.join(" and ")),
        )
    };
    if !candidate.is_absolute() || candidate.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(refuse("not a plain absolute path"));
    }
    if !candidate.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        return Err(refuse("not a .gguf file"));
    }
    match roots.iter().any(|root| candidate.starts_with(root)) {
        true => Ok(candidate.to_path_buf()),
        false => Err(refuse("outside the model folders")),
    }
}

/// [`confine`] against the model folders, or one of the files added by path.
pub fn model_path(path: &str) -> Result<PathBuf, ErrorInfo> {
    match added().into_iter().find(|added| added.as_os_str() == path) {
        Some(added) => Ok(added),
        None => confine(path, &model_roots()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_gguf_files_inside_the_roots_pass() {
        let roots = [PathBuf::from("/home/u/.cache/specula/models"), PathBuf::from("/home/u/.cache/huggingface/hub")];
        assert!(confine("/home/u/.cache/specula/models/q.gguf", &roots).is_ok());
        assert!(confine("/home/u/.cache/huggingface/hub/models--a--b/snapshots/c/m.GGUF", &roots).is_ok());
        for bad in [
            "/home/u/.ssh/id_rsa",
            "/home/u/.cache/specula/models/../../../.ssh/id_rsa.gguf",
            "/home/u/.cache/specula/models/notes.txt",
            "relative/q.gguf",
            "/etc/q.gguf",
            "/home/u/.cache/specula/models-evil/q.gguf",
        ] {
            let err = confine(bad, &roots).unwrap_err();
            assert_eq!(err.code, "path_not_allowed", "{bad}");
        }
    }

    #[test]
    fn a_file_added_by_path_must_be_a_model_and_is_then_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let not_a_model = dir.path().join("notes.gguf");
        std::fs::write(&not_a_model, "just text, not a model\n").unwrap();
        let text = not_a_model.to_str().unwrap();
        assert_eq!(add(text).unwrap_err().code, "not_gguf");
        assert_eq!(add("/etc/passwd").unwrap_err().code, "path_not_allowed");
        assert_eq!(add(&format!("{}/missing.gguf", dir.path().display())).unwrap_err().code, "path_not_allowed");
        assert_eq!(model_path(text).unwrap_err().code, "path_not_allowed");

        let model = dir.path().join("tiny.gguf");
        let tiny = specula_engine::synth::Spec::preset("tiny", 7).unwrap();
        specula_engine::synth::write(&tiny, &specula_engine::synth::tiny_tokenizer(), &model).unwrap();
        let added = add(model.to_str().unwrap()).unwrap();
        assert_eq!(added, vec![model.clone()]);
        set_added(added);
        assert_eq!(model_path(model.to_str().unwrap()).unwrap(), model);
        // Only that file: its neighbours stay outside.
        assert!(model_path(text).is_err());
        set_added(Vec::new());
    }
}
