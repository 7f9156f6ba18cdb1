//! `specula generate --attach`: a PDF's text inlined and the reply about it; a 2 MB CSV
//! refused before any decoding, with its token count and the context's size; a binary file
//! refused with the reason.

#[path = "../../attach/tests/make_pdf.rs"]
mod make_pdf;

use std::path::PathBuf;
use std::process::{Command, Output};

const TARGET: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
const SMALL: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

fn model(name: &str) -> String {
    let dir = match std::env::var_os("SPECULA_MODELS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/specula/models"),
    };
    let path = dir.join(name);
    assert!(path.exists(), "{} is missing: run scripts/fetch-models.sh", path.display());
    path.display().to_string()
}

/// The 0.5B reads the PDF (a prefill of ~1,000 tokens on 2 cores); the refusals come before
/// any decoding, so they take the default target.
fn generate(model_name: &str, files: &[&PathBuf], prompt: &str) -> Output {
    let model = model(model_name);
    let mut args = vec!["generate", "--model", &model, "--device", "cpu", "--ctx", "4096", "--max-tokens", "24"];
    args.extend(["--mode", "greedy", "--prompt", prompt]);
    let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    for file in &files {
        args.extend(["--attach", file.as_str()]);
    }
    Command::new(env!("CARGO_BIN_EXE_specula")).args(&args).output().unwrap()
}

#[test]
fn a_pdf_is_inlined_and_the_model_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let pdf = dir.path().join("report.pdf");
    std::fs::write(&pdf, make_pdf::report_pdf(2)).unwrap();
    let out =
        generate(SMALL, &[&pdf], "How many pages does the attached report say it has? Answer with the number only.");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("Attached report.pdf: PDF, 2 pages, "), "{stderr}");
    assert!(stdout.contains('2'), "{stdout}");
}

#[test]
fn a_2_mb_csv_is_refused_with_its_token_count_and_a_binary_file_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("sales.csv");
    let rows: String =
        (0..100_000).map(|i| format!("{i},region-{},{}.{:02}\n", i % 97, i * 7 % 1000, i % 100)).collect();
    std::fs::write(&csv, format!("id,region,amount\n{rows}")).unwrap();
    assert!(std::fs::metadata(&csv).unwrap().len() > 2 << 20);
    let out = generate(TARGET, &[&csv], "Total the amounts.");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Attached sales.csv: text, 2."), "{stderr}");
    let error = stderr.lines().last().unwrap();
    assert!(error.starts_with("error: the message with its files is ") && error.contains("(sales.csv "), "{error}");
    assert!(error.contains(" tokens), and the context holds 4,096"), "{error}");
    assert!(!stderr.contains("decode:"), "nothing was decoded: {stderr}");

    let png = dir.path().join("chart.png");
    std::fs::write(&png, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01").unwrap();
    let out = generate(TARGET, &[&png], "Describe the chart.");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("error: chart.png: it is not a text file (binary content)"), "{stderr}");
}

/// A 6 MB PDF whose page inflates to 6 GiB: read in this process it would abort the CLI
/// (the shell below gives it 4 GiB of address space, as a laptop's RAM would run out); read
/// in a child (specula-isolate), the child ends at its 2 GiB and the CLI says why.
#[test]
fn a_pdf_that_inflates_to_6_gib_is_refused_and_the_program_lives() {
    let dir = tempfile::tempdir().unwrap();
    let pdf = dir.path().join("bomb.pdf");
    std::fs::write(&pdf, make_pdf::inflating_pdf(6 << 10)).unwrap();
    let model = model(TARGET);
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -v 4194304; exec "$0" "$@""#)
        .arg(env!("CARGO_BIN_EXE_specula"))
        .args(["generate", "--model", &model, "--device", "cpu", "--prompt", "Summarise the file."])
        .arg("--attach")
        .arg(&pdf)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let error = stderr.lines().last().unwrap();
    assert!(error.starts_with("error: bomb.pdf: this PDF needed more than 2048 MiB of memory to read"), "{error}");
}
