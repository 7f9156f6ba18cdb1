//! Files attached to a message in the app: read by specula-attach (text, code, Markdown, CSV,
//! JSON, a PDF's text; anything else refused with the reason), their tokens counted with the
//! target model's own tokenizer (read from its GGUF once per model), and a file that alone
//! would not fit the context refused with both counts. The window shows each as a chip and
//! appends its block to the message it sends; the stored message keeps the file's text.

use crate::access::blocking;
use crate::error::{CommandResult, ErrorCode, ErrorInfo};
use crate::settings::AppSettings;
use crate::AppState;
use specula_attach::grouped;
use specula_engine::gguf::GgufFile;
use specula_engine::protocol::AttachedFile;
use specula_engine::tokenizer::Tokenizer;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tauri::State;

/// The last target's tokenizer and trained context, by its path: attaching a few files reads
/// the model's header once.
#[derive(Default)]
pub struct Tokenizers(Mutex<Option<Kept>>);

/// A target's path, its tokenizer and its trained context.
type Kept = (PathBuf, Arc<Tokenizer>, Option<u32>);

impl Tokenizers {
    fn of(&self, path: PathBuf) -> CommandResult<(Arc<Tokenizer>, Option<u32>)> {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((kept_path, tokenizer, trained)) = kept.as_ref() {
            if *kept_path == path {
                return Ok((tokenizer.clone(), *trained));
            }
        }
        let gguf = GgufFile::open(&path)?;
        let tokenizer = Arc::new(Tokenizer::from_gguf(&gguf)?);
        let architecture = gguf.string("general.architecture").unwrap_or_default();
        let trained = gguf.count(&format!("{architecture}.context_length")).ok().map(|n| n as u32);
        *kept = Some((path, tokenizer.clone(), trained));
        Ok((tokenizer, trained))
    }
}

/// Read a file the user picked or dropped (its name and bytes) for the message being written.
#[tauri::command]
#[specta::specta]
pub async fn read_attachment(
    state: State<'_, AppState>,
    name: String,
    bytes: Vec<u8>,
    settings: AppSettings,
) -> CommandResult<AttachedFile> {
    // The loaded target's context; before it is loaded, the one it will have at most.
    let loaded = state.engine.status().context.map(|c| c.tokens as u32);
    let chosen = settings.context_tokens.map(|n| n as u32);
    // A remote target's tokenizer is not here: its file is sent uncounted.
    let target = match settings.remote {
        Some(_) => None,
        None => Some(crate::paths::model_path(&settings.target)?),
    };
    let tokenizers = state.tokenizers.clone();
    blocking(move || {
        let file = specula_attach::read(&name, &bytes).map_err(|why| ErrorInfo::new(ErrorCode::InvalidRequest, why))?;
        let (tokens, context) = match target {
            Some(path) => {
                let (tokenizer, trained) = tokenizers.of(path)?;
                let tokens = tokenizer.encode_without_bos(&file.text)?.len() as u32;
                (Some(tokens), loaded.or_else(|| chosen.into_iter().chain(trained).min()))
            }
            None => (None, loaded),
        };
        let what = match &file.kind {
            specula_attach::Kind::Pdf { pages } => format!("PDF, {pages} pages"),
            specula_attach::Kind::Text { language } if !language.is_empty() => language.clone(),
            specula_attach::Kind::Text { .. } => "text".into(),
        };
        if let (Some(tokens), Some(context)) = (tokens, context) {
            if tokens >= context {
                return Err(ErrorInfo::new(
                    ErrorCode::ContextOverflow,
                    format!(
                        "{name} is {} tokens ({what}, {}), and the context holds {}: attach a part of it",
                        grouped(tokens as usize),
                        specula_attach::size(file.bytes),
                        grouped(context as usize)
                    ),
                ));
            }
        }
        let block = specula_attach::inline("", std::slice::from_ref(&file));
        Ok(AttachedFile { name, what, size: specula_attach::size(file.bytes), tokens, context, block })
    })
    .await
}
