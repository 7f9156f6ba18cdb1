//! OpenAI's request and response shapes, with Specula's extensions under `specula`.
//!
//! Requests are read as clients really send them (content as a string, a list of parts or
//! null; the `developer`, `tool` and legacy `function` roles; assistant turns that carry
//! `tool_calls`; a legacy `prompt` as a string or a list) and turned into the engine's
//! [`Message`]s here, so the handlers see one shape.

use serde::{Deserialize, Serialize};
use specula_engine::constraint::Grammar;
use specula_engine::speculative::KSetting;
use specula_engine::{
    DrafterKind, FunctionCall, Generation, GenerationStats, Message, Mode, ReplyEvent, Role, TokenEvent, ToolCall,
};

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    /// Return each token's log-probability.
    #[serde(default)]
    pub logprobs: bool,
    /// With `logprobs`, also the most likely tokens at each position (0-20).
    pub top_logprobs: Option<usize>,
    #[serde(default)]
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    pub response_format: Option<ResponseFormat>,
    #[serde(default)]
    pub speculative: Option<SpeculativeOverride>,
    /// More variables for the chat template, as llama.cpp's server and vLLM take them
    /// (`{"enable_thinking": false}` for Qwen3).
    #[serde(default)]
    pub chat_template_kwargs: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: CompletionPrompt,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    /// The legacy API's logprobs: how many alternatives per token (0-5 in OpenAI's).
    pub logprobs: Option<usize>,
    /// Prepend the prompt to the returned text (refused: not supported).
    #[serde(default)]
    pub echo: bool,
    /// Text after the completion (refused: not supported).
    pub suffix: Option<String>,
    #[serde(default)]
    pub speculative: Option<SpeculativeOverride>,
}

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Send usage on a chunk of its own, with empty `choices`, before `[DONE]`.
    #[serde(default)]
    pub include_usage: bool,
}

/// A legacy completion prompt: one text, several, or token ids.
#[derive(Debug)]
pub enum CompletionPrompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

/// Read as it streams in, with no intermediate copy (serde's `untagged` buffers the whole value
/// to try each shape), and no further than a request may go: a list of prompts stops being read
/// past [`crate::MAX_CHOICES_PER_REQUEST`] of them.
impl<'de> Deserialize<'de> for CompletionPrompt {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(PromptVisitor)
    }
}

struct PromptVisitor;

impl<'de> serde::de::Visitor<'de> for PromptVisitor {
    type Value = CompletionPrompt;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string, a list of strings, a list of token ids, or a list of lists of token ids")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(CompletionPrompt::Text(text.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Self::Value, E> {
        Ok(CompletionPrompt::Text(text))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // The first element says which list this is.
        let Some(first) = seq.next_element::<PromptItem>()? else { return Ok(CompletionPrompt::Texts(Vec::new())) };
        Ok(match first {
            PromptItem::Text(text) => CompletionPrompt::Texts(capped(text, &mut seq)?),
            PromptItem::Ids(ids) => CompletionPrompt::TokenLists(capped(ids, &mut seq)?),
            PromptItem::Id(id) => {
                let mut ids = vec![id];
                while let Some(id) = seq.next_element::<u32>()? {
                    ids.push(id);
                }
                CompletionPrompt::Tokens(ids)
            }
        })
    }
}

/// The rest of a list of prompts after its `first`, refused past the request's cap.
fn capped<'de, T: Deserialize<'de>, A: serde::de::SeqAccess<'de>>(first: T, seq: &mut A) -> Result<Vec<T>, A::Error> {
    let cap = crate::MAX_CHOICES_PER_REQUEST;
    let mut items = vec![first];
    while let Some(item) = seq.next_element::<T>()? {
        if items.len() == cap {
            let why = format!("`prompt` lists more than {cap} prompts: a request makes at most {cap} choices");
            return Err(serde::de::Error::custom(why));
        }
        items.push(item);
    }
    Ok(items)
}

/// One element of a prompt list, whose kind decides the list's.
enum PromptItem {
    Text(String),
    Id(u32),
    Ids(Vec<u32>),
}

impl<'de> Deserialize<'de> for PromptItem {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ItemVisitor;
        impl<'de> serde::de::Visitor<'de> for ItemVisitor {
            type Value = PromptItem;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string, a token id, or a list of token ids")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<PromptItem, E> {
                Ok(PromptItem::Text(text.to_owned()))
            }

            fn visit_u64<E: serde::de::Error>(self, id: u64) -> Result<PromptItem, E> {
                u32::try_from(id).map(PromptItem::Id).map_err(|_| E::custom(format!("token id {id} is out of range")))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<PromptItem, A::Error> {
                let mut ids = Vec::new();
                while let Some(id) = seq.next_element::<u32>()? {
                    ids.push(id);
                }
                Ok(PromptItem::Ids(ids))
            }
        }
        deserializer.deserialize_any(ItemVisitor)
    }
}

/// One message as the API takes it.
#[derive(Debug, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default)]
    pub tool_calls: Vec<ApiToolCall>,
    pub tool_call_id: Option<String>,
    /// An earlier reply's thinking, as this server returned it: the template decides whether
    /// the model sees it again (Qwen3's keeps it only within the current turn's tool calls).
    #[serde(default)]
    pub reasoning_content: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

/// A tool call as OpenAI writes it: `arguments` is a JSON text.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ApiToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: ApiFunctionCall,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ApiFunctionCall {
    pub name: String,
    /// A JSON text, as OpenAI sends it; an object sent instead is taken as its text.
    #[serde(deserialize_with = "text_or_json")]
    pub arguments: String,
}

fn text_or_json<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(deserializer)? {
        serde_json::Value::String(text) => text,
        other => other.to_string(),
    })
}

fn function_type() -> String {
    "function".into()
}

/// A function the model may call: passed whole to the chat template, which renders it as the
/// model was trained to see it.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Tool {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: serde_json::Value,
}

impl Tool {
    pub fn name(&self) -> Option<&str> {
        self.function.get("name").and_then(serde_json::Value::as_str)
    }
}

/// `"none"`, `"auto"`, `"required"`, or `{"type": "function", "function": {"name": ...}}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ToolChoice {
    Mode(String),
    Named { function: NamedFunction },
}

#[derive(Debug, Clone, Deserialize)]
pub struct NamedFunction {
    pub name: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ResponseFormat {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub json_schema: Option<JsonSchemaFormat>,
}

/// `response_format.json_schema`: the schema is enforced whether or not `strict` is set
/// (a reply that does not match is never what a client that sent a schema wants).
#[derive(Debug, Clone, Deserialize)]
pub struct JsonSchemaFormat {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub schema: Option<serde_json::Value>,
}

impl ResponseFormat {
    /// The grammar the reply must match: none for `text`.
    pub fn grammar(&self) -> Result<Option<Grammar>, String> {
        match self.kind.as_str() {
            "text" => Ok(None),
            "json_object" => Ok(Some(Grammar::JsonObject)),
            "json_schema" => match self.json_schema.as_ref().and_then(|f| f.schema.clone()) {
                Some(schema) => Ok(Some(Grammar::JsonSchema { schema })),
                None => Err("response_format `json_schema` needs `json_schema.schema`".into()),
            },
            other => Err(format!("response_format `{other}` is not one of text, json_object, json_schema")),
        }
    }
}

/// Why a message cannot be read, as the 400's message says it.
pub type ShapeError = String;

impl ChatMessage {
    /// The engine's message: `developer` is a system turn, `function` a tool's, and content
    /// parts are kept for templates that read them (text only: these models read no images
    /// or audio).
    pub fn into_message(self, index: usize) -> Result<Message, ShapeError> {
        let role = match self.role.as_str() {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" | "function" => Role::Tool,
            other => {
                return Err(format!(
                    "messages[{index}].role `{other}` is not one of system, developer, user, assistant, tool"
                ))
            }
        };
        let mut message = match self.content {
            None => Message::new(role, ""),
            Some(Content::Text(text)) => Message::new(role, text),
            Some(Content::Parts(parts)) => Message::from_parts(role, text_parts(parts, index)?),
        };
        message.tool_calls = self.tool_calls.into_iter().map(ApiToolCall::into_engine).collect();
        message.tool_call_id = self.tool_call_id;
        message.reasoning_content = self.reasoning_content;
        Ok(message)
    }
}

fn text_parts(parts: Vec<ContentPart>, index: usize) -> Result<Vec<String>, ShapeError> {
    parts
        .into_iter()
        .map(|part| match (part.kind.as_str(), part.text) {
            ("text", Some(text)) => Ok(text),
            (kind, _) => Err(format!("messages[{index}] has a `{kind}` part: this model reads text parts only")),
        })
        .collect()
}

impl ApiToolCall {
    /// Templates want `arguments` as a value; a text that is not JSON stays a string.
    fn into_engine(self) -> ToolCall {
        let arguments = serde_json::from_str(&self.function.arguments)
            .unwrap_or(serde_json::Value::String(self.function.arguments));
        ToolCall { id: self.id, kind: self.kind, function: FunctionCall { name: self.function.name, arguments } }
    }
}

impl CompletionPrompt {
    /// How many prompts: each is answered `n` times.
    pub fn count(&self) -> usize {
        match self {
            CompletionPrompt::Text(_) | CompletionPrompt::Tokens(_) => 1,
            CompletionPrompt::Texts(ts) => ts.len(),
            CompletionPrompt::TokenLists(lists) => lists.len(),
        }
    }

    pub fn into_prompts(self) -> Vec<specula_engine::service::Prompt> {
        use specula_engine::service::Prompt;
        match self {
            CompletionPrompt::Text(t) => vec![Prompt::Text(t)],
            CompletionPrompt::Texts(ts) => ts.into_iter().map(Prompt::Text).collect(),
            CompletionPrompt::Tokens(ids) => vec![Prompt::Tokens(ids)],
            CompletionPrompt::TokenLists(lists) => lists.into_iter().map(Prompt::Tokens).collect(),
        }
    }
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
    /// Fixes the random draws; without one every reply draws afresh, as OpenAI's do.
    pub seed: Option<u64>,
    /// Choices to generate for the prompt.
    pub n: Option<usize>,
    /// A prompt longer than the context: `stop` (an error), `truncate-middle` or `rolling`
    /// (LM Studio's policies); the server's `--overflow` when absent.
    pub context_overflow: Option<specula_engine::Overflow>,
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

#[derive(Debug, Clone, Copy, Default, Serialize)]
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

/// The `specula` extension of a streamed chunk: the reply's event as the engine emitted it
/// (`ReplyEvent`: started, prefill, tokens, step, done), none on a chunk that only releases
/// held-back text.
#[derive(Serialize, Default)]
pub struct StreamExtension {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<ReplyEvent>,
}

impl StreamExtension {
    pub fn of(event: ReplyEvent) -> Self {
        Self { event: Some(event) }
    }
}

/// The `specula` extension of a whole (non-streamed) response: the first choice's tokens with
/// their provenance, its statistics, and every choice's seed.
#[derive(Serialize, Default)]
pub struct Extension {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<TokenEvent>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<GenerationStats>,
    /// How the first choice ended in the engine's words: `context_full` apart from
    /// `max_tokens`, which OpenAI's `finish_reason` both calls `length`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<specula_engine::FinishReason>,
    /// The seed each choice was sampled with, in choice order: send it back to replay.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub seeds: Vec<u64>,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn format(json: serde_json::Value) -> Result<Option<Grammar>, String> {
        serde_json::from_value::<ResponseFormat>(json).unwrap().grammar()
    }

    #[test]
    fn response_formats_become_grammars_and_the_unknown_is_refused() {
        assert_eq!(format(serde_json::json!({"type": "text"})), Ok(None));
        assert_eq!(format(serde_json::json!({"type": "json_object"})), Ok(Some(Grammar::JsonObject)));
        let schema = serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let sdk = serde_json::json!({"type": "json_schema", "json_schema": {"name": "A", "schema": schema.clone(), "strict": true}});
        assert_eq!(format(sdk), Ok(Some(Grammar::JsonSchema { schema })));
        assert!(format(serde_json::json!({"type": "json_schema", "json_schema": {"name": "A"}}))
            .unwrap_err()
            .contains("schema"));
        assert!(format(serde_json::json!({"type": "yaml"})).unwrap_err().contains("yaml"));
    }
}
