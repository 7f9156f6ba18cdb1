//! What the desktop app's shell and its web UI say to each other: settings, the engine's
//! status, a reply's events, the model library. The browser UI (`specula serve --ui`) speaks
//! the same shapes through its own transport.

use crate::error::{ErrorCode, ErrorInfo};
use crate::limits::DEFAULT_MAX_TOKENS;
use crate::options::{DrafterKind, KSetting, KvFormat, Mode, Overflow, SamplingParams};
use crate::remote::RemoteTarget;
use serde::{Deserialize, Serialize};
use specta::Type;
use std::path::PathBuf;

/// The target a first run chats with, and its draft: the files `scripts/fetch-models.sh` gets.
pub const DEFAULT_TARGET_FILE: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
pub const DEFAULT_DRAFT_FILE: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

/// Where models are looked for: `SPECULA_MODELS_DIR`, else ~/.cache/specula/models, which the
/// set-up scripts fill. The one lookup the CLI and the app share.
pub fn models_dir() -> PathBuf {
    match std::env::var_os("SPECULA_MODELS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default().join(".cache/specula/models"),
    }
}

/// The user's settings, as the UI edits them and the history database keeps them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct AppSettings {
    /// Path of the target GGUF (the app) or the served model's id (a browser).
    pub target: String,
    /// The draft model's path; kept when another drafter is chosen, to switch back.
    pub draft: String,
    pub drafter: DrafterKind,
    /// 1 to 16, or "auto".
    pub k: KSetting,
    pub mode: Mode,
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: usize,
    /// A pinned seed; `None` draws a fresh one for each reply, so Regenerate gives a new one.
    #[serde(default)]
    pub seed: Option<u64>,
    pub max_tokens: usize,
    /// KV cache positions; `None`: the model's trained context, capped by the memory free.
    /// (Named anew: settings saved by an older app, whose `context` was 4096 whether chosen or
    /// not, read as automatic.)
    #[serde(default)]
    pub context_tokens: Option<usize>,
    /// What a chat that outgrows the context does (truncate-middle: the system prompt and the
    /// first exchange stay, middle turns leave the model's view, marked in the chat).
    #[serde(default = "app_overflow")]
    pub overflow: Overflow,
    /// How the KV cache stores keys and values.
    #[serde(default = "app_kv_format")]
    pub kv_format: KvFormat,
    pub device: String,
    /// MiB of earlier chats' caches kept in memory, so that going back to a chat does not read
    /// it again; `None`: automatic (a quarter of the free memory, at most 8 GiB).
    #[serde(default)]
    pub cache_mb: Option<u32>,
    /// A remote engine's model to chat with instead of `target` (its draft, if any, is the
    /// remote's: `draft`, `drafter` and `k` are kept for when the user switches back).
    #[serde(default)]
    pub remote: Option<RemoteTarget>,
}

impl Default for AppSettings {
    fn default() -> Self {
        let dir = models_dir();
        let sampling = SamplingParams::default();
        Self {
            target: dir.join(DEFAULT_TARGET_FILE).to_string_lossy().into_owned(),
            draft: dir.join(DEFAULT_DRAFT_FILE).to_string_lossy().into_owned(),
            // The draft model with free copies beside it: on every set measured it drafts at
            // least as well as the model alone, and far better where replies repeat earlier
            // text (BENCHMARKS.md, the drafters' sections).
            drafter: DrafterKind::Auto,
            k: KSetting::default(),
            mode: sampling.mode,
            temperature: sampling.temperature,
            top_p: sampling.top_p,
            top_k: sampling.top_k,
            seed: None,
            max_tokens: DEFAULT_MAX_TOKENS,
            context_tokens: None,
            overflow: app_overflow(),
            kv_format: app_kv_format(),
            device: "auto".into(),
            cache_mb: None,
            remote: None,
        }
    }
}

fn app_overflow() -> Overflow {
    Overflow::TruncateMiddle
}

fn app_kv_format() -> KvFormat {
    crate::options::DEFAULT_KV_FORMAT
}

impl AppSettings {
    /// How a reply was made, stored with it: "draft model · k auto · greedy", or with the seed
    /// when it sampled ("· sample · seed 7"). The browser UI writes the same label
    /// (ui/src/api/label.ts, checked against [`label_cases`]).
    pub fn label(&self) -> String {
        let mut mode = self.mode.as_str().to_string();
        if let (false, Some(seed)) = (self.mode == Mode::Greedy, self.seed) {
            mode = format!("{mode} · seed {seed}");
        }
        if let Some(remote) = &self.remote {
            return format!("remote {} @ {} · {mode}", remote.model_name(), remote.host());
        }
        let k = self.k;
        match self.drafter {
            DrafterKind::None => format!("plain · {mode}"),
            DrafterKind::Lookup => format!("prompt lookup · k {k} · {mode}"),
            DrafterKind::Model => format!("draft model · k {k} · {mode}"),
            DrafterKind::Auto => format!("draft model + copies · k {k} · {mode}"),
        }
    }
}

/// Settings and the label each gets, for the UI's own label to be tested against.
pub fn label_cases() -> Vec<(AppSettings, String)> {
    let base = AppSettings {
        target: "t.gguf".into(),
        draft: "d.gguf".into(),
        drafter: DrafterKind::Model,
        ..Default::default()
    };
    let cases = [
        AppSettings { mode: Mode::Greedy, seed: Some(3), ..base.clone() },
        AppSettings { mode: Mode::Sample, seed: Some(7), k: KSetting::Fixed(4), ..base.clone() },
        AppSettings { mode: Mode::Reproducible, seed: None, ..base.clone() },
        AppSettings { drafter: DrafterKind::Lookup, mode: Mode::Reproducible, seed: Some(42), ..base.clone() },
        AppSettings { drafter: DrafterKind::Auto, mode: Mode::Greedy, ..base.clone() },
        AppSettings { drafter: DrafterKind::None, mode: Mode::Sample, seed: Some(1), ..base.clone() },
        AppSettings {
            remote: Some(RemoteTarget {
                base_url: "http://gpu-box:8080/v1".into(),
                model: "/models/qwen-32b.gguf".into(),
            }),
            mode: Mode::Greedy,
            ..base
        },
    ];
    cases.into_iter().map(|s| (s.clone(), s.label())).collect()
}

/// The engine service's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "lowercase")]
pub enum EngineState {
    /// Nothing loaded, nothing tried.
    Empty,
    Loading,
    /// A target is loaded and replies are served.
    Ready,
    /// No target could be loaded: see the status's `error`.
    Failed,
}

/// The status line's facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct EngineStatus {
    pub state: EngineState,
    /// Paths of the loaded models (the app) or their names (a server).
    pub target: Option<String>,
    pub draft: Option<String>,
    /// The drafter replies get when they name none (a server; the app's settings say it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drafter: Option<DrafterKind>,
    pub device: String,
    /// The target's context as loaded, and how its cache stores keys and values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextInfo>,
    /// True while models load; replies wait for them.
    pub loading: bool,
    /// Why the last load failed; the models loaded before (if any) stay in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// The last reply that failed inside the engine (which went on serving).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<ErrorInfo>,
}

/// A loaded target's context: the positions it holds (the trained context capped by memory,
/// unless set), the positions it was trained for, and its KV format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct ContextInfo {
    pub tokens: usize,
    pub trained: usize,
    pub kv_format: KvFormat,
}

/// A GGUF file the settings can offer, with whether it can run and draft for the target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct ModelEntry {
    pub path: PathBuf,
    pub name: String,
    pub architecture: String,
    pub parameters: u64,
    pub quantization: String,
    pub file_bytes: u64,
    /// False, with a reason, for a file the engine cannot run (foreign, truncated, unsupported).
    pub runnable: bool,
    /// None for the target itself; false with a reason when it cannot draft for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compatible: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "lowercase")]
pub enum ModelRole {
    Target,
    Draft,
}

/// A model of the catalogue of known-good pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct CatalogueEntry {
    pub family: String,
    pub role: ModelRole,
    pub name: String,
    pub repo: String,
    pub file: String,
    pub file_mb: u32,
    /// Weights plus the KV cache at the default context.
    pub memory_mb: u64,
    /// Where it is in the Hugging Face cache, when it is there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
}

/// The pair a first run offers to download, with why it suits this machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct RecommendedPair {
    pub target: CatalogueEntry,
    pub draft: CatalogueEntry,
    /// Why it suits this machine: its cores and free memory.
    pub reason: String,
}

/// A download's progress and end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PullEvent {
    Progress { done: u64, total: u64, bytes_per_second: f64, eta_seconds: Option<f64> },
    Done { path: PathBuf },
    Error { code: ErrorCode, message: String },
}

/// Whether a draft can pair with a target, and the doctor's report, as `specula doctor` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct Diagnosis {
    pub compatible: bool,
    pub text: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sampled_label_names_its_seed_and_a_greedy_one_does_not() {
        let labels: Vec<String> = label_cases().into_iter().map(|(_, label)| label).collect();
        assert_eq!(
            labels,
            [
                "draft model · k auto · greedy",
                "draft model · k 4 · sample · seed 7",
                "draft model · k auto · reproducible",
                "prompt lookup · k auto · reproducible · seed 42",
                "draft model + copies · k auto · greedy",
                "plain · sample · seed 1",
                "remote qwen-32b @ gpu-box:8080 · greedy",
            ]
        );
    }
}

/// A file attached to a message in the app: what its chip says, and the block appended to the
/// message (the file under its name, in a fence it cannot close).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct AttachedFile {
    pub name: String,
    /// What it was read as: "text", "csv", "PDF, 40 pages".
    pub what: String,
    /// Its size as people read it.
    pub size: String,
    /// Its tokens by the target model's tokenizer; none for a remote target, whose tokenizer
    /// is not here.
    pub tokens: Option<u32>,
    /// The context the loaded target holds; none when none is loaded.
    pub context: Option<u32>,
    pub block: String,
}
