//! A target model with an optional draft: what every client (CLI, server, app) holds.

use crate::chat::Message;
use crate::error::Result;
use crate::generate::{GenerateOptions, Generation, TokenSink};
use crate::speculative::{check_pair, generate_speculative, DraftModel, SpeculativeOptions};
use crate::{generate_plain, LoadedModel, ModelInfo};
use candle_core::Device;
use std::path::Path;

pub struct Session {
    pub target: LoadedModel,
    draft: Option<(DraftModel, ModelInfo)>,
    pub speculative: SpeculativeOptions,
}

impl Session {
    pub fn new(target: LoadedModel) -> Self {
        Self {
            target,
            draft: None,
            speculative: SpeculativeOptions::default(),
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

    /// A reply to `prompt`: speculative when a draft is loaded, plain otherwise.
    pub fn generate(&mut self, prompt: &[u32], options: &GenerateOptions, sink: &mut dyn TokenSink) -> Result<Generation> {
        match &mut self.draft {
            Some((draft, _)) => generate_speculative(
                &mut self.target.model,
                draft,
                &self.target.tokenizer,
                prompt,
                options,
                &self.speculative,
                sink,
            ),
            None => generate_plain(&mut self.target.model, &self.target.tokenizer, prompt, options, sink),
        }
    }

    /// A plain reply even when a draft is loaded: the reference for comparisons.
    pub fn generate_plain(&mut self, prompt: &[u32], options: &GenerateOptions, sink: &mut dyn TokenSink) -> Result<Generation> {
        generate_plain(&mut self.target.model, &self.target.tokenizer, prompt, options, sink)
    }
}
