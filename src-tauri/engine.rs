//! The app's side of the engine service: settings become loads and requests, and each
//! reply's events are stored in the history database and forwarded to the webview's Channel.
//! The service owns the models, the engine thread and cancellation; nothing here decodes.

use crate::error::ErrorInfo;
use crate::settings::{AppSettings, EngineSettings, ReplyRequest};
use specula_engine::protocol::{
    ConnectionCheck, ContextInfo, EngineStatus, Gathered, RemoteTarget, ReplyEvent, ToolCard,
};
use specula_engine::service::{
    CancelHandle, EngineHandle, EngineState, Health, Prompt, Request, ServiceConfig, Ticket,
};
use specula_engine::{GenerationStats, TokenEvent};
use specula_remote::{Canceller, Remote, RemoteTicket};
use specula_store::Store;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tauri::ipc::Channel;

/// How often the webview hears of a streaming reply. Each message is a script the webview
/// parses and runs, on the cores the engine decodes with: a message a token cost the app a
/// tenth of its rate. It paints as often (ui/src/render/stream.ts, PAINT_INTERVAL_MS), and a
/// paint is the dear part: WebKitGTK 3 without compositing uploads the whole view to the X
/// server at every frame, whatever changed (about 11 ms of CPU across the web process, the
/// app and X on the test host; PROFILE.md), so three frames a second rather than ten.
const BATCH_EVERY: Duration = Duration::from_millis(333);

/// The status line's facts, from the service's health.
pub fn status_of(h: Health) -> EngineStatus {
    let path = |m: Option<specula_engine::service::LoadedModelInfo>| {
        m.map(|m| m.path.map_or(m.info.name, |p| p.display().to_string()))
    };
    let context = h.target.as_ref().map(|t| ContextInfo {
        tokens: t.info.context,
        trained: t.info.trained_context,
        kv_format: t.info.kv_format,
    });
    EngineStatus {
        loading: h.state == EngineState::Loading,
        state: h.state,
        context,
        target: path(h.target),
        draft: path(h.draft),
        device: h.device.unwrap_or_default(),
        drafter: None,
        error: h.error,
        last_failure: h.last_failure,
    }
}

/// The status line's facts for a remote target, from a check of its connection: ready when
/// it answers and lists the model.
pub fn remote_status(target: &RemoteTarget, check: &ConnectionCheck) -> EngineStatus {
    let missing = (check.error.is_none() && !check.models.contains(&target.model)).then(|| {
        ErrorInfo::new(
            specula_engine::protocol::ErrorCode::RemoteError,
            format!(
                "{} does not list the model {}; it lists: {}",
                target.host(),
                target.model,
                check.models.join(", ")
            ),
        )
    });
    let error = check.error.clone().or(missing);
    EngineStatus {
        state: if error.is_some() { EngineState::Failed } else { EngineState::Ready },
        target: Some(format!("{} @ {}", target.model_name(), target.host())),
        draft: None,
        drafter: None,
        device: format!("remote, {:.0} ms round trip", check.round_trip_ms),
        context: None,
        loading: false,
        error,
        last_failure: None,
    }
}

/// Where a reply goes: its row in the history and the webview's channel.
pub struct ReplyOut {
    pub message_id: i64,
    pub events: Channel<ReplyEvent>,
}

#[derive(Clone)]
pub struct Engine {
    service: EngineHandle,
    /// Replies in flight, by request id, so the Stop button can reach them.
    cancels: Arc<Mutex<HashMap<u64, Stopper>>>,
}

/// Stops a reply, local or remote.
enum Stopper {
    Local(CancelHandle),
    Remote(Canceller),
    /// A reply in turns (tool calls between engine replies).
    Turns(Arc<ChainStop>),
}

/// Stops a reply made of several engine replies in turn: the one running, and whatever runs
/// between them (a tool call, a question to the person), which polls [`ChainStop::stopped`].
#[derive(Default)]
pub struct ChainStop {
    stopped: std::sync::atomic::AtomicBool,
    current: Mutex<Option<CancelHandle>>,
}

impl ChainStop {
    pub fn stop(&self) {
        self.stopped.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(current) = self.current.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            current.cancel();
        }
    }

    pub fn stopped(&self) -> bool {
        self.stopped.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `ticket` is the engine reply running now (stopped at once if the whole was).
    pub fn follow(&self, ticket: &Ticket) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(ticket.cancel_handle());
        if self.stopped() {
            ticket.cancel();
        }
    }
}

/// Where a reply's events come from: the engine service here, or a remote engine. Both stream
/// the same events, forwarded, stored and shown alike.
pub(crate) enum Reply {
    Local(Ticket),
    Remote(RemoteTicket),
}

impl Reply {
    /// The next event, waiting at most `wait` (for ever when `None`); `Err(true)` when the
    /// wait ran out, `Err(false)` after the last event.
    fn next(&self, wait: Option<Duration>) -> Result<ReplyEvent, bool> {
        match self {
            Reply::Local(ticket) => receive(wait, |w| ticket.recv_timeout(w), || ticket.recv()),
            Reply::Remote(ticket) => receive(wait, |w| ticket.recv_timeout(w), || ticket.recv()),
        }
    }

    fn cancel(&self) {
        match self {
            Reply::Local(ticket) => ticket.cancel(),
            Reply::Remote(ticket) => ticket.cancel(),
        }
    }
}

fn receive(
    wait: Option<Duration>,
    timed: impl FnOnce(Duration) -> Result<ReplyEvent, flume::RecvTimeoutError>,
    untimed: impl FnOnce() -> Option<ReplyEvent>,
) -> Result<ReplyEvent, bool> {
    match wait {
        None => untimed().ok_or(false),
        Some(wait) => timed(wait).map_err(|e| e == flume::RecvTimeoutError::Timeout),
    }
}

/// Disk for the chats' caches kept across restarts: about 50,000 positions of the default
/// pair (the 1.5B target's 57 KiB and the 0.5B draft's 24 KiB each), a dozen long chats.
pub const DISK_CACHE_BYTES: u64 = 4 << 30;

impl Engine {
    /// `prompt_cache_dir`: where the chats' caches are kept across restarts (at most
    /// [`DISK_CACHE_BYTES`]).
    pub fn spawn(prompt_cache_dir: Option<std::path::PathBuf>) -> Self {
        // One user's engine: their chats feed the auto drafter's copies.
        let disk_cache = prompt_cache_dir.map(|dir| (dir, DISK_CACHE_BYTES));
        // Several chats stream at once (a regenerate in one while another streams), as many as
        // memory holds full contexts for.
        let config =
            ServiceConfig { max_queue: 8, parallel: 4, remember_chats: true, disk_cache, ..Default::default() };
        Self { service: EngineHandle::spawn_empty(config), cancels: Default::default() }
    }

    /// Texts of earlier conversations for the auto drafter to copy from (oldest first).
    pub fn remember(&self, texts: Vec<String>) {
        self.service.remember(texts);
    }

    pub fn status(&self) -> EngineStatus {
        status_of(self.service.health())
    }

    /// Load what the settings name (only what changed); the answer comes when it is done.
    pub fn apply(&self, settings: &AppSettings) -> Result<flume::Receiver<Result<Health, ErrorInfo>>, ErrorInfo> {
        Ok(self.service.load(settings.load_spec()?))
    }

    /// Queue the settings' models and then the reply, which runs only on those models; its
    /// events are stored and forwarded by a thread of its own. Returns the request id.
    pub fn reply(&self, request: ReplyRequest, out: ReplyOut, store: Arc<Mutex<Store>>) -> Result<u64, ErrorInfo> {
        let models = request.models.ok_or_else(|| ErrorInfo::internal("a local reply names no models"))?;
        drop(self.service.load(models));
        let ticket = self.service.submit(request.request)?;
        let id = ticket.id();
        self.start(id, Stopper::Local(ticket.cancel_handle()), Reply::Local(ticket), out, store)
    }

    /// The reply from a remote engine's `model`: streamed, stored and stopped like a local one.
    pub fn reply_remote(
        &self,
        request: ReplyRequest,
        out: ReplyOut,
        remote: &Remote,
        model: &str,
        store: Arc<Mutex<Store>>,
    ) -> Result<u64, ErrorInfo> {
        let Prompt::Chat(messages) = &request.request.prompt else {
            return Err(ErrorInfo::internal("a remote takes chat messages"));
        };
        let ticket = remote.chat_with(model, messages, &request.request.options, &request.request.template_kwargs);
        let id = ticket.id();
        self.start(id, Stopper::Remote(ticket.canceller()), Reply::Remote(ticket), out, store)
    }

    /// A local reply made of engine replies in turn (a reply with tool calls): the first is
    /// queued now (its id is the reply's); `turns` runs on the reply's own thread with it, a way
    /// to queue the next ones, the reply's way out and what stops it all.
    pub fn reply_in_turns(
        &self,
        request: ReplyRequest,
        out: ReplyOut,
        store: Arc<Mutex<Store>>,
        turns: impl FnOnce(Request, Ticket, &dyn Fn(Request) -> Result<Ticket, ErrorInfo>, Stream<'_>, &ChainStop)
            + Send
            + 'static,
    ) -> Result<u64, ErrorInfo> {
        let models = request.models.ok_or_else(|| ErrorInfo::internal("a local reply names no models"))?;
        drop(self.service.load(models));
        let first = self.service.submit(request.request.clone())?;
        let id = first.id();
        let stop = Arc::new(ChainStop::default());
        self.lock_cancels().insert(id, Stopper::Turns(stop.clone()));
        let (cancels, service) = (self.cancels.clone(), self.service.clone());
        std::thread::Builder::new()
            .name(format!("reply-{id}"))
            .spawn(move || {
                let submit = |request| service.submit(request).map_err(ErrorInfo::from);
                turns(request.request, first, &submit, Stream::new(&store, &out), &stop);
                cancels.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            })
            .map_err(|e| ErrorInfo::internal(format!("starting a reply: {e}")))?;
        Ok(id)
    }

    /// Forward the reply's events from a thread of its own, Stop reaching it by `id`.
    fn start(
        &self,
        id: u64,
        stopper: Stopper,
        reply: Reply,
        out: ReplyOut,
        store: Arc<Mutex<Store>>,
    ) -> Result<u64, ErrorInfo> {
        self.lock_cancels().insert(id, stopper);
        let cancels = self.cancels.clone();
        std::thread::Builder::new()
            .name(format!("reply-{id}"))
            .spawn(move || {
                forward(&reply, &out, &store);
                cancels.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            })
            .map_err(|e| ErrorInfo::internal(format!("starting a reply: {e}")))?;
        Ok(id)
    }

    /// Whether a reply is streaming (into the history the app holds now).
    pub fn replying(&self) -> bool {
        !self.lock_cancels().is_empty()
    }

    /// Stop a reply wherever it is; false when it already ended.
    pub fn cancel(&self, request_id: u64) -> bool {
        match self.lock_cancels().get(&request_id) {
            Some(Stopper::Local(cancel)) => cancel.cancel(),
            Some(Stopper::Remote(cancel)) => cancel.cancel(),
            Some(Stopper::Turns(stop)) => stop.stop(),
            None => return false,
        }
        true
    }

    fn lock_cancels(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Stopper>> {
        self.cancels.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Store and forward one reply's events. Tokens are written each time a batch goes to the
/// webview, and before it goes (every [`BATCH_EVERY`], whatever the decoding: plain decoding
/// has few steps), so a crash loses at most the last third of a second and nothing the window
/// showed; the row's end is written however the reply ends, and before the webview hears of
/// it, so that what it then reads back is complete. A write that fails (a full disk) is said
/// to the window once and retried with the next batch; see [`Saver`].
fn forward(reply: &Reply, out: &ReplyOut, store: &Mutex<Store>) {
    let mut stream = Stream::new(store, out);
    let last = stream.pass_on(reply, true);
    stream.end(last);
}

/// One reply's way out, however many engine replies make it (a reply with tool calls is one
/// per call round): its row in the history and the window's channel.
pub(crate) struct Stream<'a> {
    saver: Saver<'a>,
    outbox: Outbox<'a>,
    /// Tokens passed on so far: where a tool card sits among them.
    tokens: usize,
}

impl<'a> Stream<'a> {
    pub(crate) fn new(store: &'a Mutex<Store>, out: &'a ReplyOut) -> Self {
        Self { saver: Saver::new(store, out.message_id), outbox: Outbox::new(&out.events), tokens: 0 }
    }

    pub(crate) fn tokens(&self) -> usize {
        self.tokens
    }

    /// Pass on one engine reply's events (its `Started` only when `first`), and give back its
    /// last (`Done` or `Failed`) without passing it on: the caller says how the whole ends.
    /// None when its events stopped without an end.
    pub(crate) fn pass_on(&mut self, reply: &Reply, first: bool) -> Option<ReplyEvent> {
        loop {
            let event = match reply.next(self.outbox.wait()) {
                Ok(event) => event,
                Err(true) => {
                    self.saver.save(&mut self.outbox);
                    self.outbox.flush();
                    continue;
                }
                Err(false) => return None,
            };
            if event.is_last() {
                return Some(event);
            }
            match &event {
                ReplyEvent::Tokens { tokens } => {
                    self.tokens += tokens.len();
                    self.saver.push(tokens);
                }
                ReplyEvent::Started { .. } if !first => continue,
                _ => {}
            }
            self.send(event);
            if self.outbox.closed {
                reply.cancel(); // the webview is gone
            }
        }
    }

    /// Write and send what waits, now (before a tool card that points among the tokens).
    pub(crate) fn save_now(&mut self) {
        self.saver.save(&mut self.outbox);
        self.outbox.flush();
    }

    /// Send an event the reply itself makes (a tool card), in order with the tokens.
    pub(crate) fn send(&mut self, event: ReplyEvent) {
        self.outbox.send(event);
        if self.outbox.due() {
            self.saver.save(&mut self.outbox);
            self.outbox.flush();
        }
    }

    /// Keep the reply's tool cards as they are now (a failed write is logged: the tokens' own
    /// saver tells the window of a full disk).
    pub(crate) fn store_cards(&self, cards: &[ToolCard]) {
        let store = self.saver.store.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = store.set_tool_cards(self.saver.message_id, cards) {
            tracing::warn!("storing a reply's tool cards: {e}");
        }
    }

    /// Whether the window is gone (the reply should stop).
    pub(crate) fn closed(&self) -> bool {
        self.outbox.closed
    }

    /// End the reply with `last` (none: it stopped without an end, stored as an error), written
    /// before the window hears of it; then what could not be written is tried for a while.
    pub(crate) fn end(mut self, last: Option<ReplyEvent>) {
        match &last {
            Some(ReplyEvent::Done { stats, finish_reason, .. }) => {
                self.saver.end(&mut self.outbox, Some(stats), finish_reason.shown())
            }
            // The tokens that came before stay: the partial reply is kept, marked "error".
            _ => self.saver.end(&mut self.outbox, None, "error"),
        }
        if let Some(last) = last {
            self.outbox.send(last);
        }
        self.outbox.flush();
        self.saver.keep_trying();
    }
}

/// The most tokens a reply keeps waiting for the history to take them (a full disk); past it,
/// the stored copy will be cut short there (the window says so). About 10 MB of tokens.
const MAX_UNSAVED_TOKENS: usize = 65_536;
/// After a reply whose end could not be written, how long and how often its thread tries again.
const SAVE_RETRY_FOR: Duration = Duration::from_secs(600);
const SAVE_RETRY_EVERY: Duration = Duration::from_secs(5);

/// A reply's way into the history: tokens wait in `pending` until a write takes them. A write
/// that fails is not a lost reply: the tokens stay (up to [`MAX_UNSAVED_TOKENS`]), the next
/// batch tries again, and the window hears once, as `Unsaved`, that until then only it has them.
struct Saver<'a> {
    store: &'a Mutex<Store>,
    message_id: i64,
    pending: Vec<TokenEvent>,
    /// Tokens dropped past the cap: the stored reply is cut short there.
    dropped: usize,
    /// The reply's end, when it could not be written yet.
    end: Option<(Option<GenerationStats>, &'static str)>,
    said: bool,
}

impl<'a> Saver<'a> {
    fn new(store: &'a Mutex<Store>, message_id: i64) -> Self {
        Self { store, message_id, pending: Vec::new(), dropped: 0, end: None, said: false }
    }

    fn push(&mut self, tokens: &[TokenEvent]) {
        for token in tokens {
            match self.pending.len() < MAX_UNSAVED_TOKENS {
                true if self.dropped == 0 => self.pending.push(token.clone()),
                _ => self.dropped += 1,
            }
        }
    }

    /// Write what waits; on failure, tell the window (once) and keep it for the next try.
    fn save(&mut self, outbox: &mut Outbox) {
        if let Err(e) = self.write() {
            self.unsaved(outbox, &e);
        }
    }

    /// Write the tokens and then the reply's end.
    fn end(&mut self, outbox: &mut Outbox, stats: Option<&GenerationStats>, finish_reason: &'static str) {
        self.end = Some((stats.cloned(), finish_reason));
        self.save(outbox);
    }

    fn write(&mut self) -> Result<(), specula_store::StoreError> {
        let mut store = self.store.lock().unwrap_or_else(|e| e.into_inner());
        if !self.pending.is_empty() {
            store.append_tokens(self.message_id, &self.pending)?;
            self.pending.clear();
        }
        if let Some((stats, finish_reason)) = &self.end {
            store.finish_reply(self.message_id, stats.as_ref(), finish_reason)?;
            self.end = None;
        }
        Ok(())
    }

    fn unsaved(&mut self, outbox: &mut Outbox, e: &specula_store::StoreError) {
        if std::mem::replace(&mut self.said, true) {
            tracing::debug!("storing a reply, again: {e}");
            return;
        }
        tracing::error!("storing a reply: {e}; retried with every batch");
        let message = format!(
            "Not saved: {}. The reply goes on, and is written to the history as soon as it can take it; until then it is only in this window.",
            e.plainly()
        );
        outbox
            .send(ReplyEvent::Unsaved { error: ErrorInfo::new(specula_engine::protocol::ErrorCode::Storage, message) });
    }

    /// After the reply: what could not be written yet is tried again for a while (space may
    /// come back: the user frees some), so the history ends up whole after all.
    fn keep_trying(mut self) {
        let deadline = Instant::now() + SAVE_RETRY_FOR;
        while (!self.pending.is_empty() || self.end.is_some()) && Instant::now() < deadline {
            std::thread::sleep(SAVE_RETRY_EVERY);
            if self.write().is_ok() {
                tracing::info!("a reply that could not be stored was stored after all");
            }
        }
        if self.dropped > 0 || !self.pending.is_empty() {
            tracing::error!("a reply was stored cut short: {} tokens not kept", self.dropped + self.pending.len());
        }
    }
}

/// The messages to the webview: tokens and figures gathered ([`Gathered`]) and sent at most
/// every [`BATCH_EVERY`] (the first token goes at once); any other event goes at once, after
/// what was gathered.
struct Outbox<'a> {
    channel: &'a Channel<ReplyEvent>,
    gathered: Gathered,
    last_flush: Option<Instant>,
    closed: bool,
}

impl<'a> Outbox<'a> {
    fn new(channel: &'a Channel<ReplyEvent>) -> Self {
        Self { channel, gathered: Gathered::default(), last_flush: None, closed: false }
    }

    /// How long the gathered events may still wait; `None` when nothing is gathered.
    fn wait(&self) -> Option<Duration> {
        if self.gathered.is_empty() {
            return None;
        }
        Some(self.last_flush.map_or(Duration::ZERO, |t| BATCH_EVERY.saturating_sub(t.elapsed())))
    }

    fn due(&self) -> bool {
        self.wait() == Some(Duration::ZERO)
    }

    fn flush(&mut self) {
        if self.wait().is_none() {
            return;
        }
        self.last_flush = Some(Instant::now());
        for event in self.gathered.take() {
            self.deliver(event);
        }
    }

    /// Gather `event`, or send it now, after what was gathered.
    fn send(&mut self, event: ReplyEvent) {
        if let Some(now) = self.gathered.keep(event) {
            self.flush();
            self.deliver(now);
        }
    }

    fn deliver(&mut self, event: ReplyEvent) {
        self.closed |= self.channel.send(event).is_err();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use specula_engine::Source;
    use specula_store::test_support::SmallDisk;

    #[test]
    fn a_full_disk_mid_reply_is_said_once_and_the_reply_is_stored_whole_when_space_returns() {
        // Room for the reply's one transaction (about 600 KB with its WAL) once space returns.
        let Some(disk) = SmallDisk::mount(2 << 20) else { return };
        let mut store = Store::open(disk.path().join("specula.db")).unwrap();
        let c = store.create_conversation().unwrap();
        store.add_message(c.id, specula_engine::Role::User, "a long answer, please", None).unwrap();
        let reply = store.add_message(c.id, specula_engine::Role::Assistant, "", None).unwrap();
        let store = Mutex::new(store);
        let heard = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = heard.clone();
        let channel: Channel<ReplyEvent> = Channel::new(move |body| {
            if let tauri::ipc::InvokeResponseBody::Json(json) = body {
                sink.lock().unwrap().push(json);
            }
            Ok(())
        });
        let mut outbox = Outbox::new(&channel);
        let mut saver = Saver::new(&store, reply.id);
        let token = TokenEvent {
            id: 1,
            text: "a token of text that fills pages ".into(),
            source: Source::Target,
            p: None,
            q: None,
            alternatives: Vec::new(),
        };

        let filler = disk.fill();
        saver.push(&vec![token.clone(); 4000]);
        saver.save(&mut outbox);
        saver.save(&mut outbox);
        let unsaved: Vec<String> =
            heard.lock().unwrap().iter().filter(|e| e.contains("\"unsaved\"")).cloned().collect();
        assert_eq!(unsaved.len(), 1, "said once: {unsaved:?}");
        assert!(unsaved[0].contains("Not saved: the disk"), "{}", unsaved[0]);
        assert_eq!(saver.pending.len(), 4000, "kept for the next try");

        std::fs::remove_file(filler).unwrap();
        let stats = GenerationStats { generated_tokens: 4000, ..Default::default() };
        saver.end(&mut outbox, Some(&stats), "stop");
        assert!(saver.pending.is_empty() && saver.end.is_none(), "written once space returned");
        let stored = store.lock().unwrap().conversation(c.id).unwrap();
        let answer = &stored.messages[1];
        assert_eq!(answer.content.len(), 4000 * token.text.len(), "whole");
        assert_eq!(answer.finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn past_the_cap_tokens_wait_no_more_and_the_stored_copy_is_a_prefix() {
        let store = Mutex::new(Store::open_in_memory().unwrap());
        let mut saver = Saver::new(&store, 1);
        let token = |id| TokenEvent {
            id,
            text: "x".into(),
            source: Source::Target,
            p: None,
            q: None,
            alternatives: Vec::new(),
        };
        let tokens: Vec<TokenEvent> = (0..MAX_UNSAVED_TOKENS as u32 + 10).map(token).collect();
        saver.push(&tokens);
        saver.pending.truncate(5); // as if a write took some and room came back
        saver.push(&[token(0)]);
        assert_eq!(saver.pending.len(), 5, "nothing after a gap");
        assert_eq!(saver.dropped, 11);
    }
}
