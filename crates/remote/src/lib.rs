//! specula-remote: chat with an engine elsewhere that speaks the OpenAI API (`llama-server`,
//! vLLM, SGLang, Ollama, LM Studio, another `specula serve`). A reply streams as the same
//! events a local one does ([`specula_protocol::ReplyEvent`]), so the app, the CLI and the history
//! treat it like any other.
//!
//! The remote is untrusted: every answer is read with bounds (a line, a body, a number of
//! tokens), every wait has a limit (a reply's first token and its whole, a check's answer),
//! Stop closes the connection at once, redirects are refused (the key would follow them to
//! another host), and the key never appears in a `Debug` or an error message.

mod chunk;
pub mod sse;
mod stream;
mod ticket;

pub use ticket::{Canceller, RemoteTicket};

use serde::Deserialize;
use specula_protocol::{ConnectionCheck, ErrorCode, ErrorInfo, GenerateOptions, Message, Mode, RemoteKind};
use std::io::Read;
use std::time::{Duration, Instant};

/// The longest a check of a remote ([`Remote::check`]) takes, whatever the remote does: the
/// app's Connect button waits on it.
pub const CHECK_LIMIT: Duration = Duration::from_secs(15);

/// Every bound on talking to a remote.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub connect: Duration,
    /// The longest silence: before the answer's headers (a long prompt being read) and
    /// between two reads of a stream.
    pub idle: Duration,
    /// The longest wait for a reply's first token, from the request. The remote reads the
    /// whole prompt first, which on CPUs runs at tens of tokens a second; bytes that carry no
    /// token (`: keep-alive` comments, blank lines, empty chunks) do not count as progress.
    pub first_token: Duration,
    /// The longest a whole reply may take, from the request, whatever the remote streams.
    pub total: Duration,
    /// The longest line of an event stream (one chunk).
    pub max_line: usize,
    /// The most bytes one reply may stream.
    pub max_body: u64,
    /// The most bytes of a models list or an error body.
    pub max_small_body: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            idle: Duration::from_secs(300),
            // Ten minutes: a 32k-token prompt read at ~60 tokens/s by a large model on CPUs.
            first_token: Duration::from_secs(600),
            // An hour: that prefill, then a few thousand tokens at 2 tokens/s.
            total: Duration::from_secs(3600),
            max_line: 1 << 20,
            max_body: 64 << 20,
            max_small_body: 1 << 20,
        }
    }
}

/// A remote engine: its base URL (up to `/v1`) and its key.
#[derive(Clone)]
pub struct Remote {
    base_url: String,
    key: Option<String>,
    /// Each request gets an agent of its own from this, so that Stop or a deadline can shut
    /// down that request's connection and nothing else.
    config: ureq::config::Config,
    limits: Limits,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = self.key.as_ref().map(|_| "<hidden>");
        f.debug_struct("Remote").field("base_url", &self.base_url).field("key", &key).finish()
    }
}

impl Limits {
    /// These limits with `wait` for a reply's first token. A remote may send nothing at all
    /// while it reads the prompt: the silence allowed and the whole reply's limit are raised to
    /// at least that wait, so that neither cuts it short.
    pub fn with_first_token(self, wait: Duration) -> Self {
        Self { first_token: wait, idle: self.idle.max(wait), total: self.total.max(wait), ..self }
    }
}

impl Remote {
    pub fn new(base_url: &str, key: Option<String>) -> Result<Self, ErrorInfo> {
        Self::with_limits(base_url, key, Limits::default())
    }

    pub fn with_limits(base_url: &str, key: Option<String>, limits: Limits) -> Result<Self, ErrorInfo> {
        let base_url = normalize_base_url(base_url)?;
        let key = key.map(|k| k.trim().to_string()).filter(|k| !k.is_empty());
        if key.as_ref().is_some_and(|k| k.chars().any(|c| c.is_control() || c == ' ')) {
            return Err(ErrorInfo::invalid_setting("an API key is one word with no spaces or control characters"));
        }
        let config = ureq::Agent::config_builder()
            .timeout_connect(Some(limits.connect))
            .timeout_per_read(Some(limits.idle))
            .max_redirects(0)
            .max_redirects_will_error(false)
            .http_status_as_error(false)
            .user_agent(concat!("specula/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Self { base_url, key, config, limits })
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `host:port`, for messages.
    fn host(&self) -> &str {
        let rest = self.base_url.split_once("://").map_or(self.base_url.as_str(), |(_, rest)| rest);
        rest.split('/').next().unwrap_or(rest)
    }

    fn agent(&self) -> ureq::Agent {
        self.config.clone().into()
    }

    /// The remote's models and which engine it is, with the round trip timed; within
    /// [`CHECK_LIMIT`].
    pub fn check(&self) -> ConnectionCheck {
        self.check_within(CHECK_LIMIT)
    }

    /// [`Remote::check`] ended after `limit`, whatever the remote does (a server that drips
    /// its answer a byte at a time included).
    pub fn check_within(&self, limit: Duration) -> ConnectionCheck {
        let start = Instant::now();
        let (models, kind, error) = match self.models_within(limit) {
            Ok((models, kind)) => (models, kind, None),
            Err(e) => (Vec::new(), RemoteKind::OpenAi, Some(e)),
        };
        let round_trip_ms = start.elapsed().as_secs_f64() * 1e3;
        ConnectionCheck { base_url: self.base_url.clone(), models, kind, round_trip_ms, error }
    }

    /// `GET /v1/models`: the ids, and the engine as its cards name their owner; within
    /// [`CHECK_LIMIT`].
    pub fn models(&self) -> Result<(Vec<String>, RemoteKind), ErrorInfo> {
        self.models_within(CHECK_LIMIT)
    }

    /// The models, asked on a thread of their own: past `limit` the answer is given up and its
    /// connection closed, so the caller waits no longer whatever the remote (or its name's
    /// lookup) does.
    fn models_within(&self, limit: Duration) -> Result<(Vec<String>, RemoteKind), ErrorInfo> {
        let agent = self.agent();
        let (sender, answer) = flume::bounded(1);
        let (remote, asking) = (self.clone(), agent.clone());
        std::thread::Builder::new()
            .name("remote-check".into())
            .spawn(move || sender.send(remote.list_models(&asking)))
            .map_err(|e| ErrorInfo::internal(format!("starting a remote check: {e}")))?;
        match answer.recv_timeout(limit) {
            Ok(listed) => listed,
            Err(flume::RecvTimeoutError::Timeout) => {
                agent.shutdown();
                let why = format!("{} did not answer within {}", self.host(), ticket::seconds(limit));
                Err(ErrorInfo::new(ErrorCode::Timeout, why))
            }
            Err(flume::RecvTimeoutError::Disconnected) => Err(ErrorInfo::internal("the remote check ended early")),
        }
    }

    fn list_models(&self, agent: &ureq::Agent) -> Result<(Vec<String>, RemoteKind), ErrorInfo> {
        #[derive(Deserialize)]
        struct List {
            data: Vec<Card>,
        }
        #[derive(Deserialize)]
        struct Card {
            id: String,
            #[serde(default)]
            owned_by: String,
        }
        let request = agent.get(format!("{}/models", self.base_url));
        let response = self.authorized(request).call().map_err(|e| ureq_error(&e))?;
        let body = self.read_small(self.successful(response)?)?;
        let list: List = serde_json::from_str(&body)
            .map_err(|_| bad(format!("the remote's model list is not OpenAI JSON: {}", stream::preview(&body))))?;
        let kind = match list.data.first().map(|c| c.owned_by.as_str()) {
            Some("specula") => RemoteKind::Specula,
            Some("llamacpp") => RemoteKind::LlamaCpp,
            _ => RemoteKind::OpenAi,
        };
        Ok((list.data.into_iter().map(|c| c.id).collect(), kind))
    }

    /// Start a streamed chat reply; its events (and any failure, even to connect) come on the
    /// ticket, which can be stopped at once. A thread reads the stream; another holds the
    /// reply to its deadlines ([`Limits::first_token`], [`Limits::total`]).
    pub fn chat(&self, model: &str, messages: &[Message], options: &GenerateOptions) -> RemoteTicket {
        self.chat_with(model, messages, options, &serde_json::Map::new())
    }

    /// [`Self::chat`] with more variables for the remote's chat template (`chat_template_kwargs`,
    /// which llama-server and vLLM read: Qwen3's `enable_thinking`).
    pub fn chat_with(
        &self,
        model: &str,
        messages: &[Message],
        options: &GenerateOptions,
        template_kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> RemoteTicket {
        let agent = self.agent();
        let (ticket, outlet) = RemoteTicket::new(agent.clone());
        let mut body = request_body(model, messages, options);
        if !template_kwargs.is_empty() {
            body["chat_template_kwargs"] = template_kwargs.clone().into();
        }
        let body = body.to_string();
        let remote = self.clone();
        let (max_tokens, seed) = (options.max_tokens, options.sampling.seed);
        // Dropped when the reading thread ends, which ends the watch.
        let (reading, finished) = flume::bounded::<()>(0);
        let spawned = std::thread::Builder::new().name("remote-reply".into()).spawn({
            let outlet = outlet.clone();
            move || {
                let _reading = reading;
                match remote.post_stream(&agent, &body) {
                    Ok(reader) if !outlet.is_cancelled() => {
                        stream::read_reply(&outlet, reader, &remote.limits, max_tokens, seed)
                    }
                    Ok(_) => {}
                    Err(error) => outlet.end(specula_protocol::ReplyEvent::Failed { error }),
                }
            }
        });
        let (limits, host) = (self.limits, self.host().to_string());
        let watched = spawned.and_then(|_| {
            let outlet = outlet.clone();
            std::thread::Builder::new()
                .name("remote-deadlines".into())
                .spawn(move || ticket::watch(&outlet, &finished, &limits, &host))
        });
        if let Err(e) = watched {
            outlet.fail(ErrorInfo::internal(format!("starting a remote reply: {e}")));
        }
        ticket
    }

    fn post_stream(&self, agent: &ureq::Agent, body: &str) -> Result<impl Read, ErrorInfo> {
        let request = agent
            .post(format!("{}/chat/completions", self.base_url))
            .header("Content-Type", "application/json")
            .header("Accept", "text/event-stream");
        let response = self.authorized(request).send(body.as_bytes()).map_err(|e| ureq_error(&e))?;
        let response = self.successful(response)?;
        Ok(response.into_body().into_with_config().limit(self.limits.max_body.saturating_add(1)).reader())
    }

    fn authorized<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.key {
            Some(key) => request.header("Authorization", format!("Bearer {key}")),
            None => request,
        }
    }

    /// A 2xx answer, or the error its status and body say.
    fn successful(
        &self,
        response: ureq::http::Response<ureq::Body>,
    ) -> Result<ureq::http::Response<ureq::Body>, ErrorInfo> {
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(response);
        }
        if (300..400).contains(&status) {
            let to = response.headers().get("location").and_then(|v| v.to_str().ok()).unwrap_or("elsewhere");
            return Err(bad(format!(
                "the remote redirected to {}; redirects are not followed (the key stays with the host you named): \
                 use the final URL",
                stream::preview(to)
            )));
        }
        let body = self.read_small(response).unwrap_or_default();
        let said = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(chunk::error_message))
            .unwrap_or_else(|| stream::preview(body.trim()));
        Err(match status {
            401 | 403 => {
                ErrorInfo::new(ErrorCode::Unauthorized, format!("the remote refused the API key ({status}): {said}"))
            }
            _ => ErrorInfo::new(ErrorCode::RemoteError, format!("the remote answered {status}: {said}")),
        })
    }

    /// A small answer's body (a model list, an error), read to its bound.
    fn read_small(&self, response: ureq::http::Response<ureq::Body>) -> Result<String, ErrorInfo> {
        let limit = self.limits.max_small_body;
        let mut reader = response.into_body().into_with_config().limit(limit.saturating_add(1)).reader();
        let mut body = String::new();
        (&mut reader).take(limit + 1).read_to_string(&mut body).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => bad("the remote's answer is not UTF-8 text".into()),
            _ => io_error(&e),
        })?;
        if body.len() as u64 > limit {
            return Err(bad(format!("the remote's answer passed {} KiB; not read", limit / 1024)));
        }
        Ok(body)
    }
}

/// The JSON of a streamed chat request: the options an OpenAI server reads, with greedy as
/// temperature 0 and `top_k` only when it filters (OpenAI's own API refuses it).
fn request_body(model: &str, messages: &[Message], options: &GenerateOptions) -> serde_json::Value {
    let sampling = &options.sampling;
    // An earlier reply's thinking stays here: some servers refuse `reasoning_content` in a
    // request (DeepSeek's API), and templates show it again rarely.
    let messages: Vec<serde_json::Value> =
        messages.iter().map(|m| serde_json::json!({ "role": role_name(m), "content": m.content })).collect();
    let temperature = if sampling.mode == Mode::Greedy { 0.0 } else { sampling.temperature };
    let mut body = serde_json::json!({
        "model": model,
        "messages": messages,
        "stream": true,
        "stream_options": { "include_usage": true },
        "max_tokens": options.max_tokens,
        "temperature": temperature,
        "top_p": sampling.top_p,
        "seed": sampling.seed,
    });
    if sampling.top_k > 0 && sampling.mode != Mode::Greedy {
        body["top_k"] = sampling.top_k.into();
    }
    if !options.stop.is_empty() {
        body["stop"] = options.stop.clone().into();
    }
    body
}

fn role_name(message: &Message) -> &'static str {
    match message.role {
        specula_protocol::Role::System => "system",
        specula_protocol::Role::User => "user",
        specula_protocol::Role::Assistant => "assistant",
        specula_protocol::Role::Tool => "tool",
    }
}

/// `http(s)://host[:port][/path]` up to `/v1`, no trailing slash; no credentials, query or
/// fragment (a key in a URL would end up in logs and the settings).
pub fn normalize_base_url(url: &str) -> Result<String, ErrorInfo> {
    let url = url.trim().trim_end_matches('/');
    let refuse = |why: &str| Err(ErrorInfo::invalid_setting(format!("{why}: {}", stream::preview(url))));
    let Some((scheme, rest)) = url.split_once("://") else {
        return refuse("a remote's URL starts with http:// or https://");
    };
    if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        return refuse("a remote's URL starts with http:// or https://");
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return refuse("the URL names no host");
    }
    if authority.contains('@') {
        return refuse("put the key in the key field, not in the URL");
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#') {
        return refuse("the URL has spaces, a query or a fragment");
    }
    Ok(if url.ends_with("/v1") { url.to_string() } else { format!("{url}/v1") })
}

fn ureq_error(e: &ureq::Error) -> ErrorInfo {
    match e {
        ureq::Error::Timeout(which) => {
            ErrorInfo::new(ErrorCode::Timeout, format!("the remote did not answer in time ({which})"))
        }
        ureq::Error::HostNotFound => ErrorInfo::new(ErrorCode::Unreachable, "the remote's host name is not known"),
        ureq::Error::Io(io) => io_error(io),
        ureq::Error::ConnectionFailed => ErrorInfo::new(ErrorCode::Unreachable, "could not connect to the remote"),
        ureq::Error::BodyExceedsLimit(n) => bad(format!("the remote's answer passed {n} bytes; stopped reading")),
        other => bad(format!("the remote's answer broke HTTP: {other}")),
    }
}

pub(crate) fn io_error(e: &std::io::Error) -> ErrorInfo {
    if let Some(inner) = e.get_ref().and_then(|x| x.downcast_ref::<ureq::Error>()) {
        return ureq_error(inner);
    }
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
            ErrorInfo::new(ErrorCode::Timeout, "the remote went silent; stopped waiting")
        }
        std::io::ErrorKind::ConnectionRefused => {
            ErrorInfo::new(ErrorCode::Unreachable, "the remote refused the connection: is it running?")
        }
        _ => ErrorInfo::new(ErrorCode::Unreachable, format!("the connection to the remote dropped ({e})")),
    }
}

pub(crate) fn bad(message: String) -> ErrorInfo {
    ErrorInfo::new(ErrorCode::BadResponse, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_normalised_to_v1_and_refused_with_credentials_or_other_schemes() {
        assert_eq!(normalize_base_url("http://box:8080").unwrap(), "http://box:8080/v1");
        assert_eq!(normalize_base_url(" https://box/api/v1/ ").unwrap(), "https://box/api/v1");
        for bad in ["box:8080", "ftp://box", "http://user:pw@box", "http://", "http://box/?key=1", "file:///etc"] {
            assert_eq!(normalize_base_url(bad).unwrap_err().code, ErrorCode::InvalidSetting, "{bad}");
        }
    }

    #[test]
    fn the_key_is_never_in_debug_output_and_must_be_one_word() {
        let remote = Remote::new("http://127.0.0.1:9", Some("sk-secret".into())).unwrap();
        assert!(!format!("{remote:?}").contains("sk-secret"));
        assert!(Remote::new("http://127.0.0.1:9", Some("a\r\nX-Evil: 1".into())).is_err());
    }

    #[test]
    fn greedy_is_temperature_zero_and_top_k_goes_only_when_it_filters() {
        let mut options = GenerateOptions { max_tokens: 5, ..Default::default() };
        options.sampling.mode = Mode::Greedy;
        let body = request_body("m", &[Message::new(specula_protocol::Role::User, "hi")], &options);
        assert_eq!(body["temperature"], 0.0);
        assert!(body.get("top_k").is_none());
        assert_eq!(body["messages"][0]["role"], "user");
        options.sampling.mode = Mode::Sample;
        assert_eq!(request_body("m", &[], &options)["top_k"], 40);
    }
}
