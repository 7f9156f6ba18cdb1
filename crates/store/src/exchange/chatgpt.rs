//! ChatGPT's data export: the `conversations.json` of the zip that "Export data" mails.
//!
//! The file is a JSON array of conversations:
//!
//! ```json
//! [{ "title": "…", "create_time": 1717171717.123, "update_time": 1717171800.5,
//!    "conversation_id": "…", "id": "…", "current_node": "<node id>",
//!    "mapping": { "<node id>": { "id": "<node id>", "parent": "<node id>" | null, "children": ["…"],
//!       "message": null | { "id": "…", "author": { "role": "system|user|assistant|tool" },
//!          "create_time": 1717171717.2 | null, "recipient": "all",
//!          "content": { "content_type": "text", "parts": ["…", { "asset_pointer": "…" }] },
//!          "metadata": { "is_visually_hidden_from_conversation": true } } } } }]
//! ```
//!
//! Every branch is kept: an edited question and a regenerated answer are siblings under the
//! same parent. Left out, their children hung from the nearest kept ancestor:
//! - nodes with no message (the tree's root);
//! - hidden messages (`metadata.is_visually_hidden_from_conversation`): the empty system
//!   root and the custom instructions, which ChatGPT sends but never shows;
//! - tool results (`author.role` `tool`) and any other author ChatGPT may add;
//! - an assistant's call to a tool (`recipient` not `all`: code for Python, a search, an
//!   image prompt), which is instructions to a tool, not a reply to the user;
//! - every `content_type` but `text` and `multimodal_text` (code, execution output, browsing
//!   displays and quotes, reasoning "thoughts", system errors, editable context): they are
//!   tool traffic or hidden context, and have no text a person wrote or read as the chat;
//! - empty system and assistant messages (see [`tree::kept`]).
//!
//! A visible system message with text (rare: some custom GPTs) stays, as a system message.
//!
//! A message's text is its string `parts` joined by newlines; the other parts (images,
//! audio) are left out. The current branch ends at `current_node` or, when that one is left
//! out, at its nearest kept ancestor. Custom instructions being skipped, the system prompt
//! stays empty.

use std::io::Read;

use serde::Deserialize;
use specula_protocol::Role;

use super::json::{self, lenient_text, Entries};
use super::tree::{self, label, seconds_to_ms, Collector, Foreign, Node};
use super::{ArchivedConversation, ImportError};

/// Reads a `conversations.json`.
pub fn read(reader: impl Read) -> Result<Vec<ArchivedConversation>, ImportError> {
    super::collect(|take| each(reader, take))
}

/// Hands each conversation to `take` as it is read, checked.
pub fn each(reader: impl Read, take: super::Take<'_>) -> Result<(), ImportError> {
    let mut collector = Collector::new(take);
    json::read_list(reader, |n, raw: RawConversation| collector.add(n, foreign(n, raw)?))
}

#[derive(Deserialize)]
struct RawConversation {
    title: Option<String>,
    create_time: Option<f64>,
    update_time: Option<f64>,
    mapping: Option<Entries<RawNode>>,
    current_node: Option<String>,
    conversation_id: Option<String>,
    id: Option<String>,
}

/// A node of the mapping; its `children` are not read, the `parent` link alone decides.
#[derive(Deserialize)]
struct RawNode {
    message: Option<RawMessage>,
    parent: Option<String>,
}

#[derive(Deserialize)]
struct RawMessage {
    author: Author,
    create_time: Option<f64>,
    content: Option<Content>,
    metadata: Option<Metadata>,
    recipient: Option<String>,
}

#[derive(Deserialize)]
struct Author {
    role: String,
}

#[derive(Deserialize)]
struct Content {
    content_type: String,
    parts: Option<Vec<Part>>,
}

/// A part of a message: text, or an object (an image, a sound) read as none.
#[derive(Deserialize)]
struct Part(#[serde(deserialize_with = "lenient_text")] Option<String>);

#[derive(Deserialize)]
struct Metadata {
    is_visually_hidden_from_conversation: Option<bool>,
}

/// The `n`th conversation of the file as a foreign conversation.
fn foreign(n: usize, raw: RawConversation) -> Result<Foreign, ImportError> {
    let title = raw.title.unwrap_or_default();
    let id = raw.conversation_id.or(raw.id).filter(|id| !id.is_empty());
    let Some(id) = id else {
        return Err(ImportError(format!("{}: has neither a conversation_id nor an id", label(n, &title))));
    };
    let nodes = raw.mapping.unwrap_or_default().0.into_iter().map(|(id, node)| tree_node(id, node)).collect();
    Ok(Foreign {
        source_id: format!("chatgpt:{id}"),
        title,
        system_prompt: String::new(),
        created_at: seconds_to_ms(raw.create_time),
        updated_at: seconds_to_ms(raw.update_time),
        nodes,
        current: raw.current_node,
    })
}

/// A node of the mapping, named by its key there (what `parent` and `current_node` use).
fn tree_node(id: String, node: RawNode) -> Node {
    let created_at = node.message.as_ref().and_then(|m| seconds_to_ms(m.create_time));
    Node { id, parent: node.parent, message: node.message.and_then(kept), created_at }
}

/// What the history keeps of a message (see the module's notes); none for what it leaves out.
fn kept(message: RawMessage) -> Option<(Role, String)> {
    let hidden = message.metadata.and_then(|m| m.is_visually_hidden_from_conversation).unwrap_or(false);
    let to_a_tool = message.recipient.is_some_and(|r| r != "all");
    let content = message.content?;
    if hidden || to_a_tool || !matches!(content.content_type.as_str(), "text" | "multimodal_text") {
        return None;
    }
    let role = match message.author.role.as_str() {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "system" => Role::System,
        _ => return None,
    };
    let texts: Vec<String> = content.parts.unwrap_or_default().into_iter().filter_map(|p| p.0).collect();
    tree::kept(role, texts.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = include_str!("../../tests/fixtures/chatgpt-conversations.json");

    fn fixture() -> Vec<ArchivedConversation> {
        read(FIXTURE.as_bytes()).unwrap()
    }

    /// The texts from the first message to `current`, following the parents.
    #[test]
    fn every_conversation_with_messages_is_read_and_the_empty_one_left_out() {
        let conversations = fixture();
        let ids: Vec<&str> = conversations.iter().map(|c| c.source_id.as_str()).collect();
        assert_eq!(ids, ["chatgpt:c0ffee00-0001", "chatgpt:c0ffee00-0002", "chatgpt:c0ffee00-0003"]);
        assert_eq!(conversations[0].title, "Capital of Australia");
        assert_eq!(conversations[0].created_at, 1_717_000_000_500);
        assert_eq!(conversations[0].updated_at, 1_717_000_300_250);
        assert!(conversations.iter().all(|c| c.system_prompt.is_empty()));
    }

    #[test]
    fn an_edited_question_keeps_both_branches_and_the_current_one() {
        let edited = &fixture()[0];
        let texts: Vec<&str> = edited.messages.iter().map(|m| m.content.as_str()).collect();
        // The hidden system root and custom instructions are out; both questions and both
        // replies are in, each reply under its own question, both questions at the top.
        assert_eq!(
            texts,
            [
                "What is the capital of Australia?",
                "The capital of Australia is Sydney.",
                "What is the capital of Australia? Not its biggest city.",
                "Canberra is the capital of Australia; Sydney is its biggest city."
            ]
        );
        assert_eq!(edited.messages[0].parent, None);
        assert_eq!(edited.messages[2].parent, None);
        assert_eq!(edited.messages[3].parent, Some(3));
        assert_eq!(edited.messages[1].role, Role::Assistant);
        assert_eq!(edited.messages[0].created_at, 1_717_000_010_000);
        assert_eq!(
            edited.current_texts(),
            [
                "What is the capital of Australia? Not its biggest city.",
                "Canberra is the capital of Australia; Sydney is its biggest city."
            ]
        );
    }

    #[test]
    fn a_regenerated_answer_is_a_sibling_and_current_follows_current_node() {
        let regenerated = &fixture()[1];
        assert_eq!(regenerated.messages.len(), 3);
        assert_eq!(regenerated.messages[1].parent, Some(1));
        assert_eq!(regenerated.messages[2].parent, Some(1));
        // The user went back to the first answer: current_node, not the newest, decides.
        assert_eq!(
            regenerated.current_texts(),
            [
                "Write a haiku about rain.",
                "Soft rain on tin roofs\nthe gutters hum an old song\nnight drinks it slowly"
            ]
        );
    }

    #[test]
    fn tool_traffic_is_left_out_and_images_drop_from_the_text() {
        let tools = &fixture()[2];
        let texts: Vec<&str> = tools.messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(
            texts,
            [
                "What is 2 to the power of 100?",
                "2 to the power of 100 is 1267650600228229401496703205376.",
                "What is in this picture?",
                "A tabby cat asleep on a keyboard."
            ]
        );
        // The answer hangs from the question, the tool call and its output being left out.
        assert_eq!(tools.messages[1].parent, Some(1));
        assert_eq!(tools.current, Some(4));
    }

    #[test]
    fn parent_links_win_over_children_lists_that_disagree() {
        let file = r#"[{"title":"Disagree","conversation_id":"d","current_node":"b","mapping":{
            "a":{"id":"a","parent":null,"children":[],"message":{"author":{"role":"user"},"create_time":1,"content":{"content_type":"text","parts":["A"]}}},
            "b":{"id":"b","parent":"a","children":["a"],"message":{"author":{"role":"assistant"},"create_time":2,"content":{"content_type":"text","parts":["B"]}}}}}]"#;
        let conversation = &read(file.as_bytes()).unwrap()[0];
        assert_eq!(conversation.current_texts(), ["A", "B"]);
    }

    #[test]
    fn a_cycle_is_refused_naming_the_conversation() {
        let file = r#"[{"title":"Fine","id":"ok","mapping":{"a":{"parent":null,"message":{"author":{"role":"user"},"content":{"content_type":"text","parts":["hi"]}}}}},
            {"title":"Loop","id":"loop","mapping":{
            "a":{"parent":"b","message":{"author":{"role":"user"},"content":{"content_type":"text","parts":["A"]}}},
            "b":{"parent":"a","message":{"author":{"role":"assistant"},"content":{"content_type":"text","parts":["B"]}}}}}]"#;
        let error = read(file.as_bytes()).unwrap_err().0;
        assert!(error.starts_with("conversation 2 (\"Loop\"): ") && error.contains("cycle"), "{error}");
    }

    #[test]
    fn a_50000_deep_chain_reads() {
        const DEPTH: usize = 50_000;
        let mut file = String::from(r#"[{"title":"Deep","id":"deep","current_node":"n49999","mapping":{"#);
        for i in 0..DEPTH {
            let parent = if i == 0 { "null".to_string() } else { format!("\"n{}\"", i - 1) };
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            let comma = if i + 1 < DEPTH { "," } else { "" };
            file.push_str(&format!(
                r#""n{i}":{{"parent":{parent},"message":{{"author":{{"role":"{role}"}},"create_time":{i},"content":{{"content_type":"text","parts":["m{i}"]}}}}}}{comma}"#
            ));
        }
        file.push_str("}}]");
        let conversation = &read(file.as_bytes()).unwrap()[0];
        assert_eq!(conversation.messages.len(), DEPTH);
        assert_eq!(conversation.current, Some(DEPTH as u32));
        assert!(conversation.messages.iter().skip(1).all(|m| m.parent == Some(m.key - 1)));
        assert_eq!(conversation.messages[DEPTH - 1].content, "m49999");
    }

    #[test]
    fn a_cut_file_is_refused_as_ending_early() {
        let error = read(&FIXTURE.as_bytes()[..FIXTURE.len() / 2]).unwrap_err().0;
        assert!(error.starts_with("the file ends early") && error.contains("line"), "{error}");
    }

    #[test]
    fn wrong_types_are_refused_naming_the_conversation() {
        let error = read(r#"[{"title":"A","id":"a"},{"title":7,"id":"b"}]"#.as_bytes()).unwrap_err().0;
        assert!(error.starts_with("conversation 2: a field has the wrong type") && error.contains("column"), "{error}");
        let error = read(r#"{"conversations":[]}"#.as_bytes());
        // A lone object reads as one conversation, which has no id.
        assert!(error.unwrap_err().0.contains("neither a conversation_id nor an id"));
        let error = read(r#""hello""#.as_bytes()).unwrap_err().0;
        assert!(error.starts_with("the file is not a list of conversations"), "{error}");
    }

    #[test]
    fn a_node_id_twice_and_a_conversation_twice_are_refused() {
        let node =
            r#"{"parent":null,"message":{"author":{"role":"user"},"content":{"content_type":"text","parts":["x"]}}}"#;
        let twice = format!(r#"[{{"title":"T","id":"t","mapping":{{"a":{node},"a":{node}}}}}]"#);
        assert!(read(twice.as_bytes()).unwrap_err().0.contains("used twice"));
        let conversation = format!(r#"{{"title":"T","id":"t","mapping":{{"a":{node}}}}}"#);
        let error = read(format!("[{conversation},{conversation}]").as_bytes()).unwrap_err().0;
        assert!(error.starts_with("conversation 2 (\"T\"): has the same id as conversation 1"), "{error}");
    }
}
