//! What the engine makes of the user's settings (`AppSettings`, a type of the contract: the UI
//! edits them and the history database keeps them).

use crate::error::ErrorInfo;
use specula_engine::service::{LoadSpec, Prompt, Request};
use specula_engine::{GenerateOptions, Message, Mode, SamplingParams};
use std::hash::{BuildHasher, Hasher};

pub use specula_engine::protocol::app::{models_dir, AppSettings};

/// What the engine makes of the user's settings: the models to load and the options of a reply.
pub trait EngineSettings {
    /// The models these settings need: the draft only when it drafts. Both paths must lie in
    /// the model folders (they come from the webview).
    fn load_spec(&self) -> Result<LoadSpec, ErrorInfo>;
    /// Refuse settings whose model paths lie outside the model folders, before they are stored.
    fn check_paths(&self) -> Result<(), ErrorInfo>;
    fn options(&self) -> specula_engine::Result<GenerateOptions>;
    /// The settings for one reply: a seed drawn now unless one is pinned, so that the label
    /// stored with the reply names the seed that made it.
    fn for_one_reply(&self) -> Self;
    /// What one reply to `messages` asks of the engine, made and checked once, here.
    fn reply_request(&self, messages: Vec<Message>) -> Result<ReplyRequest, ErrorInfo>;
}

/// One reply's request: the engine's, to run on `models` (none for a remote target, whose
/// engine is its own); a remote reply sends the same messages and options.
#[derive(Debug)]
pub struct ReplyRequest {
    pub models: Option<LoadSpec>,
    pub request: Request,
}

impl EngineSettings for AppSettings {
    fn load_spec(&self) -> Result<LoadSpec, ErrorInfo> {
        if self.target.is_empty() {
            return Err(ErrorInfo::invalid_setting("Choose a target model"));
        }
        // Which draft the drafter needs is the engine's to say (auto uses one when chosen).
        let chosen = (!self.draft.is_empty()).then_some(self.draft.as_str());
        let draft = specula_engine::draft_to_load(self.drafter, chosen)?.map(crate::paths::model_path).transpose()?;
        let target = crate::paths::model_path(&self.target)?;
        let draft_vocab = specula_engine::DEFAULT_DRAFT_VOCAB;
        let prompt_cache = self.cache_mb.map(|mib| (mib as usize) << 20);
        let context = self.context_tokens.unwrap_or(specula_engine::AUTO_CONTEXT);
        let (kv_format, device) = (self.kv_format, self.device.clone());
        Ok(LoadSpec { target, draft, draft_vocab, context, kv_format, device, prompt_cache })
    }

    fn check_paths(&self) -> Result<(), ErrorInfo> {
        for path in [&self.target, &self.draft].into_iter().filter(|p| !p.is_empty()) {
            crate::paths::model_path(path)?;
        }
        Ok(())
    }

    fn options(&self) -> specula_engine::Result<GenerateOptions> {
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

    fn reply_request(&self, messages: Vec<Message>) -> Result<ReplyRequest, ErrorInfo> {
        let models = if self.remote.is_some() { None } else { Some(self.load_spec()?) };
        let mut request = Request::new(Prompt::Chat(messages), self.options()?);
        request.drafter = Some(self.drafter);
        request.k = Some(self.k);
        request.overflow = self.overflow;
        request.models = models.clone();
        Ok(ReplyRequest { models, request })
    }

    fn for_one_reply(&self) -> Self {
        let seed = self.seed.unwrap_or_else(|| std::collections::hash_map::RandomState::new().build_hasher().finish());
        Self { seed: Some(seed), ..self.clone() }
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
    use specula_engine::speculative::KSetting;
    use specula_engine::DrafterKind;

    #[test]
    fn k_reads_numbers_and_auto_and_refuses_the_rest() {
        let with_k = |k: &str| {
            let json = format!(
                r#"{{"target":"t","draft":"","drafter":"none","k":{k},"mode":"greedy","temperature":0,
                "top_p":1,"top_k":0,"seed":1,"max_tokens":8,"context_tokens":256,"device":"cpu"}}"#
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
    fn the_chat_cache_setting_reaches_the_engine_in_bytes_and_none_is_automatic() {
        let s = AppSettings { drafter: DrafterKind::Lookup, cache_mb: Some(512), ..Default::default() };
        assert_eq!(s.load_spec().unwrap().prompt_cache, Some(512 << 20));
        let s = AppSettings { drafter: DrafterKind::Lookup, ..Default::default() };
        assert_eq!(s.load_spec().unwrap().prompt_cache, None);
    }

    #[test]
    fn a_reply_request_is_made_once_with_its_models_drafter_and_k() {
        use specula_engine::protocol::RemoteTarget;
        let s = AppSettings { drafter: DrafterKind::Lookup, k: KSetting::Fixed(3), ..Default::default() };
        let asked = s.reply_request(vec![Message::user("hi")]).unwrap();
        assert_eq!(asked.models.as_ref().map(|m| m.draft.clone()), Some(None), "lookup loads no draft");
        assert_eq!(asked.request.models, asked.models, "runs only on the models it loads");
        assert_eq!((asked.request.drafter, asked.request.k), (Some(DrafterKind::Lookup), Some(KSetting::Fixed(3))));
        let remote = RemoteTarget { base_url: "http://h:1/v1".into(), model: "m".into() };
        let s = AppSettings { remote: Some(remote), target: String::new(), ..Default::default() };
        assert!(s.reply_request(vec![Message::user("hi")]).unwrap().models.is_none(), "a remote's engine is its own");
        let s = AppSettings { target: String::new(), ..Default::default() };
        assert_eq!(s.reply_request(Vec::new()).unwrap_err().code, "invalid_setting");
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
    fn settings_saved_before_automatic_contexts_read_as_automatic_and_truncate_middle() {
        let older = r#"{"target":"/m/t.gguf","draft":"","drafter":"none","k":"auto","mode":"greedy",
            "temperature":0,"top_p":1,"top_k":0,"seed":null,"max_tokens":512,"context":4096,"device":"auto"}"#;
        let s: AppSettings = serde_json::from_str(older).unwrap();
        assert_eq!((s.context_tokens, s.overflow), (None, specula_engine::Overflow::TruncateMiddle));
        let s = AppSettings { drafter: DrafterKind::Lookup, ..Default::default() };
        assert_eq!(s.load_spec().unwrap().context, specula_engine::AUTO_CONTEXT);
        let s = AppSettings { drafter: DrafterKind::Lookup, context_tokens: Some(2048), ..Default::default() };
        assert_eq!(s.load_spec().unwrap().context, 2048);
        let asked = s.reply_request(vec![Message::user("hi")]).unwrap();
        assert_eq!(asked.request.overflow, specula_engine::Overflow::TruncateMiddle);
    }

    #[test]
    fn the_ui_shape_round_trips() {
        let json = r#"{"target":"/m/t.gguf","draft":"","drafter":"none","k":"auto","mode":"sample",
            "temperature":0.7,"top_p":0.9,"top_k":40,"seed":1,"max_tokens":64,"context_tokens":2048,"device":"cpu"}"#;
        let s: AppSettings = serde_json::from_str(json).unwrap();
        assert_eq!(s.drafter, DrafterKind::None);
        assert_eq!(s.label(), "plain · sample · seed 1");
    }
}
