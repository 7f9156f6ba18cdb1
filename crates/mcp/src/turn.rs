//! One reply with tools: the model replies; each tool call it writes is approved (or not), run
//! and answered with its result; the model replies again with the results in its prompt; and
//! so on until it answers without a call. Bounded: at most [`Limits::max_calls_per_reply`]
//! calls, after which the model is asked to answer with no tools offered; a call the user
//! denied, one that failed, or one repeated with the same arguments, withdraws its tool for
//! the rest of the reply (small models otherwise loop on it).
//!
//! [`Limits::max_calls_per_reply`]: crate::Limits::max_calls_per_reply

use crate::toolbox::Toolbox;
use serde::Serialize;
use serde_json::Value;
use specula_protocol::tool_calls;
use specula_protocol::{FunctionCall, Message, Role, ToolCall, ToolDecision, ToolOutcome};
use std::collections::HashSet;

/// A call the model wrote, before it runs.
#[derive(Debug, Clone, Serialize)]
pub struct PendingCall {
    pub id: String,
    pub server: String,
    pub tool: String,
    pub arguments: Value,
}

/// How the loop reaches the person and the reply: approvals, what to show, cancellation.
pub trait Hooks {
    fn decide(&mut self, call: &PendingCall) -> ToolDecision;
    fn on_start(&mut self, _call: &PendingCall) {}
    fn on_done(&mut self, _call: &PendingCall, _outcome: &ToolOutcome) {}
    fn cancelled(&self) -> bool {
        false
    }
}

/// The tools a chat approved for good ("Always for this tool"), kept across its replies.
#[derive(Debug, Default, Clone)]
pub struct Approvals(HashSet<String>);

/// Reply to `messages` with the toolbox's tools `offered` (its [`Toolbox::offered`] when the
/// reply began: servers still starting may add tools meanwhile, which wait for the next
/// reply). `reply` makes one model reply to the messages with the tools given (OpenAI
/// entries) and `text` reads its text. The calls and
/// their results are appended to `messages`; the last reply, which calls nothing that may
/// still run, is returned (the caller appends it). Every round offers the same tools: they are
/// rendered at the top of the prompt, and a list that changed would make the engine read the
/// whole chat again; a tool withdrawn (or every tool, once the calls are spent) is withdrawn
/// by no longer reading its calls.
pub fn reply_with_tools<R>(
    toolbox: &Toolbox,
    offered: Vec<Value>,
    approvals: &mut Approvals,
    messages: &mut Vec<Message>,
    hooks: &mut dyn Hooks,
    mut reply: impl FnMut(&[Message], &[Value]) -> Result<R, String>,
    text: impl Fn(&R) -> &str,
) -> Result<R, String> {
    let max_calls = toolbox.limits().max_calls_per_reply;
    // Tools whose calls are no longer read in this reply: denied, failed, or called again with
    // the same arguments.
    let mut withdrawn: HashSet<String> = HashSet::new();
    let mut answered: HashSet<(String, String)> = HashSet::new();
    let mut made = 0;
    loop {
        if hooks.cancelled() {
            return Err("cancelled".into());
        }
        let answer = reply(messages, &offered)?;
        let names: Vec<&str> = match made >= max_calls {
            true => Vec::new(),
            false => offered
                .iter()
                .filter_map(|t| t.pointer("/function/name")?.as_str())
                .filter(|name| !withdrawn.contains(*name))
                .collect(),
        };
        let parsed = tool_calls::parse(text(&answer), &names);
        if parsed.calls.is_empty() || hooks.cancelled() {
            return Ok(answer);
        }
        let first = made;
        let pending: Vec<PendingCall> =
            parsed.calls.iter().enumerate().map(|(i, call)| pending_call(toolbox, call, first + i)).collect();
        made += pending.len();
        messages.push(assistant_calls(parsed.content, &pending));
        for (index, call) in pending.iter().enumerate() {
            let repeated = !answered.insert((call.tool.clone(), call.arguments.to_string()));
            let outcome = if first + index >= max_calls {
                ToolOutcome::Skipped { reason: format!("this reply made its limit of {max_calls} tool calls") }
            } else if hooks.cancelled() {
                ToolOutcome::Skipped { reason: "the reply was stopped".into() }
            } else if withdrawn.contains(&call.tool) {
                ToolOutcome::Skipped { reason: "this tool was denied or repeated earlier in this reply".into() }
            } else if repeated {
                ToolOutcome::Skipped { reason: "the same call already ran in this reply; its result is above".into() }
            } else {
                run_call(toolbox, approvals, hooks, call)
            };
            // A failed tool fails again within the reply (its server is restarted for the next).
            if matches!(outcome, ToolOutcome::Denied | ToolOutcome::Failed { .. }) || repeated {
                withdrawn.insert(call.tool.clone());
            }
            hooks.on_done(call, &outcome);
            let mut result = Message::new(Role::Tool, outcome.for_model());
            result.tool_call_id = Some(call.id.clone());
            messages.push(result);
        }
    }
}

/// The call, numbered `number` in this reply (its id is unique in the reply).
fn pending_call(toolbox: &Toolbox, call: &tool_calls::Call, number: usize) -> PendingCall {
    let server = toolbox.find(&call.name).map(|t| t.server.clone()).unwrap_or_default();
    let arguments = serde_json::from_str(&call.arguments).unwrap_or(Value::String(call.arguments.clone()));
    PendingCall { id: format!("call_{number}_{}", call.name), server, tool: call.name.clone(), arguments }
}

fn run_call(toolbox: &Toolbox, approvals: &mut Approvals, hooks: &mut dyn Hooks, call: &PendingCall) -> ToolOutcome {
    if !call.arguments.is_object() {
        return ToolOutcome::Failed { reason: format!("the arguments are not a JSON object: {}", call.arguments) };
    }
    let decision = match approvals.0.contains(&call.tool) {
        true => ToolDecision::Once,
        false => hooks.decide(call),
    };
    match decision {
        ToolDecision::Deny => return ToolOutcome::Denied,
        ToolDecision::Always => {
            approvals.0.insert(call.tool.clone());
        }
        ToolDecision::Once => {}
    }
    hooks.on_start(call);
    let cancelled = || hooks.cancelled();
    match toolbox.call(&call.tool, call.arguments.clone(), &cancelled) {
        Ok(result) => {
            ToolOutcome::Ran { text: result.text, is_error: result.is_error, cut_from: result.cut_from, ms: result.ms }
        }
        Err(reason) => ToolOutcome::Failed { reason },
    }
}

fn assistant_calls(content: String, calls: &[PendingCall]) -> Message {
    let mut message = Message::assistant(content);
    message.tool_calls = calls
        .iter()
        .map(|call| ToolCall {
            id: call.id.clone(),
            kind: "function".into(),
            function: FunctionCall { name: call.tool.clone(), arguments: call.arguments.clone() },
        })
        .collect();
    message
}
