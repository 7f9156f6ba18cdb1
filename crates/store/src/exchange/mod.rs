//! Chats in and out of the history: Specula's own lossless archive (the whole tree, every
//! token's provenance, each reply's stats and settings), a readable Markdown export of the
//! current branch, and importers for the exports of other chat apps.
//!
//! Every importer turns a file into [`ArchivedConversation`]s first and checks them whole
//! ([`check`]); only then does the store write them, in one transaction. A bad file therefore
//! imports nothing, and its error names the first bad entry.

use serde::{Deserialize, Serialize};
use specula_protocol::{AppSettings, GenerationStats, Role, TokenEvent};

/// The `format` of a Specula archive.
pub const ARCHIVE_FORMAT: &str = "specula-chats";
/// The archive's schema version; a reader refuses a newer one rather than drop what it adds.
pub const ARCHIVE_VERSION: u32 = 1;

/// Bounds on what an import accepts: a file past them is refused, never half-read.
pub const MAX_MESSAGES_PER_CONVERSATION: usize = 100_000;
/// A message longer than this is not a chat message (and would freeze the window drawing it).
pub const MAX_MESSAGE_BYTES: usize = 8 << 20;

/// A Specula archive: what `specula chats export --format json` writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Archive {
    pub format: String,
    pub version: u32,
    pub conversations: Vec<ArchivedConversation>,
}

/// One conversation, its whole tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchivedConversation {
    /// Where the conversation comes from, stable across exports: a second import of the same
    /// conversation is recognised by it and skipped. Specula's own are `specula:<hex>`; an
    /// imported one keeps its source's id (`chatgpt:<id>`, `openwebui:<id>`, `llamacpp:<id>`).
    pub source_id: String,
    pub title: String,
    #[serde(default)]
    pub system_prompt: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
    pub updated_at: i64,
    /// The `key` of the message the conversation shows last (its current branch); none for an
    /// empty conversation.
    #[serde(default)]
    pub current: Option<u32>,
    /// Parents before their children.
    pub messages: Vec<ArchivedMessage>,
}

/// One message of a tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchivedMessage {
    /// Its number within the conversation, from 1: what children and `current` name it by.
    pub key: u32,
    /// The message it answers or follows; none for the first of a branch from the start.
    #[serde(default)]
    pub parent: Option<u32>,
    /// `user` or `assistant` (`system` too: a system message inside a chat).
    pub role: Role,
    pub content: String,
    #[serde(default)]
    pub created_at: i64,
    /// A reply's tokens with their provenance; none for an imported reply, whose tokens are
    /// not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Vec<TokenEvent>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<GenerationStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<AppSettings>,
    /// The reply's tool calls and their results, each placed among its tokens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<specula_protocol::ToolCard>,
}

impl ArchivedConversation {
    /// The texts of the branch the conversation shows, first to last (a walk up from
    /// `current`, at most one step per message).
    pub fn current_texts(&self) -> Vec<&str> {
        let mut branch = Vec::new();
        let mut at = self.current;
        while let Some(message) = at.and_then(|key| self.messages.iter().find(|m| m.key == key)) {
            if branch.len() == self.messages.len() {
                break;
            }
            branch.push(message.content.as_str());
            at = message.parent;
        }
        branch.reverse();
        branch
    }
}

impl ArchivedMessage {
    /// A message with nothing but its place, role and text (what other apps' exports give).
    pub fn plain(key: u32, parent: Option<u32>, role: Role, content: String, created_at: i64) -> Self {
        Self {
            key,
            parent,
            role,
            content,
            created_at,
            tokens: None,
            stats: None,
            finish_reason: None,
            settings_label: None,
            settings: None,
            tools: Vec::new(),
        }
    }
}

/// Where an importer hands each conversation as it is read (into the store, inside its
/// transaction, or into a list); an error stops the read.
pub type Take<'a> = Box<dyn FnMut(ArchivedConversation) -> Result<(), ImportError> + 'a>;

/// The conversations `each` hands on, in a list.
fn collect(each: impl FnOnce(Take<'_>) -> Result<(), ImportError>) -> Result<Vec<ArchivedConversation>, ImportError> {
    let mut all = Vec::new();
    each(Box::new(|c| {
        all.push(c);
        Ok(())
    }))?;
    Ok(all)
}

/// Why a file cannot be imported: the first bad entry, named so the user can find it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ImportError(pub String);

/// Check a conversation before anything is written: keys unique and from 1, every parent an
/// earlier message, `current` one of its messages, roles the history keeps, sizes in bounds.
/// `at` names the conversation in the error ("conversation 3 (\"Title\")").
pub fn check(conversation: &ArchivedConversation, at: &str) -> Result<(), ImportError> {
    let bad = |what: String| Err(ImportError(format!("{at}: {what}")));
    if conversation.messages.len() > MAX_MESSAGES_PER_CONVERSATION {
        return bad(format!(
            "{} messages, more than the {MAX_MESSAGES_PER_CONVERSATION} a conversation may hold",
            conversation.messages.len()
        ));
    }
    let mut seen = std::collections::HashSet::with_capacity(conversation.messages.len());
    for (i, m) in conversation.messages.iter().enumerate() {
        if m.key == 0 || !seen.insert(m.key) {
            return bad(format!("message {} has key {}, which is 0 or used twice", i + 1, m.key));
        }
        if let Some(parent) = m.parent.filter(|p| !seen.contains(p) || *p == m.key) {
            return bad(format!("message {} follows message {parent}, which does not come before it", m.key));
        }
        if m.role == Role::Tool {
            return bad(format!("message {} is a tool result, which the history does not keep", m.key));
        }
        if m.content.len() > MAX_MESSAGE_BYTES {
            return bad(format!(
                "message {} is {} MiB long, more than the {} MiB a message may be",
                m.key,
                m.content.len() >> 20,
                MAX_MESSAGE_BYTES >> 20
            ));
        }
    }
    match conversation.current {
        Some(current) if !seen.contains(&current) => {
            bad(format!("its current message {current} is not one of its messages"))
        }
        _ => Ok(()),
    }
}

pub mod chatgpt;
mod json;
pub mod llamacpp;
pub mod markdown;
pub mod openwebui;
mod read;
mod tree;

pub use read::{each, read, ImportFormat};

/// Write `archive` as Specula JSON: stable bytes for the same history (keys, not database
/// ids), so an export, imported elsewhere and exported again, is the same file.
pub fn write_archive(archive: &Archive, out: impl std::io::Write) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(out);
    serde_json::to_writer_pretty(&mut out, archive)?;
    std::io::Write::write_all(&mut out, b"\n")?;
    std::io::Write::flush(&mut out)
}

/// Read a Specula archive, refusing a newer version or another format.
pub fn read_archive(input: impl std::io::Read) -> Result<Vec<ArchivedConversation>, ImportError> {
    let archive: Archive = serde_json::from_reader(std::io::BufReader::new(input))
        .map_err(|e| ImportError(format!("not a Specula archive: {e}")))?;
    if archive.format != ARCHIVE_FORMAT {
        return Err(ImportError(format!("its format is `{}`, not `{ARCHIVE_FORMAT}`", archive.format)));
    }
    if archive.version > ARCHIVE_VERSION {
        return Err(ImportError(format!(
            "it is version {} of the archive, newer than this Specula reads ({ARCHIVE_VERSION}): update Specula",
            archive.version
        )));
    }
    let mut conversations = archive.conversations;
    for m in conversations.iter_mut().flat_map(|c| c.messages.iter_mut()) {
        keep_tokens_only_as_shown(m);
    }
    Ok(conversations)
}

/// Drop a message's tokens unless they spell its content exactly, at most a few more of them
/// than its bytes: the window draws the tokens while the model is given the content, so a
/// shared chat whose tokens say something else would hide from the user what the model reads
/// (a prompt injection), and a million empty tokens would fill the history. Without its
/// tokens the message is shown as the model sees it, in plain text.
fn keep_tokens_only_as_shown(m: &mut ArchivedMessage) {
    /// A token's text may be empty while a character's bytes arrive (byte-level BPE).
    const SLACK: usize = 8;
    let Some(tokens) = &m.tokens else { return };
    let mut rest = m.content.as_str();
    let spelled = tokens.len() <= m.content.len() + SLACK
        && tokens.iter().all(|t| match rest.strip_prefix(t.text.as_str()) {
            Some(after) => {
                rest = after;
                true
            }
            None => false,
        })
        && rest.is_empty();
    if !spelled {
        m.tokens = None;
    }
}
