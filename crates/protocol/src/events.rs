//! What a reply streams and what it ends with: its tokens with their provenance, the live
//! figures after each step, and the reply's statistics.

use serde::{Deserialize, Serialize};
use specta::Type;

/// Where a token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Type)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Plain decoding, no draft.
    Target,
    /// A draft model's token the target kept.
    Accepted,
    /// A token copied from earlier text (prompt lookup, or the combined drafter's free
    /// copies) that the target kept.
    Copied,
    /// Drawn from the target at the first rejection.
    Resampled,
    /// Drawn from the target after every draft was accepted.
    Bonus,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct TokenEvent {
    pub id: u32,
    /// The text this token completes; empty while a UTF-8 character is still partial.
    pub text: String,
    pub source: Source,
    /// The target's probability of this token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p: Option<f32>,
    /// The draft's probability of this token (drafted and resampled tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub q: Option<f32>,
    /// The target's most likely tokens at this position, most likely first, when
    /// [`crate::GenerateOptions::alternatives`] asks for them (OpenAI's `top_logprobs`).
    // `default` last: specta reads the attributes in order, and an absent list reads as empty.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub alternatives: Vec<Alternative>,
}

/// A token the target could have chosen, with its probability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct Alternative {
    pub id: u32,
    /// The token's own text (a byte fragment of a character is shown lossily).
    pub text: String,
    pub p: f32,
}

/// Live figures after one decoding step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct StepEvent {
    /// Draft length of this step (0: plain).
    pub k: usize,
    pub accepted: usize,
    pub generated: usize,
    pub tokens_per_second: f64,
    /// The reply's rate over plain decoding's, timed by plain steps taken in this reply (the
    /// engine's `PlainReference`); None until enough were timed, and always in plain
    /// decoding, which has nothing to compare.
    pub speedup_vs_plain: Option<f64>,
    /// What that compares against: the median plain step of this reply, and how many there were.
    #[serde(default)]
    pub plain_ms_per_token: Option<f64>,
    #[serde(default)]
    pub plain_steps: usize,
    pub acceptance_rate: Option<f64>,
}

/// Why a reply ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// End-of-turn or end-of-sequence token.
    EndOfTurn,
    StopString,
    MaxTokens,
    ContextFull,
    Cancelled,
}

impl FinishReason {
    pub const ALL: [FinishReason; 5] = [
        FinishReason::EndOfTurn,
        FinishReason::StopString,
        FinishReason::MaxTokens,
        FinishReason::ContextFull,
        FinishReason::Cancelled,
    ];

    /// The name the history keeps and the windows show: OpenAI's, but a full context
    /// (`context_full`) apart from the token limit (`length`).
    pub fn shown(self) -> &'static str {
        match self {
            FinishReason::ContextFull => "context_full",
            other => other.as_str(),
        }
    }

    /// OpenAI's name, which the API sends: `stop` and `length` (a full context too, as
    /// llama-server says it; the Specula extension tells the two apart), and `cancelled`
    /// for a reply stopped by its client, its deadline or the Stop button.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::EndOfTurn | FinishReason::StopString => "stop",
            FinishReason::MaxTokens | FinishReason::ContextFull => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// Speculative figures of one reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Type)]
pub struct SpeculativeStats {
    pub drafter: String,
    pub drafted: usize,
    pub accepted: usize,
    /// Of `drafted` and `accepted`, the tokens that were copies (no draft model's work).
    #[serde(default)]
    pub copied: usize,
    #[serde(default)]
    pub copied_accepted: usize,
    pub acceptance_rate: f64,
    pub target_passes: usize,
    pub tokens_per_pass: f64,
    pub draft_ms: f64,
    pub verify_ms: f64,
    /// The median plain step timed in this reply, what `speedup_vs_plain` compares against;
    /// None while too few were timed.
    pub plain_ms_per_token: Option<f64>,
    /// Plain steps timed in this reply.
    #[serde(default)]
    pub plain_steps: usize,
    pub speedup_vs_plain: Option<f64>,
    /// Leviathan et al.'s expected speedup from the measured acceptance and cost ratio.
    pub predicted_speedup: Option<f64>,
    /// Draft/target cost ratio per token.
    pub cost_ratio: Option<f64>,
    pub k_min: usize,
    pub k_max: usize,
    pub k_mean: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Type)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    /// Prompt tokens whose cache was reused from the previous turn.
    pub cached_prompt_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub tokens_per_second: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculative: Option<SpeculativeStats>,
    /// What of the chat was left out of the model's view to fit the context.
    // `default` last: specta reads the attributes in order, and an absent field reads as none.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub trimmed: Option<Trim>,
    /// How much of the reply was a reasoning model's thinking (none: it did not think).
    // `default` last: specta reads the attributes in order, and an absent field reads as none.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reasoning: Option<crate::Reasoning>,
}

/// What a reply's prompt left out to fit the context (an overflow policy's work): whole
/// messages, counted among the chat's messages after its system prompt, and tokens cut from
/// the middle of what was left when one message alone was too long.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Trim {
    /// The first message left out (0: the first message after the system prompt).
    pub first: u32,
    /// Messages left out, from `first` on.
    pub messages: u32,
    /// Tokens cut from the middle of the prompt besides (at most a context's worth).
    pub tokens: u32,
}

/// A finished reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct Generation {
    pub text: String,
    pub tokens: Vec<TokenEvent>,
    pub finish_reason: FinishReason,
    pub stats: GenerationStats,
}

impl Generation {
    /// A reply cancelled before its first token (while queued or reading the prompt).
    pub fn cancelled(prompt_tokens: usize) -> Self {
        Self {
            text: String::new(),
            tokens: Vec::new(),
            finish_reason: FinishReason::Cancelled,
            stats: GenerationStats { prompt_tokens, ..Default::default() },
        }
    }
}

/// What one reply streams, in order: `Started`, `Prefill` progress, `Tokens` and `Step`s,
/// and last exactly one `Done` or `Failed`; `Unsaved` at most once, from the app's history.
/// The one shape from the engine's sink (and a remote's stream) to the window: the service,
/// the app's channel, the server's SSE extension and the UI carry it unchanged. The next
/// steps of a reply (tool calls, reasoning) come as variants of their own; readers skip a
/// `kind` they do not know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReplyEvent {
    Started {
        /// Unique within its engine (or remote client): Stop names it.
        request_id: u64,
        /// The prompt's length; unknown to a remote client until the reply ends.
        prompt_tokens: Option<usize>,
        /// How the engine decodes this reply, its defaults applied and `auto` resolved for the
        /// models loaded; unknown to a remote client.
        decoding: Option<crate::Decoding>,
        /// The seed the reply samples with (it replays a sampled reply).
        seed: u64,
    },
    /// The chat did not fit the context: this much of it is out of the model's view (again,
    /// larger, when a reply that filled the context goes on).
    Trimmed { trim: Trim },
    /// The reply is thinking (a reasoning model's `<think>` block): said when the thinking
    /// opens (`ended` false; every token from then on is thinking) and when it closes (the
    /// reply's first `tokens` tokens were).
    Reasoning { reasoning: crate::Reasoning },
    /// `done` of the `total` uncached prompt tokens are read.
    Prefill { done: usize, total: usize },
    /// Tokens in the order they were committed: one from the engine, a few once gathered for
    /// a slower reader ([`ReplyEvent::gather`]).
    Tokens { tokens: Vec<TokenEvent> },
    /// Live figures after a decoding step.
    Step { step: StepEvent },
    /// The reply, however it ended: `text` is the reply as released (a stop string cut off).
    // Boxed: the stats are most of a reply's end, and every event in a channel is as large
    // as the largest kind.
    Done { finish_reason: FinishReason, text: String, stats: Box<GenerationStats> },
    /// The reply failed; the tokens before it are the partial reply.
    Failed { error: crate::ErrorInfo },
    /// A tool call the reply made (the app's MCP tools): sent when it is asked about, when it
    /// starts and when it ends, the whole card each time; the window keeps the latest by id.
    Tool { card: crate::ToolCard },
    /// The history could not keep the reply (a full disk): it goes on, is written when space
    /// returns, and until then what the window drew is all there is. Said once a reply.
    Unsaved { error: crate::ErrorInfo },
}

impl ReplyEvent {
    /// Whether this event ends the reply.
    pub fn is_last(&self) -> bool {
        matches!(self, ReplyEvent::Done { .. } | ReplyEvent::Failed { .. })
    }

    /// Fold `next` into `self` when a reader that takes events less often loses nothing by it:
    /// tokens join tokens, and a step's figures replace older ones. Gives `next` back when it
    /// cannot be folded. The one place tokens are batched (the app's webview channel).
    pub fn gather(&mut self, next: ReplyEvent) -> Option<ReplyEvent> {
        match (self, next) {
            (ReplyEvent::Tokens { tokens }, ReplyEvent::Tokens { tokens: more }) => {
                tokens.extend(more);
                None
            }
            (ReplyEvent::Step { step }, ReplyEvent::Step { step: newer }) => {
                *step = newer;
                None
            }
            (_, next) => Some(next),
        }
    }
}

/// A reply's events, gathered for a reader that takes them a few times a second: tokens in one
/// event and only the latest step's figures, in their order.
#[derive(Debug, Default)]
pub struct Gathered {
    tokens: Option<ReplyEvent>,
    step: Option<ReplyEvent>,
}

impl Gathered {
    /// Keep `event` when it can wait; give it back when it cannot (it goes after [`Self::take`]).
    pub fn keep(&mut self, event: ReplyEvent) -> Option<ReplyEvent> {
        let slot = match &event {
            ReplyEvent::Tokens { .. } => &mut self.tokens,
            ReplyEvent::Step { .. } => &mut self.step,
            _ => return Some(event),
        };
        match slot {
            Some(kept) => kept.gather(event),
            None => {
                *slot = Some(event);
                None
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_none() && self.step.is_none()
    }

    /// What was kept, tokens first, and nothing kept after.
    pub fn take(&mut self) -> impl Iterator<Item = ReplyEvent> {
        [self.tokens.take(), self.step.take()].into_iter().flatten()
    }
}

/// The reply a stream of events makes: its tokens, and its end. For readers that want only
/// the outcome (a non-streamed response, a test).
#[derive(Debug, Default)]
pub struct Collected {
    pub tokens: Vec<TokenEvent>,
}

impl Collected {
    /// Take one event; the reply (or its error) once the last comes.
    pub fn add(&mut self, event: ReplyEvent) -> Option<Result<Generation, crate::ErrorInfo>> {
        match event {
            ReplyEvent::Tokens { tokens } => self.tokens.extend(tokens),
            ReplyEvent::Done { finish_reason, text, stats } => {
                let tokens = std::mem::take(&mut self.tokens);
                return Some(Ok(Generation { text, tokens, finish_reason, stats: *stats }));
            }
            ReplyEvent::Failed { error } => return Some(Err(error)),
            ReplyEvent::Started { .. }
            | ReplyEvent::Trimmed { .. }
            | ReplyEvent::Reasoning { .. }
            | ReplyEvent::Prefill { .. }
            | ReplyEvent::Step { .. }
            | ReplyEvent::Tool { .. }
            | ReplyEvent::Unsaved { .. } => {}
        }
        None
    }
}

impl Generation {
    /// The reply's last event.
    pub fn into_done(self) -> ReplyEvent {
        ReplyEvent::Done { finish_reason: self.finish_reason, text: self.text, stats: Box::new(self.stats) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(id: u32) -> TokenEvent {
        TokenEvent { id, text: format!("t{id}"), source: Source::Target, p: None, q: None, alternatives: Vec::new() }
    }

    fn step(generated: usize) -> StepEvent {
        StepEvent {
            k: 4,
            accepted: 2,
            generated,
            tokens_per_second: 1.0,
            speedup_vs_plain: None,
            plain_ms_per_token: None,
            plain_steps: 0,
            acceptance_rate: None,
        }
    }

    #[test]
    fn gathered_events_keep_every_token_in_order_and_the_latest_step() {
        let mut gathered = Gathered::default();
        for event in [
            ReplyEvent::Tokens { tokens: vec![token(1)] },
            ReplyEvent::Step { step: step(1) },
            ReplyEvent::Tokens { tokens: vec![token(2), token(3)] },
            ReplyEvent::Step { step: step(3) },
        ] {
            assert_eq!(gathered.keep(event), None);
        }
        let done = Generation::cancelled(5).into_done();
        assert_eq!(gathered.keep(done.clone()), Some(done), "an end never waits");
        let taken: Vec<ReplyEvent> = gathered.take().collect();
        assert_eq!(
            taken,
            [ReplyEvent::Tokens { tokens: vec![token(1), token(2), token(3)] }, ReplyEvent::Step { step: step(3) }]
        );
        assert!(gathered.is_empty());
    }

    #[test]
    fn collected_events_make_the_reply_with_its_released_text() {
        let mut collected = Collected::default();
        assert!(collected.add(ReplyEvent::Tokens { tokens: vec![token(1), token(2)] }).is_none());
        let stats = GenerationStats { generated_tokens: 2, ..Default::default() };
        let done =
            ReplyEvent::Done { finish_reason: FinishReason::StopString, text: "t1".into(), stats: Box::new(stats) };
        let reply = collected.add(done).unwrap().unwrap();
        assert_eq!(reply.tokens, [token(1), token(2)]);
        assert_eq!(reply.text, "t1", "the text as released, not the tokens' text");
        let failed = ReplyEvent::Failed { error: crate::ErrorInfo::internal("gone") };
        assert_eq!(collected.add(failed).unwrap().unwrap_err().message, "gone");
    }

    #[test]
    fn the_wire_names_each_event_by_its_kind() {
        let event = ReplyEvent::Tokens { tokens: vec![token(7)] };
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["kind"], "tokens");
        assert_eq!(serde_json::from_value::<ReplyEvent>(json).unwrap(), event);
    }
}
