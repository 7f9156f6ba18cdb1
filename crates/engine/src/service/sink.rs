//! The sink each job decodes into: events onto the ticket's bounded channel, with the
//! ticket's cancel flag, its deadline and a vanished or stalled reader all turned into
//! [`Flow::Stop`].

use super::{CancelHandle, ReplyEvent, Request, STALL_LIMIT};
use crate::decode::{Flow, StepEvent, TokenEvent, TokenSink};
use crate::session::Decoding;
use crate::step::Step;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a blocked send looks at the cancel flag and the deadline.
const POLL: Duration = Duration::from_millis(50);

pub(super) struct ChannelSink<'a> {
    pub events: &'a flume::Sender<ReplyEvent>,
    /// What `Started` says: the ticket's id, how the reply is decoded, its seed.
    pub request_id: u64,
    pub decoding: Option<Decoding>,
    pub seed: u64,
    pub cancel: &'a CancelHandle,
    pub deadline: Option<Instant>,
    /// The last prefill progress sent, so repeats are not.
    pub prefill_sent: Option<usize>,
    /// The step this reply's passes are taken in, left while the reader does not take events.
    pub step: Option<Arc<Step>>,
}

impl<'a> ChannelSink<'a> {
    pub fn new(
        events: &'a flume::Sender<ReplyEvent>,
        request_id: u64,
        request: &Request,
        cancel: &'a CancelHandle,
        step: Option<Arc<Step>>,
    ) -> Self {
        Self {
            events,
            request_id,
            decoding: None,
            seed: request.options.sampling.seed,
            cancel,
            deadline: request.deadline,
            prefill_sent: None,
            step,
        }
    }

    /// Whether the reply should stop: cancelled, past its deadline, or its reader gone.
    pub fn should_stop(&self) -> bool {
        self.cancel.is_cancelled()
            || self.deadline.is_some_and(|d| Instant::now() >= d)
            || self.events.is_disconnected()
    }

    /// Send `event`, waiting while the reader catches up (back-pressure), unless the reply is
    /// stopped meanwhile or the reader takes nothing for [`STALL_LIMIT`].
    fn deliver(&self, event: ReplyEvent) -> Flow {
        if self.should_stop() {
            return Flow::Stop;
        }
        match self.send_patiently(event, |sink| sink.should_stop()) {
            true => Flow::Continue,
            false => Flow::Stop,
        }
    }

    /// The last event of a job is delivered even when the job was cancelled (its reader wants
    /// to know how it ended), unless the reader is gone or stalled.
    pub fn deliver_last(&self, event: ReplyEvent) {
        if !self.send_patiently(event, |_| false) {
            tracing::debug!("a reply's last event was not taken: its reader left");
        }
    }

    fn send_patiently(&self, event: ReplyEvent, give_up: impl Fn(&Self) -> bool) -> bool {
        let event = match self.events.try_send(event) {
            Ok(()) => return true,
            Err(flume::TrySendError::Disconnected(_)) => return false,
            Err(flume::TrySendError::Full(event)) => event,
        };
        // A reader behind pauses this reply only: the others' passes do not wait for it.
        match &self.step {
            Some(step) => step.away(|| self.wait_to_send(event, give_up)),
            None => self.wait_to_send(event, give_up),
        }
    }

    fn wait_to_send(&self, mut event: ReplyEvent, give_up: impl Fn(&Self) -> bool) -> bool {
        let started = Instant::now();
        loop {
            match self.events.send_timeout(event, POLL) {
                Ok(()) => return true,
                Err(flume::SendTimeoutError::Disconnected(_)) => return false,
                Err(flume::SendTimeoutError::Timeout(back)) => event = back,
            }
            if give_up(self) || started.elapsed() >= STALL_LIMIT {
                return false;
            }
        }
    }
}

impl TokenSink for ChannelSink<'_> {
    fn on_start(&mut self, prompt_tokens: usize) -> Flow {
        let (request_id, decoding, seed) = (self.request_id, self.decoding, self.seed);
        self.deliver(ReplyEvent::Started { request_id, prompt_tokens: Some(prompt_tokens), decoding, seed })
    }

    fn on_prefill(&mut self, done: usize, total: usize) -> Flow {
        if self.prefill_sent == Some(done) {
            return if self.should_stop() { Flow::Stop } else { Flow::Continue };
        }
        self.prefill_sent = Some(done);
        self.deliver(ReplyEvent::Prefill { done, total })
    }

    fn on_trim(&mut self, trim: &specula_protocol::Trim) -> Flow {
        self.deliver(ReplyEvent::Trimmed { trim: *trim })
    }

    fn on_reasoning(&mut self, reasoning: &specula_protocol::Reasoning) -> Flow {
        self.deliver(ReplyEvent::Reasoning { reasoning: *reasoning })
    }

    fn on_token(&mut self, token: &TokenEvent) -> Flow {
        self.deliver(ReplyEvent::Tokens { tokens: vec![token.clone()] })
    }

    fn on_step(&mut self, step: &StepEvent) -> Flow {
        self.deliver(ReplyEvent::Step { step: step.clone() })
    }
}
