//! Rendering a chat template in a child process whose address space is limited.
//!
//! A template is a program that comes with the model file. minijinja bounds its steps (fuel)
//! and we bound its output, but nothing bounds the strings it builds on the way: three lines
//! of Jinja (`{% set ns.s = ns.s ~ ns.s %}` in a loop) double a string forty times, and an
//! allocation the system refuses aborts the process, which no `catch_unwind` can stop. So a
//! binary that opts in ([`render_in_children_of`]) renders each prompt in a child of itself
//! under `RLIMIT_AS`: a template that exhausts that kills the child, and the parent answers
//! with an error. Linux only (other systems ignore or lack the limit); elsewhere, and when
//! the child cannot be started, the render runs in process with fuel and the output cap.

use super::ChatTemplate;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The memory one render may use beyond what the child starts with.
pub const RENDER_MEMORY: u64 = 1 << 30;
/// How long one render may take: fuel ends a loop well before this; it is for single steps on
/// huge strings.
const RENDER_TIME: Duration = Duration::from_secs(10);
/// The variable that makes a binary a template child ([`serve_render_if_asked`]).
const CHILD_VARIABLE: &str = "SPECULA_TEMPLATE_CHILD";
/// A child's exit status when the template itself failed (its message on stderr).
const TEMPLATE_FAILED: i32 = 3;

/// Everything a render reads: the template and its context.
#[derive(Serialize, Deserialize)]
pub(super) struct Job {
    pub source: String,
    pub bos: String,
    pub eos: String,
    pub context: serde_json::Value,
    pub now: Option<chrono::NaiveDateTime>,
}

/// The program (and its first arguments) renders run in, once a binary opted in.
static CHILD: OnceLock<(PathBuf, Vec<String>)> = OnceLock::new();

/// Call first in a binary's `main`, before threads or windows: in a template child, render
/// the job on stdin to stdout and exit; otherwise make every render of this process run in a
/// child of this binary.
pub fn isolate_template_renders() {
    serve_render_if_asked();
    match std::env::current_exe() {
        Ok(exe) => render_in_children_of(exe, Vec::new()),
        Err(e) => tracing::warn!("templates render in process: this binary's path is unknown ({e})"),
    }
}

/// Render every prompt of this process in a child: `program` with `args`, a binary whose
/// `main` calls [`serve_render_if_asked`] first.
fn render_in_children_of(program: PathBuf, args: Vec<String>) {
    if cfg!(target_os = "linux") {
        let _ = CHILD.set((program, args));
    }
}

fn serve_render_if_asked() {
    if std::env::var_os(CHILD_VARIABLE).is_none() {
        return;
    }
    limit_address_space(RENDER_MEMORY);
    let mut input = Vec::new();
    let rendered = std::io::stdin()
        .read_to_end(&mut input)
        .map_err(|e| Error::Template(format!("reading the job: {e}")))
        .and_then(|_| serde_json::from_slice::<Job>(&input).map_err(|e| Error::Template(e.to_string())))
        .and_then(|job| {
            let template = ChatTemplate::new(job.source, Some(&job.bos), Some(&job.eos), true)?;
            template.render_here(&job.context, job.now)
        });
    let code = match rendered {
        Ok(text) => match std::io::stdout().write_all(text.as_bytes()) {
            Ok(()) => 0,
            Err(_) => TEMPLATE_FAILED,
        },
        Err(e) => {
            let message = match e {
                Error::Template(message) => message,
                other => other.to_string(),
            };
            let _ = std::io::stderr().write_all(message.as_bytes().get(..4096).unwrap_or(message.as_bytes()));
            TEMPLATE_FAILED
        }
    };
    std::process::exit(code);
}

/// The job rendered in a child, when this process opted in and the child starts; `None` to
/// render here.
pub(super) fn render(job: impl FnOnce() -> Job) -> Option<Result<String>> {
    let (program, args) = CHILD.get()?;
    let child = Command::new(program)
        .args(args)
        .env(CHILD_VARIABLE, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    match child {
        Ok(child) => Some(run(child, &job())),
        Err(e) => {
            tracing::warn!("the template child did not start ({e}); rendering in process");
            None
        }
    }
}

fn run(mut child: std::process::Child, job: &Job) -> Result<String> {
    let input = serde_json::to_vec(job).map_err(|e| Error::Template(e.to_string()))?;
    let mut stdin = child.stdin.take().expect("piped");
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    // Both pipes at once, or a large job and a large prompt wait on each other.
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.by_ref().take(super::MAX_PROMPT_BYTES as u64 + 1).read_to_end(&mut out);
        out
    });
    let status = wait(&mut child)?;
    let _ = writer.join();
    let out = reader.join().unwrap_or_default();
    let mut message = String::new();
    let _ = stderr.by_ref().take(4096).read_to_string(&mut message);
    // An allocation past the limit aborts the child after saying so on stderr.
    let out_of_memory = message.contains("memory allocation");
    match status.code() {
        Some(0) => String::from_utf8(out).map_err(|_| Error::Template("the template wrote invalid UTF-8".into())),
        Some(TEMPLATE_FAILED) => Err(Error::Template(message)),
        _ if out_of_memory => Err(Error::Template(format!(
            "the chat template used more than {} MiB of memory and was stopped",
            RENDER_MEMORY >> 20
        ))),
        _ => Err(Error::Template(format!("the template child failed ({status}): {}", message.trim()))),
    }
}

/// The child's exit, killed past [`RENDER_TIME`].
fn wait(child: &mut std::process::Child) -> Result<std::process::ExitStatus> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| Error::Template(e.to_string()))? {
            return Ok(status);
        }
        if started.elapsed() > RENDER_TIME {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Template(format!("the chat template ran for more than {} s", RENDER_TIME.as_secs())));
        }
        // Renders take a few milliseconds: a short nap costs little latency.
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Cap this process's address space at what it has now plus `extra` bytes.
fn limit_address_space(extra: u64) {
    #[cfg(target_os = "linux")]
    {
        let pages: u64 = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        // SAFETY: sysconf and setrlimit read and write plain values.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
        let limit = libc::rlimit { rlim_cur: pages * page + extra, rlim_max: pages * page + extra };
        unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = extra;
}
