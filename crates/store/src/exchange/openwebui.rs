//! Open WebUI's "Export chats" (Settings → Chats → Export, or a chat's own JSON download).
//!
//! The file is a JSON array of chats, as Open WebUI's `/api/v1/chats/all` returns them:
//!
//! ```json
//! [{ "id": "…", "title": "…", "created_at": 1717000000, "updated_at": 1717000500,
//!    "chat": { "title": "…", "params": { "system": "…" }, "system": "…", "timestamp": 1717000000000,
//!      "history": { "currentId": "<message id>", "messages": { "<message id>": {
//!          "id": "…", "parentId": "<message id>" | null, "childrenIds": ["…"],
//!          "role": "user|assistant|system", "content": "…", "timestamp": 1717000001 } } },
//!      "messages": [ …the current branch, the same message objects… ] } }]
//! ```
//!
//! `chat.history` is the whole tree and is what is read; a chat from before Open WebUI kept
//! one has only the `chat.messages` list, read as one branch in its order. Times are
//! seconds, but the chat's own `timestamp` is milliseconds (see [`time`]). The chat's system
//! prompt (`chat.params.system`, or `chat.system` in older exports) becomes the
//! conversation's. Left out, their children hung from the nearest kept ancestor: messages
//! of a role the history has no place for (tool results, or anything else), and empty
//! system and assistant messages (a reply stopped before its first word, see
//! [`tree::kept`]). A message's `files` and `sources` (attachments, web results) are not
//! text of the chat and are not read.

use std::io::Read;

use serde::Deserialize;
use specula_protocol::Role;

use super::json::{self, Entries};
use super::tree::{self, label, millis, seconds_to_ms, Collector, Foreign, Node};
use super::{ArchivedConversation, ImportError};

/// Reads an Open WebUI chats export.
pub fn read(reader: impl Read) -> Result<Vec<ArchivedConversation>, ImportError> {
    super::collect(|take| each(reader, take))
}

/// Hands each conversation to `take` as it is read, checked.
pub fn each(reader: impl Read, take: super::Take<'_>) -> Result<(), ImportError> {
    let mut collector = Collector::new(take);
    json::read_list(reader, |n, raw: RawChat| collector.add(n, foreign(n, raw)?))
}

#[derive(Deserialize)]
struct RawChat {
    id: Option<String>,
    title: Option<String>,
    chat: Option<Body>,
    created_at: Option<f64>,
    updated_at: Option<f64>,
}

#[derive(Deserialize)]
struct Body {
    title: Option<String>,
    history: Option<History>,
    messages: Option<Vec<RawMessage>>,
    params: Option<Params>,
    system: Option<String>,
    timestamp: Option<f64>,
}

#[derive(Deserialize)]
struct History {
    messages: Option<Entries<RawMessage>>,
    #[serde(rename = "currentId")]
    current_id: Option<String>,
}

/// A message; its `childrenIds` are not read, the `parentId` link alone decides.
#[derive(Deserialize)]
struct RawMessage {
    #[serde(rename = "parentId")]
    parent_id: Option<String>,
    role: Option<String>,
    #[serde(default, deserialize_with = "json::bounded_text")]
    content: Option<String>,
    timestamp: Option<f64>,
}

#[derive(Deserialize)]
struct Params {
    system: Option<String>,
}

/// The `n`th chat of the file as a foreign conversation.
fn foreign(n: usize, raw: RawChat) -> Result<Foreign, ImportError> {
    let body = raw.chat.unwrap_or(Body {
        title: None,
        history: None,
        messages: None,
        params: None,
        system: None,
        timestamp: None,
    });
    let title = raw.title.filter(|t| !t.is_empty()).or(body.title).unwrap_or_default();
    let Some(id) = raw.id.filter(|id| !id.is_empty()) else {
        return Err(ImportError(format!("{}: has no id", label(n, &title))));
    };
    let system_prompt = body.params.and_then(|p| p.system).or(body.system).unwrap_or_default();
    let (nodes, current) = nodes(body.history, body.messages);
    Ok(Foreign {
        source_id: format!("openwebui:{id}"),
        title,
        system_prompt,
        created_at: time(raw.created_at).or_else(|| time(body.timestamp)),
        updated_at: time(raw.updated_at),
        nodes,
        current,
    })
}

/// The tree's nodes and the current one: from the history when it has messages, else the
/// list as one branch (each message following the one before it).
fn nodes(history: Option<History>, list: Option<Vec<RawMessage>>) -> (Vec<Node>, Option<String>) {
    let history = history.map(|h| (h.messages.unwrap_or_default().0, h.current_id));
    match history {
        Some((messages, current)) if !messages.is_empty() => {
            (messages.into_iter().map(|(id, m)| node(id, m.parent_id.clone(), m)).collect(), current)
        }
        _ => {
            let list = list.unwrap_or_default();
            let current = list.len().checked_sub(1).map(|last| last.to_string());
            // The list's own ids may repeat or be missing in old exports: its place names it.
            let nodes = list
                .into_iter()
                .enumerate()
                .map(|(i, m)| node(i.to_string(), i.checked_sub(1).map(|p| p.to_string()), m));
            (nodes.collect(), current)
        }
    }
}

fn node(id: String, parent: Option<String>, message: RawMessage) -> Node {
    let role = match message.role.as_deref() {
        Some("user") => Some(Role::User),
        Some("assistant") => Some(Role::Assistant),
        Some("system") => Some(Role::System),
        _ => None,
    };
    let created_at = time(message.timestamp);
    Node {
        id,
        parent,
        message: role.and_then(|role| tree::kept(role, message.content.unwrap_or_default())),
        created_at,
    }
}

/// Open WebUI writes seconds, but milliseconds in a chat's own `timestamp` (and in some
/// versions' messages): a value past 10^11, the year 5138 in seconds, is milliseconds already.
fn time(value: Option<f64>) -> Option<i64> {
    match value {
        Some(v) if v > 1e11 => millis(Some(v)),
        seconds => seconds_to_ms(seconds),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = include_str!("../../tests/fixtures/openwebui-export.json");

    fn fixture() -> Vec<ArchivedConversation> {
        read(FIXTURE.as_bytes()).unwrap()
    }

    #[test]
    fn every_chat_and_every_message_of_the_tree_is_read() {
        let chats = fixture();
        assert_eq!(chats.len(), 2);
        let tree = &chats[0];
        assert_eq!(tree.source_id, "openwebui:0b6a2f1c-5d1e-4f8e-9a51-3a1f7c2b9d10");
        assert_eq!(tree.title, "Sourdough starter");
        assert_eq!(tree.system_prompt, "You are a patient baker.");
        assert_eq!((tree.created_at, tree.updated_at), (1_718_000_000_000, 1_718_000_900_000));
        // Two questions (one edited), three replies (one regenerated) and a follow-up pair;
        // the errored empty reply is left out.
        assert_eq!(tree.messages.len(), 7);
        assert_eq!(tree.messages[0].created_at, 1_718_000_010_000);
    }

    #[test]
    fn the_current_branch_follows_current_id() {
        let tree = &fixture()[0];
        assert_eq!(
            tree.current_texts(),
            [
                "How do I start a sourdough starter?",
                "Mix equal weights of flour and water in a jar, then feed it daily.",
                "How long until it is ready?",
                "Usually five to ten days, once it doubles within a few hours of a feed."
            ]
        );
        // The regenerated reply and the edited question's branch are there too.
        let regenerated = tree.messages.iter().filter(|m| m.parent == Some(1)).count();
        assert_eq!(regenerated, 2);
        assert_eq!(tree.messages.iter().filter(|m| m.parent.is_none()).count(), 2);
    }

    #[test]
    fn a_chat_with_no_history_reads_its_list_as_one_branch() {
        let legacy = &fixture()[1];
        assert_eq!(legacy.source_id, "openwebui:legacy-1");
        assert_eq!(legacy.system_prompt, "Be terse.");
        // No created_at: the chat's own timestamp, in milliseconds.
        assert_eq!(legacy.created_at, 1_700_000_000_000);
        assert_eq!(legacy.current_texts(), ["Hi", "Hello.", "2+2?", "4."]);
    }

    #[test]
    fn a_cycle_is_refused_naming_the_chat() {
        let file = r#"[{"id":"x","title":"Loop","chat":{"history":{"currentId":"a","messages":{
            "a":{"id":"a","parentId":"b","role":"user","content":"A","timestamp":1},
            "b":{"id":"b","parentId":"a","role":"assistant","content":"B","timestamp":2}}}}}]"#;
        let error = read(file.as_bytes()).unwrap_err().0;
        assert!(error.starts_with("conversation 1 (\"Loop\"): ") && error.contains("cycle"), "{error}");
    }

    #[test]
    fn a_50000_deep_chain_reads() {
        const DEPTH: usize = 50_000;
        let mut messages = Vec::with_capacity(DEPTH);
        for i in 0..DEPTH {
            let parent = if i == 0 { "null".to_string() } else { format!("\"m{}\"", i - 1) };
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            messages.push(format!(
                r#""m{i}":{{"id":"m{i}","parentId":{parent},"childrenIds":[],"role":"{role}","content":"t{i}","timestamp":{}}}"#,
                1_700_000_000 + i
            ));
        }
        let file = format!(
            r#"[{{"id":"deep","title":"Deep","chat":{{"history":{{"currentId":"m{}","messages":{{{}}}}}}}}}]"#,
            DEPTH - 1,
            messages.join(",")
        );
        let chat = &read(file.as_bytes()).unwrap()[0];
        assert_eq!(chat.messages.len(), DEPTH);
        assert_eq!(chat.current, Some(DEPTH as u32));
        assert!(chat.messages.iter().skip(1).all(|m| m.parent == Some(m.key - 1)));
    }

    #[test]
    fn a_cut_file_is_refused_as_ending_early() {
        let error = read(&FIXTURE.as_bytes()[..FIXTURE.len() * 2 / 3]).unwrap_err().0;
        assert!(error.starts_with("the file ends early") && error.contains("line"), "{error}");
    }

    #[test]
    fn wrong_types_are_refused_naming_the_chat() {
        let file = r#"[{"id":"a","title":"A","chat":{"messages":[{"role":"user","content":5}]}}]"#;
        let error = read(file.as_bytes()).unwrap_err().0;
        assert!(error.starts_with("conversation 1: a field has the wrong type") && error.contains("column"), "{error}");
        let error = read(r#"[{"title":"No id","chat":{}}]"#.as_bytes()).unwrap_err().0;
        assert_eq!(error, "conversation 1 (\"No id\"): has no id");
    }

    #[test]
    fn times_in_seconds_and_in_milliseconds_both_read() {
        assert_eq!(time(Some(1_700_000_000.0)), Some(1_700_000_000_000));
        assert_eq!(time(Some(1_700_000_000_123.0)), Some(1_700_000_000_123));
        assert_eq!(time(None), None);
    }
}
