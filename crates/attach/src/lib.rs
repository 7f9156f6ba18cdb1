//! specula-attach: a file a user attaches to a message, read into text the model can take.
//!
//! Text, code, Markdown, CSV and JSON are read as UTF-8; a PDF's text is extracted page by
//! page. Anything else (images, archives, office files, text in another encoding) is refused
//! with the reason, never sent as bytes. The file is inlined into the message under its name,
//! in a fence no line of it can close. Whether it fits the context is the caller's to say: it
//! counts with the model's tokenizer, which this crate does not know.

use specula_isolate::{Failure, Worker};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

/// The largest file read at all: past this, it could not fit any context.
pub const MAX_FILE_BYTES: usize = 64 << 20;

/// What a file was read as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Plain text, Markdown, CSV, JSON or code; the fence's language tag (may be empty).
    Text {
        language: String,
    },
    Pdf {
        pages: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub name: String,
    pub kind: Kind,
    /// The file's size on disk.
    pub bytes: usize,
    /// The text the model reads.
    pub text: String,
}

/// Read a file's bytes as an attachment named `name`; `Err` says why it cannot be attached.
pub fn read(name: &str, bytes: &[u8]) -> Result<Attachment, String> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(format!("{name}: {} is too large to attach (at most {})", size(bytes.len()), size(MAX_FILE_BYTES)));
    }
    if bytes.starts_with(b"%PDF-") {
        return read_pdf(name, bytes);
    }
    let text = text_of(bytes).map_err(|why| format!("{name}: {why}; attach text, code, Markdown, CSV, JSON or PDF"))?;
    Ok(Attachment { name: name.to_string(), kind: Kind::Text { language: language(name) }, bytes: bytes.len(), text })
}

/// Read a file from disk, named by its file name: a regular file only (a device, a pipe or a
/// `/proc` file says size 0 and may never end), and never more than [`MAX_FILE_BYTES`] of it.
pub fn read_path(path: &std::path::Path) -> Result<Attachment, String> {
    use std::io::Read;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string());
    let file = std::fs::File::open(path).map_err(|e| format!("{name}: {e}"))?;
    let metadata = file.metadata().map_err(|e| format!("{name}: {e}"))?;
    if !metadata.is_file() {
        return Err(format!("{name}: not a regular file (a folder, device or pipe cannot be attached)"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64 + 1).read_to_end(&mut bytes).map_err(|e| format!("{name}: {e}"))?;
    read(&name, &bytes)
}

/// Reading a PDF, in a child of the binary where it opts in (`specula_isolate::start`): a
/// stream that inflates to gigabytes, or a file that sends the reader round a loop, ends the
/// child, not the app holding the user's chats.
pub static PDF_READ: Worker =
    Worker { name: "pdf-text", memory: PDF_MEMORY, time: PDF_TIME, max_output: MAX_FILE_BYTES, work: pages_as_json };

/// The memory one PDF may take to read, beyond the child's own.
pub const PDF_MEMORY: u64 = 2 << 30;
/// How long one PDF may take to read: a 500-page report takes seconds.
pub const PDF_TIME: Duration = Duration::from_secs(60);

fn read_pdf(name: &str, bytes: &[u8]) -> Result<Attachment, String> {
    let pages: Vec<String> = match specula_isolate::run(&PDF_READ, || bytes.to_vec()) {
        Some(Ok(json)) => serde_json::from_slice(&json).map_err(|e| format!("the PDF reader's answer: {e}")),
        Some(Err(failure)) => Err(pdf_failure(failure)),
        None => pages_of(bytes),
    }
    .map_err(|why| format!("{name}: {why}"))?;
    let text = pages.iter().map(|page| page.trim()).filter(|page| !page.is_empty()).collect::<Vec<_>>().join("\n\n");
    if text.trim().is_empty() {
        return Err(format!(
            "{name}: this PDF has no text to read ({} pages of images, perhaps scanned; it would need OCR)",
            pages.len()
        ));
    }
    Ok(Attachment { name: name.to_string(), kind: Kind::Pdf { pages: pages.len() }, bytes: bytes.len(), text })
}

/// The text of each page, or why the PDF cannot be read.
fn pages_of(bytes: &[u8]) -> Result<Vec<String>, String> {
    // The extractor panics on some malformed files: a bad file is a refusal, never a crash.
    catch_unwind(AssertUnwindSafe(|| pdf_extract::extract_text_from_mem_by_pages(bytes)))
        .map_err(|_| DAMAGED.to_string())?
        .map_err(|e| format!("this PDF could not be read: {e}"))
}

/// In the child: the pages as a JSON list of strings.
fn pages_as_json(bytes: &[u8]) -> Result<Vec<u8>, String> {
    serde_json::to_vec(&pages_of(bytes)?).map_err(|e| e.to_string())
}

const DAMAGED: &str = "this PDF could not be read (it is damaged or uses a feature the reader lacks)";

fn pdf_failure(failure: Failure) -> String {
    match failure {
        Failure::Failed(why) => why,
        Failure::OutOfMemory => format!(
            "this PDF needed more than {} MiB of memory to read, and was stopped (a stream in it may inflate without end)",
            PDF_MEMORY >> 20
        ),
        Failure::TimedOut => format!("reading this PDF took more than {} s and was stopped", PDF_TIME.as_secs()),
        Failure::TooLarge => format!("this PDF holds more than {} of text, more than any context", size(MAX_FILE_BYTES)),
        Failure::Crashed { .. } => DAMAGED.to_string(),
        // Never read in process instead: the inflation bomb would take the app down with it.
        Failure::Unavailable(why) => {
            format!("this PDF is not read: PDFs are read in a separate process with memory and time limits, and {why}")
        }
    }
}

/// The bytes as text, or why they are not text.
fn text_of(bytes: &[u8]) -> Result<String, String> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if bytes.starts_with(b"\xFF\xFE") || bytes.starts_with(b"\xFE\xFF") {
        return Err("it is UTF-16 text; save it as UTF-8".into());
    }
    if bytes.iter().take(8192).any(|&b| b == 0) {
        return Err("it is not a text file (binary content)".into());
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text.replace("\r\n", "\n")),
        Err(e) => Err(format!("it is not UTF-8 text (an invalid byte at offset {})", e.valid_up_to())),
    }
}

/// The fence's language tag for a file name: its extension, lowercased, for the common ones.
fn language(name: &str) -> String {
    let extension = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    let tag = match extension.as_str() {
        "md" | "markdown" => "markdown",
        "rs" => "rust",
        "py" => "python",
        "js" | "mjs" | "cjs" => "javascript",
        "ts" | "tsx" => "typescript",
        "sh" | "bash" => "bash",
        "yml" => "yaml",
        "h" | "hpp" | "cc" | "cpp" => "cpp",
        "txt" | "log" | "" => "",
        other => other,
    };
    tag.to_string()
}

/// The user's message with the files inlined after it, each under its name in a fence longer
/// than any run of backticks inside it (so no line of the file can end the fence).
pub fn inline(message: &str, files: &[Attachment]) -> String {
    let mut out = message.trim_end().to_string();
    for file in files {
        let language = match &file.kind {
            Kind::Text { language } => language.as_str(),
            Kind::Pdf { .. } => "",
        };
        let fence = "`".repeat(longest_backtick_run(&file.text).max(2) + 1);
        let pages = match file.kind {
            Kind::Pdf { pages } => format!(" ({pages} pages, text extracted)"),
            Kind::Text { .. } => String::new(),
        };
        out.push_str(&format!("\n\nFile: {}{pages}\n{fence}{language}\n{}\n{fence}", file.name, file.text.trim_end()));
    }
    out
}

fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// A count as people read it: 1767586 as 1,767,586.
pub fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A size as people read it.
pub fn size(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.0} KB", b as f64 / (1 << 10) as f64),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(grouped(1_767_586), "1,767,586");
        assert_eq!(grouped(32_768), "32,768");
        assert_eq!(grouped(12), "12");
    }

    #[test]
    fn text_code_csv_and_json_are_read_with_their_language() {
        let csv = read("data.csv", b"a,b\r\n1,2\r\n").unwrap();
        assert_eq!((csv.text.as_str(), csv.kind.clone()), ("a,b\n1,2\n", Kind::Text { language: "csv".into() }));
        assert_eq!(read("main.RS", b"fn main() {}").unwrap().kind, Kind::Text { language: "rust".into() });
        assert_eq!(read("notes", "\u{feff}héllo".as_bytes()).unwrap().text, "héllo");
    }

    #[test]
    fn binary_and_foreign_encodings_are_refused_with_the_reason() {
        let png = read("photo.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap_err();
        assert!(png.starts_with("photo.png: it is not a text file (binary content); attach text"), "{png}");
        let latin1 = read("old.txt", b"caf\xe9 au lait").unwrap_err();
        assert!(latin1.contains("not UTF-8 text (an invalid byte at offset 3)"), "{latin1}");
        assert!(read("u16.txt", b"\xFF\xFEh\0i\0").unwrap_err().contains("UTF-16"));
        let broken = read("broken.pdf", b"%PDF-1.7\nthis is not really a pdf").unwrap_err();
        assert!(broken.starts_with("broken.pdf: this PDF could not be read"), "{broken}");
    }

    #[test]
    fn devices_and_folders_are_refused_without_reading_them() {
        let zero = read_path(std::path::Path::new("/dev/zero")).unwrap_err();
        assert_eq!(zero, "zero: not a regular file (a folder, device or pipe cannot be attached)");
        assert!(read_path(std::path::Path::new("/tmp")).unwrap_err().contains("not a regular file"));
    }

    #[test]
    fn a_file_cannot_close_its_own_fence() {
        let file = read("readme.md", b"Run:\n```sh\nmake\n```\n").unwrap();
        let message = inline("What does this do?", &[file]);
        assert!(message.starts_with("What does this do?\n\nFile: readme.md\n````markdown\nRun:\n```sh"), "{message}");
        assert!(message.ends_with("```\n````"), "{message}");
    }
}
