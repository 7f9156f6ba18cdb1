//! Which app wrote a file, and reading it as that app's export.

use super::{check, read_archive, ArchivedConversation, ImportError, Take};
use std::io::{BufRead, BufReader, Read};

/// The exports Specula reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportFormat {
    Specula,
    ChatGpt,
    OpenWebUi,
    LlamaCpp,
}

impl ImportFormat {
    pub const ALL: [ImportFormat; 4] = [Self::Specula, Self::ChatGpt, Self::OpenWebUi, Self::LlamaCpp];

    /// The name `--format` takes and the import reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Specula => "specula",
            Self::ChatGpt => "chatgpt",
            Self::OpenWebUi => "openwebui",
            Self::LlamaCpp => "llamacpp",
        }
    }

    pub fn from_name(name: &str) -> Result<Self, ImportError> {
        Self::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|f| f.name()).collect();
            ImportError(format!("unknown format `{name}`: one of {}", names.join(", ")))
        })
    }

    /// Judge by the file's first bytes: the key each format has near its start.
    fn detect(head: &str) -> Result<Self, ImportError> {
        let start = head.trim_start();
        if start.is_empty() {
            return Err(ImportError("the file is empty".into()));
        }
        if !start.starts_with(['{', '[']) {
            return Err(ImportError("the file is not JSON (a chat export is)".into()));
        }
        let has = |key: &str| head.contains(&format!("\"{key}\""));
        Ok(match () {
            _ if head.contains("\"specula-chats\"") => Self::Specula,
            _ if has("mapping") => Self::ChatGpt,
            _ if has("currentId") || (has("chat") && has("history")) => Self::OpenWebUi,
            _ if has("currNode") || has("convId") || has("conv") => Self::LlamaCpp,
            _ => {
                return Err(ImportError(
                    "this file is not an export Specula knows (Specula, ChatGPT, Open WebUI or llama.cpp's web UI): choose the format".into(),
                ))
            }
        })
    }
}

/// How far into a file detection looks.
const HEAD_BYTES: usize = 64 << 10;

/// Read `input` as `format`, or as the format its first bytes show, into a list.
pub fn read(
    input: impl Read,
    format: Option<ImportFormat>,
) -> Result<(ImportFormat, Vec<ArchivedConversation>), ImportError> {
    let mut told = None;
    let conversations = super::collect(|take| each(input, format, take).map(|f| told = Some(f)))?;
    Ok((told.unwrap_or(ImportFormat::Specula), conversations))
}

/// Read `input` as `format`, or as the format its first bytes show, handing each conversation
/// to `take` checked, as it is read: other apps' exports are streamed, so a large one is never
/// held whole in memory.
pub fn each(input: impl Read, format: Option<ImportFormat>, mut take: Take<'_>) -> Result<ImportFormat, ImportError> {
    let mut input = BufReader::with_capacity(HEAD_BYTES, input);
    let format = match format {
        Some(format) => format,
        None => {
            let head = input.fill_buf().map_err(|e| ImportError(format!("the file cannot be read: {e}")))?;
            ImportFormat::detect(&String::from_utf8_lossy(head))?
        }
    };
    match format {
        ImportFormat::Specula => {
            for (i, c) in read_archive(input)?.into_iter().enumerate() {
                check(&c, &format!("conversation {} (\"{}\")", i + 1, c.title))?;
                take(c)?;
            }
        }
        ImportFormat::ChatGpt => super::chatgpt::each(input, take)?,
        ImportFormat::OpenWebUi => super::openwebui::each(input, take)?,
        ImportFormat::LlamaCpp => super::llamacpp::each(input, take)?,
    }
    Ok(format)
}
