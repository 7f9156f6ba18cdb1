//! `specula chats`: the desktop app's history from the terminal, to back it up, move it, or
//! script it. It opens the same SQLite file the app does (its data folder, or
//! `SPECULA_DATA_DIR`), so both can run at once: SQLite's locks keep them apart.

use crate::safe_text::printable;
use clap::{Args, Subcommand, ValueEnum};
use specula_engine::protocol::ExportFormat;
use specula_store::exchange::ImportFormat;
use specula_store::Store;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct ChatsArgs {
    #[command(subcommand)]
    command: ChatsCommand,
    /// The app's data folder; default: SPECULA_DATA_DIR, or the folder the app uses.
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum ChatsCommand {
    /// The chats, newest first: id, last change, title.
    List,
    /// Write chats to a file (or stdout): every chat unless --id names some.
    Export {
        /// A chat to export (repeat for several); default: all.
        #[arg(long)]
        id: Vec<i64>,
        /// json: Specula's archive (every branch, token provenance, stats; imports exactly).
        /// md: the branch shown, to read.
        #[arg(long, value_enum, default_value_t = Format::Json)]
        format: Format,
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Import an export: Specula's, ChatGPT's conversations.json, Open WebUI's or llama.cpp's
    /// web UI's. All or nothing; chats already here (the same source id) are skipped.
    Import {
        file: PathBuf,
        /// The file's format (specula, chatgpt, openwebui or llamacpp); default: told from its
        /// content.
        #[arg(long, value_parser = import_format)]
        format: Option<ImportFormat>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Json,
    Md,
}

/// `--format` of an import, by the names the store gives its formats.
fn import_format(name: &str) -> Result<ImportFormat, String> {
    ImportFormat::from_name(name).map_err(|e| e.0)
}

pub fn chats(args: ChatsArgs) -> Result<(), String> {
    let dir = args.data_dir.or_else(specula_store::data_dir).ok_or("no data folder: set SPECULA_DATA_DIR")?;
    let path = specula_store::history_file(&dir);
    let opened = |create: bool| -> Result<Store, String> {
        if !create && !path.exists() {
            return Err(format!("{}: no chat history there yet", printable(&path.display().to_string())));
        }
        Store::open(&path).map_err(|e| format!("{}: {}", printable(&path.display().to_string()), e.plainly()))
    };
    match args.command {
        ChatsCommand::List => list(&opened(false)?),
        ChatsCommand::Export { id, format, output } => export(&opened(false)?, &id, format, output.as_deref()),
        ChatsCommand::Import { file, format } => import(&mut opened(true)?, &file, format),
    }
}

fn list(store: &Store) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    for c in store.conversations("").map_err(|e| e.to_string())? {
        let when =
            chrono::DateTime::from_timestamp_millis(c.updated_at).map(|t| t.format("%Y-%m-%d %H:%M").to_string());
        writeln!(out, "{:>6}  {}  {}", c.id, when.unwrap_or_default(), printable(&c.title))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn export(store: &Store, ids: &[i64], format: Format, output: Option<&Path>) -> Result<(), String> {
    let format = match format {
        Format::Json => ExportFormat::Json,
        Format::Md => ExportFormat::Markdown,
    };
    let Some(path) = output else {
        let mut text = Vec::new();
        store.export_to(ids, format, &mut text).map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&text);
        // On a terminal a message's text is shown, never obeyed; a pipe gets it exact.
        let shown = if std::io::stdout().is_terminal() { printable(&text) } else { text };
        return std::io::stdout().lock().write_all(shown.as_bytes()).map_err(|e| e.to_string());
    };
    let file = new_private_file(path).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::AlreadyExists => {
                "it exists already (an export never replaces a file: name a new one)".into()
            }
            _ => e.to_string(),
        };
        format!("{}: {why}", printable(&path.display().to_string()))
    })?;
    if let Err(e) = store.export_to(ids, format, file) {
        // The file is the one this export made: no half-written export left to be taken for
        // a whole one, and nothing that was there before was touched.
        std::fs::remove_file(path).ok();
        return Err(e.to_string());
    }
    eprintln!("exported to {}", printable(&path.display().to_string()));
    Ok(())
}

/// A file made for this export alone: never one that exists (a link included, which is not
/// followed), readable by the user alone (a history is private).
fn new_private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::File::options();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

fn import(store: &mut Store, file: &Path, format: Option<ImportFormat>) -> Result<(), String> {
    let name = printable(&file.display().to_string()).into_owned();
    let input = std::fs::File::open(file).map_err(|e| format!("{name}: {e}"))?;
    let (format, imported) = store.import_from(input, format).map_err(|e| format!("{name}: nothing imported: {e}"))?;
    println!(
        "imported {} chat(s) from {name} ({}); {} already here, skipped",
        imported.conversations.len(),
        format.name(),
        imported.skipped.len()
    );
    Ok(())
}
