//! A target model with an optional draft: what every client (CLI, server, app) holds.

use crate::chat::Message;
use crate::error::{Error, Result};
use crate::generate::{GenerateOptions, Generation, TokenSink};
use crate::speculative::{
    check_pair, generate_speculative, CostModel, DraftModel, Drafter, KSetting, PromptLookup, SpeculativeOptions,
};
use crate::{LoadedModel, ModelInfo};
use candle_core::Device;
use std::path::Path;

/// Who proposes tokens for the target to verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DrafterKind {
    /// Plain decoding.
    None,
    /// The loaded draft model.
    Model,
    /// n-grams from the conversation.
    Lookup,
}

impl std::str::FromStr for DrafterKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(DrafterKind::None),
            "model" => Ok(DrafterKind::Model),
            "lookup" => Ok(DrafterKind::Lookup),
            _ => Err(Error::InvalidSetting(format!("drafter `{s}`: expected model, lookup or none"))),
        }
    }
}

/// How one reply is decoded: who drafts and how far. A value every call carries, so no
/// reply's choice can outlive it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Decoding {
    pub drafter: DrafterKind,
    pub k: KSetting,
}

impl Decoding {
    pub fn plain() -> Self {
        Self { drafter: DrafterKind::None, k: KSetting::default() }
    }
}

/// The loaded models and what they have measured. It holds no per-reply settings: those
/// come with each call as a [`Decoding`].
pub struct Session {
    pub target: LoadedModel,
    draft: Option<(DraftModel, ModelInfo)>,
    lookup: PromptLookup,
    /// What each drafter's steps have cost so far, kept across replies.
    costs: std::collections::HashMap<DrafterKind, CostModel>,
}

impl Session {
    pub fn new(target: LoadedModel) -> Self {
        Self { target, draft: None, lookup: PromptLookup::default(), costs: Default::default() }
    }

    /// The drafter a reply gets when it asks for none: the draft model when one is loaded.
    pub fn default_drafter(&self) -> DrafterKind {
        match self.draft {
            Some(_) => DrafterKind::Model,
            None => DrafterKind::None,
        }
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

    /// Load a draft model and pair it with the target; refused, with the reason, when the
    /// vocabularies differ. The target stays loaded either way.
    pub fn load_draft(&mut self, path: impl AsRef<Path>, device: &Device) -> Result<&ModelInfo> {
        let draft = LoadedModel::load(path, device, self.target.info.context)?;
        self.set_draft(draft)
    }

    pub fn set_draft(&mut self, draft: LoadedModel) -> Result<&ModelInfo> {
        check_pair(&self.target.tokenizer, &draft.tokenizer)?;
        let info = draft.info.clone();
        self.costs.remove(&DrafterKind::Model);
        Ok(&self.draft.insert((DraftModel::new(draft.model), info)).1)
    }

    pub fn clear_draft(&mut self) {
        self.draft = None;
    }

    pub fn draft_info(&self) -> Option<&ModelInfo> {
        self.draft.as_ref().map(|(_, info)| info)
    }

    pub fn chat_prompt(&self, messages: &[Message]) -> Result<Vec<u32>> {
        self.target.chat_prompt(messages)
    }

    /// A reply to `prompt` decoded as `decoding` says (plain when its drafter is none).
    pub fn generate(
        &mut self,
        prompt: &[u32],
        options: &GenerateOptions,
        decoding: Decoding,
        sink: &mut dyn TokenSink,
    ) -> Result<Generation> {
        let drafter: &mut dyn Drafter = match (decoding.drafter, &mut self.draft) {
            (DrafterKind::Model, Some((draft, _))) => draft,
            (DrafterKind::Model, None) => {
                return Err(Error::InvalidSetting("no draft model is loaded: choose prompt lookup or none".into()))
            }
            (DrafterKind::Lookup, _) => &mut self.lookup,
            (DrafterKind::None, _) => return self.generate_plain(prompt, options, sink),
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
