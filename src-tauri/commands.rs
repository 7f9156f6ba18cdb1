//! The commands the webview may call (each listed in src-tauri/capabilities). They are thin:
//! the history is in specula-store, decoding in the engine thread.

use crate::access::{blocking, with_store};
use crate::engine::{ChainStop, ReplyOut, Stream};
use crate::error::{CommandResult, ErrorCode, ErrorInfo};
use crate::settings::{models_dir, AppSettings, EngineSettings};
use crate::tools::ToolTurn;
use crate::AppState;
use specula_engine::protocol::{
    split_reasoning, split_tokens, EngineStatus, ModelEntry, ReplyEvent, ReplyStarted, ToolOutcome,
};
use specula_engine::service::{Request, Ticket};
use specula_engine::{check_draft_for, inspect, Message, Overflow, Role};
use specula_store::{Conversation, ConversationSummary, StoredMessage};
use std::path::{Path, PathBuf};
use tauri::ipc::Channel;
use tauri::State;

pub const SETTINGS_KEY: &str = "settings";
/// The model files the user added by path (`Vec<PathBuf>`).
pub const ADDED_MODELS_KEY: &str = "added_models";

#[tauri::command]
#[specta::specta]
pub fn engine_status(state: State<'_, AppState>) -> EngineStatus {
    state.engine.status()
}

/// What went wrong and was worked around (a history moved aside, settings reset), for the
/// window to say.
#[tauri::command]
#[specta::specta]
pub fn startup_notices(state: State<'_, AppState>) -> Vec<ErrorInfo> {
    state.notices.all()
}

/// The user closed the notice: the kept ones are not said again at the next start.
#[tauri::command]
#[specta::specta]
pub fn dismiss_notices(state: State<'_, AppState>) {
    state.notices.dismiss();
}

#[tauri::command]
#[specta::specta]
pub fn get_settings(state: State<'_, AppState>) -> CommandResult<AppSettings> {
    Ok(with_store(&state, |s| s.setting(SETTINGS_KEY))?.unwrap_or_default())
}

#[tauri::command]
#[specta::specta]
pub fn save_settings(state: State<'_, AppState>, settings: AppSettings) -> CommandResult<()> {
    settings.options()?;
    settings.check_paths()?;
    with_store(&state, |s| s.set_setting(SETTINGS_KEY, &settings))
}

#[tauri::command]
#[specta::specta]
pub async fn apply_models(state: State<'_, AppState>, settings: AppSettings) -> CommandResult<EngineStatus> {
    if let Some(target) = settings.remote.clone() {
        let remote = crate::connections::remote(&state, &target.base_url)?;
        let check = blocking(move || Ok(remote.check())).await?;
        return Ok(crate::engine::remote_status(&target, &check));
    }
    let answer = state.engine.apply(&settings)?;
    let health = answer.recv_async().await.map_err(|_| ErrorInfo::internal("the engine stopped"))?;
    Ok(crate::engine::status_of(health?))
}

/// The models on offer; drafts are checked against `target` (default: the saved target).
#[tauri::command]
#[specta::specta]
pub async fn list_models(state: State<'_, AppState>, target: Option<String>) -> CommandResult<Vec<ModelEntry>> {
    let mut settings = get_settings(state)?;
    if let Some(target) = target.filter(|t| !t.is_empty()) {
        crate::paths::model_path(&target)?;
        settings.target = target;
    }
    blocking(move || Ok(scan_models(&settings))).await
}

fn scan_models(settings: &AppSettings) -> Vec<ModelEntry> {
    let mut dirs = vec![models_dir()];
    // The folders of the chosen models, when they lie in the model folders (older settings
    // may name others: those are not listed).
    for chosen in [&settings.target, &settings.draft] {
        if let (Ok(path), Some(dir)) = (crate::paths::model_path(chosen), Path::new(chosen).parent()) {
            drop(path);
            dirs.push(dir.to_path_buf());
        }
    }
    dirs.sort();
    dirs.dedup();
    let mut paths: Vec<PathBuf> = dirs
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .chain(crate::library::cached_models())
        .chain(crate::paths::added())
        .collect();
    paths.sort();
    paths.dedup();
    paths.into_iter().map(|path| model_entry(path, &settings.target)).collect()
}

/// Remember a model file the user names by path, wherever it is, once it reads as a model; it
/// is then offered in the settings and the doctor like the models of the model folders.
#[tauri::command]
#[specta::specta]
pub async fn add_model(state: State<'_, AppState>, path: String) -> CommandResult<ModelEntry> {
    let checked = path.clone();
    let added = blocking(move || crate::paths::add(&checked)).await?;
    with_store(&state, |s| s.set_setting(ADDED_MODELS_KEY, &added))?;
    crate::paths::set_added(added);
    let target = get_settings(state)?.target;
    blocking(move || Ok(model_entry(PathBuf::from(path), &target))).await
}

fn model_entry(path: PathBuf, target: &str) -> ModelEntry {
    match inspect(&path) {
        Err(e) => ModelEntry {
            name: path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
            path,
            architecture: String::new(),
            parameters: 0,
            quantization: String::new(),
            file_bytes: 0,
            runnable: false,
            compatible: Some(false),
            reason: Some(e.to_string()),
        },
        Ok(card) => {
            let is_target = card.path == Path::new(target);
            let pairing = if is_target { None } else { Some(check_draft_for(target, &card.path)) };
            ModelEntry {
                compatible: pairing.as_ref().map(|r| r.is_ok()),
                reason: pairing.and_then(|r| r.err()).map(|e| e.to_string()),
                path: card.path,
                name: card.name,
                architecture: card.architecture,
                parameters: card.parameters,
                quantization: card.quantization,
                file_bytes: card.file_bytes,
                runnable: true,
            }
        }
    }
}

#[tauri::command]
#[specta::specta]
pub fn list_conversations(state: State<'_, AppState>, query: String) -> CommandResult<Vec<ConversationSummary>> {
    with_store(&state, |s| s.conversations(&query))
}

#[tauri::command]
#[specta::specta]
pub fn get_conversation(state: State<'_, AppState>, id: i64) -> CommandResult<Conversation> {
    with_store(&state, |s| s.conversation(id))
}

#[tauri::command]
#[specta::specta]
pub fn create_conversation(state: State<'_, AppState>) -> CommandResult<Conversation> {
    with_store(&state, |s| s.create_conversation())
}

#[tauri::command]
#[specta::specta]
pub fn rename_conversation(state: State<'_, AppState>, id: i64, title: String) -> CommandResult<()> {
    with_store(&state, |s| s.rename_conversation(id, &title))
}

#[tauri::command]
#[specta::specta]
pub fn set_system_prompt(state: State<'_, AppState>, id: i64, text: String) -> CommandResult<()> {
    with_store(&state, |s| s.set_system_prompt(id, &text))
}

/// What the conversation's replies do when it outgrows the context; none: the app's setting.
#[tauri::command]
#[specta::specta]
pub fn set_overflow(state: State<'_, AppState>, id: i64, overflow: Option<Overflow>) -> CommandResult<()> {
    with_store(&state, |s| s.set_overflow(id, overflow))
}

/// Whether the conversation's replies think first (Qwen3's `enable_thinking`); none: the
/// model's template decides.
#[tauri::command]
#[specta::specta]
pub fn set_thinking(state: State<'_, AppState>, id: i64, thinking: Option<bool>) -> CommandResult<()> {
    with_store(&state, |s| s.set_thinking(id, thinking))
}

#[tauri::command]
#[specta::specta]
pub fn delete_conversation(state: State<'_, AppState>, id: i64) -> CommandResult<()> {
    with_store(&state, |s| s.delete_conversation(id))
}

#[tauri::command]
#[specta::specta]
pub fn add_message(
    state: State<'_, AppState>,
    conversation_id: i64,
    role: Role,
    content: String,
) -> CommandResult<StoredMessage> {
    if !matches!(role, Role::User | Role::System) {
        return Err(ErrorInfo::new(
            ErrorCode::InvalidSetting,
            "Only user and system messages are written by the window",
        ));
    }
    with_store(&state, |s| s.add_message(conversation_id, role, &content, None))
}

/// Start the assistant's reply to the conversation as stored; tokens stream over `on_event`.
#[tauri::command]
#[specta::specta]
pub fn reply(
    state: State<'_, AppState>,
    conversation_id: i64,
    settings: AppSettings,
    on_event: Channel<ReplyEvent>,
) -> CommandResult<ReplyStarted> {
    let conversation = with_store(&state, |s| s.conversation(conversation_id))?;
    let mut settings = settings.for_one_reply();
    // The chat's own overflow policy, where it has one, in the request and the stored settings.
    settings.overflow = conversation.overflow.unwrap_or(settings.overflow);
    // The settings become the reply's request once, checked before anything is stored.
    // A remote engine is sent each reply as its text: its calls and results are not its own.
    let mut request = settings.reply_request(chat_messages(&conversation, settings.remote.is_none()))?;
    if let Some(thinking) = conversation.thinking {
        request.request.template_kwargs.insert("enable_thinking".into(), thinking.into());
    }
    let remote = match &settings.remote {
        Some(target) => Some((crate::connections::remote(&state, &target.base_url)?, target.model.clone())),
        None => None,
    };
    let message = with_store(&state, |s| s.add_message(conversation_id, Role::Assistant, "", Some(&settings)))?;
    let out = ReplyOut { message_id: message.id, events: on_event };
    // Tools are offered to a local model; a remote engine runs its own.
    let toolbox = if remote.is_none() { state.tools.offering() } else { None };
    let started = match (&remote, toolbox) {
        (Some((remote, model)), _) => state.engine.reply_remote(request, out, remote, model, state.store.clone()),
        (None, Some(toolbox)) => {
            request.request.tools = toolbox.offered();
            let turn = ToolTurn { tools: state.tools.clone(), toolbox, conversation_id };
            let turns = move |request: Request,
                              first: Ticket,
                              submit: &dyn Fn(Request) -> Result<Ticket, ErrorInfo>,
                              stream: Stream<'_>,
                              stop: &ChainStop| {
                crate::tools::run(turn, request, first, submit, stream, stop)
            };
            state.engine.reply_in_turns(request, out, state.store.clone(), turns)
        }
        (None, None) => state.engine.reply(request, out, state.store.clone()),
    };
    let request_id = match started {
        Ok(id) => id,
        Err(error) => {
            // Refused (the queue is full): the empty reply row says so instead of streaming.
            with_store(&state, |s| s.finish_reply(message.id, None, "error"))?;
            return Err(error);
        }
    };
    Ok(ReplyStarted { request_id, message })
}

/// The conversation as the model reads it; `with_tools`: a reply that called tools as the
/// turns the model saw (the calls and results apart), otherwise as its text.
pub(crate) fn chat_messages(conversation: &Conversation, with_tools: bool) -> Vec<Message> {
    let system =
        (!conversation.system_prompt.trim().is_empty()).then(|| Message::system(conversation.system_prompt.clone()));
    let turns = conversation.messages.iter().flat_map(|m| match m.tools.is_empty() || !with_tools {
        true => vec![turn(m)],
        false => tool_turns(m),
    });
    system.into_iter().chain(turns).collect()
}

/// A reply that called tools, as the model saw it: each round's text and calls, their results,
/// and on; the last round is the answer.
fn tool_turns(m: &StoredMessage) -> Vec<Message> {
    let tokens = m.tokens.as_deref().unwrap_or_default();
    let mut messages = Vec::new();
    for round in specula_engine::protocol::tool_calls::rounds(tokens, &m.tools) {
        let mut assistant = Message::assistant(round.text);
        assistant.tool_calls = round
            .calls
            .iter()
            .map(|c| specula_engine::protocol::ToolCall {
                id: c.id.clone(),
                kind: "function".into(),
                function: specula_engine::protocol::FunctionCall {
                    name: c.tool.clone(),
                    arguments: c.arguments.clone(),
                },
            })
            .collect();
        messages.push(assistant);
        for c in round.calls {
            let outcome = c.outcome.clone().unwrap_or(ToolOutcome::Skipped { reason: "the reply ended first".into() });
            let mut result = Message::new(Role::Tool, outcome.for_model());
            result.tool_call_id = Some(c.id.clone());
            messages.push(result);
        }
    }
    messages
}

fn turn(m: &StoredMessage) -> Message {
    match m.stats.as_ref().and_then(|s| s.reasoning) {
        // A reply that thought: its thinking goes apart, for the template to show or leave out.
        Some(reasoning) => {
            let (thought, answer) = match m.tokens.as_deref() {
                Some(tokens) if !tokens.is_empty() => {
                    let texts: Vec<&str> = tokens.iter().map(|t| t.text.as_str()).collect();
                    split_tokens(&texts, &reasoning)
                }
                _ => {
                    let (thought, answer) = split_reasoning(&m.content, true);
                    (thought.unwrap_or_default(), answer)
                }
            };
            Message { reasoning_content: Some(thought), ..Message::new(m.role.clone(), answer) }
        }
        None => Message::new(m.role.clone(), m.content.clone()),
    }
}

#[tauri::command]
#[specta::specta]
pub fn cancel_reply(state: State<'_, AppState>, request_id: u64) -> bool {
    state.engine.cancel(request_id)
}

/// Open a link from a reply in the system's browser (or mail client): only `http(s):` and
/// `mailto:` URLs, so a reply cannot make the app open a local file or a custom scheme.
#[tauri::command]
#[specta::specta]
pub fn open_link(app: tauri::AppHandle, url: String) -> CommandResult<()> {
    use tauri_plugin_opener::OpenerExt;
    let lower = url.to_ascii_lowercase();
    if !(lower.starts_with("https://") || lower.starts_with("http://") || lower.starts_with("mailto:")) {
        return Err(ErrorInfo::invalid_setting(format!("only web and mail links open: {url}")));
    }
    app.opener().open_url(url, None::<&str>).map_err(|e| ErrorInfo::internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use specula_engine::protocol::{GenerationStats, Reasoning, Source, TokenEvent};

    fn reply(texts: &[&str], reasoning: Option<Reasoning>) -> StoredMessage {
        let token = |text: &&str| TokenEvent {
            id: 0,
            text: text.to_string(),
            source: Source::Target,
            p: None,
            q: None,
            alternatives: Vec::new(),
        };
        StoredMessage {
            id: 2,
            role: Role::Assistant,
            content: texts.concat(),
            tokens: Some(texts.iter().map(token).collect()),
            stats: Some(GenerationStats { reasoning, ..Default::default() }),
            finish_reason: Some("stop".into()),
            settings_label: None,
            settings: None,
            parent_id: Some(1),
            siblings: vec![2],
            tools: Vec::new(),
        }
    }

    #[test]
    fn a_reply_that_thought_goes_back_to_the_model_with_its_thinking_apart() {
        let question = StoredMessage { role: Role::User, content: "Sure?".into(), tokens: None, ..reply(&[], None) };
        let thought =
            reply(&["<think>", "Hm.", "</think>", "\n\n", "Yes"], Some(Reasoning { tokens: 3, ended: true, ms: 9.0 }));
        let plain = reply(&["<think> is a tag"], None);
        let conversation = Conversation {
            id: 1,
            title: "t".into(),
            system_prompt: String::new(),
            updated_at: 0,
            messages: vec![question, thought, plain],
            thinking: Some(false),
            overflow: None,
        };
        let messages = chat_messages(&conversation, true);
        assert_eq!((messages[1].content.as_str(), messages[1].reasoning_content.as_deref()), ("Yes", Some("Hm.")));
        assert_eq!(
            (messages[2].content.as_str(), messages[2].reasoning_content.as_deref()),
            ("<think> is a tag", None)
        );
    }

    #[test]
    fn a_reply_that_called_a_tool_goes_back_as_the_turns_the_model_saw() {
        let mut called = reply(
            &[
                "Let me add.",
                "\n<tool_call>",
                "{\"name\": \"add\", \"arguments\": {\"a\": 1}}",
                "</tool_call>",
                "It is 3.",
            ],
            None,
        );
        called.tools = vec![specula_engine::protocol::ToolCard {
            id: "call_0_add".into(),
            server: "arith".into(),
            tool: "add".into(),
            arguments: serde_json::json!({"a": 1}),
            at: 4,
            running: false,
            outcome: Some(ToolOutcome::Ran { text: "3".into(), is_error: false, cut_from: None, ms: 2 }),
        }];
        let conversation = Conversation {
            id: 1,
            title: "t".into(),
            system_prompt: String::new(),
            updated_at: 0,
            messages: vec![called],
            thinking: None,
            overflow: None,
        };
        let messages = chat_messages(&conversation, true);
        let roles: Vec<&Role> = messages.iter().map(|m| &m.role).collect();
        assert_eq!(roles, [&Role::Assistant, &Role::Tool, &Role::Assistant]);
        assert_eq!(messages[0].content, "Let me add.", "the call's text is the call, not content");
        assert_eq!(messages[0].tool_calls[0].function.name, "add");
        assert_eq!((messages[1].content.as_str(), messages[1].tool_call_id.as_deref()), ("3", Some("call_0_add")));
        assert_eq!(messages[2].content, "It is 3.");
    }
}
