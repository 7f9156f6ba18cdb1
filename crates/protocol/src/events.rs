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
    /// The one name every front-end shows: OpenAI's `stop` and `length`, and `cancelled`
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
