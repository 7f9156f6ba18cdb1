//! `specula pull` (a GGUF file from Hugging Face Hub into its cache) and `specula models`
//! (what is on this machine).

use crate::safe_text::printable;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use specula_hub::{local_models, Hub, Progress};
use std::io::IsTerminal;
use std::sync::atomic::AtomicBool;

#[derive(Args)]
pub struct PullArgs {
    /// Repository on the Hub, e.g. Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF.
    repo: String,
    /// The file to fetch; default: the one matching --quant.
    #[arg(long)]
    file: Option<String>,
    /// Quantization to pick from the repository's files (default Q4_K_M).
    #[arg(long)]
    quant: Option<String>,
    #[arg(long, default_value = "main")]
    revision: String,
}

pub fn pull(args: PullArgs) -> Result<(), String> {
    let hub = Hub::from_env();
    let file = hub.choose_file(&args.repo, args.file.as_deref(), args.quant.as_deref()).map_err(|e| e.to_string())?;
    if let Some(path) = hub.cached(&args.repo, &args.revision, &file) {
        println!("{}", printable(&path.display().to_string()));
        eprintln!("already in the library");
        return Ok(());
    }
    // The file's name is the Hub's: shown, never obeyed, as every name printed here.
    eprintln!(
        "pulling {}/{} into {}",
        printable(&args.repo),
        printable(&file),
        printable(&hub.cache_dir().display().to_string())
    );
    let mut report = Reporter::new();
    // Ctrl-C ends the process; the partial file stays and the next pull resumes it.
    let path = hub
        .download(&args.repo, &args.revision, &file, &mut |p| report.update(p), &AtomicBool::new(false))
        .map_err(|e| e.to_string())?;
    report.finish();
    println!("{}", printable(&path.display().to_string()));
    Ok(())
}

/// A live bar on a terminal; a line every tenth of the file otherwise (logs, CI, pipes).
struct Reporter {
    bar: Option<ProgressBar>,
    next_line: u64,
    last: Option<Progress>,
}

impl Reporter {
    fn new() -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template("{bar:40.cyan/blue} {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}")
                    .expect("a valid template"),
            );
            bar
        });
        Self { bar, next_line: 0, last: None }
    }

    fn update(&mut self, p: Progress) {
        self.last = Some(p);
        match &self.bar {
            Some(bar) => {
                bar.set_length(p.total);
                bar.set_position(p.done);
            }
            None if p.done >= self.next_line => {
                eprintln!("{}", progress_line(p));
                self.next_line = p.done + p.total.div_ceil(10);
            }
            None => {}
        }
    }

    fn finish(&self) {
        match (&self.bar, self.last) {
            (Some(bar), _) => bar.finish(),
            (None, Some(last)) => eprintln!("{}", progress_line(last)),
            (None, None) => {}
        }
    }
}

fn progress_line(p: Progress) -> String {
    let mb = |b: f64| b / 1e6;
    let eta = p.eta_seconds.map_or("?".to_string(), |s| format!("{s:.0}s"));
    format!(
        "{:5.1}%  {:.1} / {:.1} MB  {:.1} MB/s  ETA {eta}",
        100.0 * p.done as f64 / p.total.max(1) as f64,
        mb(p.done as f64),
        mb(p.total as f64),
        mb(p.bytes_per_second)
    )
}

#[derive(Args)]
pub struct ModelsArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// The Hugging Face cache (ours and other tools') and Specula's own models folder.
pub fn models(args: ModelsArgs) -> Result<(), String> {
    let hub = Hub::from_env();
    let folders = vec![specula_engine::protocol::app::models_dir()];
    let models = local_models(hub.cache_dir(), &folders);
    if args.json {
        let json = serde_json::to_string_pretty(&models).map_err(|e| e.to_string())?;
        println!("{}", crate::safe_text::printable_json(&json));
        return Ok(());
    }
    if models.is_empty() {
        let cache = hub.cache_dir().display().to_string();
        eprintln!("no models in {} or {folders:?}; try `specula pull REPO`", printable(&cache));
    }
    for m in models {
        let source = m.repo.unwrap_or_else(|| "(folder)".into());
        // Repository and file names as the cache's folders spell them: shown, never obeyed.
        let path = m.path.display().to_string();
        println!(
            "{:>8.1} MB  {}  {}\n             {}",
            m.bytes as f64 / 1e6,
            printable(&source),
            printable(&m.file),
            printable(&path)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_line_has_percent_sizes_speed_and_eta() {
        let p = Progress { done: 50_000_000, total: 100_000_000, bytes_per_second: 25e6, eta_seconds: Some(2.0) };
        assert_eq!(progress_line(p), " 50.0%  50.0 / 100.0 MB  25.0 MB/s  ETA 2s");
    }
}
