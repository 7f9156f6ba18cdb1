//! The app's side of the engine service: settings become loads and requests, and each
//! reply's events are stored in the history database and forwarded to the webview's Channel.
//! The service owns the models, the engine thread and cancellation; nothing here decodes.

use crate::error::ErrorInfo;
use crate::settings::{AppSettings, EngineSettings};
use specula_engine::protocol::{EngineStatus, ReplyEvent};
use specula_engine::service::{
    CancelHandle, EngineHandle, EngineState, Event, Health, Prompt, Request, ServiceConfig, Ticket,
};
use specula_engine::{GenerationStats, Message, StepEvent, TokenEvent};
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
    EngineStatus {
        loading: h.state == EngineState::Loading,
        state: h.state,
        target: path(h.target),
        draft: path(h.draft),
        device: h.device.unwrap_or_default(),
        drafter: None,
        error: h.error,
        last_failure: h.last_failure,
    }
}

pub struct ReplyJob {
    pub messages: Vec<Message>,
    pub settings: AppSettings,
    pub message_id: i64,
    pub events: Channel<ReplyEvent>,
}

#[derive(Clone)]
pub struct Engine {
    service: EngineHandle,
    /// Replies in flight, by request id, so the Stop button can reach them.
    cancels: Arc<Mutex<HashMap<u64, CancelHandle>>>,
}

impl Engine {
    pub fn spawn() -> Self {
        // One user's engine: their chats feed the auto drafter's copies.
        let config = ServiceConfig { max_queue: 8, remember_chats: true, ..Default::default() };
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
    pub fn reply(&self, job: ReplyJob, store: Arc<Mutex<Store>>) -> Result<u64, ErrorInfo> {
        let spec = job.settings.load_spec()?;
        drop(self.service.load(spec.clone()));
        let mut request = Request::new(Prompt::Chat(job.messages.clone()), job.settings.options()?);
        request.drafter = Some(job.settings.drafter);
        request.k = Some(job.settings.k);
        request.models = Some(spec);
        let ticket = self.service.submit(request)?;
        let id = ticket.id();
        self.lock_cancels().insert(id, ticket.cancel_handle());
        let cancels = self.cancels.clone();
        std::thread::Builder::new()
            .name(format!("reply-{id}"))
            .spawn(move || {
                forward(&ticket, &job, &store);
                cancels.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            })
            .map_err(|e| ErrorInfo::internal(format!("starting a reply: {e}")))?;
        Ok(id)
    }

    /// Stop a reply wherever it is; false when it already ended.
    pub fn cancel(&self, request_id: u64) -> bool {
        match self.lock_cancels().get(&request_id) {
            Some(cancel) => {
                cancel.cancel();
                true
            }
            None => false,
        }
    }

    fn lock_cancels(&self) -> std::sync::MutexGuard<'_, HashMap<u64, CancelHandle>> {
        self.cancels.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Store and forward one reply's events. Tokens are written each time a batch goes to the
/// webview, and before it goes (every [`BATCH_EVERY`], whatever the decoding: plain decoding
/// has few steps), so a crash loses at most the last third of a second and nothing the window
/// showed; the row's end is written however the reply ends, and before the webview hears of
/// it, so that what it then reads back is complete.
fn forward(ticket: &Ticket, job: &ReplyJob, store: &Mutex<Store>) {
    let mut unsaved: Vec<TokenEvent> = Vec::new();
    let mut outbox = Outbox::new(&job.events);
    let mut ended = false;
    loop {
        let event = match outbox.wait() {
            None => ticket.recv(),
            Some(wait) => match ticket.recv_timeout(wait) {
                Ok(event) => Some(event),
                Err(flume::RecvTimeoutError::Timeout) => {
                    store_tokens(store, job.message_id, &mut unsaved);
                    outbox.flush();
                    continue;
                }
                Err(flume::RecvTimeoutError::Disconnected) => None,
            },
        };
        let Some(event) = event else { break };
        match event {
            Event::Started { prompt_tokens } => outbox.send(ReplyEvent::Started { prompt_tokens }),
            Event::Prefill { done, total } => outbox.send(ReplyEvent::Prefill { done, total }),
            Event::Token(token) => {
                unsaved.push(token.clone());
                outbox.tokens.push(token);
            }
            Event::Step(step) => outbox.step = Some(step),
            Event::Done(g) => {
                let finish_reason = g.finish_reason.as_str();
                store_end(store, job.message_id, &mut unsaved, Some(&g.stats), finish_reason);
                ended = true;
                outbox.send(ReplyEvent::Done { stats: g.stats, finish_reason: finish_reason.into() });
            }
            Event::Failed(e) => {
                store_end(store, job.message_id, &mut unsaved, None, "error");
                ended = true;
                outbox.send(ReplyEvent::Error { error: e.into() });
            }
        }
        if outbox.due() {
            store_tokens(store, job.message_id, &mut unsaved);
            outbox.flush();
        }
        if outbox.closed {
            ticket.cancel(); // the webview is gone
        }
    }
    if !ended {
        store_end(store, job.message_id, &mut unsaved, None, "error");
    }
}

/// The messages to the webview: tokens and figures gathered into one batch at most every
/// [`BATCH_EVERY`] (the first token goes at once), anything else sent after what is gathered.
struct Outbox<'a> {
    channel: &'a Channel<ReplyEvent>,
    tokens: Vec<TokenEvent>,
    step: Option<StepEvent>,
    last_flush: Option<Instant>,
    closed: bool,
}

impl<'a> Outbox<'a> {
    fn new(channel: &'a Channel<ReplyEvent>) -> Self {
        Self { channel, tokens: Vec::new(), step: None, last_flush: None, closed: false }
    }

    /// How long the gathered batch may still wait; `None` when nothing is gathered.
    fn wait(&self) -> Option<Duration> {
        if self.tokens.is_empty() && self.step.is_none() {
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
        let batch = ReplyEvent::Batch { tokens: std::mem::take(&mut self.tokens), step: self.step.take() };
        self.last_flush = Some(Instant::now());
        self.deliver(batch);
    }

    fn send(&mut self, event: ReplyEvent) {
        self.flush();
        self.deliver(event);
    }

    fn deliver(&mut self, event: ReplyEvent) {
        self.closed |= self.channel.send(event).is_err();
    }
}

fn store_end(
    store: &Mutex<Store>,
    message_id: i64,
    pending: &mut Vec<TokenEvent>,
    stats: Option<&GenerationStats>,
    finish_reason: &str,
) {
    store_tokens(store, message_id, pending);
    if let Ok(store) = store.lock() {
        if let Err(e) = store.finish_reply(message_id, stats, finish_reason) {
            tracing::error!("storing the end of a reply: {e}");
        }
    }
}

fn store_tokens(store: &Mutex<Store>, message_id: i64, pending: &mut Vec<TokenEvent>) {
    if pending.is_empty() {
        return;
    }
    if let Ok(mut store) = store.lock() {
        match store.append_tokens(message_id, pending) {
            Ok(()) => pending.clear(),
            Err(e) => tracing::error!("storing streamed tokens: {e}"),
        }
    }
}
