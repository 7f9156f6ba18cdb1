//! `specula serve`: an OpenAI-compatible HTTP API over the engine service, with each token's
//! provenance in a `specula` extension field and the speculative stats at the end.
//!
//! This file only adapts: HTTP requests become service [`Request`]s, ticket events become a
//! JSON body or SSE chunks. A client that disconnects drops its ticket, which cancels the
//! reply wherever it is (queued, reading the prompt, decoding); a full queue answers 503 with
//! Retry-After; a request past `request_timeout` is cancelled.
//!
//! A request body is read whole before it waits for a parser, within a deadline (408 past it,
//! [`listen::Admission`]), and waits for a parser a bounded time (503 with Retry-After past
//! it): slow or many bodies cannot freeze the API, and `/health` says `degraded` while
//! requests are being turned away.

pub mod api;
pub mod listen;
mod reply;
pub mod security;
mod stream_text;
mod tools;

use api::*;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, Request as HttpRequest, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use specula_engine::constraint::GrammarCheck;
use specula_engine::service::{EngineHandle, EngineState, Prompt, Request, ServiceConfig};
use specula_engine::{Error, ErrorCode, ErrorInfo, GenerateOptions, SamplingParams, Session, MAX_ALTERNATIVES};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct ServerConfig {
    /// The id clients name in `model`.
    pub model_id: String,
    pub access: security::Access,
    pub limits: listen::Limits,
    /// Serve the built web UI from here.
    pub ui_dir: Option<PathBuf>,
    /// A request not done after this long, queued time included, is cancelled.
    pub request_timeout: Duration,
    /// What a prompt longer than the context does when the request names nothing
    /// (`context_overflow`); stop, llama-server's behaviour, by default.
    pub overflow: specula_engine::Overflow,
}

/// The largest request body accepted (a long chat fits many times over).
pub const MAX_BODY_BYTES: usize = 8 << 20;

/// Request bodies parsed at once by default ([`listen::Admission::parsers`]). Each may be
/// [`MAX_BODY_BYTES`] and parse into several times that; the rest wait their turn (bounded:
/// [`listen::Admission::parse_wait`]) with their body read.
pub const BODIES_PARSED_AT_ONCE: usize = 2;

struct AppState {
    engine: EngineHandle,
    config: ServerConfig,
    admission: listen::Admission,
    parsers: Parsers,
}

type Shared = Arc<AppState>;

/// The router over an engine service, with [`listen::Admission::default`].
pub fn router(engine: EngineHandle, config: ServerConfig) -> Router {
    router_with(engine, config, listen::Admission::default())
}

/// The router over an engine service. Serve it with [`listen::serve_with`] and the same
/// `admission`.
pub fn router_with(engine: EngineHandle, config: ServerConfig, admission: listen::Admission) -> Router {
    let ui_dir = config.ui_dir.clone();
    let parsers = Parsers::new(admission.parsers);
    let state = Arc::new(AppState { engine, config, admission, parsers });
    // The key is checked before a body is read: a client without it costs no parsing.
    let keyed = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/models/{*id}", get(model))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), require_key));
    let api = keyed
        .route("/v1/{*rest}", any(not_found))
        .route("/health", get(health))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state.clone());
    let app = match ui_dir {
        Some(dir) => api.fallback_service(tower_http::services::ServeDir::new(dir)),
        None => api.fallback(not_found),
    };
    // Every route, the UI's files included: a rebinding page must not even load the UI.
    app.layer(axum::middleware::from_fn_with_state(state, check_host)).layer(axum::middleware::map_response(no_framing))
}

/// No page of this server may be shown inside another site's frame (clickjacking: the UI's
/// buttons under a page that hides them).
async fn no_framing(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, header::HeaderValue::from_static("DENY"));
    headers.insert(header::CONTENT_SECURITY_POLICY, header::HeaderValue::from_static("frame-ancestors 'none'"));
    response
}

async fn require_key(State(state): State<Shared>, request: HttpRequest, next: Next) -> Response {
    match state.config.access.authorize(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    }
}

/// A JSON body: read whole within the body deadline, holding nothing shared, then parsed in
/// one of the server's parser turns ([`listen::Admission`]).
struct Body<T>(T);

impl<T: serde::de::DeserializeOwned> axum::extract::FromRequest<Shared> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: HttpRequest, state: &Shared) -> Result<Self, ApiError> {
        let (parts, body) = request.into_parts();
        let bytes =
            read_body(&parts.headers, body, state.config.limits.body_timeout, state.admission.min_body_rate).await?;
        let _turn = state.parsers.turn(state.admission.parse_wait).await?;
        let request = HttpRequest::from_parts(parts, axum::body::Body::from(bytes));
        parse(Json::<T>::from_request(request, state).await).map(Body)
    }
}

/// The whole body, or 413 past [`MAX_BODY_BYTES`], or 408 when it falls behind its deadline:
/// `grace`, then `min_rate` bytes a second on average ([`listen::Admission`] explains why).
async fn read_body(
    headers: &HeaderMap,
    body: axum::body::Body,
    grace: Duration,
    min_rate: usize,
) -> Result<axum::body::Bytes, ApiError> {
    use futures_util::StreamExt;
    // A body announced past the cap is still read up to it before the 413, as axum's own
    // limit does: a client that writes its whole body before reading (most do) then reads the
    // 413 rather than a broken pipe.
    let announced = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let started = tokio::time::Instant::now();
    let min_rate = min_rate.max(1) as f64;
    // Grown as bytes come, not sized by what the head announces: an announced 8 MB costs
    // nothing until it is sent.
    let mut bytes = Vec::with_capacity(announced.unwrap_or(0).min(64 << 10) as usize);
    let mut stream = body.into_data_stream();
    loop {
        let due = started + grace + Duration::from_secs_f64(bytes.len() as f64 / min_rate);
        match tokio::time::timeout_at(due, stream.next()).await {
            Ok(None) => return Ok(bytes.into()),
            Ok(Some(Ok(chunk))) if bytes.len() + chunk.len() > MAX_BODY_BYTES => return Err(too_large()),
            Ok(Some(Ok(chunk))) => bytes.extend_from_slice(&chunk),
            Ok(Some(Err(e))) => return Err(ApiError::bad_request("invalid_json", format!("Reading the body: {e}"))),
            Err(_) => {
                let of = announced.map(|n| format!(" of {n}")).unwrap_or_default();
                let message = format!(
                    "The request body came too slowly: {}{of} bytes in {:.0} s (a body must arrive within {} s, \
                     or keep up {} KiB/s after that)",
                    bytes.len(),
                    started.elapsed().as_secs_f64(),
                    grace.as_secs(),
                    min_rate as usize >> 10,
                );
                let mut err =
                    ApiError::new(StatusCode::REQUEST_TIMEOUT, "invalid_request_error", "request_timeout", message);
                // The rest of the body is not read: the connection cannot carry another request.
                err.close = true;
                return Err(err);
            }
        }
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "invalid_request_error",
        "request_too_large",
        format!("The request body is larger than {} MiB", MAX_BODY_BYTES >> 20),
    )
}

/// Turns to parse a body ([`listen::Admission::parsers`]), and since when none has been free.
struct Parsers {
    permits: tokio::sync::Semaphore,
    full_since: std::sync::Mutex<Option<Instant>>,
}

/// A parser's turn; when it ends a parser is free again.
struct Turn<'a> {
    parsers: &'a Parsers,
    _permit: tokio::sync::SemaphorePermit<'a>,
}

impl Parsers {
    fn new(count: usize) -> Self {
        let full_since = (count == 0).then(Instant::now);
        Self { permits: tokio::sync::Semaphore::new(count), full_since: std::sync::Mutex::new(full_since) }
    }

    fn full_since(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.full_since.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A turn, or 503 with Retry-After when none frees within `wait`.
    async fn turn(&self, wait: Duration) -> Result<Turn<'_>, ApiError> {
        match tokio::time::timeout(wait, self.permits.acquire()).await {
            Ok(Ok(permit)) => {
                if self.permits.available_permits() == 0 {
                    self.full_since().get_or_insert_with(Instant::now);
                }
                Ok(Turn { parsers: self, _permit: permit })
            }
            Ok(Err(_)) => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "shutting_down",
                "The server is stopping",
            )),
            Err(_) => {
                // Every parser stayed busy for this caller's whole wait.
                let since = Instant::now().checked_sub(wait).unwrap_or_else(Instant::now);
                self.full_since().get_or_insert(since);
                let message = format!(
                    "The server is busy: no request parser came free in {} s. Retry shortly.",
                    wait.as_secs_f64()
                );
                let mut err = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", "server_busy", message);
                err.retry_after = Some(2);
                Err(err)
            }
        }
    }

    /// Whether no parser has been free for `wait` or longer: requests are being turned away.
    fn saturated(&self, wait: Duration) -> bool {
        self.full_since().is_some_and(|since| since.elapsed() >= wait)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        // Its permit is given back right after this.
        *self.parsers.full_since() = None;
    }
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
    let admission = listen::Admission::default();
    let engine = EngineHandle::spawn(session, engine);
    let app = router_with(engine.clone(), config, admission);
    listen::serve_with(listener, app, limits, admission, stop_asked()).await;
    // The last chat's cache goes to disk before the process ends (when a cache folder is set);
    // asked to stop again meanwhile, it stops at once.
    let settling = tokio::task::spawn_blocking(move || engine.settle(SETTLE_AT_STOP));
    tokio::select! {
        settled = settling => if !matches!(settled, Ok(true)) {
            tracing::warn!("stopping before the engine settled: the last chat's cache may not be on disk");
        },
        () = stop_asked() => tracing::warn!("asked again to stop: not waiting for the last chat's cache"),
    }
    Ok(())
}

/// How long a stopping server waits for the reply in progress and the disk cache's write.
const SETTLE_AT_STOP: std::time::Duration = std::time::Duration::from_secs(30);

/// Ctrl+C, or SIGTERM (what `kill`, systemd and container runtimes send) on Unix.
async fn stop_asked() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut terminate) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

// ----- errors in OpenAI's shape -----

#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    code: &'static str,
    param: Option<&'static str>,
    message: String,
    retry_after: Option<u64>,
    /// Answer with `Connection: close`.
    close: bool,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, kind, code, param: None, message: message.into(), retry_after: None, close: false }
    }

    fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", code, message)
    }
}

/// A setting the contract's own checks refused: the engine's `invalid_setting` error.
impl From<specula_engine::protocol::InvalidSetting> for ApiError {
    fn from(e: specula_engine::protocol::InvalidSetting) -> Self {
        Self::from(Error::from(e))
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        Self::from(ErrorInfo::from(e))
    }
}

/// An engine error, as a reply's `Failed` event carries it, by its code.
impl From<ErrorInfo> for ApiError {
    fn from(e: ErrorInfo) -> Self {
        match e.code {
            ErrorCode::ContextOverflow => {
                // The engine's message opens with OpenAI's words, by which litellm and LangChain
                // recognise a context-window error.
                let mut err = Self::bad_request("context_length_exceeded", e.message);
                err.param = Some("messages");
                err
            }
            ErrorCode::InvalidSetting | ErrorCode::InvalidGrammar | ErrorCode::Template | ErrorCode::Tokenizer => {
                Self::bad_request(e.code.as_str(), e.message)
            }
            ErrorCode::Busy => {
                let mut err = Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "queue_full",
                    "The server is busy: too many requests are queued. Retry shortly.",
                );
                err.retry_after = Some(2);
                err
            }
            ErrorCode::NoModel => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", e.code.as_str(), e.message)
            }
            code => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", code.as_str(), e.message),
        }
    }
}

impl ApiError {
    /// The error in OpenAI's body shape (also sent as the last event of a broken stream).
    fn body(&self) -> serde_json::Value {
        let error = ErrorDetail { message: self.message.clone(), kind: self.kind, param: self.param, code: self.code };
        serde_json::to_value(ErrorBody { error }).unwrap_or_default()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, seconds.into());
        }
        if self.close {
            response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
        }
        response
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
    body.map(|Json(v)| v).map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => too_large(),
        _ => ApiError::bad_request("invalid_json", format!("Invalid request body: {}", e.body_text())),
    })
}

// ----- handlers -----

/// 200 with `"status": "ok"` only while a model is loaded and serving; 503 otherwise, with
/// the reason: `"unavailable"` with no model ready, `"degraded"` with one while new requests
/// are being turned away (`reason`: `queue_full`, the engine's queue is full; `parsers_busy`,
/// no request parser has come free for [`listen::Admission::parse_wait`]). The last reply that
/// failed inside the engine is reported either way. Without the API key (when one is set)
/// only the status is told: liveness probes need no more.
async fn health(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let health = state.engine.health();
    let ready = health.state == EngineState::Ready;
    let reason = if !ready {
        None
    } else if health.pending >= state.engine.config().max_queue {
        Some("queue_full")
    } else if state.parsers.saturated(state.admission.parse_wait) {
        Some("parsers_busy")
    } else {
        None
    };
    let word = match (ready, reason) {
        (false, _) => "unavailable",
        (true, Some(_)) => "degraded",
        (true, None) => "ok",
    };
    let status = if word == "ok" { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    if !state.config.access.is_authorized(&headers) {
        let body = serde_json::json!({ "status": word });
        return (status, Json(body)).into_response();
    }
    let body = serde_json::json!({
        "status": word,
        "reason": reason,
        "state": health.state,
        "pending": health.pending,
        "model": state.config.model_id,
        "draft": health.draft.as_ref().map(|d| &d.info.name),
        "drafter": health.default_drafter,
        "k": health.default_k,
        "device": health.device,
        // The context as loaded (the trained one, capped by memory, unless --ctx said) and
        // how its keys and values are stored.
        "context": health.target.as_ref().map(|t| t.info.context),
        "trained_context": health.target.as_ref().map(|t| t.info.trained_context),
        "kv_format": health.target.as_ref().map(|t| t.info.kv_format),
        "error": health.error,
        "last_failure": health.last_failure,
    });
    (status, Json(body)).into_response()
}

fn model_card(state: &AppState) -> ModelCard {
    ModelCard { id: state.config.model_id.clone(), object: "model", created: reply::now(), owned_by: "specula" }
}

async fn models(State(state): State<Shared>) -> Result<Json<ModelList>, ApiError> {
    Ok(Json(ModelList { object: "list", data: vec![model_card(&state)] }))
}

async fn model(State(state): State<Shared>, Path(id): Path<String>) -> Result<Json<ModelCard>, ApiError> {
    check_model(&state, &id)?;
    Ok(Json(model_card(&state)))
}

/// Unknown API routes answer in OpenAI's error shape, so clients raise a readable error.
async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", "not_found", format!("Unknown route: {method} {uri}"))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    let message = format!("{method} is not allowed on {}", uri.path());
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error", "method_not_allowed", message)
}

/// How long reading a chat request may take: it compiles the request's JSON schema, if any.
const READING_LIMIT: Duration = Duration::from_secs(5);

async fn chat_completions(State(state): State<Shared>, Body(request): Body<ChatRequest>) -> Result<Response, ApiError> {
    check_model(&state, &request.model)?;
    // Compiling a schema is work for a blocking thread, not for one that serves connections.
    let shared = state.clone();
    let reading = tokio::task::spawn_blocking(move || chat_call(&shared, request));
    let call = match tokio::time::timeout(READING_LIMIT, reading).await {
        Ok(Ok(call)) => call?,
        Ok(Err(_)) => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "internal_error",
                "reading the request failed",
            ))
        }
        Err(_) => {
            let why = format!("the JSON schema took more than {} s to compile", READING_LIMIT.as_secs());
            return Err(invalid_param("response_format", why));
        }
    };
    reply::answer(state.engine.clone(), call).await
}

async fn completions(
    State(state): State<Shared>,
    Body(request): Body<CompletionRequest>,
) -> Result<Response, ApiError> {
    check_model(&state, &request.model)?;
    let call = completion_call(&state, request)?;
    reply::answer(state.engine.clone(), call).await
}

/// The most choices one request may ask for (`n`).
pub const MAX_CHOICES: usize = 8;
/// The most tools one request may offer, and the largest JSON schema (as JSON text) a reply
/// may be held to: both are rendered into the prompt or compiled before the first token.
pub const MAX_TOOLS: usize = 128;
pub const MAX_SCHEMA_BYTES: usize = 64 << 10;

/// The most choices one request may make in all, prompts times `n`: decided before anything
/// is queued, since each is a whole reply's work.
pub const MAX_CHOICES_PER_REQUEST: usize = 16;

fn chat_call(state: &AppState, request: ChatRequest) -> Result<reply::Call, ApiError> {
    if request.messages.is_empty() {
        return Err(invalid_param("messages", "`messages` is empty: a chat needs at least one message"));
    }
    let messages = request
        .messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| m.into_message(i))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|why| invalid_param("messages", why))?;
    if request.tools.len() > MAX_TOOLS {
        return Err(invalid_param("tools", format!("{} tools: at most {MAX_TOOLS}", request.tools.len())));
    }
    let schema_bytes = request
        .response_format
        .as_ref()
        .and_then(|f| f.json_schema.as_ref()?.schema.as_ref())
        .map_or(0, |schema| schema.to_string().len());
    if schema_bytes > MAX_SCHEMA_BYTES {
        let why = format!("the JSON schema is {schema_bytes} bytes: at most {MAX_SCHEMA_BYTES}");
        return Err(invalid_param("response_format", why));
    }
    let format = match &request.response_format {
        Some(format) => format.grammar().map_err(|why| invalid_param("response_format", why))?,
        None => None,
    };
    let tools =
        tools::Offer::of(request.tools, request.tool_choice).map_err(|why| invalid_param("tool_choice", why))?;
    let grammar = match (format, tools.forced()) {
        (Some(_), Some(_)) => {
            let why = "response_format and a required tool call each constrain the reply: send one of them";
            return Err(invalid_param("response_format", why));
        }
        (format, forced) => format.or(forced),
    };
    let logprobs = match (request.logprobs, request.top_logprobs) {
        (_, Some(n)) if n > MAX_ALTERNATIVES => {
            return Err(invalid_param("top_logprobs", format!("top_logprobs is {n}: at most {MAX_ALTERNATIVES}")))
        }
        (true, top) => Some(top.unwrap_or(0)),
        (false, _) => None,
    };
    let stream = request.stream;
    let include_usage = request.stream_options.is_some_and(|o| o.include_usage);
    let mut base = base_request(state, Prompt::Chat(messages), request.sampling, request.speculative, logprobs)?;
    base.request.tools = tools.rendered();
    base.request.template_kwargs = request.chat_template_kwargs;
    // Compiled here, on the blocking thread this runs on, under the caller's time limit.
    if let Some(grammar) = &grammar {
        grammar.validate().map_err(ApiError::from)?;
    }
    base.request.options.grammar = grammar;
    let model = request.model;
    Ok(reply::Call { kind: Kind::Chat, model, base, prompts: Vec::new(), stream, include_usage, logprobs, tools })
}

fn completion_call(state: &AppState, request: CompletionRequest) -> Result<reply::Call, ApiError> {
    if request.echo {
        return Err(invalid_param("echo", "echo is not supported: the reply holds the completion only"));
    }
    if request.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(invalid_param("suffix", "suffix is not supported: these models complete text left to right"));
    }
    if let Some(n) = request.logprobs.filter(|&n| n > MAX_ALTERNATIVES) {
        return Err(invalid_param("logprobs", format!("logprobs is {n}: at most {MAX_ALTERNATIVES}")));
    }
    let count = request.prompt.count();
    if count == 0 {
        return Err(invalid_param("prompt", "`prompt` is an empty list"));
    }
    let n = request.sampling.n.unwrap_or(1);
    if count.saturating_mul(n) > MAX_CHOICES_PER_REQUEST {
        let why = format!(
            "`prompt` lists {count} prompts and n is {n}: {} choices, at most {MAX_CHOICES_PER_REQUEST} per request",
            count.saturating_mul(n)
        );
        return Err(invalid_param("prompt", why));
    }
    let mut prompts = request.prompt.into_prompts();
    let first = prompts.remove(0);
    let stream = request.stream;
    let include_usage = request.stream_options.is_some_and(|o| o.include_usage);
    let base = base_request(state, first, request.sampling, request.speculative, request.logprobs)?;
    let model = request.model;
    let tools = tools::Offer::none();
    Ok(reply::Call { kind: Kind::Text, model, base, prompts, stream, include_usage, logprobs: request.logprobs, tools })
}

fn invalid_param(param: &'static str, message: impl Into<String>) -> ApiError {
    let mut err = ApiError::bad_request("invalid_request_error", message);
    err.param = Some(param);
    err
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Text,
}

/// The service request for an API call: every option it carries, as values. A request without
/// a seed gets a fresh one (per choice), as OpenAI's do; it is reported so it can be replayed.
fn base_request(
    state: &AppState,
    prompt: Prompt,
    fields: SamplingFields,
    spec: Option<SpeculativeOverride>,
    logprobs: Option<usize>,
) -> Result<reply::Base, ApiError> {
    let defaults = SamplingParams::default();
    let spec = spec.unwrap_or_default();
    let sampling = SamplingParams {
        mode: spec.mode.unwrap_or(defaults.mode),
        temperature: fields.temperature.unwrap_or(defaults.temperature),
        top_p: fields.top_p.unwrap_or(defaults.top_p),
        top_k: fields.top_k.unwrap_or(defaults.top_k),
        seed: fields.seed.unwrap_or(0),
        ..defaults
    };
    sampling.validate().map_err(ApiError::from)?;
    let n = fields.n.unwrap_or(1);
    if !(1..=MAX_CHOICES).contains(&n) {
        return Err(invalid_param("n", format!("n is {n}: from 1 to {MAX_CHOICES}")));
    }
    let options = GenerateOptions {
        max_tokens: fields
            .max_completion_tokens
            .or(fields.max_tokens)
            .unwrap_or(specula_engine::protocol::DEFAULT_MAX_TOKENS),
        sampling,
        stop: fields.stop.map(Stop::into_vec).unwrap_or_default(),
        alternatives: logprobs.unwrap_or(0),
        grammar: None,
    };
    options.validate().map_err(ApiError::from)?;
    let mut request = Request::new(prompt, options);
    request.k = spec.k;
    request.drafter = spec.drafter;
    request.deadline = Some(Instant::now() + state.config.request_timeout);
    request.overflow = fields.context_overflow.unwrap_or(state.config.overflow);
    Ok(reply::Base { request, seed: fields.seed, n })
}
