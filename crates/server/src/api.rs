//! OpenAI's request and response shapes, with Specula's extensions under `specula`.

use serde::{Deserialize, Serialize};
use specula_engine::speculative::KSetting;
use specula_engine::{DrafterKind, Generation, GenerationStats, Message, Mode, StepEvent, TokenEvent};

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    #[serde(default)]
    pub stream: bool,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    #[serde(default)]
    pub speculative: Option<SpeculativeOverride>,
}

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: String,
    #[serde(default)]
    pub stream: bool,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    #[serde(default)]
    pub speculative: Option<SpeculativeOverride>,
}

#[derive(Debug, Default, Deserialize)]
pub struct SamplingFields {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub max_tokens: Option<usize>,
    /// OpenAI's newer name for max_tokens.
    pub max_completion_tokens: Option<usize>,
    pub stop: Option<Stop>,
    pub seed: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// Per-request overrides of the server's speculative settings.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SpeculativeOverride {
    /// A number from 1 to 16, or "auto".
    pub k: Option<KSetting>,
    pub mode: Option<Mode>,
    pub drafter: Option<DrafterKind>,
}

#[derive(Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

#[derive(Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
}

#[derive(Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

impl Usage {
    pub fn of(stats: &GenerationStats) -> Self {
        Self {
            prompt_tokens: stats.prompt_tokens,
            completion_tokens: stats.generated_tokens,
            total_tokens: stats.prompt_tokens + stats.generated_tokens,
        }
    }
}

/// The `specula` extension of a chunk or response.
#[derive(Serialize, Default)]
pub struct Extension {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<TokenEvent>,
    /// Live figures after a decoding step (streams only), for the UI's speed panel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<StepEvent>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<GenerationStats>,
}

/// The engine's one mapping of how a reply ended ("stop", "length", "cancelled").
pub fn finish_reason(g: &Generation) -> &'static str {
    g.finish_reason.as_str()
}

#[derive(Serialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub param: Option<&'static str>,
    pub code: &'static str,
}
