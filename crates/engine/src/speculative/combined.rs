//! Drafters combined step by step: text the reply copies from its context (a revision of
//! earlier code, a quoted paragraph) or from the session's history of earlier conversations
//! is proposed for free, and the draft model drafts the rest. Which of the two drafts a step
//! is auto k's choice ([`super::CostModel::copy_k`]), from what each has been measured to
//! deliver: copies and the model's drafts are right at different rates, and a copy costs no
//! draft time.

use super::drafter::{Draft, Drafter};
use super::history::{History, Match};
use super::lookup::PromptLookup;
use crate::decode::Progress;
use crate::error::Result;
use crate::sampling::Sampler;

/// A draft model (or any drafter) with free copies beside it: from the context (prompt
/// lookup), else from the session's history.
pub struct Combined<'h, D> {
    lookup: PromptLookup,
    history: Option<&'h History>,
    model: D,
}

/// Copies only after a match of 3 tokens or more: a common pair of tokens is often followed
/// by something else. Matches are tried from 8 tokens down; how far one really reaches is
/// measured apart ([`PromptLookup::find`]).
const CONTEXT_COPIES: PromptLookup = PromptLookup { max_ngram: 8, min_ngram: 3 };

impl<D: Drafter> Combined<'static, D> {
    pub fn new(model: D) -> Self {
        Self { lookup: CONTEXT_COPIES, history: None, model }
    }
}

impl<'h, D: Drafter> Combined<'h, D> {
    /// Copies from `history` too, where the context has none.
    pub fn with_history<'a>(self, history: &'a History) -> Combined<'a, D> {
        Combined { lookup: self.lookup, history: Some(history), model: self.model }
    }
}

impl<D: Drafter> Drafter for Combined<'_, D> {
    fn name(&self) -> &str {
        "auto"
    }

    fn prefill(&mut self, context: &[u32], progress: Progress) -> Result<Option<usize>> {
        self.model.prefill(context, progress)
    }

    fn propose(&mut self, context: &[u32], k: usize, sampler: &mut Sampler, position: usize) -> Result<Vec<Draft>> {
        self.model.propose(context, k, sampler, position)
    }

    /// The longer match of the context's own and the history's (the context's on a tie: it is
    /// this conversation).
    fn copy(&mut self, context: &[u32], max: usize) -> Option<Match> {
        let here = self.lookup.find(context, max);
        let earlier = self.history.and_then(|history| history.lookup(context, max));
        match (here, earlier) {
            (Some(here), Some(earlier)) if earlier.matched > here.matched => Some(earlier),
            (None, earlier) => earlier,
            (here, _) => here,
        }
    }

    fn catch_up(&mut self, context: &[u32]) -> Result<usize> {
        self.model.catch_up(context)
    }

    fn backlog(&self, context_len: usize) -> usize {
        self.model.backlog(context_len)
    }

    fn rollback(&mut self, n_past: usize) {
        self.model.rollback(n_past);
    }

    fn cached_len(&self) -> usize {
        self.model.cached_len()
    }
}
