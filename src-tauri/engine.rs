//! The engine thread: it owns the models, takes requests in order over a channel, and streams
//! each reply to the webview over its Channel while storing it in the history database.
//! Commands never wait on a reply; a reply is cancelled by its request id.

use crate::error::ErrorDto;
use crate::settings::AppSettings;
use serde::Serialize;
use specula_engine::{
    device, DrafterKind, FinishReason, Flow, GenerationStats, Message, Session, StepEvent, TokenEvent, TokenSink,
};
use specula_store::Store;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use tauri::ipc::Channel;

/// What the UI hears while a reply streams.
#[derive(Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReplyEvent {
    Started { prompt_tokens: usize },
    Token { token: TokenEvent },
    Step { step: StepEvent },
    Done { stats: GenerationStats, finish_reason: &'static str },
    Error { error: ErrorDto },
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct EngineStatus {
    pub target: Option<String>,
    pub draft: Option<String>,
    pub drafter: Option<DrafterKind>,
    pub device: String,
    pub loading: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDto>,
}

pub struct ReplyJob {
    pub messages: Vec<Message>,
    pub settings: AppSettings,
    pub message_id: i64,
    pub events: Channel<ReplyEvent>,
}

enum Request {
    Apply(AppSettings, mpsc::Sender<Result<EngineStatus, ErrorDto>>),
    Reply(ReplyJob, Arc<AtomicBool>, u64),
}

#[derive(Clone)]
pub struct Engine {
    requests: mpsc::Sender<Request>,
    status: Arc<Mutex<EngineStatus>>,
    cancels: Arc<Mutex<HashMap<u64, Arc<AtomicBool>>>>,
    next_id: Arc<AtomicU64>,
}

impl Engine {
    pub fn spawn(store: Arc<Mutex<Store>>) -> Self {
        let (requests, rx) = mpsc::channel();
        let engine = Self {
            requests,
            status: Default::default(),
            cancels: Default::default(),
            next_id: Arc::new(AtomicU64::new(1)),
        };
        let worker = Worker { loaded: None, store, status: engine.status.clone(), cancels: engine.cancels.clone() };
        std::thread::Builder::new()
            .name("specula-engine".into())
            .spawn(move || worker.run(rx))
            .expect("spawning the engine thread");
        engine
    }

    pub fn status(&self) -> EngineStatus {
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Load what the settings name (only what changed); the answer comes when it is done.
    pub fn apply(&self, settings: AppSettings) -> mpsc::Receiver<Result<EngineStatus, ErrorDto>> {
        let (tx, rx) = mpsc::channel();
        if let Ok(mut status) = self.status.lock() {
            status.loading = true;
        }
        let _ = self.requests.send(Request::Apply(settings, tx));
        rx
    }

    /// Queue a reply; returns its request id at once.
    pub fn reply(&self, job: ReplyJob) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let cancel = Arc::new(AtomicBool::new(false));
        if let Ok(mut cancels) = self.cancels.lock() {
            cancels.insert(id, cancel.clone());
        }
        let _ = self.requests.send(Request::Reply(job, cancel, id));
        id
    }

    /// Stop a reply at its next token; false when it already ended.
    pub fn cancel(&self, request_id: u64) -> bool {
        let cancels = self.cancels.lock();
        match cancels.ok().and_then(|c| c.get(&request_id).cloned()) {
            Some(flag) => {
                flag.store(true, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }
}

/// The models as loaded, and what they were loaded from, to reload only what changed.
struct Loaded {
    session: Session,
    target: String,
    context: usize,
    device_spec: String,
    device: candle_core::Device,
    draft: Option<String>,
}

struct Worker {
    loaded: Option<Loaded>,
    store: Arc<Mutex<Store>>,
    status: Arc<Mutex<EngineStatus>>,
    cancels: Arc<Mutex<HashMap<u64, Arc<AtomicBool>>>>,
}

impl Worker {
    fn run(mut self, requests: mpsc::Receiver<Request>) {
        for request in requests {
            match request {
                Request::Apply(settings, answer) => {
                    let result = self.apply(&settings);
                    let status = self.publish(result.as_ref().err().cloned());
                    let _ = answer.send(result.map(|_| status));
                }
                Request::Reply(job, cancel, id) => {
                    self.reply(job, &cancel);
                    if let Ok(mut cancels) = self.cancels.lock() {
                        cancels.remove(&id);
                    }
                }
            }
        }
    }

    fn publish(&self, error: Option<ErrorDto>) -> EngineStatus {
        let status = EngineStatus {
            target: self.loaded.as_ref().map(|l| l.target.clone()),
            draft: self.loaded.as_ref().and_then(|l| l.draft.clone()),
            drafter: self.loaded.as_ref().map(|l| l.session.drafter()),
            device: self.loaded.as_ref().map(|l| device::describe(&l.device).to_string()).unwrap_or_default(),
            loading: false,
            error,
        };
        if let Ok(mut shared) = self.status.lock() {
            *shared = status.clone();
        }
        status
    }

    /// Bring the loaded models in line with the settings. A failed load keeps what was loaded.
    fn apply(&mut self, s: &AppSettings) -> Result<(), ErrorDto> {
        let same_target = self
            .loaded
            .as_ref()
            .is_some_and(|l| l.target == s.target && l.context == s.context && l.device_spec == s.device);
        if !same_target {
            let device = device::select(&s.device)?;
            tracing::info!("loading target {}", s.target);
            let session = Session::load(&s.target, &device, s.context)?;
            self.loaded = Some(Loaded {
                session,
                target: s.target.clone(),
                context: s.context,
                device_spec: s.device.clone(),
                device,
                draft: None,
            });
        }
        let loaded = self.loaded.as_mut().ok_or_else(|| ErrorDto::new("no_model", "No target model is loaded"))?;
        if s.drafter == DrafterKind::Model {
            if s.draft.is_empty() {
                return Err(ErrorDto::new("invalid_setting", "Choose a draft model, prompt lookup or none"));
            }
            if loaded.draft.as_deref() != Some(s.draft.as_str()) {
                tracing::info!("loading draft {}", s.draft);
                loaded.session.load_draft(&s.draft, &loaded.device)?;
                loaded.draft = Some(s.draft.clone());
            }
        }
        loaded.session.set_drafter(s.drafter)?;
        loaded.session.speculative.k = s.k()?;
        Ok(())
    }

    fn reply(&mut self, job: ReplyJob, cancel: &AtomicBool) {
        let store = self.store.clone();
        let mut sink = ReplySink { job: &job, store: &store, cancel, pending: Vec::new() };
        let result = self.generate(&job, &mut sink);
        sink.flush();
        let (stats, finish_reason, event) = match result {
            Ok(g) => {
                let reason = finish_reason(g.finish_reason);
                (Some(g.stats.clone()), reason, ReplyEvent::Done { stats: g.stats, finish_reason: reason })
            }
            Err(error) => (None, "error", ReplyEvent::Error { error }),
        };
        if let Ok(store) = self.store.lock() {
            if let Err(e) = store.finish_reply(job.message_id, stats.as_ref(), finish_reason) {
                tracing::error!("storing the end of a reply: {e}");
            }
        }
        let _ = job.events.send(event);
    }

    fn generate(&mut self, job: &ReplyJob, sink: &mut ReplySink<'_>) -> Result<specula_engine::Generation, ErrorDto> {
        let applied = self.apply(&job.settings);
        self.publish(applied.as_ref().err().cloned());
        applied?;
        let loaded = self.loaded.as_mut().ok_or_else(|| ErrorDto::new("no_model", "No target model is loaded"))?;
        let options = job.settings.options()?;
        let prompt = loaded.session.chat_prompt(&job.messages)?;
        specula_engine::generate::check_context(prompt.len(), loaded.session.target.model.capacity())?;
        let _ = job.events.send(ReplyEvent::Started { prompt_tokens: prompt.len() });
        Ok(loaded.session.generate(&prompt, &options, sink)?)
    }
}

/// OpenAI's words, which the UI shares with the HTTP transport.
fn finish_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::EndOfTurn | FinishReason::StopString => "stop",
        FinishReason::MaxTokens | FinishReason::ContextFull => "length",
        FinishReason::Cancelled => "cancelled",
    }
}

/// Forwards tokens to the webview and writes each step's tokens to the database, so a crash
/// loses at most the step in flight.
struct ReplySink<'a> {
    job: &'a ReplyJob,
    store: &'a Mutex<Store>,
    cancel: &'a AtomicBool,
    pending: Vec<TokenEvent>,
}

impl ReplySink<'_> {
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        if let Ok(mut store) = self.store.lock() {
            match store.append_tokens(self.job.message_id, &self.pending) {
                Ok(()) => self.pending.clear(),
                Err(e) => tracing::error!("storing streamed tokens: {e}"),
            }
        }
    }
}

impl TokenSink for ReplySink<'_> {
    fn on_token(&mut self, token: &TokenEvent) -> Flow {
        self.pending.push(token.clone());
        let delivered = self.job.events.send(ReplyEvent::Token { token: token.clone() }).is_ok();
        if !delivered || self.cancel.load(Ordering::SeqCst) {
            return Flow::Stop;
        }
        Flow::Continue
    }

    fn on_step(&mut self, step: &StepEvent) -> Flow {
        self.flush();
        let delivered = self.job.events.send(ReplyEvent::Step { step: step.clone() }).is_ok();
        if !delivered || self.cancel.load(Ordering::SeqCst) {
            return Flow::Stop;
        }
        Flow::Continue
    }
}
