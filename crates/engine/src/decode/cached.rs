//! A model with the ids its KV cache holds: what lets a chat reuse its earlier turns and a
//! speculative step roll back what the target rejected.

use super::{Flow, Progress, PromptCache, PREFILL_CHUNK};
use crate::error::{Error, Result};
use crate::models::CausalLm;
use crate::tokenizer::common_prefix;

/// Fewer tokens than this are read again rather than restored: a restore copies the whole
/// saved sequence back, a few tokens' prefill costs less.
const MIN_RESUME_GAIN: usize = 64;

/// A model and the token ids its KV cache holds, so that a new prompt reuses the longest
/// cached prefix (the previous turns of a chat) and a rollback keeps both in step.
pub struct CachedModel {
    model: Box<dyn CausalLm>,
    ids: Vec<u32>,
    /// Sequences it held before, to resume from (off until given a budget).
    prompts: PromptCache,
}

impl CachedModel {
    pub fn new(model: Box<dyn CausalLm>) -> Self {
        Self { model, ids: Vec::new(), prompts: PromptCache::new(0) }
    }

    /// Keep up to `bytes` of earlier sequences' caches to resume from (0: none).
    pub fn set_prompt_cache(&mut self, bytes: usize) {
        self.prompts.set_budget(bytes);
    }

    pub fn prompt_cache(&self) -> &PromptCache {
        &self.prompts
    }

    pub fn model(&self) -> &dyn CausalLm {
        self.model.as_ref()
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.model.capacity()
    }

    pub fn cached_ids(&self) -> &[u32] {
        &self.ids
    }

    pub fn truncate(&mut self, len: usize) {
        self.ids.truncate(len);
        self.model.truncate(self.ids.len());
    }

    /// Score only `ids` from now on (`None`: every token); whether the model could.
    pub fn restrict_output(&mut self, ids: Option<&[u32]>) -> Result<bool> {
        // Saved sequences carry the output layer's state of their time: not this one's.
        self.prompts.clear();
        self.model.restrict_output(ids)
    }

    /// Make the cache hold exactly `context`, feeding only what it lacks; the logits after its
    /// last token. The last token is fed again when the whole context was already cached.
    pub fn advance_to(&mut self, context: &[u32]) -> Result<Vec<f32>> {
        let keep = common_prefix(&self.ids, context).min(context.len().saturating_sub(1));
        self.truncate(keep);
        let logits = self.model.forward_last(&context[keep..])?;
        self.ids.extend_from_slice(&context[keep..]);
        Ok(logits.squeeze(0)?.to_vec1()?)
    }

    /// Make the cache hold `context` (no logits needed): prompt prefill. Returns how many
    /// tokens it fed (those not already cached).
    pub fn prefill(&mut self, context: &[u32]) -> Result<usize> {
        Ok(self.prefill_with(context, &mut |_, _| Flow::Continue)?.unwrap_or(0))
    }

    /// [`Self::prefill`] in chunks of [`PREFILL_CHUNK`], asking `progress` after each whether
    /// to go on. `None` when it was told to stop; the cache then holds the chunks fed so far
    /// (a later prompt with the same start reuses them).
    pub fn prefill_with(&mut self, context: &[u32], progress: Progress) -> Result<Option<usize>> {
        let keep = self.resume(context)?;
        self.truncate(keep);
        let total = context.len() - keep;
        for chunk in context[keep..].chunks(PREFILL_CHUNK) {
            self.model.forward_last(chunk)?;
            self.ids.extend_from_slice(chunk);
            if progress(self.ids.len() - keep, total) == Flow::Stop {
                return Ok(None);
            }
        }
        Ok(Some(total))
    }

    /// Before the cache turns to `context`: keep what it would lose (another chat's sequence)
    /// and take up the saved sequence that shares the most of `context`, when that is more
    /// than the cache holds now. The tokens of `context` then cached.
    fn resume(&mut self, context: &[u32]) -> Result<usize> {
        let here = common_prefix(&self.ids, context);
        // Taken out before the outgoing sequence is kept, so keeping it cannot evict this one;
        // the live cache holds it from then on.
        let resumed = self.prompts.take_best(context, here + MIN_RESUME_GAIN);
        if here < self.ids.len() && self.prompts.wants(&self.ids) {
            match self.model.save() {
                Ok(Some(state)) => self.prompts.keep(self.ids.clone(), state),
                Ok(None) => {}
                Err(e) => tracing::warn!("a prompt's cache could not be kept: {e}"),
            }
        }
        if let Some((ids, state)) = resumed {
            match self.model.restore(&state) {
                Ok(()) => self.ids = ids,
                // Never trusted half-restored: the cache starts empty, and the prompt is read.
                Err(e) => {
                    tracing::warn!("a saved prompt could not be restored: {e}");
                    self.truncate(0);
                }
            }
        }
        Ok(common_prefix(&self.ids, context))
    }

    /// Feed `tokens` and return the logits of every one of them, `[n][vocab]`.
    pub fn forward_all(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        let logits = self.model.forward(tokens)?;
        self.ids.extend_from_slice(tokens);
        Ok(logits.to_vec2()?)
    }
}

/// Check the prompt fits with room to generate at least one token.
pub fn check_context(prompt_tokens: usize, capacity: usize) -> Result<()> {
    if prompt_tokens == 0 {
        return Err(Error::InvalidSetting("the prompt is empty".into()));
    }
    if prompt_tokens >= capacity {
        return Err(Error::ContextOverflow { prompt_tokens, context: capacity, reserve: 1 });
    }
    Ok(())
}
