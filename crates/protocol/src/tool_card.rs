//! A tool call inside a reply, as the window's card shows it and the history keeps it: asked
//! about, running, then what became of it. The reply's text is split at each card's `at` when
//! the chat goes back to the model: the text before a call, the call, its result, the rest.

use serde::{Deserialize, Serialize};
use specta::Type;

/// One tool call of a reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct ToolCard {
    /// Unique within the reply; the approval names it.
    pub id: String,
    /// The MCP server that has the tool.
    pub server: String,
    /// The tool's name as offered to the model.
    pub tool: String,
    /// The arguments the model wrote (a string when they were not JSON).
    pub arguments: serde_json::Value,
    /// How many of the reply's tokens came before the call was read: the card's place, and
    /// where the reply's text splits into the turns the model saw.
    pub at: u32,
    /// Started: approved (or approved for good earlier) and running.
    pub running: bool,
    /// How it ended; none while it is asked about or running.
    // `default` last: specta reads the attributes in order, and an absent field reads as none.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub outcome: Option<ToolOutcome>,
}

impl ToolCard {
    /// Waiting for the person's answer: Allow once, Always for this tool, or Deny.
    pub fn asking(&self) -> bool {
        !self.running && self.outcome.is_none()
    }
}

/// What became of a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolOutcome {
    Ran {
        text: String,
        /// The tool said the call failed (its result says why).
        is_error: bool,
        /// The result's length in characters before it was cut to the cap.
        cut_from: Option<usize>,
        ms: u64,
    },
    /// The person said no; the model is told so.
    Denied,
    /// The server failed, hung past the limit, or went away.
    Failed { reason: String },
    /// Not run: the reply had made as many calls as it may, was stopped, or repeated itself.
    Skipped { reason: String },
}

impl ToolOutcome {
    /// The tool message the model reads.
    pub fn for_model(&self) -> String {
        match self {
            ToolOutcome::Ran { text, is_error: false, .. } => text.clone(),
            ToolOutcome::Ran { text, is_error: true, .. } => format!("The tool reported an error: {text}"),
            ToolOutcome::Denied => "The user denied this call; it did not run.".into(),
            ToolOutcome::Failed { reason } => sentence(reason),
            ToolOutcome::Skipped { reason } => format!("Not run: {reason}"),
        }
    }
}

/// A reason (written in lower case, to follow a colon) as a sentence of its own.
pub fn sentence(reason: &str) -> String {
    let mut chars = reason.chars();
    chars.next().map_or_else(String::new, |first| first.to_uppercase().chain(chars).collect())
}

/// The person's answer to a call about to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "snake_case")]
pub enum ToolDecision {
    Once,
    /// This call and every later call of this tool, for the rest of the chat.
    Always,
    Deny,
}

/// The app's MCP servers as the Tools dialog shows them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Type)]
pub struct McpStatus {
    pub servers: Vec<McpServer>,
    /// A server is being started (each one's tools are listed when it answers).
    pub starting: bool,
    /// Why the configuration could not be read (the file is kept as it is).
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct McpServer {
    pub name: String,
    /// How it is reached (the command, or the URL without its query), never a key.
    pub endpoint: String,
    pub tools: Vec<McpTool>,
    /// It has not answered yet: its tools are listed when it does, and the others' meanwhile.
    pub starting: bool,
    /// Why it cannot be used; it stays listed.
    pub error: Option<String>,
    /// Something to know while it works (a tool list cut short).
    pub notice: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct McpTool {
    /// The name it is offered to the model under.
    pub name: String,
    pub description: String,
    /// Offered to the model (a switch in the dialog).
    pub enabled: bool,
}
