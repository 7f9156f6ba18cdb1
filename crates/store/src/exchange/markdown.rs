//! A conversation's current branch as Markdown: for reading and sharing, not for import.

use specula_protocol::history::Conversation;
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
        out.push_str(&format!("## {speaker}\n\n{}\n\n", m.content.trim_end()));
        for card in &m.tools {
            out.push_str(&tool_card(card));
        }
        if let Some(label) = m.settings_label.as_deref().filter(|_| m.role == Role::Assistant) {
            let speed = m.stats.as_ref().map(|s| format!("{:.1} tok/s · ", s.tokens_per_second)).unwrap_or_default();
            out.push_str(&format!("*{speed}{label}*\n\n"));
        }
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
        };
        assert_eq!(
            conversation(&c),
            "# Primes\n\n> **System:** Be brief.\n> Very.\n\n## You\n\nName a prime.\n\n## Assistant\n\n7\n\n"
        );
    }
}
