//! The commands that shape a conversation's tree (branches, forks, undoable deletes) and move
//! chats in and out of the app. The tree itself lives in specula-store.

use crate::access::with_store;
use crate::error::{CommandResult, ErrorCode, ErrorInfo};
use crate::AppState;
use specula_engine::protocol::{ExportFormat, ImportSummary};
use specula_store::Conversation;
use std::path::{Path, PathBuf};
use tauri::{Manager, State};

/// Show the conversation up to just before `message_id`: the next message added is its
/// sibling (Regenerate, Edit). Nothing is deleted.
#[tauri::command]
#[specta::specta]
pub fn branch_before(state: State<'_, AppState>, conversation_id: i64, message_id: i64) -> CommandResult<()> {
    with_store(&state, |s| s.branch_before(conversation_id, message_id))
}

/// Show the branch through `message_id` (◀ ▶ between siblings).
#[tauri::command]
#[specta::specta]
pub fn show_branch(state: State<'_, AppState>, conversation_id: i64, message_id: i64) -> CommandResult<Conversation> {
    with_store(&state, |s| s.show_branch(conversation_id, message_id).and_then(|()| s.conversation(conversation_id)))
}

/// Delete a message and what follows it, undoably until [`purge_deleted`].
#[tauri::command]
#[specta::specta]
pub fn delete_message(state: State<'_, AppState>, conversation_id: i64, message_id: i64) -> CommandResult<()> {
    with_store(&state, |s| s.delete_message(conversation_id, message_id))
}

#[tauri::command]
#[specta::specta]
pub fn restore_message(state: State<'_, AppState>, conversation_id: i64, message_id: i64) -> CommandResult<()> {
    with_store(&state, |s| s.restore_message(conversation_id, message_id))
}

#[tauri::command]
#[specta::specta]
pub fn restore_conversation(state: State<'_, AppState>, id: i64) -> CommandResult<()> {
    with_store(&state, |s| s.restore_conversation(id))
}

/// The Undo was dismissed: delete for good what was deleted. Not while a reply is being
/// saved: its message may be among them, and SQLite could give its id to a new message that
/// the reply's late writes would then land in. What is left is purged at the next start.
#[tauri::command]
#[specta::specta]
pub fn purge_deleted(state: State<'_, AppState>) -> CommandResult<()> {
    if state.engine.replying() {
        return Ok(());
    }
    with_store(&state, |s| s.purge_deleted().map(drop))
}

/// A new chat holding the branch up to `message_id`.
#[tauri::command]
#[specta::specta]
pub fn fork_conversation(
    state: State<'_, AppState>,
    conversation_id: i64,
    message_id: i64,
) -> CommandResult<Conversation> {
    with_store(&state, |s| s.fork(conversation_id, message_id))
}

/// Write chats `ids` (none: all) into the Downloads folder; returns the file written.
#[tauri::command]
#[specta::specta]
pub fn export_conversations(
    app: tauri::AppHandle,
    state: State<'_, AppState>,
    ids: Vec<i64>,
    format: ExportFormat,
) -> CommandResult<String> {
    let folder =
        app.path().download_dir().or_else(|_| app.path().home_dir()).map_err(|e| {
            ErrorInfo::new(ErrorCode::Storage, format!("There is no Downloads folder to export to: {e}"))
        })?;
    let title = match ids.as_slice() {
        [one] => with_store(&state, |s| s.conversation(*one))?.title,
        _ => "chats".into(),
    };
    let (path, file) = new_file(&folder, &title, format)
        .map_err(|e| ErrorInfo::new(ErrorCode::Storage, format!("{}: cannot be written: {e}", folder.display())))?;
    if let Err(e) = with_store(&state, |s| s.export_to(&ids, format, file)) {
        std::fs::remove_file(&path).ok(); // no half-written export left to be taken for a whole one
        return Err(e);
    }
    Ok(path.display().to_string())
}

/// A file of its own for an export: `specula-<title>.<ext>` in `folder`, numbered when taken,
/// created only if nothing (a file, a link) is there, so nothing is ever overwritten.
fn new_file(folder: &Path, title: &str, format: ExportFormat) -> std::io::Result<(PathBuf, std::fs::File)> {
    let mut n = 1;
    loop {
        let path = free_name(folder, title, format, n);
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err(e),
        }
    }
}

/// The `n`th name an export of `title` may take; the title's characters that file systems
/// refuse are replaced.
fn free_name(folder: &Path, title: &str, format: ExportFormat, n: u32) -> PathBuf {
    let extension = match format {
        ExportFormat::Json => "json",
        ExportFormat::Markdown => "md",
    };
    let safe: String =
        title.chars().map(|c| if c.is_alphanumeric() || c == '-' || c == ' ' { c } else { '_' }).take(60).collect();
    let stem = format!("specula-{}", safe.trim());
    match n {
        1 => folder.join(format!("{stem}.{extension}")),
        n => folder.join(format!("{stem} ({n}).{extension}")),
    }
}

/// Import a chat export the window read (Specula, ChatGPT, Open WebUI or llama.cpp's web UI,
/// told apart by its content), all or nothing.
#[tauri::command]
#[specta::specta]
pub fn import_conversations(state: State<'_, AppState>, text: String) -> CommandResult<ImportSummary> {
    let (format, imported) = with_store(&state, |s| s.import_from(text.as_bytes(), None)).map_err(|e| {
        ErrorInfo::new(e.code, format!("This file cannot be imported, and nothing of it was: {}", e.message))
    })?;
    Ok(ImportSummary { format: format.name().into(), imported: imported.conversations, skipped: imported.skipped })
}

#[cfg(test)]
mod tests {
    use super::*;
    use specula_engine::chat::RenderOptions;
    use specula_engine::{chat_prompt_ids, ChatTemplate, Message, Role, Tokenizer};
    use specula_store::Store;

    /// A prompt's token ids, with the default target's own tokenizer and chat template.
    fn target_prompt_ids() -> impl Fn(&[Message]) -> Vec<u32> {
        let dir = std::env::var_os("SPECULA_MODELS_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/specula/models")
        });
        let model = dir.join("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf");
        assert!(model.exists(), "{} is missing: run scripts/fetch-models.sh", model.display());
        let gguf = specula_engine::gguf::GgufFile::open(&model).unwrap();
        let tokenizer = Tokenizer::from_gguf(&gguf).unwrap();
        let template = ChatTemplate::from_gguf(&gguf, tokenizer.bos_text(), tokenizer.eos_text()).unwrap();
        move |messages| {
            let options = RenderOptions { add_generation_prompt: true, kwargs: Default::default(), now: None };
            chat_prompt_ids(&tokenizer, &template, messages, &[], &options).unwrap()
        }
    }

    #[test]
    fn each_branch_is_prompted_as_exactly_its_path() {
        let prompt_ids = target_prompt_ids();
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("specula.db")).unwrap();
        let c = store.create_conversation().unwrap().id;
        store.set_system_prompt(c, "Be brief.").unwrap();
        let mut ids = Vec::new();
        for text in ["Name a prime.", "7", "Another?", "11", "One more?", "13"] {
            let role = if ids.len() % 2 == 0 { Role::User } else { Role::Assistant };
            ids.push(store.add_message(c, role, text, None).unwrap().id);
        }
        // Regenerate the last reply twice, then edit the second question.
        let mut ends = vec![ids[5]];
        for again in ["17", "19"] {
            store.branch_before(c, ids[5]).unwrap();
            ends.push(store.add_message(c, Role::Assistant, again, None).unwrap().id);
        }
        store.branch_before(c, ids[2]).unwrap();
        store.add_message(c, Role::User, "An even one?", None).unwrap();
        ends.push(store.add_message(c, Role::Assistant, "2", None).unwrap().id);

        let turn = |role: Role, text: &str| Message::new(role, text.to_string());
        let path = |tail: &[(Role, &str)]| -> Vec<Message> {
            let head = [(Role::System, "Be brief."), (Role::User, "Name a prime."), (Role::Assistant, "7")];
            head.iter().chain(tail).map(|(role, text)| turn(role.clone(), text)).collect()
        };
        fn ask(last: &str) -> Vec<(Role, &str)> {
            vec![(Role::User, "Another?"), (Role::Assistant, "11"), (Role::User, "One more?"), (Role::Assistant, last)]
        }
        let expected = [
            path(&ask("13")),
            path(&ask("17")),
            path(&ask("19")),
            path(&[(Role::User, "An even one?"), (Role::Assistant, "2")]),
        ];
        for (end, expected) in ends.iter().zip(&expected) {
            store.show_branch(c, *end).unwrap();
            let shown = crate::commands::chat_messages(&store.conversation(c).unwrap(), true);
            assert_eq!(prompt_ids(&shown), prompt_ids(expected), "the branch ending at {end}");
        }
        // A Regenerate's prompt: the path up to its question, no more.
        store.branch_before(c, ends[1]).unwrap();
        let regenerating = crate::commands::chat_messages(&store.conversation(c).unwrap(), true);
        let mut question = path(&ask(""));
        question.pop();
        assert_eq!(prompt_ids(&regenerating), prompt_ids(&question));
    }

    #[test]
    fn an_export_never_overwrites_a_file_and_its_name_is_safe() {
        let dir = tempfile::tempdir().unwrap();
        let (first, _) = new_file(dir.path(), "a/b: ../c", ExportFormat::Markdown).unwrap();
        assert_eq!(first.file_name().unwrap(), "specula-a_b_ ___c.md");
        // A link where the next name would be is not followed.
        #[cfg(unix)]
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), dir.path().join("specula-a_b_ ___c (2).md")).unwrap();
        let (third, _) = new_file(dir.path(), "a/b: ../c", ExportFormat::Markdown).unwrap();
        assert_eq!(third.file_name().unwrap(), "specula-a_b_ ___c (3).md");
        assert!(!dir.path().join("elsewhere").exists());
    }
}
