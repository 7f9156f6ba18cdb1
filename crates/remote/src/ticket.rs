//! A remote reply in flight: its events arrive over a channel from the thread that reads the
//! stream, and Stop or a deadline ends it at once and closes its connection, whatever the
//! remote is doing.

use crate::Limits;
use specula_protocol::{
    Collected, ErrorCode, ErrorInfo, FinishReason, Generation, GenerationStats, Reasoning, ReplyEvent,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Remote replies' ids: unique in this process, and apart from a local engine's (which count
/// up from 1), so one Stop table can hold both.
static NEXT_ID: AtomicU64 = AtomicU64::new(1 << 48);

/// What the client saw of a reply so far: the figures it can vouch for.
#[derive(Debug)]
pub(crate) struct Tally {
    pub started: Instant,
    pub first_token: Option<Instant>,
    pub last_token: Option<Instant>,
    pub tokens: usize,
    pub text: String,
    /// The reply's thinking as the remote said it (its `reasoning_content`, or a Specula
    /// remote's events), and when it opened: however the reply ends, its stats say it.
    pub reasoning: Option<(Reasoning, Instant)>,
}

impl Tally {
    fn new() -> Self {
        let started = Instant::now();
        Self { started, first_token: None, last_token: None, tokens: 0, text: String::new(), reasoning: None }
    }

    pub fn add(&mut self, text: &str) {
        let now = Instant::now();
        self.first_token.get_or_insert(now);
        self.last_token = Some(now);
        self.tokens += 1;
        self.text.push_str(text);
    }

    /// Tokens a second from the first token to the last, as the engine counts its decode rate.
    pub fn tokens_per_second(&self) -> f64 {
        let decode = self.decode_time().as_secs_f64();
        if self.tokens < 2 || decode <= 0.0 {
            return 0.0;
        }
        (self.tokens - 1) as f64 / decode
    }

    fn decode_time(&self) -> Duration {
        match (self.first_token, self.last_token) {
            (Some(first), Some(last)) => last - first,
            _ => Duration::ZERO,
        }
    }

    /// The client's figures: time to the first token as prefill, the rest as decoding.
    pub fn stats(&self) -> GenerationStats {
        let to_first = self.first_token.map_or(self.started.elapsed(), |t| t - self.started);
        GenerationStats {
            generated_tokens: self.tokens,
            prefill_ms: to_first.as_secs_f64() * 1e3,
            decode_ms: self.decode_time().as_secs_f64() * 1e3,
            reasoning: self.reasoning.map(|(reasoning, opened)| match reasoning.ended {
                true => reasoning,
                // Still thinking when it ended: every token was.
                false => {
                    Reasoning { tokens: self.tokens as u32, ended: false, ms: opened.elapsed().as_secs_f32() * 1e3 }
                }
            }),
            tokens_per_second: self.tokens_per_second(),
            ..Default::default()
        }
    }
}

/// Shared by the ticket, the reading thread and the deadlines' watch: exactly one of them
/// ends the reply.
pub(crate) struct Outlet {
    pub id: u64,
    sender: Mutex<Option<flume::Sender<ReplyEvent>>>,
    cancelled: AtomicBool,
    tally: Mutex<Tally>,
    /// This reply's own agent: shutting it down closes the reply's socket, which wakes the
    /// reading thread from a blocked read (no other reply shares it).
    agent: ureq::Agent,
}

impl Outlet {
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// Send an event of a reply still running; false once it has ended.
    pub fn send(&self, event: ReplyEvent) -> bool {
        let sender = self.sender.lock().unwrap_or_else(|e| e.into_inner());
        sender.as_ref().is_some_and(|s| s.send(event).is_ok())
    }

    /// End the reply with this event, unless it has ended already.
    pub fn end(&self, event: ReplyEvent) {
        if let Some(sender) = self.sender.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = sender.send(event);
        }
    }

    pub fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// End the reply with this error and close its connection now.
    pub fn fail(&self, error: ErrorInfo) {
        self.end(ReplyEvent::Failed { error });
        self.close();
    }

    /// Close the reply's connection (and refuse one not yet made): the reading thread's read
    /// returns at once and the thread ends.
    fn close(&self) {
        self.agent.clone().shutdown();
    }
}

/// Hold a reply to its deadlines, from the request on; `finished` disconnects when the reading
/// thread ends, which ends the watch. Deadlines are fixed instants: nothing the remote sends
/// moves them, so comment lines (`: keep-alive`) and blank lines buy no time, and a first
/// token is the only progress that lifts the first one.
pub(crate) fn watch(outlet: &Outlet, finished: &flume::Receiver<()>, limits: &Limits, host: &str) {
    let start = Instant::now();
    let first_token = limits.first_token.min(limits.total);
    if !timed_out(finished, start + first_token) {
        return;
    }
    if outlet.tally().tokens == 0 && limits.first_token < limits.total {
        let why = format!("no first token from {host} within {}", seconds(limits.first_token));
        return outlet.fail(ErrorInfo::new(ErrorCode::Timeout, why));
    }
    if timed_out(finished, start + limits.total) {
        let why = format!("the reply from {host} ran past its {} limit", seconds(limits.total));
        outlet.fail(ErrorInfo::new(ErrorCode::Timeout, why));
    }
}

/// Whether `deadline` came before the reading thread ended.
fn timed_out(finished: &flume::Receiver<()>, deadline: Instant) -> bool {
    matches!(finished.recv_deadline(deadline), Err(flume::RecvTimeoutError::Timeout))
}

/// `600 s`, `1.5 s`.
pub(crate) fn seconds(duration: Duration) -> String {
    format!("{} s", duration.as_secs_f64())
}

/// A remote reply: read its events, stop it at any time.
pub struct RemoteTicket {
    events: flume::Receiver<ReplyEvent>,
    outlet: Arc<Outlet>,
}

impl RemoteTicket {
    pub(crate) fn new(agent: ureq::Agent) -> (Self, Arc<Outlet>) {
        let (sender, events) = flume::unbounded();
        let outlet = Arc::new(Outlet {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            sender: Mutex::new(Some(sender)),
            cancelled: AtomicBool::new(false),
            tally: Mutex::new(Tally::new()),
            agent,
        });
        (Self { events, outlet: outlet.clone() }, outlet)
    }

    /// Unique in this process, apart from a local engine's tickets: Stop names it.
    pub fn id(&self) -> u64 {
        self.outlet.id
    }

    /// Stop the reply now: it ends with what has arrived, marked cancelled, and its connection
    /// is closed at once (the reading thread wakes and ends).
    pub fn cancel(&self) {
        self.canceller().cancel();
    }

    /// A handle that stops this reply from elsewhere (the Stop button's thread).
    pub fn canceller(&self) -> Canceller {
        Canceller(self.outlet.clone())
    }

    /// The next event, waiting for it; `None` after the last.
    pub fn recv(&self) -> Option<ReplyEvent> {
        self.events.recv().ok()
    }

    pub fn recv_timeout(&self, timeout: Duration) -> Result<ReplyEvent, flume::RecvTimeoutError> {
        self.events.recv_timeout(timeout)
    }

    /// Wait for the end: the reply, or why there is none.
    pub fn wait(self) -> Result<Generation, ErrorInfo> {
        let mut reply = Collected::default();
        while let Some(event) = self.recv() {
            if let Some(end) = reply.add(event) {
                return end;
            }
        }
        Err(ErrorInfo::internal("the remote reply ended without an outcome"))
    }
}

#[derive(Clone)]
pub struct Canceller(Arc<Outlet>);

impl Canceller {
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::Relaxed);
        // The tally held until the end is sent: no token is sent after its text was read.
        let tally = self.0.tally();
        let (text, stats) = (tally.text.clone(), tally.stats());
        self.0.end(ReplyEvent::Done { finish_reason: FinishReason::Cancelled, text, stats: Box::new(stats) });
        drop(tally);
        self.0.close();
    }
}
