//! Drafters propose tokens for the target to verify. A small draft model is one; prompt
//! lookup (n-grams from the conversation) is another; the two combined, step by step, a third.

use super::history::Match;
use crate::decode::{CachedModel, Progress};
use crate::error::Result;
use crate::sampling::Sampler;

/// One proposed token and the drafter's distribution at its position (after the same
/// sampling transforms as the target's). Empty `probs` means a copy: a token taken from text
/// seen before, proposed with certainty (q is one-hot on `token`).
#[derive(Debug, Clone)]
pub struct Draft {
    pub token: u32,
    pub probs: Vec<f32>,
}

impl Draft {
    /// A token copied from earlier text, proposed with certainty (q one-hot).
    pub fn copied(token: u32) -> Self {
        Self { token, probs: Vec::new() }
    }

    /// Whether the token was copied rather than drawn from a draft model.
    pub fn is_copy(&self) -> bool {
        self.probs.is_empty()
    }

    /// q of `id` at this position.
    pub fn q(&self, id: u32) -> f32 {
        match self.probs.is_empty() {
            true => f32::from(u8::from(id == self.token)),
            false => self.probs.get(id as usize).copied().unwrap_or(0.0),
        }
    }

    pub fn prob(&self) -> f32 {
        self.q(self.token)
    }

    /// The whole of q over a vocabulary of `vocab` tokens.
    pub fn dense(&self, vocab: usize) -> Vec<f32> {
        match self.probs.is_empty() {
            true => (0..vocab as u32).map(|id| self.q(id)).collect(),
            false => self.probs.clone(),
        }
    }
}

pub trait Drafter {
    fn name(&self) -> &str;
    /// Get ready for a reply to `context` (the prompt), e.g. by prefilling a cache; returns
    /// how many tokens it had to feed, or `None` when `progress` said stop.
    fn prefill(&mut self, context: &[u32], progress: Progress) -> Result<Option<usize>>;
    /// Up to `k` tokens continuing `context`; the first is at reply `position`.
    fn propose(&mut self, context: &[u32], k: usize, sampler: &mut Sampler, position: usize) -> Result<Vec<Draft>>;
    /// Feed what a cache missed while steps went without drafting, leaving only what a normal
    /// step feeds to `propose`; returns how many tokens that took. The loop times it apart: a
    /// one-off catch-up is not the price of a draft, and counting it as one made auto k shun
    /// a draft it had just paused.
    fn catch_up(&mut self, _context: &[u32]) -> Result<usize> {
        Ok(0)
    }
    /// Tokens `catch_up` would feed before drafting after a context of `context_len`: what
    /// returning to this drafter after plain steps costs, which auto k weighs.
    fn backlog(&self, _context_len: usize) -> usize {
        0
    }
    /// Up to `max` tokens continuing `context` that cost nothing to propose, copied from
    /// text seen before, and the length of the match they continue, when the drafter has a
    /// second, free source beside `propose` (the combined drafter). The loop weighs them
    /// against `propose`'s drafts each step.
    fn copy(&mut self, _context: &[u32], _max: usize) -> Option<Match> {
        None
    }
    /// Only the first `n_past` tokens of the context are still valid.
    fn rollback(&mut self, n_past: usize);
    /// Positions held in the drafter's cache, if it has one.
    fn cached_len(&self) -> usize {
        0
    }
}

/// A drafter lent for one reply (the session keeps its draft model between replies).
impl<T: Drafter + ?Sized> Drafter for &mut T {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn prefill(&mut self, context: &[u32], progress: Progress) -> Result<Option<usize>> {
        (**self).prefill(context, progress)
    }
    fn propose(&mut self, context: &[u32], k: usize, sampler: &mut Sampler, position: usize) -> Result<Vec<Draft>> {
        (**self).propose(context, k, sampler, position)
    }
    fn catch_up(&mut self, context: &[u32]) -> Result<usize> {
        (**self).catch_up(context)
    }
    fn backlog(&self, context_len: usize) -> usize {
        (**self).backlog(context_len)
    }
    fn copy(&mut self, context: &[u32], max: usize) -> Option<Match> {
        (**self).copy(context, max)
    }
    fn rollback(&mut self, n_past: usize) {
        (**self).rollback(n_past)
    }
    fn cached_len(&self) -> usize {
        (**self).cached_len()
    }
}

/// Tokens a draft cache may lack at a normal step: the last draft, when every draft was
/// accepted, and the token the target added.
const LAZY_TOKENS: usize = 2;

/// A smaller model of the same vocabulary as the target.
pub struct DraftModel {
    model: CachedModel,
}

impl DraftModel {
    pub fn new(model: CachedModel) -> Self {
        Self { model }
    }

    /// Keep up to `bytes` of earlier prompts' caches ([`CachedModel::set_prompt_cache`]).
    pub fn set_prompt_cache(&mut self, bytes: usize) {
        self.model.set_prompt_cache(bytes);
    }

    /// Keep sequences on disk ([`CachedModel::set_disk_cache`]).
    pub fn set_disk_cache(&mut self, place: Option<(std::path::PathBuf, u64)>) {
        self.model.set_disk_cache(place);
    }

    /// Write the sequence held now to disk ([`CachedModel::persist`]).
    pub fn persist(&mut self) -> Result<bool> {
        self.model.persist()
    }

    /// The same draft for a reply on another thread ([`CachedModel::share`]).
    pub fn share(&self, passes: Option<std::sync::Arc<dyn crate::models::Passes>>) -> Result<Self> {
        Ok(Self { model: self.model.share(passes)? })
    }

    /// Take passes with other replies' by `passes` ([`CachedModel::set_step`]).
    pub fn set_passes(&mut self, passes: Option<std::sync::Arc<dyn crate::models::Passes>>) {
        self.model.set_passes(passes);
    }

    /// Bytes one sequence of the draft takes once it fills the context.
    pub fn sequence_bytes(&self) -> usize {
        self.model.model().sequence_bytes()
    }

    pub fn into_inner(self) -> CachedModel {
        self.model
    }

    /// Propose only tokens of `ids` (`None`: any): the draft scores fewer tokens, and the
    /// target, which verifies over the whole vocabulary, keeps its output exactly (a token the
    /// draft cannot propose has q = 0, which the acceptance rule allows for).
    pub fn restrict_vocab(&mut self, ids: Option<&[u32]>) -> Result<bool> {
        self.model.restrict_output(ids)
    }
}

impl Drafter for DraftModel {
    fn name(&self) -> &str {
        "model"
    }

    fn prefill(&mut self, context: &[u32], progress: Progress) -> Result<Option<usize>> {
        self.model.prefill_with(&context[..context.len().saturating_sub(1)], progress)
    }

    fn propose(&mut self, context: &[u32], k: usize, sampler: &mut Sampler, position: usize) -> Result<Vec<Draft>> {
        let room = self.model.capacity().saturating_sub(context.len());
        let mut history = context.to_vec();
        let mut drafts = Vec::with_capacity(k);
        for i in 0..k.min(room) {
            // The first call also feeds what the cache lacks: the last committed token, and
            // the final draft of the previous step when all of them were accepted.
            let logits = self.model.advance_to(&history)?;
            let logits = sampler.constrained(&logits, &history, position + i)?;
            if !logits.iter().any(|l| l.is_finite()) {
                break; // a pruned head scores none of what the grammar allows here
            }
            let choice = sampler.choose_constrained(&logits, &history, position + i)?;
            history.push(choice.token);
            drafts.push(Draft { token: choice.token, probs: choice.probs });
        }
        Ok(drafts)
    }

    fn catch_up(&mut self, context: &[u32]) -> Result<usize> {
        // A normal step lacks at most the last draft and the newest token, which `propose`
        // feeds in one pass with its first draft; anything older is a backlog.
        let normal = context.len().saturating_sub(LAZY_TOKENS);
        match self.model.len() < normal {
            true => self.model.prefill(&context[..normal]),
            false => Ok(0),
        }
    }

    fn backlog(&self, context_len: usize) -> usize {
        context_len.saturating_sub(LAZY_TOKENS).saturating_sub(self.model.len())
    }

    fn rollback(&mut self, n_past: usize) {
        self.model.truncate(n_past);
    }

    fn cached_len(&self) -> usize {
        self.model.len()
    }
}
