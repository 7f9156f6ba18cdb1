//! Rendering a chat template in a child process whose memory and time are limited.
//!
//! A template is a program that comes with the model file. minijinja bounds its steps (fuel)
//! and we bound its output, but nothing bounds the strings it builds on the way: three lines
//! of Jinja (`{% set ns.s = ns.s ~ ns.s %}` in a loop) double a string forty times, and an
//! allocation the system refuses aborts the process. So a binary that opts in (it names
//! [`TEMPLATE_RENDER`] to `specula_isolate::start`) renders each prompt in a child of itself:
//! a template that exhausts the limit ends the child, and the parent answers with an error.
//! Elsewhere, and when the child cannot start, the render runs in process with fuel and the
//! output cap.

use super::ChatTemplate;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use specula_isolate::{Failure, Worker};
use std::time::Duration;

/// The memory one render may use beyond what the child starts with.
pub const RENDER_MEMORY: u64 = 1 << 30;
/// How long one render may take: fuel ends a loop well before this; it is for single steps on
/// huge strings.
const RENDER_TIME: Duration = Duration::from_secs(10);

/// Chat templates rendered in a child: name it to `specula_isolate::start` in `main`.
pub static TEMPLATE_RENDER: Worker = Worker {
    name: "chat-template",
    memory: RENDER_MEMORY,
    time: RENDER_TIME,
    max_output: super::MAX_PROMPT_BYTES,
    work: render_job,
};

/// Everything a render reads: the template and its context.
#[derive(Serialize, Deserialize)]
pub(super) struct Job {
    pub source: String,
    pub bos: String,
    pub eos: String,
    pub context: serde_json::Value,
    pub now: Option<chrono::NaiveDateTime>,
}

/// In the child: the job's prompt, or the template's own error.
fn render_job(input: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let job: Job = serde_json::from_slice(input).map_err(|e| format!("reading the job: {e}"))?;
    ChatTemplate::new(job.source, Some(&job.bos), Some(&job.eos), true)
        .and_then(|template| template.render_here(&job.context, job.now))
        .map(String::into_bytes)
        .map_err(|e| match e {
            Error::Template(message) => message,
            other => other.to_string(),
        })
}

/// The job rendered in a child, when this process opted in and the child starts; `None` to
/// render here.
pub(super) fn render(job: impl FnOnce() -> Job) -> Option<Result<String>> {
    if !specula_isolate::isolated() {
        return None;
    }
    let input = match serde_json::to_vec(&job()) {
        Ok(input) => input,
        Err(e) => return Some(Err(Error::Template(e.to_string()))),
    };
    let rendered = specula_isolate::run(&TEMPLATE_RENDER, || input)?;
    Some(match rendered {
        Ok(out) => String::from_utf8(out).map_err(|_| Error::Template("the template wrote invalid UTF-8".into())),
        Err(Failure::Failed(message)) => Err(Error::Template(message)),
        Err(Failure::OutOfMemory) => Err(Error::Template(format!(
            "the chat template used more than {} MiB of memory and was stopped",
            RENDER_MEMORY >> 20
        ))),
        Err(Failure::TimedOut) => {
            Err(Error::Template(format!("the chat template ran for more than {} s", RENDER_TIME.as_secs())))
        }
        Err(Failure::TooLarge) => {
            Err(Error::Template(format!("the chat template wrote more than {} MiB", super::MAX_PROMPT_BYTES >> 20)))
        }
        Err(Failure::Crashed { status, said }) => {
            Err(Error::Template(format!("the template child failed ({status}): {said}")))
        }
        // A template is rendered under fuel and an output cap in process too: a chat that
        // cannot start a child still works.
        Err(Failure::Unavailable(why)) => {
            tracing::warn!("the chat template is rendered in process: {why}");
            return None;
        }
    })
}
