//! One engine service for every front-end: a handle feeding one engine thread that owns the
//! models (the shape of mistral.rs's engine loop).
//!
//! The app, the HTTP server and the CLI's chat submit [`Request`]s that carry every per-call
//! option as values (sampling, k, drafter, limits, stops, a deadline), and get back a
//! [`Ticket`] that streams [`ReplyEvent`]s and can be cancelled at any time: while queued, while
//! the prompt is read (prefill runs in chunks and asks between them), or while decoding.
//! Nothing is set on the shared [`Session`] and restored afterwards, so no request's
//! settings can leak into the next.
//!
//! A job that fails, a panic included, ends with a [`ReplyEvent::Failed`] and the service goes on
//! with the next one; [`EngineHandle::health`] says what is loaded and what went wrong.
//! Events travel over a bounded channel: a slow reader slows the engine (back-pressure)
//! instead of growing a queue, and one that stops reading for [`STALL_LIMIT`] is cancelled.
//! Front-ends only adapt events: the app to a Tauri Channel and SQLite, the server to SSE,
//! the CLI to the terminal.

mod sink;
mod worker;

use crate::chat::Message;
use crate::decode::{GenerateOptions, Generation};
use crate::error::{Error, ErrorInfo, Result};
use crate::models::ModelInfo;
use crate::session::{DrafterKind, Session};
use crate::speculative::KSetting;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Text the engine keeps for the auto drafter's copies, newest kept: about a million tokens,
/// which a newly loaded target re-reads in a few seconds at most.
pub const REMEMBERED_BYTES: usize = 4 << 20;

/// How long the engine waits on a reader that takes no event before it gives the job up.
pub const STALL_LIMIT: Duration = Duration::from_secs(60);

/// What the service does with requests that leave a choice open.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Generation requests queued or running before [`EngineHandle::submit`] answers
    /// [`Error::Busy`].
    pub max_queue: usize,
    /// Replies decoded at once, their passes taken together ([`crate::step`]); 1: one at a
    /// time, the others queued.
    pub parallel: usize,
    /// The draft length of requests that name none.
    pub default_k: KSetting,
    /// The drafter of requests that name none; `None`: the draft model when one is loaded,
    /// plain decoding otherwise.
    pub default_drafter: Option<DrafterKind>,
    /// Events buffered per ticket before the engine waits for its reader.
    pub event_buffer: usize,
    /// Remember each chat request's last user message and its reply, for the auto drafter's
    /// copies in later replies. For one user's own engine (the app); a server that answers
    /// several users keeps it off, so that no reply is drafted from another user's text.
    pub remember_chats: bool,
    /// Memory for earlier prompts' caches, to resume a chat gone back to without reading it
    /// again (`Session::set_prompt_cache`); `None`: `default_prompt_cache_bytes()` at load.
    pub prompt_cache_bytes: Option<usize>,
    /// A folder to keep prompts' caches in across restarts, and its cap in bytes: written when
    /// no reply waits, read when a prompt resumes a chat no longer in memory.
    pub disk_cache: Option<(PathBuf, u64)>,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            max_queue: 32,
            parallel: 1,
            default_k: KSetting::default(),
            default_drafter: None,
            event_buffer: 64,
            remember_chats: false,
            prompt_cache_bytes: None,
            disk_cache: None,
        }
    }
}

/// What to reply to.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Rendered with the target's chat template.
    Chat(Vec<Message>),
    /// Tokenized as it is (a completion).
    Text(String),
    Tokens(Vec<u32>),
}

/// One reply, with every option it needs.
#[derive(Debug, Clone)]
pub struct Request {
    pub prompt: Prompt,
    pub options: GenerateOptions,
    /// `None`: [`ServiceConfig::default_drafter`].
    pub drafter: Option<DrafterKind>,
    /// `None`: [`ServiceConfig::default_k`].
    pub k: Option<KSetting>,
    /// The reply is cancelled when it is not done by then, queued time included.
    pub deadline: Option<Instant>,
    /// Run only on these models: when the load asked for just before failed, the reply fails
    /// with that load's error instead of running on the models it meant to replace.
    pub models: Option<LoadSpec>,
    /// Function definitions (OpenAI's `tools` entries) the chat template renders into a chat
    /// prompt; ignored for other prompts.
    pub tools: Vec<serde_json::Value>,
    /// More variables for the chat template (`chat_template_kwargs`: `enable_thinking`).
    pub template_kwargs: serde_json::Map<String, serde_json::Value>,
    /// What a prompt too long for the context does (`stop`: an error, as before).
    pub overflow: specula_protocol::Overflow,
}

impl Request {
    pub fn new(prompt: Prompt, options: GenerateOptions) -> Self {
        Self {
            prompt,
            options,
            drafter: None,
            k: None,
            deadline: None,
            models: None,
            tools: Vec::new(),
            template_kwargs: serde_json::Map::new(),
            overflow: specula_protocol::Overflow::Stop,
        }
    }
}

/// What a ticket hears: the contract's [`ReplyEvent`]s, as the engine's sink emits them
/// (one token each) and unchanged from there to the window.
pub use specula_protocol::ReplyEvent;

/// Stops a reply wherever it is; clones share the flag.
#[derive(Debug, Clone, Default)]
pub struct CancelHandle(Arc<AtomicBool>);

impl CancelHandle {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A submitted reply: its events, and the means to cancel it. Dropping the ticket cancels
/// the reply too (a client that went away).
pub struct Ticket {
    id: u64,
    events: flume::Receiver<ReplyEvent>,
    cancel: CancelHandle,
}

impl Ticket {
    /// Unique within the service: front-ends cancel by it.
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn cancel_handle(&self) -> CancelHandle {
        self.cancel.clone()
    }

    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// The next event, waiting for it; `None` after the last.
    pub fn recv(&self) -> Option<ReplyEvent> {
        self.events.recv().ok()
    }

    /// The next event if one comes within `timeout`.
    pub fn recv_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> std::result::Result<ReplyEvent, flume::RecvTimeoutError> {
        self.events.recv_timeout(timeout)
    }

    pub async fn recv_async(&self) -> Option<ReplyEvent> {
        self.events.recv_async().await.ok()
    }

    /// Wait for the end and return the reply, or why there is none.
    pub fn wait(self) -> std::result::Result<Generation, ErrorInfo> {
        let mut reply = specula_protocol::Collected::default();
        while let Some(event) = self.recv() {
            if let Some(end) = reply.add(event) {
                return end;
            }
        }
        Err(ErrorInfo::from(stopped()))
    }
}

fn stopped() -> Error {
    Error::NoModel("the engine stopped".into())
}

/// The models a service should hold. Loading reloads only what differs from what is loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadSpec {
    pub target: PathBuf,
    /// `None` unloads the draft.
    pub draft: Option<PathBuf>,
    /// Tokens the draft may propose (`None`: all; see `Session::set_draft_vocab`).
    pub draft_vocab: Option<usize>,
    /// KV cache positions (capped at the model's trained context; 0: automatic).
    pub context: usize,
    /// How the KV cache stores keys and values.
    pub kv_format: specula_protocol::KvFormat,
    /// `auto`, `cpu`, `cuda`, `cuda:N` or `metal`.
    pub device: String,
    /// Bytes of earlier prompts' caches kept (`Session::set_prompt_cache`); `None`: the
    /// service's [`ServiceConfig::prompt_cache_bytes`].
    pub prompt_cache: Option<usize>,
}

pub use specula_protocol::app::EngineState;

/// A model as loaded: where from, and what it is.
#[derive(Debug, Clone, Serialize)]
pub struct LoadedModelInfo {
    /// `None` for a model handed to the service already loaded.
    pub path: Option<PathBuf>,
    pub info: ModelInfo,
}

/// The truth about the service, for `/health` and the app's status line.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    pub state: EngineState,
    pub target: Option<LoadedModelInfo>,
    pub draft: Option<LoadedModelInfo>,
    /// The drafter requests get when they name none.
    pub default_drafter: DrafterKind,
    pub default_k: KSetting,
    pub device: Option<String>,
    /// Replies queued or running.
    pub pending: usize,
    /// Replies running now (at most `parallel`).
    pub running: usize,
    /// How the passes so far were shared by replies running at once (none with `parallel` 1).
    pub step: Option<crate::step::StepCounts>,
    /// Why the last load failed. With state `ready` the models loaded before stay in use.
    pub error: Option<ErrorInfo>,
    /// The last reply that failed inside the engine (a panic, numerical garbage), and why.
    pub last_failure: Option<ErrorInfo>,
}

impl Health {
    fn new(config: &ServiceConfig) -> Self {
        Self {
            state: EngineState::Empty,
            target: None,
            draft: None,
            default_drafter: config.default_drafter.unwrap_or(DrafterKind::None),
            default_k: config.default_k,
            device: None,
            pending: 0,
            running: 0,
            step: None,
            error: None,
            last_failure: None,
        }
    }
}

/// What the handle and the engine thread share.
struct Shared {
    health: Mutex<Health>,
    /// Generation jobs queued or running.
    pending: AtomicUsize,
    /// Loads queued or running.
    loads: AtomicUsize,
    /// Replies running now.
    running: AtomicUsize,
    /// The step the running replies share, when several may run.
    step: Mutex<Option<Arc<crate::step::Step>>>,
    next_id: AtomicU64,
    config: ServiceConfig,
}

impl Shared {
    fn update_health(&self, f: impl FnOnce(&mut Health)) {
        // A poisoned lock still holds a usable status: keep reporting.
        let mut health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut health);
    }
}

enum Job {
    // Boxed: a request (its options, grammar and tools) is far larger than a load.
    Generate(Box<GenerateJob>),
    Load(LoadSpec, flume::Sender<std::result::Result<Health, ErrorInfo>>),
    /// Texts of earlier conversations, oldest first, for the auto drafter to copy from.
    Remember(Vec<String>),
    /// Answered once the jobs before it are done and the models' state is on the disk cache.
    Settle(flume::Sender<()>),
}

struct GenerateJob {
    id: u64,
    request: Request,
    events: flume::Sender<ReplyEvent>,
    cancel: CancelHandle,
    _slot: QueueSlot,
}

/// A place in the queue, given back when the job ends however it ends.
struct QueueSlot(Arc<Shared>);

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The front-ends' side of the engine thread. Cheap to clone; the thread ends when the last
/// handle is dropped and the queue is empty.
#[derive(Clone)]
pub struct EngineHandle {
    jobs: flume::Sender<Job>,
    shared: Arc<Shared>,
}

impl EngineHandle {
    /// A service over models already loaded.
    pub fn spawn(session: Session, config: ServiceConfig) -> Self {
        Self::start(Some(session), config)
    }

    /// A service with nothing loaded yet: [`Self::load`] brings the models.
    pub fn spawn_empty(config: ServiceConfig) -> Self {
        Self::start(None, config)
    }

    fn start(session: Option<Session>, config: ServiceConfig) -> Self {
        let shared = Arc::new(Shared {
            health: Mutex::new(Health::new(&config)),
            pending: AtomicUsize::new(0),
            loads: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            step: Mutex::new(None),
            next_id: AtomicU64::new(1),
            config,
        });
        let (jobs, queue) = flume::unbounded();
        let engine = worker::Worker::new(session, shared.clone());
        std::thread::Builder::new()
            .name("specula-engine".into())
            .spawn(move || engine.run(queue))
            .expect("spawning the engine thread");
        Self { jobs, shared }
    }

    /// Wait, at most `timeout`, for the jobs queued so far to end and for what the models hold
    /// to be written to the disk cache: a server that is asked to stop keeps its last chat for
    /// the next start. False when the time ran out (or the engine is gone).
    pub fn settle(&self, timeout: std::time::Duration) -> bool {
        let (done, settled) = flume::bounded(1);
        self.jobs.send(Job::Settle(done)).is_ok() && settled.recv_timeout(timeout).is_ok()
    }

    /// Queue a reply. Refused with [`Error::Busy`] when `max_queue` replies are queued or
    /// running: nothing is dropped silently.
    pub fn submit(&self, request: Request) -> Result<Ticket> {
        let queued = self.shared.pending.fetch_add(1, Ordering::SeqCst);
        let slot = QueueSlot(self.shared.clone());
        if queued >= self.shared.config.max_queue {
            return Err(Error::Busy { queued });
        }
        let (events, receiver) = flume::bounded(self.shared.config.event_buffer.max(1));
        let cancel = CancelHandle::default();
        let id = self.shared.next_id.fetch_add(1, Ordering::SeqCst);
        let job = GenerateJob { id, request, events, cancel: cancel.clone(), _slot: slot };
        self.jobs.send(Job::Generate(Box::new(job))).map_err(|_| stopped())?;
        Ok(Ticket { id, events: receiver, cancel })
    }

    /// Queue a load of `spec` (only what changed is reloaded). The answer comes when it is
    /// done; replies submitted after it wait for it. A failed load keeps what was loaded.
    pub fn load(&self, spec: LoadSpec) -> flume::Receiver<std::result::Result<Health, ErrorInfo>> {
        let (answer, receiver) = flume::bounded(1);
        self.shared.loads.fetch_add(1, Ordering::SeqCst);
        if self.jobs.send(Job::Load(spec, answer)).is_err() {
            tracing::error!("the engine thread is gone");
        }
        receiver
    }

    /// Add texts of earlier conversations (oldest first) to what the auto drafter copies
    /// from: the app's stored history at start. Kept across model loads, within a cap.
    pub fn remember(&self, texts: Vec<String>) {
        if self.jobs.send(Job::Remember(texts)).is_err() {
            tracing::error!("the engine thread is gone");
        }
    }

    pub fn health(&self) -> Health {
        let mut health = self.shared.health.lock().unwrap_or_else(|e| e.into_inner()).clone();
        health.pending = self.shared.pending.load(Ordering::SeqCst);
        health.running = self.shared.running.load(Ordering::SeqCst);
        health.step = self.shared.step.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|s| s.counts());
        // With nothing loaded, a queued load is the news: the models are on their way. (With
        // models loaded, the engine itself says `loading` once a load really changes them.)
        if matches!(health.state, EngineState::Empty | EngineState::Failed)
            && self.shared.loads.load(Ordering::SeqCst) > 0
        {
            health.state = EngineState::Loading;
        }
        health
    }

    pub fn config(&self) -> &ServiceConfig {
        &self.shared.config
    }
}
