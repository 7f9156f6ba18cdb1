//! `specula serve`: an OpenAI-compatible HTTP API over one engine, with each token's
//! provenance in a `specula` extension field and the speculative stats at the end.
//!
//! Requests are served in order by one engine thread ([`worker`]); a client that disconnects
//! cancels its generation, and a full queue answers 503 with Retry-After.

pub mod api;
pub mod worker;

use api::*;
use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use specula_engine::speculative::KSetting;
use specula_engine::{DrafterKind, Error, GenerateOptions, Generation, SamplingParams, Session};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use worker::{Event, Job, Prompt, Worker};

pub struct ServerConfig {
    /// The id clients name in `model`.
    pub model_id: String,
    pub api_key: Option<String>,
    /// Jobs queued or running before new ones get 503.
    pub max_queue: usize,
    /// Serve the built web UI from here.
    pub ui_dir: Option<PathBuf>,
}

struct AppState {
    worker: Worker,
    config: ServerConfig,
    /// The draft model's name, when one is loaded, and the drafter requests get by default.
    draft_id: Option<String>,
    drafter: DrafterKind,
}

type Shared = Arc<AppState>;

/// The router over an engine thread that owns `session`.
pub fn router(session: Session, config: ServerConfig) -> Router {
    let ui_dir = config.ui_dir.clone();
    let draft_id = session.draft_info().map(|info| info.name.clone());
    let drafter = session.drafter();
    let state = Arc::new(AppState { worker: Worker::spawn(session), config, draft_id, drafter });
    let api = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/health", get(health))
        .with_state(state);
    match ui_dir {
        Some(dir) => api.fallback_service(tower_http::services::ServeDir::new(dir)),
        None => api,
    }
}

/// Bind and serve until Ctrl-C.
pub async fn serve(session: Session, config: ServerConfig, addr: std::net::SocketAddr) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("specula serve: http://{}", listener.local_addr()?);
    axum::serve(listener, router(session, config))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}

// ----- errors in OpenAI's shape -----

pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    code: &'static str,
    param: Option<&'static str>,
    message: String,
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, kind, code, param: None, message: message.into(), retry_after: None }
    }

    fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", code, message)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        match e {
            Error::ContextOverflow { .. } => {
                let mut err = Self::bad_request("context_length_exceeded", e.to_string());
                err.param = Some("messages");
                err
            }
            Error::InvalidSetting(_) | Error::Template(_) | Error::Tokenizer(_) => {
                Self::bad_request(e.code(), e.to_string())
            }
            other => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "internal_error", other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail { message: self.message, kind: self.kind, param: self.param, code: self.code },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &state.config.api_key else {
        return Ok(());
    };
    let given =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(given) if given == key => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "invalid_api_key",
            "Incorrect or missing API key: send `Authorization: Bearer <key>`",
        )),
    }
}

fn check_model(state: &AppState, model: &str) -> Result<(), ApiError> {
    if model == state.config.model_id {
        return Ok(());
    }
    let mut err = ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "model_not_found",
        format!("The model `{model}` does not exist; this server serves `{}`", state.config.model_id),
    );
    err.param = Some("model");
    Err(err)
}

fn parse<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    body.map(|Json(v)| v)
        .map_err(|e| ApiError::bad_request("invalid_json", format!("Invalid request body: {}", e.body_text())))
}

// ----- handlers -----

async fn health(State(state): State<Shared>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "status": "ok",
        "pending": state.worker.pending(),
        "model": state.config.model_id,
        "draft": state.draft_id,
        "drafter": state.drafter,
    }))
}

async fn models(State(state): State<Shared>, headers: HeaderMap) -> Result<Json<ModelList>, ApiError> {
    authorize(&state, &headers)?;
    Ok(Json(ModelList {
        object: "list",
        data: vec![ModelCard {
            id: state.config.model_id.clone(),
            object: "model",
            created: now(),
            owned_by: "specula",
        }],
    }))
}

async fn chat_completions(
    State(state): State<Shared>,
    headers: HeaderMap,
    body: Result<Json<ChatRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let request = parse(body)?;
    check_model(&state, &request.model)?;
    let kind = Kind::Chat;
    let job = job(Prompt::Chat(request.messages), request.sampling, request.speculative)?;
    run(state, job, request.stream, kind, request.model).await
}

async fn completions(
    State(state): State<Shared>,
    headers: HeaderMap,
    body: Result<Json<CompletionRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let request = parse(body)?;
    check_model(&state, &request.model)?;
    let job = job(Prompt::Raw(request.prompt), request.sampling, request.speculative)?;
    run(state, job, request.stream, Kind::Text, request.model).await
}

#[derive(Clone, Copy)]
enum Kind {
    Chat,
    Text,
}

fn job(
    prompt: Prompt,
    fields: SamplingFields,
    spec: Option<SpeculativeOverride>,
) -> Result<(Prompt, GenerateOptions, SpeculativeOverride), ApiError> {
    let defaults = SamplingParams::default();
    let spec = spec.unwrap_or_default();
    let sampling = SamplingParams {
        mode: spec.mode.unwrap_or(defaults.mode),
        temperature: fields.temperature.unwrap_or(defaults.temperature),
        top_p: fields.top_p.unwrap_or(defaults.top_p),
        top_k: fields.top_k.unwrap_or(defaults.top_k),
        seed: fields.seed.unwrap_or(defaults.seed),
        ..defaults
    };
    sampling.validate().map_err(ApiError::from)?;
    let options = GenerateOptions {
        max_tokens: fields.max_completion_tokens.or(fields.max_tokens).unwrap_or(512),
        sampling,
        stop: fields.stop.map(Stop::into_vec).unwrap_or_default(),
    };
    Ok((prompt, options, spec))
}

fn parse_k(value: &Option<serde_json::Value>) -> Result<Option<KSetting>, ApiError> {
    let Some(value) = value else { return Ok(None) };
    let text = match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    text.parse().map(Some).map_err(|e: Error| ApiError::bad_request("invalid_value", e.to_string()))
}

async fn run(
    state: Shared,
    (prompt, options, spec): (Prompt, GenerateOptions, SpeculativeOverride),
    stream: bool,
    kind: Kind,
    model: String,
) -> Result<Response, ApiError> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let job = Job { prompt, options, k: parse_k(&spec.k)?, drafter: spec.drafter, events: tx };
    if !state.worker.submit(job, state.config.max_queue) {
        let mut err = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "queue_full",
            "The server is busy: too many requests are queued. Retry shortly.",
        );
        err.retry_after = Some(2);
        return Err(err);
    }
    // Wait for the job to start: a prompt too long for the context is a 400, not a stream.
    match rx.recv().await {
        Some(Event::Started { .. }) => {}
        Some(Event::Failed(e)) => return Err(e.into()),
        _ => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "internal_error",
                "the engine stopped",
            ))
        }
    }
    let id = format!("{}-{}", if matches!(kind, Kind::Chat) { "chatcmpl" } else { "cmpl" }, now_nanos());
    if stream {
        Ok(stream_response(rx, id, model, kind).into_response())
    } else {
        loop {
            match rx.recv().await {
                Some(Event::Done(generation)) => {
                    return Ok(Json(full_response(&generation, &id, &model, kind)).into_response())
                }
                Some(Event::Failed(e)) => return Err(e.into()),
                Some(_) => continue,
                None => {
                    return Err(ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "server_error",
                        "internal_error",
                        "the engine stopped",
                    ))
                }
            }
        }
    }
}

fn full_response(g: &Generation, id: &str, model: &str, kind: Kind) -> serde_json::Value {
    let extension = Extension { tokens: g.tokens.clone(), step: None, stats: Some(g.stats.clone()) };
    let choice = match kind {
        Kind::Chat => serde_json::json!({
            "index": 0,
            "message": { "role": "assistant", "content": g.text },
            "finish_reason": finish_reason(g),
        }),
        Kind::Text => {
            serde_json::json!({ "index": 0, "text": g.text, "finish_reason": finish_reason(g) })
        }
    };
    serde_json::json!({
        "id": id,
        "object": if matches!(kind, Kind::Chat) { "chat.completion" } else { "text_completion" },
        "created": now(),
        "model": model,
        "choices": [choice],
        "usage": Usage::of(&g.stats),
        "specula": extension,
    })
}

fn chunk(
    id: &str,
    model: &str,
    kind: Kind,
    text: &str,
    first: bool,
    finish: Option<&str>,
    extension: Extension,
) -> serde_json::Value {
    let choice = match kind {
        Kind::Chat => {
            let mut delta = serde_json::json!({});
            if first {
                delta["role"] = "assistant".into();
            }
            if !text.is_empty() || finish.is_none() {
                delta["content"] = text.into();
            }
            serde_json::json!({ "index": 0, "delta": delta, "finish_reason": finish })
        }
        Kind::Text => serde_json::json!({ "index": 0, "text": text, "finish_reason": finish }),
    };
    serde_json::json!({
        "id": id,
        "object": if matches!(kind, Kind::Chat) { "chat.completion.chunk" } else { "text_completion" },
        "created": now(),
        "model": model,
        "choices": [choice],
        "specula": extension,
    })
}

/// SSE chunks: one per token with its provenance, then the finish with the stats, then
/// `[DONE]`. Dropping the stream (client gone) closes the channel, which stops the engine.
fn stream_response(
    mut rx: mpsc::UnboundedReceiver<Event>,
    id: String,
    model: String,
    kind: Kind,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, std::convert::Infallible>>> {
    let events = async_stream::stream! {
        let mut first = true;
        while let Some(event) = rx.recv().await {
            match event {
                Event::Token(token) => {
                    let text = token.text.clone();
                    let ext = Extension { tokens: vec![token], ..Default::default() };
                    yield Ok(SseEvent::default().data(chunk(&id, &model, kind, &text, first, None, ext).to_string()));
                    first = false;
                }
                Event::Step(step) => {
                    let ext = Extension { step: Some(step), ..Default::default() };
                    yield Ok(SseEvent::default().data(chunk(&id, &model, kind, "", first, None, ext).to_string()));
                    first = false;
                }
                Event::Done(g) => {
                    let ext = Extension { stats: Some(g.stats.clone()), ..Default::default() };
                    let mut last = chunk(&id, &model, kind, "", first, Some(finish_reason(&g)), ext);
                    last["usage"] = serde_json::to_value(Usage::of(&g.stats)).unwrap_or_default();
                    yield Ok(SseEvent::default().data(last.to_string()));
                    break;
                }
                Event::Failed(e) => {
                    let body = serde_json::json!({ "error": { "message": e.to_string(), "type": "server_error", "code": e.code() } });
                    yield Ok(SseEvent::default().data(body.to_string()));
                    break;
                }
                Event::Started { .. } => {}
            }
        }
        yield Ok(SseEvent::default().data("[DONE]"));
    };
    Sse::new(events).keep_alive(KeepAlive::default())
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn now_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}
