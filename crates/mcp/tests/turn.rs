//! The call -> approval -> result -> continue loop, with a scripted model (each reply a text
//! given in advance) and a well-behaved server (tests/servers/hostile.py well): what the
//! model reads back, the bound on calls, and what Deny and Always do.

use serde_json::Value;
use specula_mcp::{
    reply_with_tools, Approvals, Endpoint, Hooks, Limits, PendingCall, ServerSpec, ToolDecision, ToolOutcome, Toolbox,
};
use specula_protocol::{Message, Role};
use std::path::PathBuf;

fn toolbox(max_calls: usize) -> Toolbox {
    toolbox_of("well", max_calls)
}

/// The hostile server in `mode` (tests/servers/hostile.py), its one tool `echo`.
fn toolbox_of(mode: &str, max_calls: usize) -> Toolbox {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/hostile.py");
    let spec = ServerSpec {
        call_limit: None,
        name: mode.into(),
        endpoint: Endpoint::Stdio {
            command: "python3".into(),
            args: vec![script.display().to_string(), mode.into()],
            env: Default::default(),
            cwd: None,
        },
    };
    Toolbox::start(vec![spec], Limits { max_calls_per_reply: max_calls, ..Limits::default() }).unwrap()
}

fn echo_call(text: &str) -> String {
    format!("<tool_call>\n{{\"name\": \"echo\", \"arguments\": {{\"text\": \"{text}\"}}}}\n</tool_call>")
}

struct Scripted {
    answers: Vec<ToolDecision>,
    asked: usize,
    done: Vec<ToolOutcome>,
    /// Stop the reply once a call is done.
    stop_after_a_call: bool,
}

impl Hooks for Scripted {
    fn decide(&mut self, _call: &PendingCall) -> ToolDecision {
        self.asked += 1;
        self.answers.get(self.asked - 1).copied().unwrap_or(ToolDecision::Deny)
    }
    fn on_done(&mut self, _call: &PendingCall, outcome: &ToolOutcome) {
        self.done.push(outcome.clone());
    }
    fn cancelled(&self) -> bool {
        self.stop_after_a_call && !self.done.is_empty()
    }
}

/// Run one reply whose model says `replies` in turn; the tools each reply was offered.
fn run(
    toolbox: &Toolbox,
    approvals: &mut Approvals,
    hooks: &mut Scripted,
    replies: &[String],
) -> (Vec<Message>, Vec<usize>, String) {
    let mut messages = vec![Message::user("go")];
    let mut offered_counts = Vec::new();
    let mut next = replies.iter();
    let answer = reply_with_tools(
        toolbox,
        toolbox.offered(),
        approvals,
        &mut messages,
        hooks,
        |_messages, offered: &[Value]| {
            offered_counts.push(offered.len());
            Ok(next.next().cloned().unwrap_or_else(|| "done".into()))
        },
        |text: &String| text.as_str(),
    )
    .unwrap();
    (messages, offered_counts, answer)
}

#[test]
fn a_result_goes_back_to_the_model_as_a_tool_turn_and_the_reply_goes_on() {
    let toolbox = toolbox(8);
    let mut hooks = Scripted { answers: vec![ToolDecision::Once], asked: 0, done: vec![], stop_after_a_call: false };
    let replies = [format!("Let me echo.\n{}", echo_call("hello")), "It said hello.".into()];
    let (messages, offered, answer) = run(&toolbox, &mut Approvals::default(), &mut hooks, &replies);
    assert_eq!(answer, "It said hello.");
    assert_eq!(offered, [1, 1]);
    assert_eq!(messages.len(), 3);
    assert_eq!((&messages[1].role, messages[1].content.as_str()), (&Role::Assistant, "Let me echo."));
    assert_eq!(messages[1].tool_calls[0].function.arguments["text"], "hello");
    assert_eq!((&messages[2].role, messages[2].content.as_str()), (&Role::Tool, "hello"));
    assert_eq!(messages[2].tool_call_id.as_deref(), Some(messages[1].tool_calls[0].id.as_str()));
}

#[test]
fn calls_past_the_limit_are_not_run_and_the_model_then_answers() {
    let toolbox = toolbox(2);
    let mut hooks = Scripted { answers: vec![ToolDecision::Always], asked: 0, done: vec![], stop_after_a_call: false };
    let three: String = (0..3).map(|i| echo_call(&format!("n{i}"))).collect();
    let replies = [three, echo_call("n3"), "answer".into()];
    let (messages, offered, answer) = run(&toolbox, &mut Approvals::default(), &mut hooks, &replies);
    // Always: asked once, then run without asking; the third call is past the limit.
    assert_eq!(hooks.asked, 1);
    assert!(matches!(&hooks.done[1], ToolOutcome::Ran { text, .. } if text == "n1"));
    // Each call of the batch has its own id, and its result answers that id.
    let ids: Vec<&str> = messages[1].tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_0_echo", "call_1_echo", "call_2_echo"]);
    assert_eq!(messages[3].tool_call_id.as_deref(), Some("call_1_echo"));
    assert!(matches!(&hooks.done[2], ToolOutcome::Skipped { reason } if reason.contains("limit of 2 tool calls")));
    assert!(messages.last().unwrap().content.starts_with("Not run: this reply made its limit"));
    // Every round is offered the same tools (the prompt's head, and its cache, stay as they
    // were); past the limit no call is read: what the model writes is the answer.
    assert_eq!(offered, [1, 1]);
    assert_eq!(answer, echo_call("n3"));
}

#[test]
fn a_call_repeated_with_the_same_arguments_is_not_run_again_and_its_tool_is_withdrawn() {
    let toolbox = toolbox(8);
    let mut hooks = Scripted { answers: vec![ToolDecision::Always], asked: 0, done: vec![], stop_after_a_call: false };
    let replies = [echo_call("x"), echo_call("x"), "answer".into()];
    let (messages, offered, answer) = run(&toolbox, &mut Approvals::default(), &mut hooks, &replies);
    assert!(matches!(&hooks.done[1], ToolOutcome::Skipped { reason } if reason.contains("already ran")));
    assert!(messages[4].content.contains("its result is above"), "{messages:?}");
    assert_eq!((offered.as_slice(), answer.as_str()), ([1, 1, 1].as_slice(), "answer"));
}

#[test]
fn a_denied_tool_is_withdrawn_for_the_rest_of_the_reply_and_the_model_is_told() {
    let toolbox = toolbox(8);
    let mut hooks = Scripted { answers: vec![ToolDecision::Deny], asked: 0, done: vec![], stop_after_a_call: false };
    let replies = [echo_call("x"), echo_call("x")];
    let (messages, offered, answer) = run(&toolbox, &mut Approvals::default(), &mut hooks, &replies);
    assert_eq!(hooks.done, [ToolOutcome::Denied]);
    assert_eq!(messages[2].content, "The user denied this call; it did not run.");
    // The tool is still in the prompt, but its calls are no longer read: the second call's
    // text is the answer.
    assert_eq!(offered, [1, 1]);
    assert_eq!(answer, echo_call("x"));
}

#[test]
fn a_stopped_reply_runs_no_more_calls_and_asks_the_model_for_nothing_more() {
    let toolbox = toolbox(8);
    let mut hooks = Scripted { answers: vec![ToolDecision::Always], asked: 0, done: vec![], stop_after_a_call: true };
    let mut messages = vec![Message::user("go")];
    let mut replies = 0;
    let two = format!("{}{}", echo_call("a"), echo_call("b"));
    let result = reply_with_tools(
        &toolbox,
        toolbox.offered(),
        &mut Approvals::default(),
        &mut messages,
        &mut hooks,
        |_messages, _offered: &[Value]| {
            replies += 1;
            Ok(two.clone())
        },
        |text: &String| text.as_str(),
    );
    assert_eq!(result.unwrap_err(), "cancelled");
    assert_eq!(replies, 1);
    assert!(matches!(&hooks.done[1], ToolOutcome::Skipped { reason } if reason == "the reply was stopped"));
}

#[test]
fn a_failed_tool_is_withdrawn_for_the_rest_of_the_reply_with_the_reason_told() {
    let toolbox = toolbox_of("exit", 8);
    let mut hooks = Scripted { answers: vec![ToolDecision::Always], asked: 0, done: vec![], stop_after_a_call: false };
    let replies = [echo_call("x"), echo_call("y")];
    let (messages, offered, answer) = run(&toolbox, &mut Approvals::default(), &mut hooks, &replies);
    assert!(matches!(&hooks.done[..], [ToolOutcome::Failed { .. }]), "{:?}", hooks.done);
    assert!(messages[2].content.starts_with("The call failed: the server exited"), "{}", messages[2].content);
    assert!(!messages[2].content.contains("Transport closed"), "the SDK's words add nothing: {}", messages[2].content);
    assert_eq!(offered, [1, 1]);
    assert_eq!(answer, echo_call("y"));
}
