//! `specula serve`: an OpenAI-compatible HTTP API over the engine service, with each token's
//! provenance in a `specula` extension field and the speculative stats at the end.
//!
//! This file only adapts: HTTP requests become service [`Request`]s, ticket events become a
//! JSON body or SSE chunks. A client that disconnects drops its ticket, which cancels the
//! reply wherever it is (queued, reading the prompt, decoding); a full queue answers 503 with
//! Retry-After; a request past `request_timeout` is cancelled.

pub mod api;
pub mod listen;
pub mod security;

use api::*;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Request as HttpRequest, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use specula_engine::service::{EngineHandle, EngineState, Event, Prompt, Request, ServiceConfig, Ticket};
use specula_engine::{Error, GenerateOptions, Generation, SamplingParams, Session};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub struct ServerConfig {
    /// The id clients name in `model`.
    pub model_id: String,
    pub access: security::Access,
    pub limits: listen::Limits,
    /// Serve the built web UI from here.
    pub ui_dir: Option<PathBuf>,
    /// A request not done after this long, queued time included, is cancelled.
    pub request_timeout: Duration,
}

/// The largest request body accepted (a long chat fits many times over).
pub const MAX_BODY_BYTES: usize = 8 << 20;

struct AppState {
    engine: EngineHandle,
    config: ServerConfig,
}

type Shared = Arc<AppState>;

/// The router over an engine service.
pub fn router(engine: EngineHandle, config: ServerConfig) -> Router {
    let ui_dir = config.ui_dir.clone();
    let state = Arc::new(AppState { engine, config });
    let api = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/health", get(health))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state.clone());
    let app = match ui_dir {
        Some(dir) => api.fallback_service(tower_http::services::ServeDir::new(dir)),
        None => api,
    };
    // Every route, the UI's files included: a rebinding page must not even load the UI.
    app.layer(axum::middleware::from_fn_with_state(state, check_host))
}

async fn check_host(State(state): State<Shared>, request: HttpRequest, next: Next) -> Response {
    match state.config.access.check_host(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    }
}

/// Bind and serve `session` through an engine service until Ctrl-C.
pub async fn serve(
    session: Session,
    engine: ServiceConfig,
    config: ServerConfig,
    addr: std::net::SocketAddr,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("specula serve: http://{}", listener.local_addr()?);
    let limits = config.limits;
    let app = router(EngineHandle::spawn(session, engine), config);
    listen::serve(listener, app, limits, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await;
    Ok(())
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
    pub fn new(status: StatusCode, kind: &'static str, code: &'static str, message: impl Into<String>) -> Self {
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
            Error::Busy { .. } => {
                let mut err = Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "queue_full",
                    "The server is busy: too many requests are queued. Retry shortly.",
                );
                err.retry_after = Some(2);
                err
            }
            Error::NoModel(_) => Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", e.code(), e.to_string()),
            other => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", other.code(), other.to_string()),
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
    state.config.access.authorize(headers)
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
    body.map(|Json(v)| v).map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "request_too_large",
            format!("The request body is larger than {} MiB", MAX_BODY_BYTES >> 20),
        ),
        _ => ApiError::bad_request("invalid_json", format!("Invalid request body: {}", e.body_text())),
    })
}

// ----- handlers -----

/// 200 with `"status": "ok"` only while a model is loaded and serving; 503 otherwise, with
/// the reason. The last reply that failed inside the engine is reported either way. Without
/// the API key (when one is set) only the status is told: liveness probes need no more.
async fn health(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let health = state.engine.health();
    let ready = health.state == EngineState::Ready;
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    if !state.config.access.is_authorized(&headers) {
        let body = serde_json::json!({ "status": if ready { "ok" } else { "unavailable" } });
        return (status, Json(body)).into_response();
    }
    let body = serde_json::json!({
        "status": if ready { "ok" } else { "unavailable" },
        "state": health.state,
        "pending": health.pending,
        "model": state.config.model_id,
        "draft": health.draft.as_ref().map(|d| &d.info.name),
        "drafter": health.default_drafter,
        "k": health.default_k,
        "device": health.device,
        "error": health.error,
        "last_failure": health.last_failure,
    });
    (status, Json(body)).into_response()
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
    let job = job(&state, Prompt::Chat(request.messages), request.sampling, request.speculative)?;
    run(state, job, request.stream, Kind::Chat, request.model).await
}

async fn completions(
    State(state): State<Shared>,
    headers: HeaderMap,
    body: Result<Json<CompletionRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let request = parse(body)?;
    check_model(&state, &request.model)?;
    let job = job(&state, Prompt::Text(request.prompt), request.sampling, request.speculative)?;
    run(state, job, request.stream, Kind::Text, request.model).await
}

#[derive(Clone, Copy)]
enum Kind {
    Chat,
    Text,
}

/// The service request for an API call: every option it carries, as values.
fn job(
    state: &AppState,
    prompt: Prompt,
    fields: SamplingFields,
    spec: Option<SpeculativeOverride>,
) -> Result<Request, ApiError> {
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
    let mut request = Request::new(prompt, options);
    request.k = spec.k;
    request.drafter = spec.drafter;
    request.deadline = Some(Instant::now() + state.config.request_timeout);
    Ok(request)
}

fn engine_stopped() -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "internal_error", "the engine stopped")
}

async fn run(state: Shared, request: Request, stream: bool, kind: Kind, model: String) -> Result<Response, ApiError> {
    let ticket = state.engine.submit(request)?;
    let id = format!("{}-{}", if matches!(kind, Kind::Chat) { "chatcmpl" } else { "cmpl" }, now_nanos());
    // Wait for the reply to start: a prompt too long for the context is a 400, not a stream.
    loop {
        match ticket.recv_async().await.ok_or_else(engine_stopped)? {
            Event::Started { .. } => break,
            Event::Failed(e) => return Err(e.into()),
            // Cancelled before it started (its deadline passed in the queue).
            Event::Done(generation) => return Ok(Json(full_response(&generation, &id, &model, kind)).into_response()),
            Event::Prefill { .. } | Event::Token(_) | Event::Step(_) => {}
        }
    }
    if stream {
        return Ok(stream_response(ticket, id, model, kind).into_response());
    }
    loop {
        match ticket.recv_async().await.ok_or_else(engine_stopped)? {
            Event::Done(generation) => return Ok(Json(full_response(&generation, &id, &model, kind)).into_response()),
            Event::Failed(e) => return Err(e.into()),
            _ => continue,
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
/// `[DONE]`. Dropping the stream (client gone) drops the ticket, which stops the engine.
fn stream_response(
    ticket: Ticket,
    id: String,
    model: String,
    kind: Kind,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, std::convert::Infallible>>> {
    let events = async_stream::stream! {
        let mut first = true;
        while let Some(event) = ticket.recv_async().await {
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
                Event::Started { .. } | Event::Prefill { .. } => {}
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
