//! The history as archives ([`Archive`]): what `export` writes and `import` reads, the whole
//! tree of each conversation with every token's provenance, stats and settings.

use crate::exchange::{
    check, Archive, ArchivedConversation, ArchivedMessage, ImportError, ImportFormat, ARCHIVE_FORMAT, ARCHIVE_VERSION,
};
use crate::{stored_name, Result, Store, StoreError, NEW_TITLE};
use rusqlite::{params, OptionalExtension, Transaction};
use specula_protocol::{ExportFormat, TokenEvent};
use std::collections::HashMap;

/// What an import wrote.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Imported {
    /// The new conversations' ids, in the file's order.
    pub conversations: Vec<i64>,
    /// The titles of conversations already in the history (the same source id), not written
    /// again.
    pub skipped: Vec<String>,
}

impl Store {
    /// The conversations `ids` names (none: every one), oldest first, each with every message
    /// it shows on any branch.
    pub fn export(&self, ids: &[i64]) -> Result<Archive> {
        let ids = self.export_ids(ids)?;
        let mut conversations = Vec::with_capacity(ids.len());
        for id in ids {
            let shown = self.tree(id)?.shown();
            conversations.push(self.export_conversation(id, &shown)?);
        }
        Ok(Archive { format: ARCHIVE_FORMAT.into(), version: ARCHIVE_VERSION, conversations })
    }

    /// Conversation `id` with the messages `messages` names (parents first), keyed from 1.
    pub(crate) fn export_conversation(&self, id: i64, messages: &[i64]) -> Result<ArchivedConversation> {
        let head = self
            .conn
            .query_row(
                "SELECT uid, title, system_prompt, created_at, updated_at, current_leaf FROM conversations
                 WHERE id = ?1 AND deleted_at IS NULL",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get::<_, Option<i64>>(5)?)),
            )
            .optional()?
            .ok_or_else(|| crate::not_found(id))?;
        let (source_id, title, system_prompt, created_at, updated_at, leaf) = head;
        let tree = self.tree(id)?;
        let keys: HashMap<i64, u32> = messages.iter().enumerate().map(|(i, id)| (*id, i as u32 + 1)).collect();
        let stored = self.messages(&tree, messages)?;
        let mut archived = Vec::with_capacity(stored.len());
        for m in stored {
            let created_at =
                self.conn.query_row("SELECT created_at FROM messages WHERE id = ?1", [m.id], |r| r.get(0))?;
            archived.push(ArchivedMessage {
                key: keys[&m.id],
                parent: m.parent_id.and_then(|p| keys.get(&p).copied()),
                role: m.role,
                content: m.content,
                created_at,
                tokens: m.tokens,
                stats: m.stats,
                finish_reason: m.finish_reason,
                settings_label: m.settings_label,
                settings: m.settings,
                tools: m.tools,
            });
        }
        // The branch shown, or where a partial copy (a fork) ends.
        let current = tree.path_to(leaf).last().and_then(|l| keys.get(l)).or_else(|| archived.last().map(|m| &m.key));
        Ok(ArchivedConversation {
            source_id,
            title,
            system_prompt,
            created_at,
            updated_at,
            current: current.copied(),
            messages: archived,
        })
    }

    /// Write `conversations`, all or none: each is checked first, and the first bad one refuses
    /// the whole import. One already here (the same source id) is skipped.
    pub fn import(&mut self, conversations: Vec<ArchivedConversation>) -> Result<Imported> {
        for (i, c) in conversations.iter().enumerate() {
            check(c, &format!("conversation {} (\"{}\")", i + 1, c.title)).map_err(|e| StoreError::Invalid(e.0))?;
        }
        let tx = self.conn.transaction()?;
        let imported = insert(&tx, conversations)?;
        tx.commit()?;
        Ok(imported)
    }

    /// Import a file as `format` (none: as its content shows), all or nothing: each
    /// conversation is written as it is read, inside one transaction that a bad entry or a
    /// failed write rolls back. A large export is never held whole in memory.
    pub fn import_from(
        &mut self,
        input: impl std::io::Read,
        format: Option<ImportFormat>,
    ) -> Result<(ImportFormat, Imported)> {
        let tx = self.conn.transaction()?;
        let mut imported = Imported::default();
        let mut failed = None;
        let read = crate::exchange::each(
            input,
            format,
            Box::new(|c| {
                insert_one(&tx, c, &mut imported).map_err(|e| {
                    failed = Some(e);
                    ImportError("the history refused a write".into())
                })
            }),
        );
        if let Some(failed) = failed {
            return Err(failed);
        }
        let format = read.map_err(|e| StoreError::Invalid(e.0))?;
        tx.commit()?;
        Ok((format, imported))
    }
}

/// Write checked conversations inside `tx`.
pub(crate) fn insert(tx: &Transaction, conversations: Vec<ArchivedConversation>) -> Result<Imported> {
    let mut imported = Imported::default();
    for c in conversations {
        insert_one(tx, c, &mut imported)?;
    }
    Ok(imported)
}

/// Write one checked conversation inside `tx`, or skip it when it is already here.
fn insert_one(tx: &Transaction, c: ArchivedConversation, imported: &mut Imported) -> Result<()> {
    // One deleted, its Undo pending, gives way to the import: the user is bringing it back.
    let known: Option<bool> = tx
        .query_row("SELECT deleted_at IS NOT NULL FROM conversations WHERE uid = ?1", [&c.source_id], |r| r.get(0))
        .optional()?;
    match known {
        Some(true) => purge_conversation(tx, &c.source_id)?,
        Some(false) => {
            imported.skipped.push(c.title);
            return Ok(());
        }
        None => {}
    }
    let title = if c.title.trim().is_empty() { NEW_TITLE } else { c.title.as_str() };
    tx.execute(
        "INSERT INTO conversations (title, system_prompt, created_at, updated_at, uid) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![title, c.system_prompt, c.created_at, c.updated_at, c.source_id],
    )?;
    let conversation = tx.last_insert_rowid();
    // Keys were checked (`check`) before this; a missing one is refused all the same, never a panic.
    let unknown =
        |key: u32| StoreError::Invalid(format!("\"{}\": message {key} is not in the file before it", c.title));
    let mut ids: HashMap<u32, i64> = HashMap::with_capacity(c.messages.len());
    for m in &c.messages {
        let parent = m.parent.map(|p| ids.get(&p).copied().ok_or_else(|| unknown(p))).transpose()?;
        ids.insert(m.key, insert_message(tx, conversation, parent, m)?);
    }
    let leaf = c.current.map(|k| ids.get(&k).copied().ok_or_else(|| unknown(k))).transpose()?;
    tx.execute("UPDATE conversations SET current_leaf = ?2 WHERE id = ?1", params![conversation, leaf])?;
    imported.conversations.push(conversation);
    Ok(())
}

fn insert_message(tx: &Transaction, conversation: i64, parent: Option<i64>, m: &ArchivedMessage) -> Result<i64> {
    let stats = m.stats.as_ref().map(serde_json::to_string).transpose()?;
    let settings = m.settings.as_ref().map(serde_json::to_string).transpose()?;
    let tools = (!m.tools.is_empty()).then(|| serde_json::to_string(&m.tools)).transpose()?;
    tx.prepare_cached(
        "INSERT INTO messages (conversation_id, parent_id, role, content, created_at, stats, finish_reason, settings_label, settings, tools)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        conversation,
        parent,
        stored_name(&m.role),
        m.content,
        m.created_at,
        stats,
        m.finish_reason,
        m.settings_label,
        settings,
        tools
    ])?;
    let id = tx.last_insert_rowid();
    if let Some(tokens) = &m.tokens {
        insert_tokens(tx, id, 0, tokens)?;
    }
    Ok(id)
}

/// Tokens of reply `message_id` from `start` on, with their provenance.
pub(crate) fn insert_tokens(tx: &Transaction, message_id: i64, start: i64, tokens: &[TokenEvent]) -> Result<()> {
    let mut insert = tx.prepare_cached(
        "INSERT INTO tokens (message_id, position, token_id, text, source, p, q) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for (i, t) in tokens.iter().enumerate() {
        insert.execute(params![
            message_id,
            start + i as i64,
            t.id,
            t.text,
            stored_name(&t.source),
            t.p.map(f64::from),
            t.q.map(f64::from)
        ])?;
    }
    Ok(())
}

impl Store {
    /// Write conversations `ids` (none: every one) to `out` as `format`: the whole trees as a
    /// Specula archive, or each current branch as Markdown.
    pub fn export_to(&self, ids: &[i64], format: ExportFormat, mut out: impl std::io::Write) -> Result<()> {
        let written = match format {
            ExportFormat::Json => crate::exchange::write_archive(&self.export(ids)?, out),
            ExportFormat::Markdown => {
                let mut pages = Vec::new();
                for id in self.export_ids(ids)? {
                    pages.push(crate::exchange::markdown::conversation(&self.conversation(id)?));
                }
                out.write_all(pages.join("\n---\n\n").as_bytes())
            }
        };
        written.map_err(|e| StoreError::Invalid(format!("the export cannot be written: {e}")))
    }

    /// `ids`, or every conversation shown, oldest first.
    fn export_ids(&self, ids: &[i64]) -> Result<Vec<i64>> {
        if !ids.is_empty() {
            return Ok(ids.to_vec());
        }
        let mut stmt = self.conn.prepare("SELECT id FROM conversations WHERE deleted_at IS NULL ORDER BY id")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<Vec<i64>>>()?)
    }
}

/// Delete conversation `uid` for good, its messages first, newest first (no cascade runs
/// down a long branch).
fn purge_conversation(tx: &Transaction, uid: &str) -> Result<()> {
    let ids: Vec<i64> = {
        let mut stmt = tx.prepare(
            "SELECT m.id FROM messages m JOIN conversations c ON m.conversation_id = c.id WHERE c.uid = ?1 ORDER BY m.id DESC",
        )?;
        let rows = stmt.query_map([uid], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for id in ids {
        tx.execute("DELETE FROM messages WHERE id = ?1", [id])?;
    }
    tx.execute("DELETE FROM conversations WHERE uid = ?1", [uid])?;
    Ok(())
}
