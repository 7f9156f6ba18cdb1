//! Remote engines: servers elsewhere that speak the OpenAI API (`llama-server`, vLLM, SGLang,
//! Ollama, LM Studio, another `specula serve`), as the app and the CLI name and check them.
//! A connection's API key never appears here: it is kept apart from the history and settings.

use crate::error::ErrorInfo;
use serde::{Deserialize, Serialize};
use specta::Type;

/// A model of a remote engine chosen as the target: the connection's base URL and the
/// remote's own model id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct RemoteTarget {
    pub base_url: String,
    pub model: String,
}

impl RemoteTarget {
    /// The model as people name it: llama-server lists a model by the path it was loaded
    /// from, which says the file's name and nothing more ("/models/qwen2.5-7b-q4_k_m.gguf"
    /// reads as "qwen2.5-7b-q4_k_m"); other ids are kept whole ("Qwen/Qwen2.5-7B-Instruct").
    pub fn model_name(&self) -> &str {
        let file = self.model.rsplit(['/', '\\']).next().unwrap_or(&self.model);
        match file.strip_suffix(".gguf") {
            Some(stem) if self.model.contains(['/', '\\']) => stem,
            _ => &self.model,
        }
    }

    /// The host (and port) the URL names, for labels: "gpu-box:8080".
    pub fn host(&self) -> &str {
        let rest = self.base_url.split_once("://").map_or(self.base_url.as_str(), |(_, r)| r);
        rest.split('/').next().unwrap_or(rest)
    }
}

/// Which engine a remote is, as far as its answers tell; it decides which statistics can be
/// read from its replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "snake_case")]
pub enum RemoteKind {
    /// Another `specula serve`: tokens with their provenance, and its speculative figures.
    Specula,
    /// llama.cpp's `llama-server`: draft counts in its `timings`.
    LlamaCpp,
    /// Any other OpenAI-compatible server: text and usage only.
    OpenAi,
}

/// A connection as the app remembers it (the key is stored apart, only whether there is one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct Connection {
    /// Normalised: scheme, host, port and path up to `/v1`, no trailing slash.
    pub base_url: String,
    pub has_key: bool,
    /// The remote's models at the last check.
    pub models: Vec<String>,
    pub kind: RemoteKind,
    /// The longest wait for a reply's first token, in seconds (the remote reads the whole
    /// prompt first); none: specula-remote's default (600 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token_secs: Option<u32>,
}

/// What checking a connection found: its models and how long one round trip took, or why
/// it failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct ConnectionCheck {
    pub base_url: String,
    pub models: Vec<String>,
    pub kind: RemoteKind,
    /// Milliseconds for `GET /v1/models`, measured here.
    pub round_trip_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_loaded_from_a_path_is_named_by_its_file() {
        let named =
            |model: &str| RemoteTarget { base_url: "http://h/v1".into(), model: model.into() }.model_name().to_string();
        assert_eq!(named("/root/models/qwen2.5-coder-1.5b-q4_k_m.gguf"), "qwen2.5-coder-1.5b-q4_k_m");
        assert_eq!(named("C:\\models\\m.gguf"), "m");
        assert_eq!(named("Qwen/Qwen2.5-7B-Instruct"), "Qwen/Qwen2.5-7B-Instruct");
        assert_eq!(named("llama3.gguf"), "llama3.gguf");
    }

    #[test]
    fn a_label_names_the_host_without_scheme_or_path() {
        let t = RemoteTarget { base_url: "http://gpu-box:8080/v1".into(), model: "m".into() };
        assert_eq!(t.host(), "gpu-box:8080");
    }
}
