//! specula-isolate: work on what a stranger wrote (a model's chat template, an attached PDF)
//! run in a child of this binary, under a memory and a time limit.
//!
//! Such work can allocate without end (a template that doubles a string forty times, a PDF
//! stream that inflates to gigabytes) or never finish, and an allocation the system refuses
//! aborts the whole process, which no `catch_unwind` can stop. A binary that opts in ([`start`],
//! the first line of its `main`) runs each job in a child of itself under `RLIMIT_AS` and a
//! deadline: what exhausts either ends the child, and the caller gets a [`Failure`] to put in
//! words. Linux only (other systems ignore or lack the limit). Once a binary opted in, work it
//! cannot isolate (another system, a child that cannot start: a process limit, no free
//! descriptors, the binary replaced by an upgrade) fails closed as [`Failure::Unavailable`],
//! which a caller may turn into a refusal (a PDF) or a reasoned choice to work in process (a
//! template, which has bounds of its own). A binary that did not opt in (a library's tests)
//! gets `None` from [`run`] and does the work in process.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// One kind of job and its limits.
pub struct Worker {
    /// Names the job to the child.
    pub name: &'static str,
    /// Bytes one job may use beyond what the child starts with.
    pub memory: u64,
    /// How long one job may take.
    pub time: Duration,
    /// The most output one job may give.
    pub max_output: usize,
    /// The work: the input's bytes to the output's, or why it failed.
    pub work: fn(&[u8]) -> Result<Vec<u8>, String>,
}

/// How a job in a child ended without an output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The work said why it failed.
    Failed(String),
    /// It needed more memory than the worker's allowance.
    OutOfMemory,
    /// It ran past the worker's time.
    TimedOut,
    /// Its output was larger than the worker's `max_output`.
    TooLarge,
    /// The child ended another way (a panic, a signal): its status and its last words.
    Crashed { status: String, said: String },
    /// No child could run it (this system has none, or it did not start): why.
    Unavailable(String),
}

/// The variable that makes a binary a child, and names its worker.
const CHILD_VARIABLE: &str = "SPECULA_CHILD";
/// A child's exit status when the work failed: its message is on stdout (stderr may carry a
/// panic the work caught before it).
const WORK_FAILED: i32 = 3;
/// How much of a child's stderr is kept: its end, where the last words are.
const MAX_MESSAGE: usize = 4096;

/// The program jobs run in, once a binary opted in (on Linux, where its path is known).
static CHILD: OnceLock<PathBuf> = OnceLock::new();
/// Whether the binary opted in ([`start`]): from then on no job runs unisolated unasked.
static OPTED_IN: OnceLock<()> = OnceLock::new();

/// Call first in a binary's `main`, before threads or windows: in a child, do the job on stdin
/// with the named worker among `workers`, write its output to stdout and exit; otherwise make
/// [`run`] start children of this binary.
pub fn start(workers: &[&Worker]) {
    if let Some(name) = std::env::var_os(CHILD_VARIABLE) {
        serve(workers, &name.to_string_lossy());
    }
    let _ = OPTED_IN.set(());
    if !cfg!(target_os = "linux") {
        return;
    }
    match std::env::current_exe() {
        Ok(exe) => {
            let _ = CHILD.set(exe);
        }
        Err(e) => tracing::warn!("work on untrusted input runs in process: this binary's path is unknown ({e})"),
    }
}

/// Whether [`run`] starts children (the binary opted in, on Linux).
pub fn isolated() -> bool {
    CHILD.get().is_some()
}

/// The job done by `worker` in a child, when this binary opted in: [`Failure::Unavailable`]
/// where no child can run it. `None` when the binary did not opt in: do it in process. `input`
/// is made only when a child will read it.
pub fn run(worker: &Worker, input: impl FnOnce() -> Vec<u8>) -> Option<Result<Vec<u8>, Failure>> {
    OPTED_IN.get()?;
    let Some(program) = CHILD.get() else {
        let why = "this system cannot run it in a separate process with memory and time limits";
        return Some(Err(Failure::Unavailable(why.into())));
    };
    // Made before the child starts: a child is never left unwaited for.
    let input = input();
    let child = Command::new(program)
        .env(CHILD_VARIABLE, worker.name)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    match child {
        Ok(child) => Some(finish(child, worker, input)),
        Err(e) => {
            tracing::warn!("the {} child did not start: {e}", worker.name);
            Some(Err(Failure::Unavailable(format!("the separate process for it could not start ({e})"))))
        }
    }
}

fn serve(workers: &[&Worker], name: &str) -> ! {
    let Some(worker) = workers.iter().find(|w| w.name == name) else {
        let _ = write!(std::io::stdout(), "this binary has no worker named {name:?}");
        std::process::exit(WORK_FAILED);
    };
    limit_address_space(worker.memory);
    let mut input = Vec::new();
    let done = std::io::stdin()
        .read_to_end(&mut input)
        .map_err(|e| format!("reading the job: {e}"))
        .and_then(|_| (worker.work)(&input));
    let code = match done {
        Ok(output) => match std::io::stdout().write_all(&output) {
            Ok(()) => 0,
            Err(_) => WORK_FAILED,
        },
        Err(message) => {
            let bytes = message.as_bytes();
            let _ = std::io::stdout().write_all(bytes.get(..MAX_MESSAGE).unwrap_or(bytes));
            WORK_FAILED
        }
    };
    std::process::exit(code);
}

fn finish(mut child: Child, worker: &Worker, input: Vec<u8>) -> Result<Vec<u8>, Failure> {
    let (Some(mut stdin), Some(stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(Failure::Crashed { status: "not started".into(), said: "its pipes were not open".into() });
    };
    // All three pipes at once, or the child waits on a full one (a large input or output, a
    // long panic message) while this side waits on another. Past the output's cap the reader
    // lets go, and the child's next write fails.
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let cap = worker.max_output as u64 + 1;
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.take(cap).read_to_end(&mut out);
        out
    });
    let last_words = std::thread::spawn(move || tail(&mut stderr, MAX_MESSAGE));
    let status = wait(&mut child, worker.time);
    let _ = writer.join();
    let out = reader.join().unwrap_or_default();
    let said = last_words.join().unwrap_or_default();
    let status = status?;
    if out.len() > worker.max_output {
        return Err(Failure::TooLarge);
    }
    match status.code() {
        Some(0) => Ok(out),
        Some(WORK_FAILED) => Err(Failure::Failed(String::from_utf8_lossy(&out).into_owned())),
        // An allocation past the limit aborts the child after saying so on stderr.
        _ if said.contains("memory allocation") => Err(Failure::OutOfMemory),
        _ => Err(Failure::Crashed { status: status.to_string(), said: said.trim().to_string() }),
    }
}

/// The last `keep` bytes of what `from` says until it closes, as text.
fn tail(from: &mut impl Read, keep: usize) -> String {
    let (mut kept, mut buffer) = (Vec::new(), [0u8; 8192]);
    while let Ok(n @ 1..) = from.read(&mut buffer) {
        kept.extend_from_slice(&buffer[..n]);
        if kept.len() > 2 * keep {
            kept.drain(..kept.len() - keep);
        }
    }
    let start = kept.len().saturating_sub(keep);
    String::from_utf8_lossy(&kept[start..]).into_owned()
}

/// The child's exit; past `time` it is killed and the job has timed out.
fn wait(child: &mut Child, time: Duration) -> Result<ExitStatus, Failure> {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if started.elapsed() <= time => {}
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failure::TimedOut);
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failure::Crashed { status: "unknown".into(), said: format!("waiting for it: {e}") });
            }
        }
        // Most jobs take milliseconds: short naps first, then longer ones.
        let nap = if started.elapsed() < Duration::from_millis(100) { 1 } else { 10 };
        std::thread::sleep(Duration::from_millis(nap));
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
