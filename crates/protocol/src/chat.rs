//! A chat's turns, in the shape chat templates read them (transformers' `messages`).

use serde::{Deserialize, Serialize};
use specta::Type;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    /// A tool's result, answering an assistant's tool call.
    Tool,
}

/// One turn of a chat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Message {
    pub role: Role,
    /// The text; for a message sent in parts, their texts joined by newlines.
    pub content: String,
    /// The texts of a message sent as content parts, for templates that render parts
    /// themselves (Gemma 3 trims each); empty for plain text.
    // `default` last: specta reads the attributes in order, and an absent list reads as empty.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub parts: Vec<String>,
    /// The functions an assistant turn called.
    // `default` last: specta reads the attributes in order, and an absent list reads as empty.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub tool_calls: Vec<ToolCall>,
    /// The call a tool turn answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// An assistant turn's thinking, apart from its content: templates that know thinking
    /// (Qwen3's) read `reasoning_content`, and the others never show it to the model again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

/// A function call as templates render it: `arguments` is a JSON value, not a string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: serde_json::Value,
}

impl Message {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            parts: Vec::new(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning_content: None,
        }
    }

    /// A message sent as text parts: its content is their texts joined by newlines, as
    /// templates that read only text get it (llama.cpp's server joins them so too).
    pub fn from_parts(role: Role, parts: Vec<String>) -> Self {
        Self { content: parts.join("\n"), parts, ..Self::new(role, "") }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }
}
