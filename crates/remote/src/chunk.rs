//! One chunk of an OpenAI chat stream, as far as any engine fills it: the text delta and
//! finish reason of the first choice, the usage, llama.cpp's `timings` (with its draft
//! counts) and Specula's own extension (tokens with provenance, step figures, stats).

use serde::Deserialize;
use specula_protocol::{FinishReason, GenerationStats, ReplyEvent, StepEvent, TokenEvent};

#[derive(Debug, Default, Deserialize)]
pub struct Chunk {
    #[serde(default)]
    pub choices: Vec<Choice>,
    pub usage: Option<Usage>,
    pub timings: Option<Timings>,
    pub specula: Option<Extension>,
    /// An error sent inside the stream (llama.cpp, vLLM and Specula do this after a 200).
    pub error: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Choice {
    #[serde(default)]
    pub delta: Delta,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Delta {
    pub content: Option<String>,
    /// A reasoning model's thinking, apart from its answer (llama-server, vLLM).
    pub reasoning_content: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: usize,
    #[serde(default)]
    pub completion_tokens: usize,
}

/// llama-server's per-reply timings; `draft_n` and `draft_n_accepted` only when it drafts.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub struct Timings {
    #[serde(default)]
    pub prompt_n: usize,
    #[serde(default)]
    pub cache_n: usize,
    #[serde(default)]
    pub predicted_n: usize,
    pub draft_n: Option<usize>,
    pub draft_n_accepted: Option<usize>,
}

/// `specula serve`'s extension to a streamed chunk: the reply's event, as its engine emitted
/// it (specula-server's `api::StreamExtension`). Kept as JSON until read, so that a kind this
/// client does not know (a newer server's) is skipped, not taken for a broken stream.
#[derive(Debug, Default, Deserialize)]
pub struct Extension {
    pub event: Option<serde_json::Value>,
    /// What a `specula serve` before the one event shape sent instead: a chunk's tokens, a
    /// step's figures, and the reply's statistics last.
    #[serde(default)]
    pub tokens: Vec<TokenEvent>,
    pub step: Option<StepEvent>,
    pub stats: Option<GenerationStats>,
}

impl Extension {
    /// The events this chunk carries, when they are of kinds this client knows.
    pub fn events(self) -> Vec<ReplyEvent> {
        if let Some(event) = self.event {
            return serde_json::from_value(event).ok().into_iter().collect();
        }
        let tokens = (!self.tokens.is_empty()).then_some(ReplyEvent::Tokens { tokens: self.tokens });
        let step = self.step.map(|step| ReplyEvent::Step { step });
        let done = self.stats.map(|stats| ReplyEvent::Done {
            finish_reason: FinishReason::EndOfTurn,
            text: String::new(),
            stats: Box::new(stats),
        });
        tokens.into_iter().chain(step).chain(done).collect()
    }
}

/// OpenAI's finish reasons as the engine names them; anything else (`tool_calls`,
/// `content_filter`) ended the turn.
pub fn finish_reason(name: &str) -> FinishReason {
    match name {
        "length" => FinishReason::MaxTokens,
        "cancelled" => FinishReason::Cancelled,
        _ => FinishReason::EndOfTurn,
    }
}

/// The message of an error body in OpenAI's shape (`{"error":{"message":..}}`), or of a bare
/// `{"error":"..."}`, or `None`.
pub fn error_message(error: &serde_json::Value) -> Option<String> {
    let message = error.get("message").unwrap_or(error);
    message.as_str().map(|m| m.chars().take(500).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_timings_and_specula_tokens_are_read() {
        let llama: Chunk = serde_json::from_str(
            r#"{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1,"model":"m",
            "object":"chat.completion.chunk","usage":{"completion_tokens":32,"prompt_tokens":12,"total_tokens":44},
            "timings":{"cache_n":0,"prompt_n":12,"prompt_ms":80.1,"predicted_n":32,"predicted_ms":700.0,
            "draft_n":40,"draft_n_accepted":25}}"#,
        )
        .unwrap();
        assert_eq!(llama.timings.unwrap().draft_n_accepted, Some(25));
        assert_eq!(finish_reason(llama.choices[0].finish_reason.as_deref().unwrap()), FinishReason::EndOfTurn);
        let specula: Chunk = serde_json::from_str(
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}],
            "specula":{"event":{"kind":"tokens","tokens":[{"id":17,"text":"Hi","source":"accepted","p":0.9,"q":0.8}]}}}"#,
        )
        .unwrap();
        let Some(ReplyEvent::Tokens { tokens }) = specula.specula.unwrap().events().pop() else { panic!("no tokens") };
        assert_eq!(tokens[0].source, specula_protocol::Source::Accepted);
        assert_eq!(specula.choices[0].delta.content.as_deref(), Some("Hi"));
    }

    #[test]
    fn an_event_of_a_kind_this_client_does_not_know_is_skipped() {
        let newer: Chunk =
            serde_json::from_str(r#"{"choices":[],"specula":{"event":{"kind":"tool_call","name":"x"}}}"#).unwrap();
        assert_eq!(newer.specula.unwrap().events(), []);
    }

    #[test]
    fn an_older_specula_servers_tokens_steps_and_stats_still_read() {
        let older: Chunk = serde_json::from_str(
            r#"{"choices":[],"specula":{"tokens":[{"id":3,"text":"a","source":"bonus"}],
            "step":{"k":2,"accepted":1,"generated":1,"tokens_per_second":5.0,"speedup_vs_plain":null,"acceptance_rate":null}}}"#,
        )
        .unwrap();
        let kinds: Vec<&str> = older
            .specula
            .unwrap()
            .events()
            .iter()
            .map(|e| match e {
                ReplyEvent::Tokens { .. } => "tokens",
                ReplyEvent::Step { .. } => "step",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["tokens", "step"]);
    }

    #[test]
    fn error_bodies_give_their_message() {
        let v: serde_json::Value = serde_json::from_str(r#"{"error":{"message":"no such model","code":404}}"#).unwrap();
        assert_eq!(error_message(&v["error"]).as_deref(), Some("no such model"));
        assert_eq!(error_message(&serde_json::json!("boom")).as_deref(), Some("boom"));
    }
}
