//! Where a reply's output goes, and how a front-end stops it.

use super::{StepEvent, TokenEvent};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// Where output goes: the CLI prints, the app forwards to a channel, tests collect.
/// Returning [`Flow::Stop`] from any method is how cancellation reaches the loop, prefill
/// included.
pub trait TokenSink {
    /// The prompt fits: `prompt_tokens` will be read, then the reply begins.
    fn on_start(&mut self, _prompt_tokens: usize) -> Flow {
        Flow::Continue
    }
    /// `done` of the `total` prompt tokens that had to be fed are in the cache. Asked between
    /// prefill chunks, so a long prompt can be abandoned part-way.
    fn on_prefill(&mut self, _done: usize, _total: usize) -> Flow {
        Flow::Continue
    }
    /// The chat did not fit the context and `trim` of it is out of the model's view (said
    /// before the prompt is read, and again when a reply that filled the context goes on).
    fn on_trim(&mut self, _trim: &specula_protocol::Trim) -> Flow {
        Flow::Continue
    }
    fn on_token(&mut self, token: &TokenEvent) -> Flow;
    /// A chat reply's thinking opened or closed (see [`crate::thinking`]).
    fn on_reasoning(&mut self, _reasoning: &specula_protocol::Reasoning) -> Flow {
        Flow::Continue
    }
    fn on_step(&mut self, _step: &StepEvent) -> Flow {
        Flow::Continue
    }
}

/// A sink that only keeps going; the reply is in the returned [`super::Generation`].
pub struct NullSink;

impl TokenSink for NullSink {
    fn on_token(&mut self, _: &TokenEvent) -> Flow {
        Flow::Continue
    }
}

impl<F: FnMut(&TokenEvent) -> Flow> TokenSink for F {
    fn on_token(&mut self, token: &TokenEvent) -> Flow {
        self(token)
    }
}

/// Asked between prefill chunks with (tokens fed, tokens to feed); [`Flow::Stop`] abandons.
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize) -> Flow;
