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

/// One round of a reply that called tools: its text up to its calls (their own markup left
/// out), and those calls; the last round is the answer, with none.
#[derive(Debug, PartialEq)]
pub struct Round<'a> {
    pub text: String,
    pub calls: Vec<&'a ToolCard>,
}

/// A reply's tokens and its cards as the rounds the model wrote: split at each card's `at`
/// (cards of one place share a round). The prompt of the reply's next turn and its Markdown
/// export both read the reply this way.
pub fn rounds<'a>(tokens: &[crate::TokenEvent], cards: &'a [ToolCard]) -> Vec<Round<'a>> {
    let text = |from: usize, to: usize| -> String {
        let from = from.min(tokens.len());
        tokens[from..to.clamp(from, tokens.len())].iter().map(|t| t.text.as_str()).collect()
    };
    let mut rounds = Vec::new();
    let mut from = 0;
    let mut cards = cards.iter().peekable();
    while let Some(card) = cards.next() {
        // Never before the last round's end (an archive may say anything).
        let at = (card.at as usize).max(from);
        let mut calls = vec![card];
        while let Some(next) = cards.next_if(|c| c.at == card.at) {
            calls.push(next);
        }
        let names: Vec<&str> = calls.iter().map(|c| c.tool.as_str()).collect();
        rounds.push(Round { text: crate::tool_calls::parse(&text(from, at), &names).content, calls });
        from = at;
    }
    rounds.push(Round { text: text(from, tokens.len()), calls: Vec::new() });
    rounds
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
    /// The servers are being started (their tools are listed when they answer).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_never_panic_on_places_out_of_order_or_past_the_end() {
        let token = |text: &str| crate::TokenEvent {
            id: 0,
            text: text.into(),
            source: crate::Source::Target,
            p: None,
            q: None,
            alternatives: Vec::new(),
        };
        let card = |id: &str, at| ToolCard {
            id: id.into(),
            server: "s".into(),
            tool: "t".into(),
            arguments: serde_json::Value::Null,
            at,
            running: false,
            outcome: None,
        };
        let tokens = [token("a"), token("b"), token("c")];
        let cards = [card("1", 9), card("2", 1)];
        let rounds = rounds(&tokens, &cards);
        let texts: Vec<&str> = rounds.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(texts, ["abc", "", ""]);
        assert_eq!(rounds.iter().map(|r| r.calls.len()).collect::<Vec<_>>(), [1, 1, 0]);
    }
}
