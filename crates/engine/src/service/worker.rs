//! The engine thread: it owns the models, takes jobs in order, and runs each reply on a lane
//! of its own thread, behind `catch_unwind`, so that one failing reply ends as an error and
//! the others go on. With `parallel` above one, several lanes run at once and their passes are
//! taken together ([`crate::step`]); loads and settling wait until every lane is home.

use super::sink::ChannelSink;
use super::ReplyEvent;
use super::{EngineState, GenerateJob, Health, Job, LoadSpec, LoadedModelInfo, Prompt, Request, ServiceConfig, Shared};
use crate::decode::Generation;
use crate::device;
use crate::error::{panic_message, Error, ErrorInfo, Result};
use crate::fitted::ReplyTo;
use crate::session::{Decoding, DrafterKind, Session};
use crate::step::Step;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The models as loaded and what they were loaded from, to reload only what changed.
struct Loaded {
    /// Lane 0 holds the session loads and settings go to; the others share its weights. A
    /// lane out on a reply is `None` until it comes home.
    lanes: Vec<Option<Lane>>,
    /// `None` for a session handed in already loaded.
    spec: Option<LoadSpec>,
    device: candle_core::Device,
    /// The step the lanes take their passes in, when there are several.
    step: Option<Arc<Step>>,
}

/// A session that serves one reply at a time, and what it served last (to send a chat back
/// to the lane that holds its sequence).
struct Lane {
    session: Session,
    last: Option<Prompt>,
    /// When it last took a reply: the least recently used takes a new conversation.
    used: u64,
}

impl Loaded {
    fn all_home(&self) -> bool {
        self.lanes.iter().all(Option::is_some)
    }

    /// The session loads and settings go to; `None` while it is out on a reply.
    fn home(&mut self) -> Option<&mut Session> {
        self.lanes.first_mut()?.as_mut().map(|lane| &mut lane.session)
    }

    fn home_ref(&self) -> Option<&Session> {
        self.lanes.first()?.as_ref().map(|lane| &lane.session)
    }

    /// The idle lane for `prompt`: the one whose last prompt shares the most with it, else the
    /// least recently used.
    fn lane_for(&self, prompt: &Prompt) -> Option<usize> {
        let idle = self.lanes.iter().enumerate().filter_map(|(i, lane)| Some((i, lane.as_ref()?)));
        idle.max_by_key(|(_, lane)| {
            (lane.last.as_ref().map_or(0, |last| shared_start(last, prompt)), u64::MAX - lane.used)
        })
        .map(|(i, _)| i)
    }

    /// Lanes 1.. made again from lane 0 (after a load or at start): `parallel` in all, or as
    /// many as memory holds full contexts for, their passes taken together. Off the CPU, one:
    /// a batched pass there is not yet shown to give each row its single-pass bits.
    fn make_lanes(&mut self, parallel: usize) {
        self.lanes.truncate(1);
        self.step = None;
        let device = self.device.clone();
        let Some(home) = self.home() else { return };
        let parallel = match device.is_cpu() {
            true => parallel.min(lanes_memory_holds(home)),
            false => 1,
        };
        if parallel <= 1 {
            home.set_passes(None);
            return;
        }
        let step = Step::new();
        home.set_passes(Some(step.clone()));
        self.step = Some(step.clone());
        let home = self.home_ref().expect("home above");
        let mut more = Vec::new();
        for _ in 1..parallel {
            match home.share(Some(step.clone())) {
                Ok(session) => more.push(Some(Lane { session, last: None, used: 0 })),
                Err(e) => {
                    tracing::warn!("one reply at a time: {e}");
                    break;
                }
            }
        }
        self.lanes.extend(more);
    }
}

/// How many replies' sequences fit, full, in the memory free now beside the one lane 0 holds
/// (at least one).
fn lanes_memory_holds(home: &Session) -> usize {
    let each = home.sequence_bytes().max(1) as u64;
    match device::available_memory() {
        Some(free) => 1 + (free / 2 / each).min(usize::MAX as u64 - 1) as usize,
        None => usize::MAX,
    }
}

/// How much of `b` the prompt `a` already holds: the bytes of their equal leading messages
/// (or of their common start).
fn shared_start(a: &Prompt, b: &Prompt) -> usize {
    match (a, b) {
        (Prompt::Chat(a), Prompt::Chat(b)) => {
            a.iter().zip(b).take_while(|(x, y)| x == y).map(|(m, _)| m.content.len() + 1).sum()
        }
        (Prompt::Text(a), Prompt::Text(b)) => a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count(),
        (Prompt::Tokens(a), Prompt::Tokens(b)) => crate::tokenizer::common_prefix(a, b),
        _ => 0,
    }
}

/// A lane back from a reply, with what the reply leaves to remember.
struct Returned {
    index: usize,
    lane: Lane,
    remember: Option<(Request, Vec<u32>, String)>,
}

pub(super) struct Worker {
    loaded: Option<Loaded>,
    shared: Arc<Shared>,
    /// Texts remembered for the auto drafter, as text: a new target tokenizes them anew.
    remembered: Remembered,
    /// What lane 0 is to remember once it is home.
    to_remember: Vec<Remembering>,
    /// Jobs taken from the handles, not yet started.
    queue: VecDeque<Job>,
    returns: (flume::Sender<Box<Returned>>, flume::Receiver<Box<Returned>>),
    clock: u64,
}

enum Remembering {
    Text(String),
    Tokens(Vec<u32>),
}

/// Texts kept for the history pool, oldest first, at most [`super::REMEMBERED_BYTES`] of them.
#[derive(Default)]
struct Remembered {
    texts: std::collections::VecDeque<String>,
    bytes: usize,
}

impl Remembered {
    fn push(&mut self, text: String) {
        self.bytes += text.len();
        self.texts.push_back(text);
        while self.bytes > super::REMEMBERED_BYTES {
            let Some(old) = self.texts.pop_front() else { break };
            self.bytes -= old.len();
        }
    }

    /// Hand every text to `session`'s pool.
    fn fill(&self, session: &mut Session) {
        for text in &self.texts {
            remember_text(session, text);
        }
    }
}

fn remember_text(session: &mut Session, text: &str) {
    match session.target.tokenizer.encode(text) {
        Ok(tokens) => session.remember(&tokens),
        Err(e) => tracing::debug!("a text to remember did not tokenize: {e}"),
    }
}

impl Worker {
    pub fn new(session: Option<Session>, shared: Arc<Shared>) -> Self {
        let loaded = session.map(|mut session| {
            let device = session.target.model.model().device();
            session.set_prompt_cache(prompt_cache_bytes(&shared.config));
            session.set_disk_cache(shared.config.disk_cache.clone());
            let mut loaded =
                Loaded { lanes: vec![Some(Lane { session, last: None, used: 0 })], spec: None, device, step: None };
            loaded.make_lanes(shared.config.parallel);
            *shared.step.lock().unwrap_or_else(|e| e.into_inner()) = loaded.step.clone();
            loaded
        });
        let worker = Self {
            loaded,
            shared,
            remembered: Remembered::default(),
            to_remember: Vec::new(),
            queue: VecDeque::new(),
            returns: flume::unbounded(),
            clock: 0,
        };
        worker.publish(None);
        worker
    }

    pub fn run(mut self, jobs: flume::Receiver<Job>) {
        let mut open = true;
        loop {
            self.start_what_can_start();
            let out = self.loaded.as_ref().is_some_and(|l| !l.all_home());
            if !open && !out && self.queue.is_empty() {
                return;
            }
            let returns = self.returns.1.clone();
            let news = match open {
                true => flume::Selector::new()
                    .recv(&jobs, |job| job.map(News::Job).unwrap_or(News::Closed))
                    .recv(&returns, |lane| lane.map(News::Home).unwrap_or(News::Closed))
                    .wait(),
                false => returns.recv().map(News::Home).unwrap_or(News::Closed),
            };
            match news {
                News::Job(job) => self.queue.push_back(job),
                News::Home(returned) => self.home_again(returned, jobs.is_empty()),
                News::Closed => open = false,
            }
        }
    }

    /// Start the queued jobs that can start now, in order: a reply on an idle lane; a load or
    /// a settle once every lane is home; remembering at once.
    fn start_what_can_start(&mut self) {
        self.remember_pending();
        while let Some(job) = self.queue.pop_front() {
            match job {
                Job::Remember(texts) => {
                    for text in texts {
                        self.to_remember.push(Remembering::Text(text.clone()));
                        self.remembered.push(text);
                    }
                    self.remember_pending();
                }
                Job::Generate(job) => {
                    if let Err(job) = self.dispatch(job) {
                        self.queue.push_front(Job::Generate(job));
                        return;
                    }
                }
                Job::Load(spec, answer) if self.is_loaded(&spec) => {
                    // What is loaded already: answered without waiting for the lanes (the
                    // app loads before each reply), with the health as last published (lane 0,
                    // which it is read from, may be out on a reply).
                    let health = self.shared.health.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    self.shared.loads.fetch_sub(1, Ordering::SeqCst);
                    let _ = answer.send(Ok(health));
                }
                Job::Load(spec, answer) if self.all_home() => {
                    let result = self.load(&spec);
                    let health = self.publish(result.as_ref().err().cloned());
                    self.shared.loads.fetch_sub(1, Ordering::SeqCst);
                    let _ = answer.send(result.map(|()| health));
                }
                Job::Settle(done) if self.all_home() => {
                    self.persist_all();
                    let _ = done.send(());
                }
                waits @ (Job::Load(..) | Job::Settle(_)) => {
                    self.queue.push_front(waits);
                    return;
                }
            }
        }
    }

    fn all_home(&self) -> bool {
        self.loaded.as_ref().is_none_or(Loaded::all_home)
    }

    /// Whether `spec` is exactly what is loaded (a load of it would change nothing).
    fn is_loaded(&self, spec: &LoadSpec) -> bool {
        self.loaded.as_ref().is_some_and(|l| l.spec.as_ref() == Some(spec))
    }

    /// Start `job` on an idle lane (or answer it at once when it cannot run); the job back
    /// when every lane is busy.
    fn dispatch(&mut self, job: Box<GenerateJob>) -> std::result::Result<(), Box<GenerateJob>> {
        if let Err(error) = self.check_models(&job.request) {
            let GenerateJob { id, request, events, cancel, _slot: slot } = *job;
            let sink = ChannelSink::new(&events, id, &request, &cancel, None);
            drop(slot);
            sink.deliver_last(ReplyEvent::Failed { error: ErrorInfo::from(error) });
            return Ok(());
        }
        let loaded = self.loaded.as_mut().expect("checked by check_models");
        let Some(index) = loaded.lane_for(&job.request.prompt) else { return Err(job) };
        let mut lane = loaded.lanes[index].take().expect("an idle lane");
        self.clock += 1;
        lane.used = self.clock;
        if index > 0 {
            if let Some(home) = loaded.home_ref() {
                lane.session.share_history(home);
            }
        }
        let shared = self.shared.clone();
        let returns = self.returns.0.clone();
        let step = loaded.step.clone();
        self.shared.running.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new().name(format!("specula-reply-{index}")).spawn(move || {
            let remember = serve(&mut lane, *job, &shared, step);
            let _ = returns.send(Box::new(Returned { index, lane, remember }));
        });
        if let Err(e) = spawned {
            self.shared.running.fetch_sub(1, Ordering::SeqCst);
            // The lane went with the closure: it is gone, and with it this reply.
            tracing::error!("a reply's thread could not start: {e}");
        }
        Ok(())
    }

    /// A lane back from its reply: home again, what the reply leaves remembered, and with
    /// nothing waiting, what it holds written to the disk cache.
    fn home_again(&mut self, returned: Box<Returned>, nothing_waits: bool) {
        let Returned { index, lane, remember } = *returned;
        if let Some((request, tokens, text)) = remember {
            self.remember_chat(&request, tokens, text);
        }
        let Some(loaded) = self.loaded.as_mut() else { return };
        let Some(place) = loaded.lanes.get_mut(index) else { return };
        let lane = place.insert(lane);
        if nothing_waits && self.queue.is_empty() {
            persist(&mut lane.session);
        }
        self.remember_pending();
    }

    /// Hand what is to be remembered to lane 0, when it is home.
    fn remember_pending(&mut self) {
        let Some(home) = self.loaded.as_mut().and_then(Loaded::home) else { return };
        for item in self.to_remember.drain(..) {
            match item {
                Remembering::Text(text) => remember_text(home, &text),
                Remembering::Tokens(tokens) => home.remember(&tokens),
            }
        }
    }

    /// Write what is loaded into the shared health; `error` is the last load's failure.
    fn publish(&self, error: Option<ErrorInfo>) -> Health {
        let loaded = self.loaded.as_ref();
        let state = match (loaded, &error) {
            (Some(_), _) => EngineState::Ready,
            (None, Some(_)) => EngineState::Failed,
            (None, None) => EngineState::Empty,
        };
        let config = &self.shared.config;
        let mut snapshot = None;
        self.shared.update_health(|h| {
            h.state = state;
            h.error = error;
            h.target = loaded.map(|l| LoadedModelInfo {
                path: l.spec.as_ref().map(|s| s.target.clone()),
                info: l.home_ref().map(|s| s.target.info.clone()).expect("published with every lane home"),
            });
            h.draft = loaded.and_then(|l| {
                let info = l.home_ref()?.draft_info()?.clone();
                Some(LoadedModelInfo { path: l.spec.as_ref().and_then(|s| s.draft.clone()), info })
            });
            h.device = loaded.map(|l| device::describe(&l.device).to_string());
            h.default_drafter = config.default_drafter.unwrap_or_else(|| {
                loaded.and_then(Loaded::home_ref).map_or(DrafterKind::None, Session::default_drafter)
            });
            snapshot = Some(h.clone());
        });
        snapshot.unwrap_or_else(|| Health::new(config))
    }

    /// Bring the loaded models in line with `spec`; a failure (a panic included) keeps what
    /// was loaded.
    fn load(&mut self, spec: &LoadSpec) -> std::result::Result<(), ErrorInfo> {
        match catch_unwind(AssertUnwindSafe(|| self.load_unguarded(spec))) {
            Ok(result) => result.map_err(ErrorInfo::from),
            Err(panic) => {
                let what = format!("loading {} panicked: {}", spec.target.display(), panic_message(&panic));
                tracing::error!("{what}");
                Err(ErrorInfo::from(Error::JobPanicked(what)))
            }
        }
    }

    fn load_unguarded(&mut self, spec: &LoadSpec) -> Result<()> {
        let same_target = self.loaded.as_ref().and_then(|l| l.spec.as_ref()).is_some_and(|s| {
            s.target == spec.target
                && s.context == spec.context
                && s.kv_format == spec.kv_format
                && s.device == spec.device
        });
        if !same_target {
            self.shared.update_health(|h| h.state = EngineState::Loading);
            let device = device::select(&spec.device)?;
            tracing::info!("loading target {}", spec.target.display());
            let mut session = Session::load_with(&spec.target, &device, spec.context, spec.kv_format)?;
            session.set_prompt_cache(spec.prompt_cache.unwrap_or_else(|| prompt_cache_bytes(&self.shared.config)));
            session.set_disk_cache(self.shared.config.disk_cache.clone());
            self.remembered.fill(&mut session);
            self.to_remember.clear();
            let spec = LoadSpec { draft: None, draft_vocab: None, ..spec.clone() };
            let lanes = vec![Some(Lane { session, last: None, used: 0 })];
            self.loaded = Some(Loaded { lanes, spec: Some(spec), device, step: None });
        }
        let parallel = self.shared.config.parallel;
        let Some(loaded) = self.loaded.as_mut() else { return Err(Error::NoModel("no target model".into())) };
        // Lanes are made again from lane 0 below, whatever changes: they share its weights.
        loaded.lanes.truncate(1);
        let result = change_models(loaded, spec, &self.shared);
        loaded.make_lanes(parallel);
        *self.shared.step.lock().unwrap_or_else(|e| e.into_inner()) = loaded.step.clone();
        result
    }
}

/// Bring lane 0's models in line with `spec`, its target already the one asked for.
fn change_models(loaded: &mut Loaded, spec: &LoadSpec, shared: &Shared) -> Result<()> {
    let config = &shared.config;
    {
        let device = loaded.device.clone();
        let Some(session) = loaded.lanes.first_mut().and_then(Option::as_mut).map(|l| &mut l.session) else {
            return Err(Error::NoModel("no target model".into()));
        };
        // Shares hold the weights no more: the draft's output layer may change.
        session.set_passes(None);
        let loaded_spec =
            loaded.spec.get_or_insert_with(|| LoadSpec { draft: None, draft_vocab: None, ..spec.clone() });
        if loaded_spec.prompt_cache != spec.prompt_cache {
            // The default is read once, at a change: free memory moves with every reply.
            session.set_prompt_cache(spec.prompt_cache.unwrap_or_else(|| prompt_cache_bytes(config)));
            loaded_spec.prompt_cache = spec.prompt_cache;
        }
        if loaded_spec.draft == spec.draft {
            if loaded_spec.draft_vocab != spec.draft_vocab {
                session.set_draft_vocab(spec.draft_vocab)?;
                loaded_spec.draft_vocab = spec.draft_vocab;
            }
            return Ok(());
        }
        match &spec.draft {
            Some(path) => {
                shared.update_health(|h| h.state = EngineState::Loading);
                tracing::info!("loading draft {}", path.display());
                // A draft that fails to load or pair leaves the one before in place.
                session.load_draft(path, &device)?;
                session.set_draft_vocab(spec.draft_vocab)?;
            }
            None => session.clear_draft(),
        }
        loaded_spec.draft = spec.draft.clone();
        loaded_spec.draft_vocab = spec.draft_vocab;
        Ok(())
    }
}

impl Worker {
    /// With nothing waiting, write what every lane holds to the disk cache (a chat reopened
    /// after a restart resumes there).
    fn persist_all(&mut self) {
        for lane in self.loaded.iter_mut().flat_map(|l| l.lanes.iter_mut().flatten()) {
            persist(&mut lane.session);
        }
    }

    /// Keep a chat's last user message and its reply (as decoded, no tokenizing again) for
    /// later replies' copies; as text too, for a target loaded later.
    fn remember_chat(&mut self, request: &Request, reply_tokens: Vec<u32>, reply_text: String) {
        let Prompt::Chat(messages) = &request.prompt else { return };
        if let Some(question) = messages.iter().rev().find(|m| m.role == crate::chat::Role::User) {
            self.to_remember.push(Remembering::Text(question.content.clone()));
            self.remembered.push(question.content.clone());
        }
        self.to_remember.push(Remembering::Tokens(reply_tokens));
        self.remembered.push(reply_text);
    }

    /// Whether the models `request` asks for are the ones loaded.
    fn check_models(&self, request: &Request) -> Result<()> {
        let last_error = || self.shared.health.lock().ok().and_then(|h| h.error.clone());
        let Some(loaded) = self.loaded.as_ref() else {
            let why = last_error().map_or("load a target model first".into(), |e| e.message);
            return Err(Error::NoModel(why));
        };
        if let Some(wanted) = &request.models {
            if loaded.spec.as_ref() != Some(wanted) {
                let why = last_error().map_or("the models asked for are not loaded".into(), |e| e.message);
                return Err(Error::NoModel(why));
            }
        }
        Ok(())
    }
}

/// News for the engine thread: a job from a handle, a lane home, or the handles all gone.
enum News {
    Job(Job),
    // Boxed: a lane (its session) is far larger than a job.
    Home(Box<Returned>),
    Closed,
}

/// Run `job` on `lane` (on the lane's own thread); what the reply leaves to remember. With
/// `step`, the lane's passes are taken with the other lanes' while it runs.
fn serve(
    lane: &mut Lane,
    job: GenerateJob,
    shared: &Shared,
    step: Option<Arc<Step>>,
) -> Option<(Request, Vec<u32>, String)> {
    let GenerateJob { id, request, events, cancel, _slot: slot } = job;
    // Counted as running until its place in the queue is free (`slot`).
    let slot = (slot, Running(&shared.running));
    let _member = step.as_ref().map(Step::join);
    let mut sink = ChannelSink::new(&events, id, &request, &cancel, step.clone());
    if sink.should_stop() {
        // Cancelled or abandoned while queued.
        drop(slot);
        sink.deliver_last(Generation::cancelled(0).into_done());
        return None;
    }
    lane.last = Some(request.prompt.clone());
    let attempt = match decoding_of(&request, &shared.config, &lane.session) {
        Err(error) => Ok(Err(error)),
        Ok(decoding) => {
            sink.decoding = Some(decoding);
            catch_unwind(AssertUnwindSafe(|| reply(&mut lane.session, &request, decoding, &mut sink)))
        }
    };
    let outcome = attempt.unwrap_or_else(|panic| Err(recover(&mut lane.session, &panic)));
    // The reply as decoded (no tokenizing again), and as text for a target loaded later.
    let remember = match (&outcome, shared.config.remember_chats) {
        (Ok(g), true) => Some((g.tokens.iter().map(|t| t.id).collect::<Vec<u32>>(), g.text.clone())),
        _ => None,
    };
    let event = match outcome {
        Ok(generation) => generation.into_done(),
        Err(error) => {
            if matches!(error, Error::InvalidLogits(_) | Error::Candle(_) | Error::JobPanicked(_)) {
                shared.update_health(|h| h.last_failure = Some(ErrorInfo::from(&error)));
            }
            ReplyEvent::Failed { error: ErrorInfo::from(error) }
        }
    };
    // The job's place is free before its reader hears the end, so a reader that then asks
    // for the health sees it gone.
    drop(slot);
    sink.deliver_last(event);
    // After the reader has the end: remembering is for the next reply, not this one's.
    remember.map(|(tokens, text)| (request, tokens, text))
}

/// A running reply, counted down when it ends however it ends.
struct Running<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Write what `session`'s models hold to the disk cache; a failure is logged and changes
/// nothing else.
fn persist(session: &mut Session) {
    match catch_unwind(AssertUnwindSafe(|| session.persist())) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("a prompt's cache could not be kept on disk: {e}"),
        Err(panic) => tracing::error!("keeping a prompt's cache on disk panicked: {}", panic_message(&panic)),
    }
}

/// After a panic mid-reply the caches may disagree with what they claim to hold; empty ones
/// are known to be right. The models themselves are intact (weights are read-only).
fn recover(session: &mut Session, panic: &Box<dyn std::any::Any + Send>) -> Error {
    let message = panic_message(panic);
    tracing::error!("a reply panicked: {message}; the caches are reset and the engine goes on");
    session.reset_caches();
    Error::JobPanicked(message)
}

/// The reply to one request on `session`, decoded with the request's own choices.
fn reply(session: &mut Session, request: &Request, decoding: Decoding, sink: &mut ChannelSink) -> Result<Generation> {
    let render = crate::chat::RenderOptions { kwargs: request.template_kwargs.clone(), ..Default::default() };
    let text_tokens;
    let to = match &request.prompt {
        Prompt::Chat(messages) => ReplyTo::Chat { messages, tools: &request.tools, render: &render },
        Prompt::Text(text) => {
            text_tokens = session.target.tokenizer.encode(text)?;
            ReplyTo::Tokens(&text_tokens)
        }
        Prompt::Tokens(ids) => ReplyTo::Tokens(ids),
    };
    session.reply(to, request.overflow, &request.options, decoding, sink)
}

/// The request's drafter and k, or the service's defaults for what it leaves open, with the
/// drafter as it runs on the models loaded (`auto` without a draft model is lookup).
fn decoding_of(request: &Request, config: &ServiceConfig, session: &Session) -> Result<Decoding> {
    let asked = request.drafter.or(config.default_drafter).unwrap_or_else(|| session.default_drafter());
    Ok(Decoding { drafter: session.resolve(asked)?, k: request.k.unwrap_or(config.default_k) })
}

/// The configured prompt cache, or the default for the memory free now (the models loaded).
fn prompt_cache_bytes(config: &ServiceConfig) -> usize {
    config.prompt_cache_bytes.unwrap_or_else(crate::session::default_prompt_cache_bytes)
}
