//! Conversations as trees on a real history file: nothing a Regenerate or an Edit replaces is
//! lost, a history from before trees keeps every message, and an archive round-trips exactly.

use specula_protocol::{AppSettings, GenerationStats, Role, Source, TokenEvent, ToolCard, ToolOutcome};
use specula_store::exchange::{read_archive, write_archive};
use specula_store::{Store, StoreError};

fn reply(store: &mut Store, conversation: i64, text: &str) -> i64 {
    let m = store.add_message(conversation, Role::Assistant, "", Some(&AppSettings::default())).unwrap();
    let token = TokenEvent {
        id: 42,
        text: text.into(),
        source: Source::Accepted,
        p: Some(0.625),
        q: Some(0.5),
        alternatives: vec![],
    };
    store.append_tokens(m.id, &[token]).unwrap();
    let stats = GenerationStats { generated_tokens: 1, tokens_per_second: 12.3, ..Default::default() };
    store.finish_reply(m.id, Some(&stats), "stop").unwrap();
    m.id
}

/// The texts of the branch the conversation shows.
fn shown(store: &Store, conversation: i64) -> Vec<String> {
    store.conversation(conversation).unwrap().messages.into_iter().map(|m| m.content).collect()
}

#[test]
fn regenerating_twice_and_editing_once_keeps_three_branches_and_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("specula.db")).unwrap();
    let c = store.create_conversation().unwrap().id;
    let mut ids = Vec::new();
    for (q, a) in [("q1", "a1"), ("q2", "a2"), ("q3", "a3")] {
        ids.push(store.add_message(c, Role::User, q, None).unwrap().id);
        ids.push(reply(&mut store, c, a));
    }
    let original = shown(&store, c);
    assert_eq!(original, ["q1", "a1", "q2", "a2", "q3", "a3"]);

    // Regenerate the last reply twice: three answers to q3.
    for answer in ["a3 again", "a3 third"] {
        store.branch_before(c, ids[5]).unwrap();
        reply(&mut store, c, answer);
    }
    assert_eq!(shown(&store, c), ["q1", "a1", "q2", "a2", "q3", "a3 third"]);
    let last = store.conversation(c).unwrap().messages.pop().unwrap();
    assert_eq!(last.siblings.len(), 3, "◀ 3/3 ▶");
    assert_eq!(last.siblings[0], ids[5], "the first answer is still there");

    // Edit the second question: a new branch from a1.
    store.branch_before(c, ids[2]).unwrap();
    store.add_message(c, Role::User, "q2 edited", None).unwrap();
    reply(&mut store, c, "a2 for the edit");
    assert_eq!(shown(&store, c), ["q1", "a1", "q2 edited", "a2 for the edit"]);
    let question = &store.conversation(c).unwrap().messages[2];
    assert_eq!(question.siblings, [ids[2], question.id]);

    // Back to the first question's branch: it shows the newest answer under it.
    store.show_branch(c, ids[2]).unwrap();
    assert_eq!(shown(&store, c), ["q1", "a1", "q2", "a2", "q3", "a3 third"]);
    store.show_branch(c, ids[5]).unwrap();
    assert_eq!(shown(&store, c), original, "every original message, in its place");

    // Ten messages in all, nothing deleted: three answers to q3 and the edited branch, four
    // ends, each branch the path to its end.
    let archive = store.export(&[c]).unwrap();
    let messages = &archive.conversations[0].messages;
    assert_eq!(messages.len(), 10);
    let parents: std::collections::HashSet<_> = messages.iter().filter_map(|m| m.parent).collect();
    let ends: Vec<_> = messages.iter().filter(|m| !parents.contains(&m.key)).map(|m| m.content.as_str()).collect();
    assert_eq!(ends, ["a3", "a3 again", "a3 third", "a2 for the edit"]);
}

#[test]
fn a_history_made_before_trees_keeps_every_message_as_one_branch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("specula.db");
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/history-before-trees.db"), &path).unwrap();
    let mut store = Store::open(&path).unwrap();
    let listed = store.conversations("").unwrap();
    assert_eq!(listed.len(), 2);
    let first = store.conversation(listed[1].id).unwrap();
    assert_eq!(first.system_prompt, "You are terse.");
    let texts: Vec<_> = first.messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["What is 2+2?", "4", "And 3+3?", "6", "Name a prime.", "7"]);
    assert!(first.messages.iter().all(|m| m.siblings == [m.id]));
    let tokens = first.messages[5].tokens.as_ref().unwrap();
    assert_eq!((tokens[0].id, tokens[0].source, tokens[0].p), (102, Source::Accepted, Some(0.75)));
    assert_eq!(first.messages[5].stats.as_ref().unwrap().tokens_per_second, 12.5);
    // New messages follow the last, and a Regenerate keeps the old answer.
    store.branch_before(first.id, first.messages[5].id).unwrap();
    reply(&mut store, first.id, "11");
    let again = store.conversation(first.id).unwrap();
    assert_eq!(again.messages[5].siblings, [first.messages[5].id, again.messages[5].id]);
    drop(store);
    // Opening it again migrates nothing twice.
    let store = Store::open(&path).unwrap();
    assert_eq!(store.conversation(first.id).unwrap().messages[5].content, "11");
    assert_eq!(store.conversation(listed[0].id).unwrap().messages.len(), 2);
}

#[test]
fn an_archive_imported_in_a_fresh_history_exports_to_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("a/specula.db")).unwrap();
    let c = store.create_conversation().unwrap().id;
    store.set_system_prompt(c, "Be brief.").unwrap();
    let q = store.add_message(c, Role::User, "Hello ✓", None).unwrap().id;
    let a = reply(&mut store, c, "Hi");
    let card = ToolCard {
        id: "call_0_add".into(),
        server: "arith".into(),
        tool: "add".into(),
        arguments: serde_json::json!({"a": 1, "b": 2}),
        at: 1,
        running: false,
        outcome: Some(ToolOutcome::Ran { text: "3".into(), is_error: false, cut_from: None, ms: 4 }),
    };
    store.set_tool_cards(a, std::slice::from_ref(&card)).unwrap();
    store.branch_before(c, a).unwrap();
    reply(&mut store, c, "Hey");
    store.show_branch(c, a).unwrap();
    assert_eq!(
        store.conversation(c).unwrap().messages[1].tools,
        std::slice::from_ref(&card),
        "the cards are kept with the reply"
    );
    store.branch_before(c, q).unwrap();
    store.add_message(c, Role::User, "Edited", None).unwrap();
    store.create_conversation().unwrap();

    let mut first = Vec::new();
    write_archive(&store.export(&[]).unwrap(), &mut first).unwrap();
    let mut fresh = Store::open(dir.path().join("b/specula.db")).unwrap();
    let imported = fresh.import(read_archive(first.as_slice()).unwrap()).unwrap();
    assert_eq!(imported.conversations.len(), 2);
    let mut second = Vec::new();
    write_archive(&fresh.export(&[]).unwrap(), &mut second).unwrap();
    assert_eq!(String::from_utf8(second).unwrap(), String::from_utf8(first.clone()).unwrap());
    assert_eq!(shown(&fresh, imported.conversations[0]), ["Edited"], "the branch shown is kept");
    assert!(String::from_utf8(first.clone()).unwrap().contains("call_0_add"), "the archive carries tool cards");

    // A second import of the same file is recognised and skips both.
    let again = fresh.import(read_archive(first.as_slice()).unwrap()).unwrap();
    assert_eq!((again.conversations.len(), again.skipped.len()), (0, 2));
}

#[test]
fn a_bad_archive_imports_nothing_and_names_the_first_bad_entry() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("specula.db")).unwrap();
    let c = store.create_conversation().unwrap().id;
    store.add_message(c, Role::User, "ok", None).unwrap();
    let mut archive = store.export(&[]).unwrap();
    let mut bad = archive.conversations[0].clone();
    bad.source_id = "other".into();
    bad.title = "Broken".into();
    bad.messages[0].parent = Some(9);
    archive.conversations.push(bad);
    archive.conversations[0].source_id = "fresh".into();
    let refused = store.import(archive.conversations).unwrap_err();
    assert!(matches!(refused, StoreError::Invalid(_)));
    assert!(refused.to_string().contains("conversation 2 (\"Broken\"): message 1 follows message 9"), "{refused}");
    assert_eq!(store.conversations("").unwrap().len(), 1, "the good one before it was not written either");
}

#[test]
fn a_fork_copies_the_branch_and_a_deleted_message_comes_back_on_undo() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("specula.db")).unwrap();
    let c = store.create_conversation().unwrap().id;
    store.add_message(c, Role::User, "q1", None).unwrap();
    let a1 = reply(&mut store, c, "a1");
    let q2 = store.add_message(c, Role::User, "q2", None).unwrap().id;
    reply(&mut store, c, "a2");

    let fork = store.fork(c, a1).unwrap();
    assert_eq!(fork.title, "q1 (fork)");
    assert_eq!(fork.messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(), ["q1", "a1"]);
    assert_eq!(fork.messages[1].tokens.as_ref().unwrap()[0].p, Some(0.625), "provenance copied");
    assert_eq!(shown(&store, c).len(), 4, "the original untouched");

    store.delete_message(c, q2).unwrap();
    assert_eq!(shown(&store, c), ["q1", "a1"]);
    assert!(store.conversations("q2").unwrap().is_empty(), "a deleted message is not found");
    store.restore_message(c, q2).unwrap();
    assert_eq!(shown(&store, c), ["q1", "a1", "q2", "a2"]);
    store.delete_message(c, q2).unwrap();
    store.purge_deleted().unwrap();
    assert!(store.restore_message(c, q2).is_err(), "gone for good once purged");
    assert_eq!(store.export(&[c]).unwrap().conversations[0].messages.len(), 2);
}

#[test]
fn a_chat_deleted_and_imported_again_from_a_backup_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("specula.db")).unwrap();
    let c = store.create_conversation().unwrap().id;
    store.add_message(c, Role::User, "keep me", None).unwrap();
    let backup = store.export(&[]).unwrap();
    store.delete_conversation(c).unwrap();
    let imported = store.import(backup.conversations).unwrap();
    assert_eq!((imported.conversations.len(), imported.skipped.len()), (1, 0), "not skipped as already here");
    store.purge_deleted().unwrap();
    assert_eq!(shown(&store, imported.conversations[0]), ["keep me"]);
}

/// A history file with one conversation of one message, closed.
fn history_with_one_message() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("specula.db");
    let mut store = Store::open(&path).unwrap();
    let c = store.create_conversation().unwrap().id;
    store.add_message(c, Role::User, "kept", None).unwrap();
    (dir, path)
}

#[test]
fn a_history_of_a_newer_release_is_refused_and_left_untouched() {
    // The harm (issue 65, item 5): this release opened a history a newer release had marked
    // and wrote to it without a word; statements written for another format can delete
    // branches.
    let (_dir, path) = history_with_one_message();
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch("PRAGMA user_version = 99; PRAGMA wal_checkpoint(TRUNCATE);").unwrap();
    drop(raw);
    let before = std::fs::read(&path).unwrap();
    let refused = Store::open(&path).err().expect("refused");
    assert!(refused.to_string().contains("newer release") && refused.to_string().contains("99"), "{refused}");
    assert!(!refused.is_damage(), "never set aside as damaged");
    assert!(Store::open_or_set_aside(&path).is_err(), "and not set aside by the app's open either");
    assert_eq!(std::fs::read(&path).unwrap(), before, "the file is as it was");
}

#[test]
fn a_history_opens_for_reading_while_another_process_writes_to_it() {
    // The harm (issue 65, item 9): every open took the write lock, so `specula chats list`
    // failed while an import wrote, and the app started during a long import ran in memory.
    let (_dir, path) = history_with_one_message();
    let writer = rusqlite::Connection::open(&path).unwrap();
    writer.execute_batch("BEGIN IMMEDIATE; INSERT INTO settings (key, value) VALUES ('import', '1');").unwrap();
    let reader = Store::open(&path).expect("opened while another process holds the write lock");
    assert_eq!(reader.conversations("").unwrap().len(), 1);
    writer.execute_batch("COMMIT").unwrap();
}

#[test]
fn an_older_release_cannot_delete_the_messages_of_this_releases_tree() {
    // The harm (issue 65, item 5): the previous release's Regenerate SQL, run on this
    // release's tree, deleted 6 of 7 messages across branches.
    let (_dir, path) = history_with_one_message();
    let mut store = Store::open(&path).unwrap();
    let c = store.conversations("").unwrap()[0].id;
    for text in ["a1", "q2", "a2"] {
        store.add_message(c, Role::User, text, None).unwrap();
    }
    drop(store);
    // A connection without this release's functions, as an older release opens the file.
    let older = rusqlite::Connection::open(&path).unwrap();
    let refused = older.execute("DELETE FROM messages WHERE conversation_id = ?1 AND id > 1", [c]).unwrap_err();
    assert!(refused.to_string().contains("specula_may_delete"), "{refused}");
    let refused = older.execute("DELETE FROM conversations WHERE id = ?1", [c]).unwrap_err();
    assert!(refused.to_string().contains("specula_may_delete"), "{refused}");
    let count: i64 = older.query_row("SELECT COUNT(*) FROM messages", [], |r| r.get(0)).unwrap();
    assert_eq!(count, 4, "nothing deleted");
    drop(older);
    // This release still deletes for good what the user deleted.
    let mut store = Store::open(&path).unwrap();
    let last = store.conversation(c).unwrap().messages.last().unwrap().id;
    store.delete_message(c, last).unwrap();
    assert_eq!(store.purge_deleted().unwrap(), 1);
}
