//! A server started as a child process, speaking newline-delimited JSON-RPC on its stdin and
//! stdout: the SDK's [`Transport`], written here so that every way a server can misbehave
//! ends in a reason a person can read ([`Faults`]) rather than a silent time-out. A message
//! over the size cap closes the connection (its call fails at once, with the size named);
//! lines that are not JSON-RPC are skipped, as the SDKs skip them, and the last one is kept
//! to explain a call that then gets no answer; the server's stderr tail explains its exit.

use futures_util::StreamExt;
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use std::collections::VecDeque;
use std::future::Future;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

/// How much of the server's stderr is kept to explain its exit.
const STDERR_TAIL: usize = 2048;
/// How much of a line that is not JSON-RPC is quoted.
const QUOTED: usize = 120;

/// What went wrong on a connection, as its calls' errors tell it.
#[derive(Default)]
pub struct Faults {
    /// Why the connection was closed from this side.
    closed: Option<String>,
    /// The last line that was not a JSON-RPC message.
    garbage: Option<String>,
    stderr: VecDeque<u8>,
    exit: Option<String>,
}

pub type SharedFaults = Arc<Mutex<Faults>>;

impl Faults {
    /// The most telling reason known, for a call that failed or got no answer.
    pub fn explain(shared: &SharedFaults) -> Option<String> {
        let faults = shared.lock().ok()?;
        let stderr = String::from_utf8_lossy(&faults.stderr.iter().copied().collect::<Vec<u8>>()).trim().to_string();
        let stderr = (!stderr.is_empty()).then(|| format!("; its last words on stderr: {stderr}"));
        if let Some(closed) = &faults.closed {
            return Some(closed.clone());
        }
        if let Some(exit) = &faults.exit {
            return Some(format!("{exit}{}", stderr.unwrap_or_default()));
        }
        faults.garbage.as_ref().map(|line| format!("it wrote output that is not JSON-RPC: {line}"))
    }

    fn note(shared: &SharedFaults, write: impl FnOnce(&mut Faults)) {
        if let Ok(mut faults) = shared.lock() {
            write(&mut faults);
        }
    }
}

pub struct ChildTransport {
    child: Child,
    lines: FramedRead<ChildStdout, LinesCodec>,
    stdin: Arc<tokio::sync::Mutex<ChildStdin>>,
    max_message: usize,
    faults: SharedFaults,
}

impl ChildTransport {
    /// Start `command` in a process group of its own (a wrapper such as `npx` and the server it
    /// starts go together); its stderr is read into the faults' tail, never onto ours.
    pub fn spawn(mut command: Command, max_message: usize) -> std::io::Result<(Self, SharedFaults)> {
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command.spawn()?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(std::io::Error::other("the server's pipes could not be opened"));
        };
        let faults = SharedFaults::default();
        tokio::spawn(keep_stderr_tail(stderr, faults.clone()));
        let lines = FramedRead::new(stdout, LinesCodec::new_with_max_length(max_message));
        let stdin = Arc::new(tokio::sync::Mutex::new(stdin));
        Ok((Self { child, lines, stdin, max_message, faults: faults.clone() }, faults))
    }

    fn note_exit(&mut self) {
        let status = self.child.try_wait().ok().flatten();
        let exit = match status {
            Some(status) => format!("the server exited ({status})"),
            None => "the server closed its output".to_string(),
        };
        Faults::note(&self.faults, |f| f.exit = Some(exit));
    }
}

/// Keep the last [`STDERR_TAIL`] bytes the server writes on stderr, reading to its end (a pipe
/// left unread would block the server, or kill it with SIGPIPE once closed).
async fn keep_stderr_tail(mut stderr: tokio::process::ChildStderr, faults: SharedFaults) {
    let mut chunk = [0u8; 4096];
    while let Ok(read @ 1..) = stderr.read(&mut chunk).await {
        Faults::note(&faults, |f| {
            f.stderr.extend(&chunk[..read]);
            let excess = f.stderr.len().saturating_sub(STDERR_TAIL);
            f.stderr.drain(..excess);
        });
    }
}

impl ChildTransport {
    /// Kill the server's whole process group (the wrapper and what it started).
    fn kill_group(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) with a negative pid signals that process group; no memory is touched.
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        }
        let _ = self.child.start_kill();
    }
}

impl Drop for ChildTransport {
    fn drop(&mut self) {
        self.kill_group();
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let stdin = self.stdin.clone();
        async move {
            let mut line = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            line.push(b'\n');
            let mut stdin = stdin.lock().await;
            stdin.write_all(&line).await?;
            stdin.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            match self.lines.next().await {
                Some(Ok(line)) if line.trim().is_empty() => continue,
                Some(Ok(line)) => match serde_json::from_str(&line) {
                    Ok(message) => return Some(message),
                    Err(_) => {
                        let quoted: String = line.chars().take(QUOTED).collect();
                        Faults::note(&self.faults, |f| f.garbage = Some(format!("`{quoted}`")));
                    }
                },
                Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                    let why = format!(
                        "the server sent a message over {} MiB; the connection was closed (it restarts on the next call)",
                        self.max_message >> 20
                    );
                    Faults::note(&self.faults, |f| f.closed = Some(why));
                    return None;
                }
                Some(Err(LinesCodecError::Io(e))) => {
                    Faults::note(&self.faults, |f| f.exit = Some(format!("reading from the server failed: {e}")));
                    return None;
                }
                None => {
                    // Give the process a moment to be reaped, so that its status is known.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    self.note_exit();
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.kill_group();
        let _ = self.child.wait().await;
        Ok(())
    }
}
