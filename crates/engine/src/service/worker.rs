//! The engine thread: it owns the models and runs jobs in order, each behind `catch_unwind`
//! so that one failing job ends as an error and the next one runs.

use super::sink::ChannelSink;
use super::ReplyEvent;
use super::{EngineState, GenerateJob, Health, Job, LoadSpec, LoadedModelInfo, Prompt, Request, ServiceConfig, Shared};
use crate::decode::Generation;
use crate::device;
use crate::error::{Error, ErrorInfo, Result};
use crate::fitted::ReplyTo;
use crate::session::{Decoding, DrafterKind, Session};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The models as loaded and what they were loaded from, to reload only what changed.
struct Loaded {
    session: Session,
    /// `None` for a session handed in already loaded.
    spec: Option<LoadSpec>,
    device: candle_core::Device,
}

pub(super) struct Worker {
    loaded: Option<Loaded>,
    shared: Arc<Shared>,
    /// Texts remembered for the auto drafter, as text: a new target tokenizes them anew.
    remembered: Remembered,
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
            Loaded { session, spec: None, device }
        });
        let worker = Self { loaded, shared, remembered: Remembered::default() };
        worker.publish(None);
        worker
    }

    pub fn run(mut self, jobs: flume::Receiver<Job>) {
        for job in jobs.iter() {
            match job {
                Job::Load(spec, answer) => {
                    let result = self.load(&spec);
                    let health = self.publish(result.as_ref().err().cloned());
                    self.shared.loads.fetch_sub(1, Ordering::SeqCst);
                    let _ = answer.send(result.map(|()| health));
                }
                Job::Generate(job) => {
                    self.serve(*job);
                    if jobs.is_empty() {
                        self.persist();
                    }
                }
                Job::Settle(done) => {
                    self.persist();
                    let _ = done.send(());
                }
                Job::Remember(texts) => {
                    for text in texts {
                        if let Some(loaded) = &mut self.loaded {
                            remember_text(&mut loaded.session, &text);
                        }
                        self.remembered.push(text);
                    }
                }
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
                info: l.session.target.info.clone(),
            });
            h.draft = loaded.and_then(|l| {
                let info = l.session.draft_info()?.clone();
                Some(LoadedModelInfo { path: l.spec.as_ref().and_then(|s| s.draft.clone()), info })
            });
            h.device = loaded.map(|l| device::describe(&l.device).to_string());
            h.default_drafter = config
                .default_drafter
                .unwrap_or_else(|| loaded.map_or(DrafterKind::None, |l| l.session.default_drafter()));
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
            let spec = LoadSpec { draft: None, draft_vocab: None, ..spec.clone() };
            self.loaded = Some(Loaded { session, spec: Some(spec), device });
        }
        let Some(loaded) = self.loaded.as_mut() else { return Err(Error::NoModel("no target model".into())) };
        let loaded_spec =
            loaded.spec.get_or_insert_with(|| LoadSpec { draft: None, draft_vocab: None, ..spec.clone() });
        if loaded_spec.prompt_cache != spec.prompt_cache {
            // The default is read once, at a change: free memory moves with every reply.
            let config = &self.shared.config;
            loaded.session.set_prompt_cache(spec.prompt_cache.unwrap_or_else(|| prompt_cache_bytes(config)));
            loaded_spec.prompt_cache = spec.prompt_cache;
        }
        if loaded_spec.draft == spec.draft {
            if loaded_spec.draft_vocab != spec.draft_vocab {
                loaded.session.set_draft_vocab(spec.draft_vocab)?;
                loaded_spec.draft_vocab = spec.draft_vocab;
            }
            return Ok(());
        }
        match &spec.draft {
            Some(path) => {
                self.shared.update_health(|h| h.state = EngineState::Loading);
                tracing::info!("loading draft {}", path.display());
                // A draft that fails to load or pair leaves the one before in place.
                loaded.session.load_draft(path, &loaded.device)?;
                loaded.session.set_draft_vocab(spec.draft_vocab)?;
            }
            None => loaded.session.clear_draft(),
        }
        loaded_spec.draft = spec.draft.clone();
        loaded_spec.draft_vocab = spec.draft_vocab;
        Ok(())
    }

    fn serve(&mut self, job: GenerateJob) {
        let GenerateJob { id, request, events, cancel, _slot: slot } = job;
        let mut sink = ChannelSink {
            events: &events,
            request_id: id,
            decoding: None,
            seed: request.options.sampling.seed,
            cancel: &cancel,
            deadline: request.deadline,
            prefill_sent: None,
        };
        if sink.should_stop() {
            // Cancelled or abandoned while queued.
            drop(slot);
            sink.deliver_last(Generation::cancelled(0).into_done());
            return;
        }
        let shared = self.shared.clone();
        let attempt = match self.session_for(&request).and_then(|s| Ok((decoding_of(&request, &shared.config, s)?, s)))
        {
            Err(error) => Ok(Err(error)),
            Ok((decoding, session)) => {
                sink.decoding = Some(decoding);
                catch_unwind(AssertUnwindSafe(|| reply(session, &request, decoding, &mut sink)))
            }
        };
        let outcome = attempt.unwrap_or_else(|panic| Err(self.recover(&panic)));
        // The reply as decoded (no tokenizing again), and as text for a target loaded later.
        let remember = match (&outcome, shared.config.remember_chats) {
            (Ok(g), true) => Some((g.tokens.iter().map(|t| t.id).collect::<Vec<u32>>(), g.text.clone())),
            _ => None,
        };
        let event = match outcome {
            Ok(generation) => generation.into_done(),
            Err(error) => {
                if matches!(error, Error::InvalidLogits(_) | Error::Candle(_) | Error::JobPanicked(_)) {
                    self.shared.update_health(|h| h.last_failure = Some(ErrorInfo::from(&error)));
                }
                ReplyEvent::Failed { error: ErrorInfo::from(error) }
            }
        };
        // The job's place is free before its reader hears the end, so a reader that then asks
        // for the health sees it gone.
        drop(slot);
        sink.deliver_last(event);
        // After the reader has the end: remembering is for the next reply, not this one's.
        if let Some((reply_tokens, reply_text)) = remember {
            self.remember_chat(&request, &reply_tokens, reply_text);
        }
    }

    /// With nothing waiting, write what the models hold to the disk cache (a chat reopened
    /// after a restart resumes there); a failure is logged and changes nothing else.
    fn persist(&mut self) {
        if let Some(loaded) = &mut self.loaded {
            let result = catch_unwind(AssertUnwindSafe(|| loaded.session.persist()));
            match result {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("a prompt's cache could not be kept on disk: {e}"),
                Err(panic) => tracing::error!("keeping a prompt's cache on disk panicked: {}", panic_message(&panic)),
            }
        }
    }

    /// Keep a chat's last user message and its reply (as decoded, no tokenizing again) for
    /// later replies' copies; as text too, for a target loaded later.
    fn remember_chat(&mut self, request: &Request, reply_tokens: &[u32], reply_text: String) {
        let Prompt::Chat(messages) = &request.prompt else { return };
        let Some(loaded) = &mut self.loaded else { return };
        if let Some(question) = messages.iter().rev().find(|m| m.role == crate::chat::Role::User) {
            remember_text(&mut loaded.session, &question.content);
            self.remembered.push(question.content.clone());
        }
        loaded.session.remember(reply_tokens);
        self.remembered.push(reply_text);
    }

    /// The loaded session, if it is the one `request` asks for.
    fn session_for(&mut self, request: &Request) -> Result<&mut Session> {
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
        Ok(&mut self.loaded.as_mut().expect("checked above").session)
    }

    /// After a panic mid-reply the caches may disagree with what they claim to hold; empty
    /// ones are known to be right. The models themselves are intact (weights are read-only).
    fn recover(&mut self, panic: &Box<dyn std::any::Any + Send>) -> Error {
        let message = panic_message(panic);
        tracing::error!("a reply panicked: {message}; the caches are reset and the engine goes on");
        if let Some(loaded) = &mut self.loaded {
            loaded.session.reset_caches();
        }
        Error::JobPanicked(message)
    }
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

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (_, Some(s)) => s.clone(),
        _ => "a panic without a message".into(),
    }
}
