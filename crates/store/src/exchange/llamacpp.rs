//! The llama.cpp server's web UI export (ggml-org/llama.cpp, `tools/server/webui`, the Svelte
//! UI), in both shapes it has written.
//!
//! What was found, in that repository:
//! - `src/lib/types/database.d.ts`: the stored shapes. A conversation is
//!   `{ id, name, currNode: string | null, lastModified /* ms */ }`; a message is
//!   `{ id, convId, type: "root" | "system" | "text", timestamp /* ms */, role:
//!   "user" | "assistant" | "system" | "tool", content, parent: string | null, children:
//!   string[], thinking?, reasoningContent?, toolCalls?, extra?, timings?, model? }`. Every
//!   conversation has one synthetic root (`type: "root"`, role `system`, empty content,
//!   `parent: null`) that its first messages hang from; the system prompt, if any, is a
//!   `type: "system"` message below it. An edit or a regeneration adds a sibling.
//! - `src/lib/stores/conversations.svelte.ts` and
//!   `src/lib/components/app/settings/SettingsChat/SettingsChatImportExportTab.svelte`: the
//!   JSON export, `ExportedConversation = { conv, messages }`; "Export conversations" writes
//!   a JSON array of them (each with all its messages, root included, sorted by time), a
//!   single conversation's download one such object. Its own importer takes either.
//! - Newer versions of `conversations.svelte.ts` (`serializeSessionToJsonl`,
//!   `parseSessionsJsonl`; the marker `EXPORT_CONV.HARNESS = 'llama.app'` in
//!   `src/lib/constants/`) write JSON Lines instead, one `.jsonl` per conversation (a `.zip`
//!   of them for several): a session line `{"type":"session","harness":"llama.app", ...the
//!   conversation's fields}`, then one `{"type":"message","message":{...}}` line per message
//!   (with `toolCalls` as an array). Several sessions may follow each other in one file;
//!   lines of another `type` are ignored, as its reader does.
//!
//! So this reads a JSON array of `{conv, messages}`, or a stream of JSON values (one lone
//! value, or one a line): `{conv, messages}` objects and session/message lines, mixed as
//! they come. A `.zip` must be unpacked first.
//!
//! Left out, their children hung from the nearest kept ancestor: the root; tool results;
//! empty system and assistant messages (an assistant turn that only called a tool, see
//! [`tree::kept`]). Of a message only its `content` is read: reasoning (`thinking`,
//! `reasoningContent`), tool calls and attachments (`extra`) are not text of the chat.
//! A message whose parent is not in the file (the export of only the branch on screen
//! leaves out the root) starts a branch. The current branch ends at `currNode` (walking up
//! from it, as the UI does); a missing one falls back to the newest message, as in the UI.

use std::io::Read;

use serde::Deserialize;
use specula_protocol::Role;

use super::json::{self, buffered, peek};
use super::tree::{self, label, millis, Collector, Foreign, Node};
use super::{ArchivedConversation, ImportError};

/// Reads a llama.cpp web UI export, JSON or JSON Lines.
pub fn read(reader: impl Read) -> Result<Vec<ArchivedConversation>, ImportError> {
    super::collect(|take| each(reader, take))
}

/// Hands each conversation to `take` as it is read, checked.
pub fn each(reader: impl Read, take: super::Take<'_>) -> Result<(), ImportError> {
    let mut reader = buffered(reader)?;
    let mut import = Import { collector: Collector::new(take), count: 0, open: None };
    match peek(&mut reader)? {
        None => return Err(ImportError("the file is empty".into())),
        Some(b'[') => json::read_list(reader, |n, record| import.take(n, record))?,
        Some(_) => json::read_stream(reader, |n, record| import.take(n, record))?,
    }
    import.close()
}

/// One value of the file: a `{conv, messages}` object, or a JSONL session or message line.
/// The session line's conversation fields are listed here rather than flattened, which
/// would make serde buffer each whole record before reading it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    #[serde(rename = "type")]
    kind: Option<String>,
    conv: Option<Conv>,
    messages: Option<Vec<Message>>,
    message: Option<Message>,
    id: Option<String>,
    name: Option<String>,
    curr_node: Option<String>,
    last_modified: Option<f64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Conv {
    id: Option<String>,
    name: Option<String>,
    curr_node: Option<String>,
    last_modified: Option<f64>,
}

/// A message; its `children` are not read, the `parent` link alone decides.
#[derive(Deserialize)]
struct Message {
    id: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    timestamp: Option<f64>,
    role: Option<String>,
    #[serde(default, deserialize_with = "json::bounded_text")]
    content: Option<String>,
    parent: Option<String>,
}

/// The conversations read so far, and the JSONL session whose message lines are coming.
struct Import<'a> {
    collector: Collector<'a>,
    /// Conversations begun, to number them in errors.
    count: usize,
    open: Option<(Conv, Vec<Message>)>,
}

impl Import<'_> {
    /// Takes the `n`th value of the file.
    fn take(&mut self, n: usize, record: Record) -> Result<(), ImportError> {
        let refuse = |why: &str| Err(ImportError(format!("entry {n}: {why}")));
        match (record.kind.as_deref(), record.conv) {
            (Some("session"), _) => {
                self.close()?;
                let conv = Conv {
                    id: record.id,
                    name: record.name,
                    curr_node: record.curr_node,
                    last_modified: record.last_modified,
                };
                self.open = Some((conv, Vec::new()));
            }
            (Some("message"), _) => match (&mut self.open, record.message) {
                (Some((_, messages)), Some(message)) => messages.push(message),
                (None, _) => return refuse("a message line comes before any session line"),
                (Some(_), None) => return refuse("a message line has no message"),
            },
            (_, Some(conv)) => {
                self.close()?;
                self.add(conv, record.messages.unwrap_or_default())?;
            }
            // A record of a kind added since: skipped, as llama.cpp's own reader skips it.
            (Some(_), None) => {}
            (None, None) => return refuse("neither a conversation ({conv, messages}) nor a session or message line"),
        }
        Ok(())
    }

    /// Ends the open JSONL session, if any: all its message lines have come.
    fn close(&mut self) -> Result<(), ImportError> {
        match self.open.take() {
            Some((conv, messages)) => self.add(conv, messages),
            None => Ok(()),
        }
    }

    fn add(&mut self, conv: Conv, messages: Vec<Message>) -> Result<(), ImportError> {
        self.count += 1;
        let foreign = foreign(self.count, conv, messages)?;
        self.collector.add(self.count, foreign)
    }
}

/// The `n`th conversation of the file as a foreign conversation.
fn foreign(n: usize, conv: Conv, messages: Vec<Message>) -> Result<Foreign, ImportError> {
    let title = conv.name.unwrap_or_default();
    let Some(id) = conv.id.filter(|id| !id.is_empty()) else {
        return Err(ImportError(format!("{}: has no id", label(n, &title))));
    };
    let nodes: Vec<Node> = messages.into_iter().map(node).collect();
    Ok(Foreign {
        source_id: format!("llamacpp:{id}"),
        title,
        system_prompt: String::new(),
        // The root is created with the conversation: the earliest time is the conversation's.
        created_at: nodes.iter().filter_map(|n| n.created_at).min(),
        updated_at: millis(conv.last_modified),
        nodes,
        // A new conversation's `currNode` is "" until its first message.
        current: conv.curr_node.filter(|id| !id.is_empty()),
    })
}

fn node(message: Message) -> Node {
    let role = match message.role.as_deref() {
        _ if message.kind.as_deref() == Some("root") => None,
        Some("user") => Some(Role::User),
        Some("assistant") => Some(Role::Assistant),
        Some("system") => Some(Role::System),
        _ => None,
    };
    Node {
        id: message.id,
        parent: message.parent,
        message: role.and_then(|role| tree::kept(role, message.content.unwrap_or_default())),
        created_at: millis(message.timestamp),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSONL: &str = include_str!("../../tests/fixtures/llamacpp-export.jsonl");
    const JSON: &str = include_str!("../../tests/fixtures/llamacpp-export.json");

    #[test]
    fn a_jsonl_export_reads_every_session_and_every_message() {
        let conversations = read(JSONL.as_bytes()).unwrap();
        assert_eq!(conversations.len(), 2);
        let tutor = &conversations[0];
        assert_eq!(tutor.source_id, "llamacpp:7d3f9a2e-1b4c-4e8a-9f6d-2c5b8e1a0d11");
        assert_eq!(tutor.title, "Borrow checker");
        assert_eq!((tutor.created_at, tutor.updated_at), (1_751_900_000_000, 1_751_900_400_000));
        // The root is out; the system prompt, the question, both replies (one regenerated)
        // and the follow-up pair are in.
        assert_eq!(tutor.messages.len(), 6);
        assert_eq!(tutor.messages[0].role, Role::System);
        assert_eq!(tutor.messages[0].parent, None);
        assert_eq!(tutor.messages.iter().filter(|m| m.parent == Some(2)).count(), 2);
        assert_eq!(
            tutor.current_texts(),
            [
                "You are a patient Rust tutor.",
                "What does the borrow checker do?",
                "It makes sure every reference is valid for as long as it is used, at compile time.",
                "Give me an example.",
                "let r; { let x = 5; r = &x; } println!(\"{r}\"); // x does not live long enough"
            ]
        );
    }

    #[test]
    fn tool_calls_and_results_are_left_out() {
        let weather = &read(JSONL.as_bytes()).unwrap()[1];
        let texts: Vec<&str> = weather.messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(texts, ["What is the weather in Paris?", "It is 18 °C and sunny in Paris."]);
        assert_eq!(weather.messages[1].parent, Some(1));
        assert_eq!(weather.current, Some(2));
    }

    #[test]
    fn a_json_export_reads_with_its_branch_and_a_missing_root() {
        let conversations = read(JSON.as_bytes()).unwrap();
        assert_eq!(conversations.len(), 2);
        let edited = &conversations[0];
        assert_eq!(edited.messages.len(), 4);
        assert_eq!(edited.messages.iter().filter(|m| m.parent.is_none()).count(), 2);
        assert_eq!(edited.current_texts(), ["Name an even prime number.", "2 is the only even prime."]);
        // Exported as the branch on screen: its root is not in the file.
        let branch_only = &conversations[1];
        assert_eq!(branch_only.current_texts(), ["Hello", "Hi! How can I help?"]);
    }

    #[test]
    fn the_same_conversations_read_from_one_json_value_a_line() {
        let lines: Vec<String> = serde_json::from_str::<Vec<serde_json::Value>>(JSON)
            .unwrap()
            .iter()
            .map(|value| serde_json::to_string(value).unwrap())
            .collect();
        let from_lines = read(lines.join("\n").as_bytes()).unwrap();
        assert_eq!(from_lines, read(JSON.as_bytes()).unwrap());
        // A lone conversation object (one conversation's download) reads too.
        let lone = read(lines[0].as_bytes()).unwrap();
        assert_eq!(lone.len(), 1);
    }

    #[test]
    fn a_cycle_is_refused_naming_the_conversation() {
        let file = concat!(
            r#"{"type":"session","harness":"llama.app","id":"c1","name":"Loop","currNode":"a","lastModified":5}"#,
            "\n",
            r#"{"type":"message","message":{"id":"a","type":"text","role":"user","content":"A","parent":"b","timestamp":1,"children":[]}}"#,
            "\n",
            r#"{"type":"message","message":{"id":"b","type":"text","role":"assistant","content":"B","parent":"a","timestamp":2,"children":[]}}"#,
        );
        let error = read(file.as_bytes()).unwrap_err().0;
        assert!(error.starts_with("conversation 1 (\"Loop\"): ") && error.contains("cycle"), "{error}");
    }

    #[test]
    fn a_50000_deep_chain_reads() {
        const DEPTH: usize = 50_000;
        let mut file = String::from(r#"{"type":"session","id":"deep","name":"Deep","currNode":"m49999"}"#);
        for i in 0..DEPTH {
            let parent = if i == 0 { "null".to_string() } else { format!("\"m{}\"", i - 1) };
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            file.push_str(&format!(
                "\n{{\"type\":\"message\",\"message\":{{\"id\":\"m{i}\",\"type\":\"text\",\"role\":\"{role}\",\"content\":\"t{i}\",\"parent\":{parent},\"timestamp\":{i},\"children\":[]}}}}"
            ));
        }
        let conversation = &read(file.as_bytes()).unwrap()[0];
        assert_eq!(conversation.messages.len(), DEPTH);
        assert_eq!(conversation.current, Some(DEPTH as u32));
        assert!(conversation.messages.iter().skip(1).all(|m| m.parent == Some(m.key - 1)));
    }

    #[test]
    fn a_cut_file_is_refused_as_ending_early() {
        let error = read(&JSON.as_bytes()[..JSON.len() / 2]).unwrap_err().0;
        assert!(error.starts_with("the file ends early") && error.contains("line"), "{error}");
        let cut_line = &JSONL[..JSONL.find("\"children\"").unwrap()];
        let error = read(cut_line.as_bytes()).unwrap_err().0;
        assert!(error.starts_with("the file ends early (in entry"), "{error}");
        assert_eq!(read("  \n".as_bytes()).unwrap_err().0, "the file is empty");
    }

    #[test]
    fn wrong_types_and_strays_are_refused() {
        let error = read(r#"[{"conv":{"id":"a","name":"A"},"messages":[{"id":3}]}]"#.as_bytes()).unwrap_err().0;
        assert!(error.starts_with("conversation 1: a field has the wrong type") && error.contains("column"), "{error}");
        let error = read(r#"{"type":"message","message":{"id":"m"}}"#.as_bytes()).unwrap_err().0;
        assert_eq!(error, "entry 1: a message line comes before any session line");
        let error = read(r#"{"hello":"world"}"#.as_bytes()).unwrap_err().0;
        assert!(error.starts_with("entry 1: neither a conversation"), "{error}");
        // A kind of line added since is skipped.
        let ok = read("{\"type\":\"session\",\"id\":\"s\",\"name\":\"S\"}\n{\"type\":\"bookmark\"}\n".as_bytes());
        assert_eq!(ok.unwrap().len(), 0, "a session with no message is dropped");
    }

    #[test]
    fn a_message_id_used_twice_is_refused() {
        let message =
            r#"{"id":"m","type":"text","role":"user","content":"x","parent":null,"timestamp":1,"children":[]}"#;
        let file = format!(r#"[{{"conv":{{"id":"c","name":"Twice"}},"messages":[{message},{message}]}}]"#);
        let error = read(file.as_bytes()).unwrap_err().0;
        assert!(error.starts_with("conversation 1 (\"Twice\"): ") && error.contains("used twice"), "{error}");
    }
}
