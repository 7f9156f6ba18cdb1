//! `generate --attach FILE`: files inlined into the user's message under their names, each
//! one's size and token count said first, and the message refused with those counts when it
//! would not fit the context (never cut: the user would not know what the model missed).

use crate::safe_text::printable;
use specula_attach::{grouped, Attachment, Kind};
use specula_engine::tokenizer::TokenCount;
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
    let context = session.target.info.context;
    let mut counts = Vec::new();
    let mut over = false;
    for file in files {
        // Counted in pieces that stop past the context: a 16 MiB text is refused in the memory
        // of one piece, not tokenized whole first.
        let tokens = match session.target.tokenizer.count_within(&file.text, context).map_err(|e| e.to_string())? {
            TokenCount::Exact(n) => grouped(n),
            TokenCount::MoreThan(_) => {
                over = true;
                format!("more than {}", grouped(context))
            }
        };
        let what = match file.kind {
            Kind::Pdf { pages } => format!("PDF, {pages} pages"),
            Kind::Text { .. } => "text".to_string(),
        };
        let line = format!("{}: {what}, {}, {tokens} tokens", file.name, specula_attach::size(file.bytes));
        eprintln!("Attached {}", printable(&line));
        counts.push(format!("{} {tokens} tokens", file.name));
    }
    if over {
        return Err(too_long(&format!("more than {}", grouped(context)), &counts, context));
    }
    let prompt = session.chat_prompt(messages, &[]).map_err(|e| e.to_string())?.len();
    if prompt >= context {
        return Err(too_long(&grouped(prompt), &counts, context));
    }
    Ok(())
}

fn too_long(prompt: &str, counts: &[String], context: usize) -> String {
    printable(&format!(
        "the message with its files is {prompt} tokens ({}), and the context holds {}: attach less, or a part of the file",
        counts.join(", "),
        grouped(context)
    ))
    .into_owned()
}
