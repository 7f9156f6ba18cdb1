//! The chat history as the store keeps it and the UI shows it.

use crate::app::AppSettings;
use crate::chat::Role;
use crate::events::{GenerationStats, TokenEvent};
use serde::{Deserialize, Serialize};
use specta::Type;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct ConversationSummary {
    pub id: i64,
    pub title: String,
    /// Milliseconds since the Unix epoch.
    pub updated_at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct Conversation {
    pub id: i64,
    pub title: String,
    pub system_prompt: String,
    pub updated_at: i64,
    pub messages: Vec<StoredMessage>,
    /// Whether replies think first, for models whose template lets it be chosen (Qwen3's
    /// `enable_thinking`); none: the template's default.
    #[serde(default)]
    pub thinking: Option<bool>,
    /// What its replies do when it outgrows the context; none: the app's setting.
    #[serde(default)]
    pub overflow: Option<crate::Overflow>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct StoredMessage {
    pub id: i64,
    /// `system`, `user` or `assistant`: the store refuses any other.
    pub role: Role,
    pub content: String,
    /// Assistant replies: every token with its provenance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Vec<TokenEvent>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<GenerationStats>,
    /// None while the reply streams (or if the app died during it); `cancelled` when stopped,
    /// `error` when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// The settings the reply was made with, e.g. "draft model · k auto · greedy".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settings_label: Option<String>,
    /// Those settings whole (replies stored since they were kept): what the reply's footer
    /// reads, its k and whether a remote engine wrote it, whatever the settings are now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<AppSettings>,
    /// The message this one follows; none for the first of the conversation.
    #[serde(default)]
    pub parent_id: Option<i64>,
    /// The messages that follow the same one as this (itself among them), oldest first: more
    /// than one after a Regenerate or an Edit, each the start of its own branch.
    #[serde(default)]
    pub siblings: Vec<i64>,
    /// The tool calls the reply made, in order, each placed among its tokens.
    // `default` last: specta reads the attributes in order, and an absent list reads as empty.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub tools: Vec<crate::ToolCard>,
}

/// A reply the shell has started: the id to cancel it by, and its stored (empty) message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct ReplyStarted {
    pub request_id: u64,
    pub message: StoredMessage,
}

/// How chats leave the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "lowercase")]
pub enum ExportFormat {
    /// Specula's archive: every branch, token provenance, stats and settings; imports exactly.
    Json,
    /// The current branch, readable.
    Markdown,
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct ImportSummary {
    /// The format the file was read as (`specula`, `chatgpt`, `openwebui`, `llamacpp`).
    pub format: String,
    /// The new conversations' ids.
    pub imported: Vec<i64>,
    /// Titles of conversations already in the history, not imported again.
    pub skipped: Vec<String>,
}
