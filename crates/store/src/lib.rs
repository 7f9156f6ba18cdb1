//! specula-store: chat history in one SQLite file.
//!
//! A reply is stored while it streams: its row is created before the first token, and the app
//! appends its tokens (with provenance, p and q) in one transaction every tenth of a second,
//! so a crash mid-reply loses at most that. WAL journaling keeps those small writes cheap.

use rusqlite::{params, Connection, OptionalExtension};
use serde::{de::DeserializeOwned, Serialize};
use specula_protocol::{ErrorCode, ErrorInfo, GenerationStats, Source, TokenEvent};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("chat history: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("chat history: stored data is unreadable: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
}

impl StoreError {
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    pub fn error_code(&self) -> ErrorCode {
        match self {
            StoreError::Sqlite(_) | StoreError::Json(_) => ErrorCode::Storage,
            StoreError::NotFound(_) => ErrorCode::NotFound,
            StoreError::Invalid(_) => ErrorCode::InvalidRequest,
        }
    }
}

impl From<StoreError> for ErrorInfo {
    fn from(e: StoreError) -> Self {
        ErrorInfo::new(e.error_code(), e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

pub use specula_protocol::history::{Conversation, ConversationSummary, StoredMessage};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL,
    stats TEXT,
    finish_reason TEXT,
    settings_label TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
CREATE TABLE IF NOT EXISTS tokens (
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    token_id INTEGER NOT NULL,
    text TEXT NOT NULL,
    source TEXT NOT NULL,
    p REAL,
    q REAL,
    PRIMARY KEY (message_id, position)
);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
";

pub struct Store {
    conn: Connection,
}

/// A history file that could not be opened, and where it was moved.
#[derive(Debug, Clone, PartialEq)]
pub struct SetAside {
    pub moved_to: PathBuf,
    /// Why it could not be opened.
    pub reason: String,
}

/// Why `path` is not a SQLite database, judged by its first bytes; `None` when it may be one
/// (it has SQLite's header, is empty, or is not there).
fn foreign_header(path: &Path) -> Option<String> {
    use std::io::Read;
    const MAGIC: &[u8; 16] = b"SQLite format 3\0";
    let mut head = Vec::with_capacity(16);
    std::fs::File::open(path).ok()?.take(16).read_to_end(&mut head).ok()?;
    match head.is_empty() || head == MAGIC {
        true => None,
        false => Some("the file is not a database: it lacks SQLite's header".into()),
    }
}

/// Rename `path` (and its `-wal` and `-shm`, which belong to it) beside itself, under a name
/// no earlier move used. Returns the new path of the main file.
fn set_aside(path: &Path) -> Result<PathBuf> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "history".into());
    let stamp = now_ms() / 1000;
    let mut target = path.with_file_name(format!("{name}.unreadable-{stamp}"));
    let mut n = 1;
    while target.exists() {
        target = path.with_file_name(format!("{name}.unreadable-{stamp}-{n}"));
        n += 1;
    }
    let moved = |from: &Path, to: &Path| {
        std::fs::rename(from, to)
            .map_err(|e| StoreError::Invalid(format!("{}: cannot be opened, nor moved aside: {e}", from.display())))
    };
    moved(path, &target)?;
    for journal in ["-wal", "-shm"] {
        let from = PathBuf::from(format!("{}{journal}", path.display()));
        if from.exists() {
            moved(&from, &PathBuf::from(format!("{}{journal}", target.display())))?;
        }
    }
    Ok(target)
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A conversation's title from its first message: the first line, at most 48 characters.
pub fn title_from(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or_default();
    match line.char_indices().nth(47) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None if line.is_empty() => NEW_TITLE.to_string(),
        None => line.to_string(),
    }
}

const NEW_TITLE: &str = "New chat";

impl Store {
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        if let Some(dir) = path.as_ref().parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Invalid(format!("{}: cannot create the folder: {e}", dir.display())))?;
        }
        Self::init(Connection::open(path)?)
    }

    /// Open the history at `path`, whatever is there. A file that cannot be opened as one
    /// (corrupt, not a database, unreadable) is moved aside with its journal files, kept and
    /// never deleted, and a fresh history starts in its place: an app that cannot open its
    /// history must still start, and the user's data must still be there to recover.
    pub fn open_or_set_aside(path: &Path) -> Result<(Self, Option<SetAside>)> {
        // A file that is not SQLite's is moved before SQLite opens it: a failed open can
        // already have touched its journals.
        if let Some(reason) = foreign_header(path) {
            let moved_to = set_aside(path)?;
            return Ok((Self::open(path)?, Some(SetAside { moved_to, reason })));
        }
        let failure = match Self::open(path) {
            Ok(store) => return Ok((store, None)),
            // Nothing to move: the folder itself is the problem, and a fresh file would fail too.
            Err(e) if !path.exists() => return Err(e),
            Err(e) => e,
        };
        let moved_to = set_aside(path)?;
        let store = Self::open(path)?;
        Ok((store, Some(SetAside { moved_to, reason: failure.to_string() })))
    }

    pub fn open_in_memory() -> Result<Self> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(conn: Connection) -> Result<Self> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // A streaming reply commits its tokens ten times a second. With WAL, NORMAL syncs at
        // checkpoints only: a crash of the app still loses nothing committed (the WAL is in the
        // OS's hands), a power cut may lose the last commits but never corrupts the file; FULL
        // put an fsync on the engine's cores at every commit.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self { conn })
    }

    // ----- conversations -----

    /// Conversations, most recent first; `query` matches titles and message text.
    pub fn conversations(&self, query: &str) -> Result<Vec<ConversationSummary>> {
        let pattern = format!("%{}%", query.trim().replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
        let mut stmt = self.conn.prepare(
            "SELECT c.id, c.title, c.updated_at FROM conversations c
             WHERE ?1 = '%%' OR c.title LIKE ?1 ESCAPE '\\'
                OR EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND m.content LIKE ?1 ESCAPE '\\')
             ORDER BY c.updated_at DESC, c.id DESC",
        )?;
        let rows = stmt.query_map([pattern], |r| {
            Ok(ConversationSummary { id: r.get(0)?, title: r.get(1)?, updated_at: r.get(2)? })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn create_conversation(&self) -> Result<Conversation> {
        let now = now_ms();
        self.conn.execute(
            "INSERT INTO conversations (title, created_at, updated_at) VALUES (?1, ?2, ?2)",
            params![NEW_TITLE, now],
        )?;
        self.conversation(self.conn.last_insert_rowid())
    }

    pub fn conversation(&self, id: i64) -> Result<Conversation> {
        let head = self
            .conn
            .query_row("SELECT title, system_prompt, updated_at FROM conversations WHERE id = ?1", [id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()?
            .ok_or_else(|| StoreError::NotFound(format!("No conversation {id}")))?;
        let (title, system_prompt, updated_at) = head;
        Ok(Conversation { id, title, system_prompt, updated_at, messages: self.messages(id)? })
    }

    /// The texts of the newest user and assistant messages, oldest first, up to about
    /// `max_bytes` in all: what the engine's auto drafter may copy from.
    pub fn recent_texts(&self, max_bytes: usize) -> Result<Vec<String>> {
        let mut stmt = self.conn.prepare(
            "SELECT content FROM messages WHERE role IN ('user', 'assistant') AND content != '' ORDER BY id DESC",
        )?;
        let mut texts = Vec::new();
        let mut bytes = 0;
        for content in stmt.query_map([], |r| r.get::<_, String>(0))? {
            let content = content?;
            bytes += content.len();
            if bytes > max_bytes {
                break;
            }
            texts.push(content);
        }
        texts.reverse();
        Ok(texts)
    }

    fn messages(&self, conversation_id: i64) -> Result<Vec<StoredMessage>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, role, content, stats, finish_reason, settings_label FROM messages
             WHERE conversation_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([conversation_id], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, Option<String>>(5)?,
            ))
        })?;
        let mut messages = Vec::new();
        for row in rows {
            let (id, role, content, stats, finish_reason, settings_label) = row?;
            let tokens = if role == "assistant" { Some(self.tokens(id)?) } else { None };
            let stats = stats.map(|s| serde_json::from_str(&s)).transpose()?;
            messages.push(StoredMessage { id, role, content, tokens, stats, finish_reason, settings_label });
        }
        Ok(messages)
    }

    fn tokens(&self, message_id: i64) -> Result<Vec<TokenEvent>> {
        let mut stmt = self
            .conn
            .prepare("SELECT token_id, text, source, p, q FROM tokens WHERE message_id = ?1 ORDER BY position")?;
        let rows = stmt.query_map([message_id], |r| {
            let source: String = r.get(2)?;
            Ok(TokenEvent {
                id: r.get(0)?,
                text: r.get(1)?,
                source: parse_source(&source),
                p: r.get::<_, Option<f64>>(3)?.map(|v| v as f32),
                q: r.get::<_, Option<f64>>(4)?.map(|v| v as f32),
                alternatives: Vec::new(),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn rename_conversation(&self, id: i64, title: &str) -> Result<()> {
        let title = title.trim();
        if title.is_empty() {
            return Err(StoreError::Invalid("A title cannot be empty".into()));
        }
        self.touch(id, "UPDATE conversations SET title = ?2, updated_at = ?3 WHERE id = ?1", title)
    }

    pub fn set_system_prompt(&self, id: i64, text: &str) -> Result<()> {
        self.touch(id, "UPDATE conversations SET system_prompt = ?2, updated_at = ?3 WHERE id = ?1", text)
    }

    fn touch(&self, id: i64, sql: &str, value: &str) -> Result<()> {
        match self.conn.execute(sql, params![id, value, now_ms()])? {
            0 => Err(StoreError::NotFound(format!("No conversation {id}"))),
            _ => Ok(()),
        }
    }

    pub fn delete_conversation(&self, id: i64) -> Result<()> {
        self.conn.execute("DELETE FROM conversations WHERE id = ?1", [id])?;
        Ok(())
    }

    // ----- messages -----

    /// Add a message, and touch (and maybe title) its conversation, in one transaction: a
    /// crash between the two must not leave a message in a conversation that does not show it.
    pub fn add_message(
        &mut self,
        conversation_id: i64,
        role: &str,
        content: &str,
        settings_label: Option<&str>,
    ) -> Result<StoredMessage> {
        if !matches!(role, "system" | "user" | "assistant") {
            return Err(StoreError::Invalid(format!("Unknown role `{role}`")));
        }
        let now = now_ms();
        let tx = self.conn.transaction()?;
        let changed = tx.execute(
            "UPDATE conversations SET updated_at = ?2,
                 title = CASE WHEN title = ?3 AND ?4 = 'user' THEN ?5 ELSE title END
             WHERE id = ?1",
            params![conversation_id, now, NEW_TITLE, role, title_from(content)],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound(format!("No conversation {conversation_id}")));
        }
        tx.execute(
            "INSERT INTO messages (conversation_id, role, content, settings_label, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![conversation_id, role, content, settings_label, now],
        )?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(StoredMessage {
            id,
            role: role.to_string(),
            content: content.to_string(),
            tokens: (role == "assistant").then(Vec::new),
            stats: None,
            finish_reason: None,
            settings_label: settings_label.map(str::to_string),
        })
    }

    /// Delete a message and every later one in its conversation (regenerate, edit-and-resend).
    pub fn truncate(&self, conversation_id: i64, from_message_id: i64) -> Result<()> {
        self.conn.execute(
            "DELETE FROM messages WHERE conversation_id = ?1 AND id >= ?2",
            params![conversation_id, from_message_id],
        )?;
        Ok(())
    }

    /// Append streamed tokens to a reply, text and provenance together, in one transaction.
    pub fn append_tokens(&mut self, message_id: i64, tokens: &[TokenEvent]) -> Result<()> {
        if tokens.is_empty() {
            return Ok(());
        }
        let tx = self.conn.transaction()?;
        let start: i64 =
            tx.query_row("SELECT COUNT(*) FROM tokens WHERE message_id = ?1", [message_id], |r| r.get(0))?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO tokens (message_id, position, token_id, text, source, p, q) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            for (i, t) in tokens.iter().enumerate() {
                insert.execute(params![
                    message_id,
                    start + i as i64,
                    t.id,
                    t.text,
                    source_name(t.source),
                    t.p.map(f64::from),
                    t.q.map(f64::from)
                ])?;
            }
        }
        let text: String = tokens.iter().map(|t| t.text.as_str()).collect();
        tx.execute("UPDATE messages SET content = content || ?2 WHERE id = ?1", params![message_id, text])?;
        tx.commit()?;
        Ok(())
    }

    /// Close a reply with how it ended and its stats (none when it failed).
    pub fn finish_reply(&self, message_id: i64, stats: Option<&GenerationStats>, finish_reason: &str) -> Result<()> {
        let stats = stats.map(serde_json::to_string).transpose()?;
        self.conn.execute(
            "UPDATE messages SET stats = ?2, finish_reason = ?3 WHERE id = ?1",
            params![message_id, stats, finish_reason],
        )?;
        Ok(())
    }

    // ----- settings -----

    pub fn setting<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        let value: Option<String> =
            self.conn.query_row("SELECT value FROM settings WHERE key = ?1", [key], |r| r.get(0)).optional()?;
        Ok(value.map(|v| serde_json::from_str(&v)).transpose()?)
    }

    pub fn delete_setting(&self, key: &str) -> Result<()> {
        self.conn.execute("DELETE FROM settings WHERE key = ?1", [key])?;
        Ok(())
    }

    /// A setting's stored text, whether or not it reads as any type.
    pub fn setting_text(&self, key: &str) -> Result<Option<String>> {
        Ok(self.conn.query_row("SELECT value FROM settings WHERE key = ?1", [key], |r| r.get(0)).optional()?)
    }

    pub fn set_setting<T: Serialize>(&self, key: &str, value: &T) -> Result<()> {
        self.conn.execute(
            "INSERT INTO settings (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![key, serde_json::to_string(value)?],
        )?;
        Ok(())
    }
}

fn source_name(source: Source) -> &'static str {
    match source {
        Source::Target => "target",
        Source::Accepted => "accepted",
        Source::Copied => "copied",
        Source::Resampled => "resampled",
        Source::Bonus => "bonus",
    }
}

fn parse_source(name: &str) -> Source {
    match name {
        "accepted" => Source::Accepted,
        "copied" => Source::Copied,
        "resampled" => Source::Resampled,
        "bonus" => Source::Bonus,
        _ => Source::Target,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str, source: Source, p: Option<f32>, q: Option<f32>) -> TokenEvent {
        TokenEvent { id: 7, text: text.into(), source, p, q, alternatives: Vec::new() }
    }

    #[test]
    fn a_reply_keeps_its_tokens_and_provenance_across_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history/specula.db");
        let (conversation, reply) = {
            let mut store = Store::open(&path).unwrap();
            let c = store.create_conversation().unwrap();
            store.add_message(c.id, "user", "Write fizzbuzz\nin Rust", None).unwrap();
            let reply = store.add_message(c.id, "assistant", "", Some("draft model · k auto")).unwrap();
            store.append_tokens(reply.id, &[token("fn", Source::Accepted, Some(0.9), Some(0.8))]).unwrap();
            store.append_tokens(reply.id, &[token(" main", Source::Resampled, Some(0.5), Some(0.1))]).unwrap();
            store.append_tokens(reply.id, &[token("()", Source::Bonus, None, None)]).unwrap();
            // The app dies here: the reply was never finished.
            (c.id, reply.id)
        };
        let store = Store::open(&path).unwrap();
        let c = store.conversation(conversation).unwrap();
        assert_eq!(c.title, "Write fizzbuzz");
        let stored = &c.messages[1];
        assert_eq!(stored.id, reply);
        assert_eq!(stored.content, "fn main()");
        assert_eq!(stored.finish_reason, None);
        let tokens = stored.tokens.as_ref().unwrap();
        assert_eq!(
            tokens.iter().map(|t| t.source).collect::<Vec<_>>(),
            [Source::Accepted, Source::Resampled, Source::Bonus]
        );
        assert_eq!(tokens[1].q, Some(0.1));
        assert_eq!(tokens[2].p, None);
    }

    #[test]
    fn recent_texts_are_the_newest_messages_oldest_first_within_the_cap() {
        let mut store = Store::open_in_memory().unwrap();
        let c = store.create_conversation().unwrap();
        store.add_message(c.id, "system", "a system prompt is not the user's text", None).unwrap();
        for text in ["first question", "first answer", "second question", "second answer"] {
            let role = if text.ends_with("question") { "user" } else { "assistant" };
            store.add_message(c.id, role, text, None).unwrap();
        }
        store.add_message(c.id, "assistant", "", None).unwrap(); // a reply that never began
        assert_eq!(
            store.recent_texts(1 << 20).unwrap(),
            ["first question", "first answer", "second question", "second answer"]
        );
        assert_eq!(store.recent_texts(30).unwrap(), ["second question", "second answer"]);
    }

    #[test]
    fn finishing_a_reply_stores_its_stats() {
        let mut store = Store::open_in_memory().unwrap();
        let c = store.create_conversation().unwrap();
        let reply = store.add_message(c.id, "assistant", "", None).unwrap();
        let stats = GenerationStats { generated_tokens: 3, tokens_per_second: 9.5, ..Default::default() };
        store.finish_reply(reply.id, Some(&stats), "cancelled").unwrap();
        let m = &store.conversation(c.id).unwrap().messages[0];
        assert_eq!(m.stats.as_ref(), Some(&stats));
        assert_eq!(m.finish_reason.as_deref(), Some("cancelled"));
    }

    #[test]
    fn conversations_are_listed_searched_renamed_truncated_and_deleted() {
        let mut store = Store::open_in_memory().unwrap();
        let a = store.create_conversation().unwrap();
        let b = store.create_conversation().unwrap();
        store.add_message(a.id, "user", "borrow checker 100% helper", None).unwrap();
        let second = store.add_message(a.id, "assistant", "Sure", None).unwrap();
        store.add_message(a.id, "user", "more", None).unwrap();
        store.rename_conversation(b.id, "Recipes").unwrap();
        let ids = |q: &str| store.conversations(q).unwrap().iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(ids("BORROW"), [a.id]);
        assert_eq!(ids("recipes"), [b.id]);
        assert_eq!(ids("100%"), [a.id]);
        assert_eq!(ids("he_per"), Vec::<i64>::new(), "LIKE wildcards in the query are literal");
        assert_eq!(ids("").len(), 2);
        store.truncate(a.id, second.id).unwrap();
        assert_eq!(store.conversation(a.id).unwrap().messages.len(), 1);
        store.delete_conversation(b.id).unwrap();
        assert!(matches!(store.conversation(b.id), Err(StoreError::NotFound(_))));
        assert!(matches!(store.rename_conversation(a.id, "  "), Err(StoreError::Invalid(_))));
        assert!(matches!(store.add_message(b.id, "user", "x", None), Err(StoreError::NotFound(_))));
        assert!(matches!(store.add_message(a.id, "robot", "x", None), Err(StoreError::Invalid(_))));
    }

    #[test]
    fn deleting_a_conversation_deletes_its_messages_and_tokens() {
        let mut store = Store::open_in_memory().unwrap();
        let c = store.create_conversation().unwrap();
        let reply = store.add_message(c.id, "assistant", "", None).unwrap();
        store.append_tokens(reply.id, &[token("x", Source::Target, None, None)]).unwrap();
        store.delete_conversation(c.id).unwrap();
        let count: i64 = store.conn.query_row("SELECT COUNT(*) FROM tokens", [], |r| r.get(0)).unwrap();
        assert_eq!(count, 0);
    }

    #[test]
    fn settings_round_trip_as_json() {
        let store = Store::open_in_memory().unwrap();
        assert_eq!(store.setting::<Vec<u32>>("k").unwrap(), None);
        store.set_setting("k", &vec![1, 2]).unwrap();
        store.set_setting("k", &vec![3]).unwrap();
        assert_eq!(store.setting::<Vec<u32>>("k").unwrap(), Some(vec![3]));
    }

    #[test]
    fn titles_are_the_first_line_cut_at_48_characters() {
        assert_eq!(title_from("  Hello\nworld"), "Hello");
        assert_eq!(title_from(""), "New chat");
        let long = "é".repeat(60);
        assert_eq!(title_from(&long).chars().count(), 48);
    }

    #[test]
    fn a_history_that_cannot_be_opened_is_moved_aside_whole_and_a_fresh_one_starts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("specula.db");
        let garbage = b"not a database, but someone's data all the same\n".repeat(200);
        std::fs::write(&path, &garbage).unwrap();
        std::fs::write(dir.path().join("specula.db-wal"), b"a journal of the old file").unwrap();

        let (store, aside) = Store::open_or_set_aside(&path).unwrap();
        let aside = aside.expect("moved aside");
        assert!(aside.reason.contains("not a database"), "{}", aside.reason);
        assert_eq!(std::fs::read(&aside.moved_to).unwrap(), garbage, "kept byte for byte");
        let wal = PathBuf::from(format!("{}-wal", aside.moved_to.display()));
        assert_eq!(std::fs::read(wal).unwrap(), b"a journal of the old file");
        // The fresh history works and is where the old one was.
        let c = store.create_conversation().unwrap();
        drop(store);
        let (again, none) = Store::open_or_set_aside(&path).unwrap();
        assert_eq!(none, None, "a good history is opened, not moved");
        assert_eq!(again.conversations("").unwrap()[0].id, c.id);

        // A second bad file on the same second gets a name of its own. This one passes for
        // SQLite's by its header and fails on opening.
        drop(again);
        std::fs::remove_file(PathBuf::from(format!("{}-wal", path.display()))).ok();
        std::fs::remove_file(PathBuf::from(format!("{}-shm", path.display()))).ok();
        let mut fake = b"SQLite format 3\0".to_vec();
        fake.extend_from_slice(&[0xff; 200]);
        std::fs::write(&path, &fake).unwrap();
        let (_, second) = Store::open_or_set_aside(&path).unwrap();
        let second = second.unwrap().moved_to;
        assert_ne!(second, aside.moved_to);
        assert_eq!(std::fs::read(&second).unwrap(), fake);
        assert_eq!(std::fs::read(&aside.moved_to).unwrap(), garbage, "the first one untouched");
    }

    #[test]
    fn a_setting_that_does_not_read_as_its_type_is_still_there_as_text() {
        let store = Store::open_in_memory().unwrap();
        store.conn.execute("INSERT INTO settings (key, value) VALUES ('s', '{not json')", []).unwrap();
        assert!(store.setting::<serde_json::Value>("s").is_err());
        assert_eq!(store.setting_text("s").unwrap().as_deref(), Some("{not json"));
        assert_eq!(store.setting_text("absent").unwrap(), None);
    }
}
