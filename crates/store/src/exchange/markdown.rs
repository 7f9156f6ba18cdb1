//! A conversation's current branch as Markdown: for reading and sharing, not for import.

use specula_protocol::history::{Conversation, StoredMessage};
use specula_protocol::Role;

/// The title, the system prompt if any, then each message under its speaker's heading; a
/// reply's footer (its speed and settings) in italics. Messages are written as they are:
/// they are Markdown already.
pub fn conversation(c: &Conversation) -> String {
    let mut out = format!("# {}\n\n", c.title.trim());
    if !c.system_prompt.trim().is_empty() {
        out.push_str(&format!("> **System:** {}\n\n", c.system_prompt.trim().replace('\n', "\n> ")));
    }
    for m in &c.messages {
        let speaker = match m.role {
            Role::User => "You",
            Role::Assistant => "Assistant",
            Role::System => "System",
            Role::Tool => "Tool",
        };
        out.push_str(&format!("## {speaker}\n\n"));
        out.push_str(&body(m));
        if let Some(label) = m.settings_label.as_deref().filter(|_| m.role == Role::Assistant) {
            let speed = m.stats.as_ref().map(|s| format!("{:.1} tok/s · ", s.tokens_per_second)).unwrap_or_default();
            out.push_str(&format!("*{speed}{label}*\n\n"));
        }
    }
    out
}

/// A message's text; a reply that called tools as its rounds, each call quoted where the model
/// made it (the call's own markup left out: the quote says it).
fn body(m: &StoredMessage) -> String {
    let tokens = m.tokens.as_deref().unwrap_or_default();
    if m.tools.is_empty() || tokens.is_empty() {
        let cards: String = m.tools.iter().map(tool_card).collect();
        return format!("{}\n\n{cards}", m.content.trim_end());
    }
    let mut out = String::new();
    for round in specula_protocol::tool_calls::rounds(tokens, &m.tools) {
        if !round.text.trim().is_empty() {
            out.push_str(&format!("{}\n\n", round.text.trim_end()));
        }
        out.extend(round.calls.into_iter().map(tool_card));
    }
    out
}

/// A tool call as a quote: the call, then what came of it (a long result stays in the JSON
/// archive; the reader here gets its first lines).
fn tool_card(card: &specula_protocol::ToolCard) -> String {
    let outcome = card.outcome.as_ref().map_or("not finished".to_string(), |o| match o {
        specula_protocol::ToolOutcome::Ran { text, ms, .. } => {
            let shown: String = text.chars().take(500).collect();
            let more = if text.chars().count() > 500 { " …" } else { "" };
            format!("result in {ms} ms: {}{more}", shown.replace('\n', "\n> "))
        }
        other => other.for_model(),
    });
    format!("> **Tool call** `{}` `{}` (server `{}`)\n> {outcome}\n\n", card.tool, card.arguments, card.server)
}

#[cfg(test)]
mod tests {
    use super::*;
    use specula_protocol::history::StoredMessage;

    fn message(role: Role, content: &str) -> StoredMessage {
        StoredMessage {
            id: 1,
            role,
            content: content.into(),
            tokens: None,
            stats: None,
            finish_reason: None,
            settings_label: None,
            settings: None,
            parent_id: None,
            siblings: Vec::new(),
            tools: Vec::new(),
        }
    }

    #[test]
    fn a_branch_reads_as_headed_turns() {
        let c = Conversation {
            id: 1,
            title: "Primes".into(),
            system_prompt: "Be brief.\nVery.".into(),
            updated_at: 0,
            messages: vec![message(Role::User, "Name a prime."), message(Role::Assistant, "7\n")],
            thinking: None,
            overflow: None,
        };
        assert_eq!(
            conversation(&c),
            "# Primes\n\n> **System:** Be brief.\n> Very.\n\n## You\n\nName a prime.\n\n## Assistant\n\n7\n\n"
        );
    }

    #[test]
    fn a_reply_that_called_a_tool_reads_with_the_call_quoted_where_it_was_made() {
        let token = |text: &str| specula_protocol::TokenEvent {
            id: 0,
            text: text.into(),
            source: specula_protocol::Source::Target,
            p: None,
            q: None,
            alternatives: Vec::new(),
        };
        let texts =
            ["Adding.", "\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>", "It is 3."];
        let mut reply = message(Role::Assistant, &texts.concat());
        reply.tokens = Some(texts.iter().map(|t| token(t)).collect());
        reply.tools = vec![specula_protocol::ToolCard {
            id: "call_0_add".into(),
            server: "arith".into(),
            tool: "add".into(),
            arguments: serde_json::json!({"a": 1}),
            at: 2,
            running: false,
            outcome: Some(specula_protocol::ToolOutcome::Ran {
                text: "3".into(),
                is_error: false,
                cut_from: None,
                ms: 2,
            }),
        }];
        let c = Conversation {
            id: 1,
            title: "Sum".into(),
            system_prompt: String::new(),
            updated_at: 0,
            messages: vec![reply],
            thinking: None,
            overflow: None,
        };
        assert_eq!(
            conversation(&c),
            "# Sum\n\n## Assistant\n\nAdding.\n\n> **Tool call** `add` `{\"a\":1}` (server `arith`)\n> result in 2 ms: 3\n\nIt is 3.\n\n"
        );
    }
}
