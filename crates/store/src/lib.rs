//! specula-store: chat history in one SQLite file.
//!
//! A reply is stored while it streams: its row is created before the first token, and the app
//! appends its tokens (with provenance, p and q) in one transaction every tenth of a second,
//! so a crash mid-reply loses at most that. WAL journaling keeps those small writes cheap.

use rusqlite::functions::FunctionFlags;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{de::DeserializeOwned, Serialize};
use specula_protocol::{AppSettings, ErrorCode, ErrorInfo, GenerationStats, Overflow, Role, TokenEvent, ToolCard};
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
    /// The file itself is damaged: SQLite says it is corrupt or not a database. Only then may
    /// a history be set aside. Everything else (a full disk, a lock another program holds, an
    /// I/O or permission error) is the machine's state, not the file's: the file is kept as it
    /// is and opening it again later may well work.
    pub fn is_damage(&self) -> bool {
        use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
        matches!(self, StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) if matches!(e.code, DatabaseCorrupt | NotADatabase))
    }

    /// What went wrong, in the words a user needs to act on it.
    pub fn plainly(&self) -> String {
        use rusqlite::ErrorCode as C;
        let StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) = self else { return self.to_string() };
        match e.code {
            C::DiskFull => "the disk is full".into(),
            C::DatabaseBusy | C::DatabaseLocked => "another program holds a lock on it".into(),
            C::ReadOnly => "it is read-only".into(),
            C::CannotOpen | C::PermissionDenied => "it cannot be opened (check the folder's permissions)".into(),
            // SQLite reports a full disk met while sizing its shared-memory file this way.
            C::SystemIoFailure => "the disk reported an I/O error (it may be full)".into(),
            _ => self.to_string(),
        }
    }

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

mod archive;
pub mod exchange;
mod tree;

use tree::Tree;

pub use archive::Imported;
pub use specula_protocol::history::{Conversation, ConversationSummary, StoredMessage};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    current_leaf INTEGER,
    deleted_at INTEGER,
    uid TEXT,
    thinking INTEGER,
    overflow TEXT
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL,
    stats TEXT,
    finish_reason TEXT,
    settings_label TEXT,
    created_at INTEGER NOT NULL,
    settings TEXT,
    parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    deleted_at INTEGER,
    tools TEXT
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
    for suffix in ["-wal", "-shm"] {
        let from = journal(path, suffix);
        if from.exists() {
            moved(&from, &journal(&target, suffix))?;
        }
    }
    Ok(target)
}

/// How long a statement waits for a lock another connection holds before it fails.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

fn journal(path: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}{suffix}", path.display()))
}

/// Create `dir` (and its parents) if missing; the history's own folder readable by the user
/// alone.
fn private_folder(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Make sure `path` exists readable and writable by the user alone, before SQLite opens it
/// (SQLite would create it 0644 and its journals after it). An existing history, and its
/// journals, are narrowed to 0600 too. True when this call created the file.
fn private_file(path: &Path) -> std::io::Result<bool> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            #[cfg(unix)]
            for file in [PathBuf::from(path), journal(path, "-wal"), journal(path, "-shm")] {
                use std::os::unix::fs::PermissionsExt;
                if file.exists() {
                    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
                }
            }
            Ok(false)
        }
        Err(e) => Err(e),
    }
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

/// The app's identifier (tauri.conf.json), which names its data folder.
pub const APP_IDENTIFIER: &str = "app.specula.desktop";

/// Where the history lives: `SPECULA_DATA_DIR` when set (tests, portable use), otherwise the
/// app's data folder as Tauri names it (the platform's data folder, then the identifier), so
/// the app and `specula chats` read the same file.
pub fn data_dir() -> Option<PathBuf> {
    match std::env::var_os("SPECULA_DATA_DIR") {
        Some(dir) => Some(PathBuf::from(dir)),
        None => dirs::data_dir().map(|dir| dir.join(APP_IDENTIFIER)),
    }
}

/// The history's file in `dir`.
pub fn history_file(dir: &Path) -> PathBuf {
    dir.join("specula.db")
}

impl Store {
    /// Open (or create) the history at `path`. The folder is made readable by the user alone
    /// and so is the file (SQLite gives its -wal and -shm the file's own mode). A file this
    /// call created is removed again when it cannot be made a history (a full disk, say):
    /// an empty file left behind would be adopted by the next start as an empty history.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            private_folder(dir)
                .map_err(|e| StoreError::Invalid(format!("{}: cannot create the folder: {e}", dir.display())))?;
        }
        let created = private_file(path)
            .map_err(|e| StoreError::Invalid(format!("{}: cannot be created or opened: {e}", path.display())))?;
        let opened = Connection::open(path).map_err(StoreError::from).and_then(Self::init);
        if opened.is_err() && created {
            for leftover in [PathBuf::from(path), journal(path, "-wal"), journal(path, "-shm")] {
                std::fs::remove_file(leftover).ok();
            }
        }
        opened
    }

    /// Open the history at `path`, whatever is there. A damaged file (corrupt, not a
    /// database) is moved aside with its journal files, kept and never deleted, and a fresh
    /// history starts in its place: an app that cannot open its history must still start, and
    /// the user's data must still be there to recover. Any other failure (a full disk, a lock
    /// another program holds) leaves the file as it is and is returned: the caller runs on
    /// without it and tries again later.
    pub fn open_or_set_aside(path: &Path) -> Result<(Self, Option<SetAside>)> {
        // A file that is not SQLite's is moved before SQLite opens it: a failed open can
        // already have touched its journals.
        if let Some(reason) = foreign_header(path) {
            let moved_to = set_aside(path)?;
            return Ok((Self::open(path)?, Some(SetAside { moved_to, reason })));
        }
        let failure = match Self::open(path) {
            Ok(store) => return Ok((store, None)),
            Err(e) if e.is_damage() => e,
            Err(e) => return Err(e),
        };
        let moved_to = set_aside(path)?;
        let store = Self::open(path)?;
        Ok((store, Some(SetAside { moved_to, reason: failure.to_string() })))
    }

    pub fn open_in_memory() -> Result<Self> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(conn: Connection) -> Result<Self> {
        // Another program reading or writing the file (a backup, a second copy of the app)
        // holds its lock for a moment: wait that moment out rather than fail at once.
        conn.busy_timeout(BUSY_TIMEOUT)?;
        refuse_newer_release(&conn)?;
        // This release's mark: the guard on deleting messages passes only where it is defined.
        conn.create_scalar_function(MAY_DELETE, 0, FunctionFlags::SQLITE_DETERMINISTIC, |_| Ok(1))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // A streaming reply commits its tokens ten times a second. With WAL, NORMAL syncs at
        // checkpoints only: a crash of the app still loses nothing committed (the WAL is in the
        // OS's hands), a power cut may lose the last commits but never corrupts the file; FULL
        // put an fsync on the engine's cores at every commit.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Only a history that lacks something is written to at open: every open took the
        // write lock, so `specula chats list` failed while an import wrote, and the app started
        // during a long import ran in memory.
        if !up_to_date(&conn)? {
            conn.execute_batch(SCHEMA)?;
            add_missing_columns(&conn)?;
            migrate_to_trees(&conn)?;
        }
        Ok(Self { conn })
    }

    // ----- conversations -----

    /// Conversations, most recent first; `query` matches titles and message text.
    pub fn conversations(&self, query: &str) -> Result<Vec<ConversationSummary>> {
        let pattern = format!("%{}%", query.trim().replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
        let mut stmt = self.conn.prepare(
            "SELECT c.id, c.title, c.updated_at FROM conversations c
             WHERE c.deleted_at IS NULL AND (?1 = '%%' OR c.title LIKE ?1 ESCAPE '\\'
                OR EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND m.deleted_at IS NULL
                           AND m.content LIKE ?1 ESCAPE '\\'))
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
            "INSERT INTO conversations (title, created_at, updated_at, uid) VALUES (?1, ?2, ?2, ?3)",
            params![NEW_TITLE, now, new_uid(&self.conn)?],
        )?;
        self.conversation(self.conn.last_insert_rowid())
    }

    /// A conversation with the messages of its current branch, first to last.
    pub fn conversation(&self, id: i64) -> Result<Conversation> {
        let head = self
            .conn
            .query_row(
                "SELECT title, system_prompt, updated_at, current_leaf, thinking, overflow FROM conversations
                 WHERE id = ?1 AND deleted_at IS NULL",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get::<_, Option<String>>(5)?)),
            )
            .optional()?
            .ok_or_else(|| not_found(id))?;
        let (title, system_prompt, updated_at, leaf, thinking, overflow) = head;
        let tree = self.tree(id)?;
        let messages = self.messages(&tree, &tree.path_to(leaf))?;
        // A policy a later version named is the app's default here, never an error.
        let overflow = overflow.and_then(|o| o.parse().ok());
        Ok(Conversation { id, title, system_prompt, updated_at, messages, thinking, overflow })
    }

    /// The shape of a conversation's messages, deleted ones marked.
    fn tree(&self, conversation_id: i64) -> Result<Tree> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, parent_id, deleted_at IS NOT NULL FROM messages WHERE conversation_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([conversation_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(Tree::new(rows.collect::<rusqlite::Result<Vec<_>>>()?))
    }

    /// The conversation's current leaf as stored; NotFound for a conversation not shown.
    fn stored_leaf(&self, conversation_id: i64) -> Result<Option<i64>> {
        self.conn
            .query_row(
                "SELECT current_leaf FROM conversations WHERE id = ?1 AND deleted_at IS NULL",
                [conversation_id],
                |r| r.get(0),
            )
            .optional()?
            .ok_or_else(|| not_found(conversation_id))
    }

    /// The texts of the newest user and assistant messages, oldest first, up to about
    /// `max_bytes` in all: what the engine's auto drafter may copy from.
    pub fn recent_texts(&self, max_bytes: usize) -> Result<Vec<String>> {
        let mut stmt = self.conn.prepare(
            "SELECT content FROM messages m WHERE role IN ('user', 'assistant') AND content != '' AND deleted_at IS NULL
               AND NOT EXISTS (SELECT 1 FROM conversations c WHERE c.id = m.conversation_id AND c.deleted_at IS NOT NULL)
             ORDER BY id DESC",
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

    /// The messages `ids` names, in that order, each with its siblings in `tree`.
    fn messages(&self, tree: &Tree, ids: &[i64]) -> Result<Vec<StoredMessage>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT role, content, stats, finish_reason, settings_label, settings, parent_id, tools FROM messages WHERE id = ?1",
        )?;
        let mut messages = Vec::with_capacity(ids.len());
        for &id in ids {
            let row = stmt.query_row([id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, Option<i64>>(6)?,
                    r.get::<_, Option<String>>(7)?,
                ))
            })?;
            let (role, content, stats, finish_reason, settings_label, settings, parent_id, tools) = row;
            let role: Role = from_stored_name(&role, "message's role")?;
            let tokens = if role == Role::Assistant { Some(self.tokens(id)?) } else { None };
            // Stats or settings a later version wrote in a shape this one cannot read: the
            // message is shown (and exported) without them; the label says the settings.
            let stats = stats.and_then(|s| serde_json::from_str(&s).ok());
            let settings = settings.and_then(|s| serde_json::from_str(&s).ok());
            let tools = tools.and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_default();
            let siblings = tree.siblings(id);
            messages.push(StoredMessage {
                id,
                role,
                content,
                tokens,
                stats,
                finish_reason,
                settings_label,
                settings,
                parent_id,
                siblings,
                tools,
            });
        }
        Ok(messages)
    }

    fn tokens(&self, message_id: i64) -> Result<Vec<TokenEvent>> {
        let mut stmt = self
            .conn
            .prepare("SELECT token_id, text, source, p, q FROM tokens WHERE message_id = ?1 ORDER BY position")?;
        let rows = stmt.query_map([message_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get::<_, String>(2)?, r.get::<_, Option<f64>>(3)?, r.get::<_, Option<f64>>(4)?))
        })?;
        let mut tokens = Vec::new();
        for row in rows {
            let (id, text, source, p, q) = row?;
            tokens.push(TokenEvent {
                id,
                text,
                source: from_stored_name(&source, "token's source")?,
                p: p.map(|v| v as f32),
                q: q.map(|v| v as f32),
                alternatives: Vec::new(),
            });
        }
        Ok(tokens)
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

    /// Whether the conversation's replies think first, for models whose template lets it be
    /// chosen (Qwen3's `enable_thinking`); none: the template's default.
    /// A setting, not a change of the chat: it keeps its place in the list.
    pub fn set_thinking(&self, id: i64, thinking: Option<bool>) -> Result<()> {
        let sql = "UPDATE conversations SET thinking = ?2 WHERE id = ?1 AND deleted_at IS NULL";
        match self.conn.execute(sql, params![id, thinking])? {
            0 => Err(not_found(id)),
            _ => Ok(()),
        }
    }

    /// What the conversation's replies do when it outgrows the context (drop middle turns,
    /// drop the oldest, or stop); none: the app's setting. A setting: the chat keeps its place.
    pub fn set_overflow(&self, id: i64, overflow: Option<Overflow>) -> Result<()> {
        let sql = "UPDATE conversations SET overflow = ?2 WHERE id = ?1 AND deleted_at IS NULL";
        match self.conn.execute(sql, params![id, overflow.map(Overflow::as_str)])? {
            0 => Err(not_found(id)),
            _ => Ok(()),
        }
    }

    fn touch(&self, id: i64, sql: &str, value: &str) -> Result<()> {
        match self.conn.execute(sql, params![id, value, now_ms()])? {
            0 => Err(not_found(id)),
            _ => Ok(()),
        }
    }

    /// Delete a conversation, undoably: it is gone from every list until
    /// [`Store::restore_conversation`], and really deleted by [`Store::purge_deleted`].
    pub fn delete_conversation(&self, id: i64) -> Result<()> {
        match self.conn.execute(
            "UPDATE conversations SET deleted_at = ?2 WHERE id = ?1 AND deleted_at IS NULL",
            params![id, now_ms()],
        )? {
            0 => Err(not_found(id)),
            _ => Ok(()),
        }
    }

    /// Undo [`Store::delete_conversation`].
    pub fn restore_conversation(&self, id: i64) -> Result<()> {
        match self.conn.execute("UPDATE conversations SET deleted_at = NULL WHERE id = ?1", [id])? {
            0 => Err(not_found(id)),
            _ => Ok(()),
        }
    }

    // ----- messages -----

    /// Add a message, and touch (and maybe title) its conversation, in one transaction: a
    /// crash between the two must not leave a message in a conversation that does not show it.
    pub fn add_message(
        &mut self,
        conversation_id: i64,
        role: Role,
        content: &str,
        settings: Option<&AppSettings>,
    ) -> Result<StoredMessage> {
        if role == Role::Tool {
            return Err(StoreError::Invalid("The history keeps system, user and assistant messages only".into()));
        }
        let role_name = stored_name(&role);
        let settings_label = settings.map(AppSettings::label);
        let settings_json = settings.map(serde_json::to_string).transpose()?;
        let now = now_ms();
        // It follows the last message the conversation shows.
        let parent_id = self.current_path(conversation_id)?.last().copied();
        let tx = self.conn.transaction()?;
        let changed = tx.execute(
            "UPDATE conversations SET updated_at = ?2,
                 title = CASE WHEN title = ?3 AND ?4 = 'user' THEN ?5 ELSE title END
             WHERE id = ?1",
            params![conversation_id, now, NEW_TITLE, role_name, title_from(content)],
        )?;
        if changed == 0 {
            return Err(not_found(conversation_id));
        }
        tx.execute(
            "INSERT INTO messages (conversation_id, role, content, settings_label, created_at, settings, parent_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![conversation_id, role_name, content, settings_label, now, settings_json, parent_id],
        )?;
        let id = tx.last_insert_rowid();
        tx.execute("UPDATE conversations SET current_leaf = ?2 WHERE id = ?1", params![conversation_id, id])?;
        tx.commit()?;
        Ok(StoredMessage {
            id,
            tokens: (role == Role::Assistant).then(Vec::new),
            role,
            content: content.to_string(),
            stats: None,
            finish_reason: None,
            settings_label,
            settings: settings.cloned(),
            parent_id,
            siblings: Vec::new(),
            tools: Vec::new(),
        })
    }

    /// The ids of the messages the conversation shows, first to last.
    fn current_path(&self, conversation_id: i64) -> Result<Vec<i64>> {
        let leaf = self.stored_leaf(conversation_id)?;
        Ok(self.tree(conversation_id)?.path_to(leaf))
    }

    fn set_leaf(&self, conversation_id: i64, leaf: Option<i64>) -> Result<()> {
        self.conn
            .execute("UPDATE conversations SET current_leaf = ?2 WHERE id = ?1", params![conversation_id, leaf])?;
        Ok(())
    }

    /// The conversation's tree, checked to hold `message_id`.
    fn tree_holding(&self, conversation_id: i64, message_id: i64) -> Result<Tree> {
        self.stored_leaf(conversation_id)?;
        let tree = self.tree(conversation_id)?;
        match tree.contains(message_id) {
            true => Ok(tree),
            false => Err(StoreError::NotFound(format!("No message {message_id} in conversation {conversation_id}"))),
        }
    }

    /// Show the conversation up to just before `message_id`, so that the next message added
    /// becomes its sibling: Regenerate (before a reply) and Edit (before a question). Nothing
    /// is deleted; the old branch stays one arrow away.
    pub fn branch_before(&self, conversation_id: i64, message_id: i64) -> Result<()> {
        let tree = self.tree_holding(conversation_id, message_id)?;
        self.set_leaf(conversation_id, tree.parent(message_id))
    }

    /// Show the branch through `message_id`: down to the newest message under it.
    pub fn show_branch(&self, conversation_id: i64, message_id: i64) -> Result<()> {
        let tree = self.tree_holding(conversation_id, message_id)?;
        let leaf = tree
            .newest_under(Some(message_id))
            .ok_or_else(|| StoreError::NotFound(format!("Message {message_id} is deleted")))?;
        self.set_leaf(conversation_id, Some(leaf))
    }

    /// Delete a message and the branches under it, undoably ([`Store::restore_message`]); the
    /// conversation then shows a sibling's branch, or stops above the deleted message.
    pub fn delete_message(&self, conversation_id: i64, message_id: i64) -> Result<()> {
        let tree = self.tree_holding(conversation_id, message_id)?;
        let leaf = self.stored_leaf(conversation_id)?;
        self.conn.execute("UPDATE messages SET deleted_at = ?2 WHERE id = ?1", params![message_id, now_ms()])?;
        if leaf.is_some_and(|leaf| tree.is_under(leaf, message_id)) {
            let tree = self.tree(conversation_id)?;
            self.set_leaf(conversation_id, tree.newest_under(tree.parent(message_id)))?;
        }
        Ok(())
    }

    /// Undo [`Store::delete_message`]: the message is back, and its branch shown.
    pub fn restore_message(&self, conversation_id: i64, message_id: i64) -> Result<()> {
        self.tree_holding(conversation_id, message_id)?;
        self.conn.execute("UPDATE messages SET deleted_at = NULL WHERE id = ?1", [message_id])?;
        self.show_branch(conversation_id, message_id)
    }

    /// Really delete what was deleted undoably: when the Undo is dismissed, and at start.
    /// Children go before their parents (ids grow down a branch), so no delete cascades down
    /// a long branch at once.
    pub fn purge_deleted(&mut self) -> Result<usize> {
        let tx = self.conn.transaction()?;
        let doomed: Vec<i64> = {
            let mut stmt = tx.prepare(
                "WITH RECURSIVE doomed(id) AS (
                     SELECT id FROM messages WHERE deleted_at IS NOT NULL
                        OR conversation_id IN (SELECT id FROM conversations WHERE deleted_at IS NOT NULL)
                     UNION SELECT m.id FROM messages m JOIN doomed d ON m.parent_id = d.id)
                 SELECT id FROM doomed ORDER BY id DESC",
            )?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        {
            let mut delete = tx.prepare("DELETE FROM messages WHERE id = ?1")?;
            for id in &doomed {
                delete.execute([id])?;
            }
        }
        let conversations = tx.execute("DELETE FROM conversations WHERE deleted_at IS NOT NULL", [])?;
        tx.commit()?;
        Ok(doomed.len() + conversations)
    }

    /// A new conversation holding the branch up to `message_id`, copied whole (tokens, stats
    /// and settings): "Fork to a new chat". The original is untouched.
    pub fn fork(&mut self, conversation_id: i64, message_id: i64) -> Result<Conversation> {
        let tree = self.tree_holding(conversation_id, message_id)?;
        let path = tree.path_to(Some(message_id));
        if path.last() != Some(&message_id) {
            return Err(StoreError::NotFound(format!("Message {message_id} is deleted")));
        }
        let source = self.conversation(conversation_id)?;
        let mut archive = self.export_conversation(conversation_id, &path)?;
        archive.source_id = new_uid(&self.conn)?;
        archive.title = format!("{} (fork)", source.title);
        archive.created_at = now_ms();
        archive.updated_at = archive.created_at;
        let imported = self.import(vec![archive])?;
        self.conversation(imported.conversations[0])
    }

    /// Append streamed tokens to a reply, text and provenance together, in one transaction.
    pub fn append_tokens(&mut self, message_id: i64, tokens: &[TokenEvent]) -> Result<()> {
        if tokens.is_empty() {
            return Ok(());
        }
        let tx = self.conn.transaction()?;
        let start: i64 =
            tx.query_row("SELECT COUNT(*) FROM tokens WHERE message_id = ?1", [message_id], |r| r.get(0))?;
        archive::insert_tokens(&tx, message_id, start, tokens)?;
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

    /// Keep a reply's tool cards as they are now (each change writes them all: a reply has a
    /// few, each a few KB at most).
    pub fn set_tool_cards(&self, message_id: i64, cards: &[ToolCard]) -> Result<()> {
        let cards = (!cards.is_empty()).then(|| serde_json::to_string(cards)).transpose()?;
        self.conn.execute("UPDATE messages SET tools = ?2 WHERE id = ?1", params![message_id, cards])?;
        Ok(())
    }

    // ----- recovery -----

    /// Copy everything in `session` (the history kept in memory while this file could not be
    /// opened) into this one, in one transaction: its conversations whole (trees, tokens,
    /// stats), under new ids, and its settings, which are newer than this file's.
    pub fn absorb(&mut self, session: &Store) -> Result<()> {
        let conversations = session.export(&[])?.conversations;
        let settings: Vec<(String, String)> = {
            let mut stmt = session.conn.prepare("SELECT key, value FROM settings")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        let tx = self.conn.transaction()?;
        archive::insert(&tx, conversations)?;
        for (key, value) in settings {
            tx.execute(
                "INSERT INTO settings (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![key, value],
            )?;
        }
        tx.commit()?;
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

/// Columns later versions added, added to a history an earlier one made (`CREATE TABLE IF
/// NOT EXISTS` leaves an existing table as it was): (table, column, declaration).
const ADDED_COLUMNS: [(&str, &str, &str); 9] = [
    ("messages", "settings", "TEXT"),
    ("messages", "parent_id", "INTEGER REFERENCES messages(id) ON DELETE CASCADE"),
    ("messages", "deleted_at", "INTEGER"),
    ("conversations", "current_leaf", "INTEGER"),
    ("conversations", "deleted_at", "INTEGER"),
    ("conversations", "uid", "TEXT"),
    ("conversations", "thinking", "INTEGER"),
    ("messages", "tools", "TEXT"),
    ("conversations", "overflow", "TEXT"),
];

fn add_missing_columns(conn: &Connection) -> Result<()> {
    for (table, column, declaration) in ADDED_COLUMNS {
        if !has_column(conn, table, column)? {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {declaration}"))?;
        }
    }
    Ok(())
}

fn has_column(conn: &Connection, table: &str, column: &str) -> Result<bool> {
    Ok(conn.query_row("SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2", params![table, column], |r| {
        r.get(0)
    })?)
}

/// A trigger that stops releases from before trees deleting messages: their Regenerate and
/// Edit deleted what followed a message, which in a tree is other branches (6 of 7 messages
/// in the reproduction). It calls [`MAY_DELETE`], a function only this release (and
/// later ones) defines on its connections: an older release's delete fails to prepare
/// ("no such function") and deletes nothing, while this release's own deletes pass.
const DELETE_GUARD: &str = "messages_kept_from_older_releases";
const MAY_DELETE: &str = "specula_may_delete";

/// `PRAGMA user_version` of a history whose messages form trees.
const TREES: i64 = 2;

/// The newest history format this release reads and writes (`PRAGMA user_version`).
const NEWEST_KNOWN: i64 = TREES;

/// Whether the history is as this release writes it (its format, every table, index and
/// column, every conversation with its own id): then opening it only reads.
fn up_to_date(conn: &Connection) -> Result<bool> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version != NEWEST_KNOWN {
        return Ok(false);
    }
    let has = |kind: &str, name: &str| -> Result<bool> {
        Ok(conn.query_row("SELECT COUNT(*) FROM sqlite_master WHERE type = ?1 AND name = ?2", [kind, name], |r| {
            r.get::<_, i64>(0)
        })? > 0)
    };
    for (kind, name) in schema_objects()? {
        if !has(&kind, &name)? {
            return Ok(false);
        }
    }
    for (kind, name) in [("index", "messages_by_parent"), ("index", "conversations_by_uid"), ("trigger", DELETE_GUARD)]
    {
        if !has(kind, name)? {
            return Ok(false);
        }
    }
    for (table, column, _) in ADDED_COLUMNS {
        if !has_column(conn, table, column)? {
            return Ok(false);
        }
    }
    let without_uid: bool =
        conn.query_row("SELECT EXISTS (SELECT 1 FROM conversations WHERE uid IS NULL)", [], |r| r.get(0))?;
    Ok(!without_uid)
}

/// The tables and indexes [`SCHEMA`] makes, as (type, name): read from a history it makes in
/// memory, so the list cannot fall behind it.
fn schema_objects() -> Result<Vec<(String, String)>> {
    let scratch = Connection::open_in_memory()?;
    scratch.execute_batch(SCHEMA)?;
    let mut stmt = scratch.prepare("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")?;
    let objects = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(objects.collect::<rusqlite::Result<_>>()?)
}

/// Refuse, before anything is written, a history a newer release made: this release's
/// statements could undo what it keeps (an older release's Regenerate deleted branches it
/// did not know of). The file is left as it is for that release.
fn refuse_newer_release(conn: &Connection) -> Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > NEWEST_KNOWN {
        return Err(StoreError::Invalid(format!(
            "a newer release of Specula wrote this history (format {version}; this release knows up to \
             {NEWEST_KNOWN}); it is left untouched: open it with that release"
        )));
    }
    Ok(())
}

/// A history from before messages formed trees becomes one, once and in one transaction:
/// each message follows the one before it in its conversation, which shows its last.
/// Conversations without an id of their own (made before ids, or in this version's first
/// start) get one.
fn migrate_to_trees(conn: &Connection) -> Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let tx = conn.unchecked_transaction()?;
    if version < TREES {
        tx.execute_batch(&format!(
            "UPDATE messages SET parent_id = (SELECT MAX(p.id) FROM messages p
                 WHERE p.conversation_id = messages.conversation_id AND p.id < messages.id)
             WHERE parent_id IS NULL;
             UPDATE conversations SET current_leaf = (SELECT MAX(m.id) FROM messages m WHERE m.conversation_id = conversations.id);
             PRAGMA user_version = {TREES};"
        ))?;
    }
    tx.execute_batch(&format!(
        "UPDATE conversations SET uid = 'specula:' || lower(hex(randomblob(16))) WHERE uid IS NULL;
         CREATE INDEX IF NOT EXISTS messages_by_parent ON messages(parent_id);
         CREATE UNIQUE INDEX IF NOT EXISTS conversations_by_uid ON conversations(uid);
         CREATE TRIGGER IF NOT EXISTS {DELETE_GUARD} BEFORE DELETE ON messages WHEN {MAY_DELETE}() IS NULL
         BEGIN SELECT RAISE(ABORT, 'a newer release of Specula keeps this history: its messages are not deleted'); END;"
    ))?;
    tx.commit()?;
    Ok(())
}

fn not_found(conversation_id: i64) -> StoreError {
    StoreError::NotFound(format!("No conversation {conversation_id}"))
}

/// A new conversation's own id, kept by exports so a second import is recognised.
fn new_uid(conn: &Connection) -> Result<String> {
    Ok(conn.query_row(NEW_UID, [], |r| r.get(0))?)
}

const NEW_UID: &str = "SELECT 'specula:' || lower(hex(randomblob(16)))";

/// A value's name as the protocol spells it (its serde name): the store keeps roles and
/// token sources under the names every other part uses, spelled in one place.
fn stored_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        other => unreachable!("a unit variant serializes as its name, not {other:?}"),
    }
}

/// A stored name read back; one this version does not know (a newer app's, or damage) is
/// refused with a clear error, never read as some other value.
fn from_stored_name<T: DeserializeOwned>(name: &str, what: &str) -> Result<T> {
    serde_json::from_value(serde_json::Value::String(name.to_string()))
        .map_err(|_| StoreError::Invalid(format!("The history holds a {what} `{name}` this version does not know")))
}

/// What tests of the history need on the machine, for this crate's and the app's tests.
#[cfg(any(test, feature = "test-support"))]
pub mod test_support {
    use std::path::{Path, PathBuf};

    /// A tmpfs of `bytes` at a temporary folder, unmounted when dropped: a disk that can be
    /// filled and emptied. `None` where this process may not mount one (not root); the caller's
    /// case is then not run, and says so.
    pub struct SmallDisk(tempfile::TempDir);

    impl SmallDisk {
        pub fn mount(bytes: usize) -> Option<Self> {
            let dir = tempfile::tempdir().ok()?;
            let mounted = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
                .arg(dir.path())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !mounted {
                eprintln!("cannot mount a tmpfs here (not root?): a full-disk case is not run");
            }
            mounted.then_some(Self(dir))
        }

        pub fn path(&self) -> &Path {
            self.0.path()
        }

        /// Fill what is left with a file; removing it gives the space back.
        pub fn fill(&self) -> PathBuf {
            use std::io::Write;
            let filler = self.path().join("filler");
            let Ok(mut file) = std::fs::File::create(&filler) else { return filler };
            while file.write_all(&[0u8; 4096]).is_ok() {}
            filler
        }
    }

    impl Drop for SmallDisk {
        fn drop(&mut self) {
            std::process::Command::new("umount").arg(self.0.path()).status().ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::SmallDisk;
    use specula_protocol::Source;

    fn token(text: &str, source: Source, p: Option<f32>, q: Option<f32>) -> TokenEvent {
        TokenEvent { id: 7, text: text.into(), source, p, q, alternatives: Vec::new() }
    }

    #[test]
    fn a_chats_overflow_choice_is_kept_and_an_unknown_one_reads_as_none() {
        let store = Store::open_in_memory().unwrap();
        let c = store.create_conversation().unwrap();
        assert_eq!(c.overflow, None, "the app's setting until chosen");
        store.set_overflow(c.id, Some(Overflow::Rolling)).unwrap();
        let again = store.conversation(c.id).unwrap();
        assert_eq!((again.overflow, again.updated_at), (Some(Overflow::Rolling), c.updated_at));
        store.conn.execute("UPDATE conversations SET overflow = 'summarise' WHERE id = ?1", [c.id]).unwrap();
        assert_eq!(store.conversation(c.id).unwrap().overflow, None);
        assert!(store.set_overflow(c.id + 1, None).is_err(), "no such chat");
    }

    #[test]
    fn a_chats_thinking_choice_is_kept_without_moving_the_chat_up_the_list() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("specula.db");
        let store = Store::open(&path).unwrap();
        let c = store.create_conversation().unwrap();
        assert_eq!(c.thinking, None, "the model's default until chosen");
        store.set_thinking(c.id, Some(false)).unwrap();
        let again = Store::open(&path).unwrap().conversation(c.id).unwrap();
        assert_eq!((again.thinking, again.updated_at), (Some(false), c.updated_at));
        store.set_thinking(c.id, None).unwrap();
        assert_eq!(store.conversation(c.id).unwrap().thinking, None);
        assert!(store.set_thinking(c.id + 1, Some(true)).is_err(), "no such chat");
    }

    #[test]
    fn a_reply_keeps_its_tokens_and_provenance_across_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history/specula.db");
        let (conversation, reply) = {
            let mut store = Store::open(&path).unwrap();
            let c = store.create_conversation().unwrap();
            store.add_message(c.id, Role::User, "Write fizzbuzz\nin Rust", None).unwrap();
            let reply = store.add_message(c.id, Role::Assistant, "", Some(&AppSettings::default())).unwrap();
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
        assert_eq!(stored.settings, Some(AppSettings::default()), "the reply's own settings, whole");
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
        store.add_message(c.id, Role::System, "a system prompt is not the user's text", None).unwrap();
        for text in ["first question", "first answer", "second question", "second answer"] {
            let role = if text.ends_with("question") { Role::User } else { Role::Assistant };
            store.add_message(c.id, role, text, None).unwrap();
        }
        store.add_message(c.id, Role::Assistant, "", None).unwrap(); // a reply that never began
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
        let reply = store.add_message(c.id, Role::Assistant, "", None).unwrap();
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
        store.add_message(a.id, Role::User, "borrow checker 100% helper", None).unwrap();
        let second = store.add_message(a.id, Role::Assistant, "Sure", None).unwrap();
        store.add_message(a.id, Role::User, "more", None).unwrap();
        store.rename_conversation(b.id, "Recipes").unwrap();
        let ids = |q: &str| store.conversations(q).unwrap().iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(ids("BORROW"), [a.id]);
        assert_eq!(ids("recipes"), [b.id]);
        assert_eq!(ids("100%"), [a.id]);
        assert_eq!(ids("he_per"), Vec::<i64>::new(), "LIKE wildcards in the query are literal");
        assert_eq!(ids("").len(), 2);
        store.branch_before(a.id, second.id).unwrap();
        assert_eq!(store.conversation(a.id).unwrap().messages.len(), 1);
        store.delete_conversation(b.id).unwrap();
        assert!(matches!(store.conversation(b.id), Err(StoreError::NotFound(_))));
        assert!(matches!(store.rename_conversation(a.id, "  "), Err(StoreError::Invalid(_))));
        assert!(matches!(store.add_message(b.id, Role::User, "x", None), Err(StoreError::NotFound(_))));
        assert!(matches!(store.add_message(a.id, Role::Tool, "x", None), Err(StoreError::Invalid(_))));
    }

    #[test]
    fn deleting_a_conversation_deletes_its_messages_and_tokens() {
        let mut store = Store::open_in_memory().unwrap();
        let c = store.create_conversation().unwrap();
        let reply = store.add_message(c.id, Role::Assistant, "", None).unwrap();
        store.append_tokens(reply.id, &[token("x", Source::Target, None, None)]).unwrap();
        store.delete_conversation(c.id).unwrap();
        assert!(store.conversations("").unwrap().is_empty());
        store.restore_conversation(c.id).unwrap();
        assert_eq!(store.conversation(c.id).unwrap().messages[0].tokens.as_ref().unwrap().len(), 1, "undone whole");
        store.delete_conversation(c.id).unwrap();
        store.purge_deleted().unwrap();
        let count: i64 = store.conn.query_row("SELECT COUNT(*) FROM tokens", [], |r| r.get(0)).unwrap();
        assert_eq!(count, 0);
        assert!(matches!(store.restore_conversation(c.id), Err(StoreError::NotFound(_))));
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

    #[test]
    fn a_history_locked_by_another_program_is_kept_and_opens_once_the_lock_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("specula.db");
        let mut store = Store::open(&path).unwrap();
        let c = store.create_conversation().unwrap();
        store.add_message(c.id, Role::User, "keep me", None).unwrap();
        drop(store);
        // Another program takes the file in rollback mode with an exclusive lock, as a second
        // app or a backup tool can.
        let holder = Connection::open(&path).unwrap();
        holder.pragma_update(None, "journal_mode", "DELETE").unwrap();
        holder.execute_batch("BEGIN EXCLUSIVE; INSERT INTO settings VALUES ('held', '1');").unwrap();

        let failure = Store::open_or_set_aside(&path).err().expect("the lock is held");
        assert!(!failure.is_damage(), "{failure}");
        assert_eq!(failure.plainly(), "another program holds a lock on it");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "nothing moved aside: the file and its journal");

        holder.execute_batch("ROLLBACK").unwrap();
        drop(holder);
        let (store, aside) = Store::open_or_set_aside(&path).unwrap();
        assert_eq!(aside, None);
        assert_eq!(store.conversation(c.id).unwrap().messages[0].content, "keep me");
    }

    #[test]
    fn a_full_disk_at_open_keeps_the_history_and_leaves_no_empty_file() {
        let Some(disk) = SmallDisk::mount(512 << 10) else { return };
        let path = disk.path().join("specula.db");
        let mut store = Store::open(&path).unwrap();
        let c = store.create_conversation().unwrap();
        store.add_message(c.id, Role::User, "my first chat", None).unwrap();
        drop(store);
        let before = std::fs::read(&path).unwrap();
        let filler = disk.fill();

        let failure = Store::open_or_set_aside(&path).err().expect("the disk is full");
        assert!(!failure.is_damage(), "{failure}");
        assert!(failure.plainly().contains("full"), "{}", failure.plainly());
        assert_eq!(std::fs::read(&path).unwrap(), before, "the history is untouched");
        let names: Vec<_> = std::fs::read_dir(disk.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(!names.iter().any(|n| n.to_string_lossy().contains("unreadable")), "{names:?}");
        // A first start on the full disk leaves nothing the next start could adopt.
        let fresh = disk.path().join("fresh/specula.db");
        assert!(Store::open_or_set_aside(&fresh).is_err());
        assert!(!fresh.exists());

        std::fs::remove_file(filler).unwrap();
        let (store, aside) = Store::open_or_set_aside(&path).unwrap();
        assert_eq!(aside, None);
        assert_eq!(store.conversation(c.id).unwrap().messages[0].content, "my first chat");
    }

    #[test]
    fn a_write_on_a_full_disk_fails_plainly_and_succeeds_once_space_returns() {
        let mut store = Store::open_in_memory().unwrap();
        let c = store.create_conversation().unwrap();
        let reply = store.add_message(c.id, Role::Assistant, "", None).unwrap();
        let pages: i64 = store.conn.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
        store.conn.pragma_update(None, "max_page_count", pages).unwrap();
        let many: Vec<_> = (0..2000).map(|_| token("a longer token text ", Source::Target, None, None)).collect();
        let failure = store.append_tokens(reply.id, &many).unwrap_err();
        assert_eq!(failure.plainly(), "the disk is full");
        assert_eq!(store.conversation(c.id).unwrap().messages[0].content, "", "nothing half-written");
        store.conn.pragma_update(None, "max_page_count", 1 << 20).unwrap();
        store.append_tokens(reply.id, &many).unwrap();
        assert_eq!(store.conversation(c.id).unwrap().messages[0].tokens.as_ref().unwrap().len(), 2000);
    }

    #[cfg(unix)]
    #[test]
    fn the_history_is_readable_by_its_user_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("data");
        let path = folder.join("specula.db");
        let store = Store::open(&path).unwrap();
        store.create_conversation().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&folder), 0o700);
        for file in [path.clone(), journal(&path, "-wal"), journal(&path, "-shm")] {
            assert_eq!(mode(&file), 0o600, "{}", file.display());
        }
        // A history an older version created 0644 is narrowed when opened.
        drop(store);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        Store::open(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn a_session_kept_in_memory_is_absorbed_whole_into_the_history() {
        let dir = tempfile::tempdir().unwrap();
        let mut history = Store::open(dir.path().join("specula.db")).unwrap();
        let old = history.create_conversation().unwrap();
        history.add_message(old.id, Role::User, "from before", None).unwrap();
        history.set_setting("theme", &"light").unwrap();

        let mut session = Store::open_in_memory().unwrap();
        let c = session.create_conversation().unwrap();
        session.add_message(c.id, Role::User, "Written while the disk was full", None).unwrap();
        let made_with = AppSettings { k: specula_protocol::KSetting::Fixed(3), ..Default::default() };
        let reply = session.add_message(c.id, Role::Assistant, "", Some(&made_with)).unwrap();
        session.append_tokens(reply.id, &[token("Hi", Source::Accepted, Some(0.9), Some(0.7))]).unwrap();
        let stats = GenerationStats { generated_tokens: 1, ..Default::default() };
        session.finish_reply(reply.id, Some(&stats), "stop").unwrap();
        session.set_setting("theme", &"dark").unwrap();

        history.absorb(&session).unwrap();
        let listed = history.conversations("").unwrap();
        assert_eq!(listed.len(), 2);
        let copied = history.conversation(listed.iter().find(|s| s.id != old.id).unwrap().id).unwrap();
        assert_eq!(copied.title, "Written while the disk was full");
        assert_eq!(copied.messages.len(), 2);
        let answer = &copied.messages[1];
        assert_eq!(answer.content, "Hi");
        assert_eq!(answer.stats.as_ref(), Some(&stats));
        assert_eq!(answer.settings_label, Some(made_with.label()));
        assert_eq!(answer.settings.as_ref(), Some(&made_with));
        assert_eq!(answer.tokens.as_ref().unwrap()[0].q, Some(0.7));
        assert_eq!(history.conversation(old.id).unwrap().messages[0].content, "from before");
        assert_eq!(
            history.setting::<String>("theme").unwrap().as_deref(),
            Some("dark"),
            "the session's settings are newer"
        );
    }

    #[test]
    fn a_role_or_source_this_version_does_not_know_is_refused_on_read_never_mapped() {
        let mut store = Store::open_in_memory().unwrap();
        let c = store.create_conversation().unwrap();
        let reply = store.add_message(c.id, Role::Assistant, "", None).unwrap();
        store.append_tokens(reply.id, &[token("x", Source::Copied, None, None)]).unwrap();
        let stored: String = store.conn.query_row("SELECT source FROM tokens", [], |r| r.get(0)).unwrap();
        assert_eq!(stored, "copied", "the protocol's own name");
        store.conn.execute("UPDATE tokens SET source = 'telepathy'", []).unwrap();
        let refused = store.conversation(c.id).unwrap_err().to_string();
        assert!(refused.contains("token's source `telepathy`"), "{refused}");
    }

    #[test]
    fn a_history_from_before_replies_kept_their_settings_opens_and_gains_the_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("specula.db");
        let old = Connection::open(&path).unwrap();
        // The schema as the first release made it.
        old.execute_batch(
            "CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL,
                 system_prompt TEXT NOT NULL DEFAULT '', created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
             CREATE TABLE messages (id INTEGER PRIMARY KEY,
                 conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                 role TEXT NOT NULL, content TEXT NOT NULL, stats TEXT, finish_reason TEXT,
                 settings_label TEXT, created_at INTEGER NOT NULL);",
        )
        .unwrap();
        old.execute_batch(
            "INSERT INTO conversations VALUES (1, 'Old', '', 0, 0);
             INSERT INTO messages (conversation_id, role, content, settings_label, created_at)
             VALUES (1, 'assistant', 'hi', 'remote m @ h · remote', 0);",
        )
        .unwrap();
        drop(old);
        let mut store = Store::open(&path).unwrap();
        let before = &store.conversation(1).unwrap().messages[0];
        assert_eq!((before.settings.as_ref(), before.settings_label.as_deref()), (None, Some("remote m @ h · remote")));
        let reply = store.add_message(1, Role::Assistant, "", Some(&AppSettings::default())).unwrap();
        assert_eq!(store.conversation(1).unwrap().messages[1].id, reply.id);
        assert!(store.conversation(1).unwrap().messages[1].settings.is_some());
    }
}
