//! `generate --attach FILE`: files inlined into the user's message under their names, each
//! one's size and token count said first, and the message refused with those counts when it
//! would not fit the context (never cut: the user would not know what the model missed).

use crate::safe_text::printable;
use specula_attach::{grouped, Attachment, Kind};
use specula_engine::{Message, Session};

/// Read the files (any refusal names the file and why).
pub fn read_all(paths: &[std::path::PathBuf]) -> Result<Vec<Attachment>, String> {
    paths.iter().map(|path| specula_attach::read_path(path)).collect()
}

/// Say each file's size and tokens; refuse when the chat's prompt would not fit the context.
pub fn check_fit(session: &Session, messages: &[Message], files: &[Attachment]) -> Result<(), String> {
    if files.is_empty() {
        return Ok(());
    }
    let mut counts = Vec::new();
    for file in files {
        let tokens = session.target.tokenizer.encode(&file.text).map_err(|e| e.to_string())?.len();
        let what = match file.kind {
            Kind::Pdf { pages } => format!("PDF, {pages} pages"),
            Kind::Text { .. } => "text".to_string(),
        };
        let line = format!("{}: {what}, {}, {} tokens", file.name, specula_attach::size(file.bytes), grouped(tokens));
        eprintln!("Attached {}", printable(&line));
        counts.push(format!("{} {} tokens", file.name, grouped(tokens)));
    }
    let prompt = session.chat_prompt(messages, &[]).map_err(|e| e.to_string())?.len();
    let context = session.target.info.context;
    if prompt >= context {
        return Err(printable(&format!(
            "the message with its files is {} tokens ({}), and the context holds {}: attach less, or a part of the file",
            grouped(prompt),
            counts.join(", "),
            grouped(context)
        ))
        .into_owned());
    }
    Ok(())
}
