//! A target model with an optional draft: what every client (CLI, server, app) holds.

use crate::chat::Message;
use crate::decode::{GenerateOptions, Generation, TokenSink};
use crate::error::{Error, Result};
use crate::speculative::{
    check_pair, generate_speculative, Combined, CostModel, DraftModel, Drafter, History, PromptLookup,
    SpeculativeOptions,
};
use crate::{LoadedModel, ModelInfo};
use candle_core::Device;
use specula_protocol::KvFormat;
use std::path::Path;

pub use specula_protocol::{Decoding, DrafterKind};

/// What a drafter means, decided here alone (the app, the server and the CLI ask):
///
/// | asked  | a draft model loaded      | none loaded                  |
/// |--------|---------------------------|------------------------------|
/// | auto   | the model, copies beside  | copies alone (prompt lookup) |
/// | model  | the model                 | an error: nothing to draft   |
/// | lookup | copies (prompt lookup)    | copies (prompt lookup)       |
/// | none   | plain decoding            | plain decoding               |
pub fn resolve_drafter(asked: DrafterKind, draft_loaded: bool) -> Result<DrafterKind> {
    match (asked, draft_loaded) {
        (DrafterKind::Auto, false) => Ok(DrafterKind::Lookup),
        (DrafterKind::Model, false) => {
            Err(Error::InvalidSetting("no draft model is loaded: choose prompt lookup or none".into()))
        }
        (asked, _) => Ok(asked),
    }
}

/// The draft model a reply with `drafter` needs loaded, of the one `chosen` (if any): auto
/// uses it when there is one, model must have one, lookup and none load none.
pub fn draft_to_load<P>(drafter: DrafterKind, chosen: Option<P>) -> Result<Option<P>> {
    match (drafter, chosen) {
        (DrafterKind::Model, None) => Err(Error::InvalidSetting("choose a draft model, prompt lookup or none".into())),
        (DrafterKind::Model | DrafterKind::Auto, chosen) => Ok(chosen),
        (DrafterKind::Lookup | DrafterKind::None, _) => Ok(None),
    }
}

/// The text token frequencies are counted in: the default target's own replies to prompts
/// of code and prose (`scripts/draft-corpus.sh` writes it; none are bench prompts).
const DRAFT_CORPUS: &str = include_str!("../data/draft-corpus.txt");

/// The `n` tokens a pruned draft may propose, and every special token: the most frequent in
/// [`DRAFT_CORPUS`], then, among tokens it never shows, the lowest ids (a BPE vocabulary
/// numbers tokens in the order their merges were learnt, most frequent first). Sorted.
pub fn pruned_vocab(tokenizer: &crate::Tokenizer, n: usize) -> Vec<u32> {
    let vocab = tokenizer.vocab().len();
    let mut counts = vec![0u32; vocab];
    for id in tokenizer.encode_literal(DRAFT_CORPUS).unwrap_or_default() {
        if let Some(c) = counts.get_mut(id as usize) {
            *c += 1;
        }
    }
    let mut ranked: Vec<u32> = (0..vocab as u32).collect();
    ranked.sort_by_key(|&id| (std::cmp::Reverse(counts[id as usize]), id));
    let mut ids: Vec<u32> = ranked.into_iter().take(n).collect();
    ids.extend((0..vocab as u32).filter(|&id| tokenizer.is_special(id) || tokenizer.is_stop(id)));
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The loaded models and what they have measured. It holds no per-reply settings: those
/// come with each call as a [`Decoding`].
pub struct Session {
    pub target: LoadedModel,
    draft: Option<(DraftModel, ModelInfo)>,
    lookup: PromptLookup,
    /// Earlier conversations, for the auto drafter's copies: only what the owner remembers.
    /// Shared with the sessions made by [`Self::share`] as it was then; copied on write.
    history: std::sync::Arc<History>,
    /// What each drafter's steps have cost so far, kept across replies.
    costs: std::collections::HashMap<DrafterKind, CostModel>,
    /// Memory for earlier prompts' caches, the target's and the draft's together.
    prompt_cache_bytes: usize,
    /// The folder prompts' caches are kept in across restarts, and its cap.
    disk_cache: Option<(std::path::PathBuf, u64)>,
}

/// The prompt cache's default: a quarter of the memory free once the models are loaded (2 GiB
/// where that cannot be read), at most 8 GiB (llama-server keeps 8 GiB of evicted slots by default). A 1,400-word chat on the
/// 1.5B target is about 120 MB of keys and values.
pub fn default_prompt_cache_bytes() -> usize {
    // Where free memory cannot be read (not Linux), 2 GiB.
    let free = crate::device::available_memory().unwrap_or(8 << 30);
    (free / 4).min(8 << 30) as usize
}

/// The history pool's default cap: about 1.6 million tokens, a thousand long conversations.
pub const HISTORY_BYTES: usize = 64 << 20;

impl Session {
    pub fn new(target: LoadedModel) -> Self {
        let history = std::sync::Arc::new(History::new(HISTORY_BYTES));
        let costs = Default::default();
        Self {
            target,
            draft: None,
            lookup: PromptLookup::default(),
            history,
            costs,
            prompt_cache_bytes: 0,
            disk_cache: None,
        }
    }

    /// Keep up to `bytes` of earlier prompts' caches, so that a prompt sharing a long start
    /// with one of them (going back to a chat) resumes there instead of reading it again. The
    /// target gets three quarters, the draft the rest: about the same number of positions
    /// for the default pair, whose draft's position is a third of the target's.
    pub fn set_prompt_cache(&mut self, bytes: usize) {
        self.prompt_cache_bytes = bytes;
        self.target.model.set_prompt_cache(bytes / 4 * 3);
        if let Some((draft, _)) = &mut self.draft {
            draft.set_prompt_cache(bytes / 4);
        }
    }

    /// Keep prompts' caches on disk under `root`, in at most `bytes` (`None`: none), so that
    /// a long chat reopened after a restart is not read again. See [`Self::persist`].
    pub fn set_disk_cache(&mut self, place: Option<(std::path::PathBuf, u64)>) {
        self.disk_cache = place.clone();
        self.target.model.set_disk_cache(place.clone());
        if let Some((draft, _)) = &mut self.draft {
            draft.set_disk_cache(place);
        }
    }

    /// Write what the target and the draft hold now to the disk cache (when one is set and it
    /// is not there yet): for the owner to call when no reply waits.
    pub fn persist(&mut self) -> Result<()> {
        self.target.model.persist()?;
        if let Some((draft, _)) = &mut self.draft {
            draft.persist()?;
        }
        Ok(())
    }

    /// Keep `tokens` (a message, a reply) for the auto drafter to copy from in later replies.
    /// Decoding remembers nothing by itself: the owner decides what a user's history is.
    pub fn remember(&mut self, tokens: &[u32]) {
        std::sync::Arc::make_mut(&mut self.history).remember(tokens);
    }

    /// Draft copies from `other`'s history from now on (the one the owner keeps up to date).
    pub fn share_history(&mut self, other: &Session) {
        self.history = other.history.clone();
    }

    /// Another session on the same weights, for a reply on another thread: its own sequences
    /// (empty at first), drafter state and measured costs, the same prompt caches and history,
    /// its passes taken with the other replies' by `passes`. Loads and settings are made on the
    /// session it was made from, and sessions made before a change are made again.
    pub fn share(&self, passes: Option<std::sync::Arc<dyn crate::models::Passes>>) -> Result<Session> {
        let target = LoadedModel {
            model: self.target.model.share(passes.clone())?,
            tokenizer: self.target.tokenizer.clone(),
            template: self.target.template.clone(),
            info: self.target.info.clone(),
        };
        let draft = match &self.draft {
            Some((draft, info)) => Some((draft.share(passes)?, info.clone())),
            None => None,
        };
        Ok(Session {
            target,
            draft,
            lookup: PromptLookup::default(),
            history: self.history.clone(),
            costs: self.costs.clone(),
            prompt_cache_bytes: self.prompt_cache_bytes,
            disk_cache: self.disk_cache.clone(),
        })
    }

    /// Bytes one more reply's sequences take once they fill the context (target and draft).
    pub fn sequence_bytes(&self) -> usize {
        let draft = self.draft.as_ref().map_or(0, |(draft, _)| draft.sequence_bytes());
        self.target.model.model().sequence_bytes() + draft
    }

    /// Take the models' passes with other replies' by `passes` from now on (`None`: alone).
    pub fn set_passes(&mut self, passes: Option<std::sync::Arc<dyn crate::models::Passes>>) {
        self.target.model.set_passes(passes.clone());
        if let Some((draft, _)) = &mut self.draft {
            draft.set_passes(passes);
        }
    }

    pub fn history(&self) -> &History {
        &self.history
    }

    /// The drafter a reply gets when it asks for none: the draft model when one is loaded.
    pub fn default_drafter(&self) -> DrafterKind {
        match self.draft {
            Some(_) => DrafterKind::Model,
            None => DrafterKind::None,
        }
    }

    /// What `asked` runs as with the models loaded now ([`resolve_drafter`]).
    pub fn resolve(&self, asked: DrafterKind) -> Result<DrafterKind> {
        resolve_drafter(asked, self.draft.is_some())
    }

    /// Forget every cached position of every model: after a failure part-way through a
    /// reply, the caches are known to be consistent only when empty.
    pub fn reset_caches(&mut self) {
        self.target.model.truncate(0);
        if let Some((draft, _)) = &mut self.draft {
            draft.rollback(0);
        }
    }

    pub fn load(target: impl AsRef<Path>, device: &Device, context: usize) -> Result<Self> {
        Ok(Self::new(LoadedModel::load(target, device, context)?))
    }

    /// The target with keys and values stored as `kv_format` (a draft loaded later too).
    pub fn load_with(target: impl AsRef<Path>, device: &Device, context: usize, kv_format: KvFormat) -> Result<Self> {
        Ok(Self::new(LoadedModel::load_with(target, device, context, kv_format)?))
    }

    /// Load a draft model and pair it with the target; refused, with the reason, when the
    /// vocabularies differ. The target stays loaded either way.
    pub fn load_draft(&mut self, path: impl AsRef<Path>, device: &Device) -> Result<&ModelInfo> {
        let draft = LoadedModel::load_with(path, device, self.target.info.context, self.target.info.kv_format)?;
        self.set_draft(draft)
    }

    pub fn set_draft(&mut self, draft: LoadedModel) -> Result<&ModelInfo> {
        check_pair(&self.target.tokenizer, &draft.tokenizer)?;
        let info = draft.info.clone();
        self.costs.remove(&DrafterKind::Model);
        let mut model = DraftModel::new(draft.model);
        model.set_prompt_cache(self.prompt_cache_bytes / 4);
        model.set_disk_cache(self.disk_cache.clone());
        Ok(&self.draft.insert((model, info)).1)
    }

    pub fn clear_draft(&mut self) {
        self.draft = None;
    }

    /// Let the draft propose only the `n` most frequent tokens and the special tokens (the end
    /// of a turn must stay proposable); `None`: all ([`pruned_vocab`]). Whether the draft
    /// could (off the CPU it keeps its whole output layer).
    pub fn set_draft_vocab(&mut self, n: Option<usize>) -> Result<bool> {
        let Some((draft, _)) = &mut self.draft else { return Ok(false) };
        let vocab = self.target.tokenizer.vocab().len();
        let ids = n.filter(|&n| n < vocab).map(|n| pruned_vocab(&self.target.tokenizer, n));
        let done = draft.restrict_vocab(ids.as_deref())?;
        self.costs.remove(&DrafterKind::Model);
        Ok(done)
    }

    pub fn draft_info(&self) -> Option<&ModelInfo> {
        self.draft.as_ref().map(|(_, info)| info)
    }

    pub fn chat_prompt(&self, messages: &[Message], tools: &[serde_json::Value]) -> Result<Vec<u32>> {
        self.target.chat_prompt(messages, tools)
    }

    /// A reply to `prompt` decoded as `decoding` says (plain when its drafter is none).
    pub fn generate(
        &mut self,
        prompt: &[u32],
        options: &GenerateOptions,
        decoding: Decoding,
        sink: &mut dyn TokenSink,
    ) -> Result<Generation> {
        let mut combined;
        let drafter: &mut dyn Drafter = match (self.resolve(decoding.drafter)?, &mut self.draft) {
            (DrafterKind::Model, Some((draft, _))) => draft,
            (DrafterKind::Auto, Some((draft, _))) => {
                combined = Combined::new(draft).with_history(&self.history);
                &mut combined
            }
            (DrafterKind::None, _) => return self.generate_plain(prompt, options, sink),
            _ => &mut self.lookup,
        };
        let target = &mut self.target;
        let costs = self.costs.entry(decoding.drafter).or_default();
        let spec = SpeculativeOptions { k: decoding.k, ..Default::default() };
        generate_speculative(&mut target.model, drafter, &target.tokenizer, prompt, options, &spec, costs, sink)
    }

    /// A plain reply even when a draft is loaded: the reference for comparisons.
    pub fn generate_plain(
        &mut self,
        prompt: &[u32],
        options: &GenerateOptions,
        sink: &mut dyn TokenSink,
    ) -> Result<Generation> {
        self.target.generate(prompt, options, sink)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drafter_means_what_the_table_says_for_the_models_at_hand() {
        use DrafterKind::*;
        let resolved = |asked, loaded| resolve_drafter(asked, loaded).ok();
        assert_eq!([resolved(Auto, true), resolved(Auto, false)], [Some(Auto), Some(Lookup)]);
        assert_eq!([resolved(Model, true), resolved(Model, false)], [Some(Model), Option::None]);
        assert_eq!([resolved(Lookup, false), resolved(None, true)], [Some(Lookup), Some(None)]);
        let load = |drafter, chosen: Option<&'static str>| draft_to_load(drafter, chosen).map_err(|e| e.code());
        assert_eq!(load(Auto, Some("d")), Ok(Some("d")));
        assert_eq!(load(Auto, Option::None), Ok(Option::None));
        assert_eq!(load(Model, Option::None), Err("invalid_setting"));
        assert_eq!(load(Lookup, Some("d")), Ok(Option::None), "copies need no draft model");
    }
}
