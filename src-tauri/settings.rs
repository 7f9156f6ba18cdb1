//! The user's settings, as the UI edits them and the history database keeps them.

use crate::error::ErrorDto;
use serde::{Deserialize, Serialize};
use specula_engine::service::LoadSpec;
use specula_engine::speculative::KSetting;
use specula_engine::{DrafterKind, GenerateOptions, Mode, SamplingParams};
use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;

const DEFAULT_TARGET: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
const DEFAULT_DRAFT: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppSettings {
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
    pub context: usize,
    pub device: String,
}

/// Where models are looked for: SPECULA_MODELS_DIR, else the cache scripts/fetch-models.sh fills.
pub fn models_dir() -> PathBuf {
    match std::env::var_os("SPECULA_MODELS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default().join(".cache/specula/models"),
    }
}

impl Default for AppSettings {
    fn default() -> Self {
        let dir = models_dir();
        let sampling = SamplingParams::default();
        Self {
            target: dir.join(DEFAULT_TARGET).to_string_lossy().into_owned(),
            draft: dir.join(DEFAULT_DRAFT).to_string_lossy().into_owned(),
            drafter: DrafterKind::Model,
            k: KSetting::default(),
            mode: sampling.mode,
            temperature: sampling.temperature,
            top_p: sampling.top_p,
            top_k: sampling.top_k,
            seed: None,
            max_tokens: 512,
            context: specula_engine::DEFAULT_CONTEXT,
            device: "auto".into(),
        }
    }
}

impl AppSettings {
    /// The models these settings need: the draft only when it drafts. Both paths must lie in
    /// the model folders (they come from the webview).
    pub fn load_spec(&self) -> Result<LoadSpec, ErrorDto> {
        if self.target.is_empty() {
            return Err(ErrorDto::new("invalid_setting", "Choose a target model"));
        }
        let draft = match self.drafter {
            DrafterKind::Model if self.draft.is_empty() => {
                return Err(ErrorDto::new("invalid_setting", "Choose a draft model, prompt lookup or none"))
            }
            DrafterKind::Model => Some(crate::paths::model_path(&self.draft)?),
            DrafterKind::Lookup | DrafterKind::None => None,
        };
        let target = crate::paths::model_path(&self.target)?;
        let draft_vocab = specula_engine::DEFAULT_DRAFT_VOCAB;
        Ok(LoadSpec { target, draft, draft_vocab, context: self.context, device: self.device.clone() })
    }

    /// Refuse settings whose model paths lie outside the model folders, before they are stored.
    pub fn check_paths(&self) -> Result<(), ErrorDto> {
        for path in [&self.target, &self.draft].into_iter().filter(|p| !p.is_empty()) {
            crate::paths::model_path(path)?;
        }
        Ok(())
    }

    pub fn options(&self) -> specula_engine::Result<GenerateOptions> {
        let greedy = self.mode == Mode::Greedy;
        let sampling = SamplingParams {
            mode: self.mode,
            temperature: if greedy { 0.0 } else { self.temperature },
            top_p: self.top_p,
            top_k: self.top_k,
            seed: self.seed.unwrap_or_default(),
            ..SamplingParams::default()
        };
        sampling.validate()?;
        Ok(GenerateOptions { max_tokens: self.max_tokens.max(1), sampling, stop: Vec::new(), ..Default::default() })
    }

    /// The settings for one reply: a seed drawn now unless one is pinned, so that the label
    /// stored with the reply names the seed that made it.
    pub fn for_one_reply(&self) -> Self {
        let seed = self.seed.unwrap_or_else(|| std::collections::hash_map::RandomState::new().build_hasher().finish());
        Self { seed: Some(seed), ..self.clone() }
    }

    /// How a reply was made, stored with it: "draft model · k auto · greedy", or with the seed
    /// when it sampled ("· sample · seed 7").
    pub fn label(&self) -> String {
        let mut mode =
            serde_json::to_value(self.mode).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        if let (false, Some(seed)) = (self.mode == Mode::Greedy, self.seed) {
            mode = format!("{mode} · seed {seed}");
        }
        let k = self.k;
        match self.drafter {
            DrafterKind::None => format!("plain · {mode}"),
            DrafterKind::Lookup => format!("prompt lookup · k {k} · {mode}"),
            DrafterKind::Model => format!("draft model · k {k} · {mode}"),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_reply_draws_its_own_seed_unless_one_is_pinned() {
        let settings = super::AppSettings { mode: super::Mode::Sample, ..Default::default() };
        let (a, b) = (settings.for_one_reply(), settings.for_one_reply());
        assert_ne!(a.seed, b.seed);
        assert_eq!(a.options().unwrap().sampling.seed, a.seed.unwrap());
        assert!(a.label().ends_with(&format!("sample · seed {}", a.seed.unwrap())), "{}", a.label());
        let pinned = super::AppSettings { seed: Some(7), ..settings };
        assert_eq!(pinned.for_one_reply().seed, Some(7));
    }

    use super::*;

    #[test]
    fn k_reads_numbers_and_auto_and_refuses_the_rest() {
        let with_k = |k: &str| {
            let json = format!(
                r#"{{"target":"t","draft":"","drafter":"none","k":{k},"mode":"greedy","temperature":0,
                "top_p":1,"top_k":0,"seed":1,"max_tokens":8,"context":256,"device":"cpu"}}"#
            );
            serde_json::from_str::<AppSettings>(&json).map(|s| s.k)
        };
        assert_eq!(with_k("4").unwrap(), KSetting::Fixed(4));
        assert_eq!(with_k("\"auto\"").unwrap(), KSetting::default());
        assert!(with_k("40").is_err());
        assert_eq!(serde_json::to_value(AppSettings::default()).unwrap()["k"], "auto");
    }

    #[test]
    fn the_draft_is_loaded_only_when_it_drafts() {
        let s = AppSettings { drafter: DrafterKind::Lookup, ..Default::default() };
        assert_eq!(s.load_spec().unwrap().draft, None);
        let s = AppSettings { drafter: DrafterKind::Model, draft: String::new(), ..Default::default() };
        assert_eq!(s.load_spec().unwrap_err().code, "invalid_setting");
    }

    #[test]
    fn greedy_mode_means_temperature_zero_and_the_label_says_how() {
        let s = AppSettings {
            mode: Mode::Greedy,
            drafter: DrafterKind::Lookup,
            k: KSetting::Fixed(2),
            ..Default::default()
        };
        assert_eq!(s.options().unwrap().sampling.temperature, 0.0);
        assert_eq!(s.label(), "prompt lookup · k 2 · greedy");
    }

    #[test]
    fn the_ui_shape_round_trips() {
        let json = r#"{"target":"/m/t.gguf","draft":"","drafter":"none","k":"auto","mode":"sample",
            "temperature":0.7,"top_p":0.9,"top_k":40,"seed":1,"max_tokens":64,"context":2048,"device":"cpu"}"#;
        let s: AppSettings = serde_json::from_str(json).unwrap();
        assert_eq!(s.drafter, DrafterKind::None);
        assert_eq!(s.label(), "plain · sample · seed 1");
    }
}
