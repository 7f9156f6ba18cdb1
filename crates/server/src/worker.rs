//! One engine thread owns the models and serves jobs in order; handlers talk to it through a
//! channel and get events back. A job whose client went away is cancelled at the next token.

use specula_engine::speculative::KSetting;
use specula_engine::{
    DrafterKind, Error, Flow, GenerateOptions, Generation, Message, Session, StepEvent, TokenEvent, TokenSink,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use tokio::sync::mpsc::UnboundedSender;

pub enum Prompt {
    Chat(Vec<Message>),
    Raw(String),
}

pub struct Job {
    pub prompt: Prompt,
    pub options: GenerateOptions,
    pub k: Option<KSetting>,
    pub drafter: Option<DrafterKind>,
    pub events: UnboundedSender<Event>,
}

pub enum Event {
    /// The prompt fits and generation begins.
    Started {
        prompt_tokens: usize,
    },
    Token(TokenEvent),
    Step(StepEvent),
    Done(Generation),
    Failed(Error),
}

/// The handlers' side of the engine thread.
#[derive(Clone)]
pub struct Worker {
    jobs: mpsc::Sender<(Job, Ticket)>,
    /// Jobs queued or running.
    pending: Arc<AtomicUsize>,
}

/// Released when a job leaves the queue, however it ends.
pub struct Ticket(Arc<AtomicUsize>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Worker {
    pub fn spawn(session: Session) -> Self {
        let (jobs, rx) = mpsc::channel::<(Job, Ticket)>();
        let pending = Arc::new(AtomicUsize::new(0));
        std::thread::Builder::new()
            .name("specula-engine".into())
            .spawn(move || run(session, rx))
            .expect("spawning the engine thread");
        Self { jobs, pending }
    }

    /// Queue a job unless `limit` jobs are already waiting or running; false when refused.
    pub fn submit(&self, job: Job, limit: usize) -> bool {
        // The ticket travels with the job and gives its place back when the job is done.
        let ticket = Ticket(self.pending.clone());
        if self.pending.fetch_add(1, Ordering::SeqCst) >= limit {
            return false; // dropping the ticket undoes the increment
        }
        self.jobs.send((job, ticket)).is_ok()
    }

    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::SeqCst)
    }
}

fn run(mut session: Session, jobs: mpsc::Receiver<(Job, Ticket)>) {
    for (job, _ticket) in jobs {
        if job.events.is_closed() {
            continue; // the client left while queued
        }
        let result = serve(&mut session, &job);
        let event = match result {
            Ok(generation) => Event::Done(generation),
            Err(error) => Event::Failed(error),
        };
        let _ = job.events.send(event);
    }
}

fn serve(session: &mut Session, job: &Job) -> Result<Generation, Error> {
    let prompt = match &job.prompt {
        Prompt::Chat(messages) => session.chat_prompt(messages)?,
        Prompt::Raw(text) => session.target.tokenizer.encode(text)?,
    };
    specula_engine::generate::check_context(prompt.len(), session.target.model.capacity())?;
    let _ = job.events.send(Event::Started { prompt_tokens: prompt.len() });
    // Per-request overrides last for this job only.
    let (k, drafter) = (session.speculative.k, session.drafter());
    if let Some(k) = job.k {
        session.speculative.k = k;
    }
    if let Some(kind) = job.drafter {
        session.set_drafter(kind)?;
    }
    let mut sink = ChannelSink(&job.events);
    let result = session.generate(&prompt, &job.options, &mut sink);
    session.speculative.k = k;
    let _ = session.set_drafter(drafter);
    result
}

struct ChannelSink<'a>(&'a UnboundedSender<Event>);

impl TokenSink for ChannelSink<'_> {
    fn on_token(&mut self, token: &TokenEvent) -> Flow {
        match self.0.send(Event::Token(token.clone())) {
            Ok(()) => Flow::Continue,
            Err(_) => Flow::Stop, // the client disconnected
        }
    }

    fn on_step(&mut self, step: &StepEvent) -> Flow {
        match self.0.send(Event::Step(step.clone())) {
            Ok(()) => Flow::Continue,
            Err(_) => Flow::Stop,
        }
    }
}
