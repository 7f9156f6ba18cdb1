//! Paths that come from the webview are hostile: a compromised or tricked page must not make
//! the app open `~/.ssh/id_rsa` as a "model" and report its size and first bytes. Model paths
//! are accepted only as `.gguf` files inside the model folders (Specula's own and the
//! Hugging Face cache), without `..`.

use crate::error::ErrorDto;
use std::path::{Component, Path, PathBuf};

/// The folders models may be read from.
pub fn model_roots() -> Vec<PathBuf> {
    vec![crate::settings::models_dir(), specula_hub::Hub::from_env().cache_dir().to_path_buf()]
}

/// `path` if it names a `.gguf` file inside one of `roots`; the error says where models go.
pub fn confine(path: &str, roots: &[PathBuf]) -> Result<PathBuf, ErrorDto> {
    let candidate = Path::new(path);
    let refuse = |why: &str| {
        let places: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        ErrorDto::new("path_not_allowed", format!("{path}: {why}; models are read from {}", places.join(" and ")))
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

/// [`confine`] against the model folders.
pub fn model_path(path: &str) -> Result<PathBuf, ErrorDto> {
    confine(path, &model_roots())
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
}
