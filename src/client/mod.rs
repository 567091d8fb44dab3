//! An MCP client speaking Streamable HTTP: 2026-07-28 by default, with `server/discover`
//! probing and a fallback to the stateless 2025-11-25 `initialize` handshake for older servers.
//!
//! Every request carries the `_meta` envelope and the standard headers (names that are not
//! plain visible ASCII go through the `=?base64?…?=` sentinel), `Mcp-Param-*` headers mirror
//! arguments whose schema carries `x-mcp-header`, and responses may be JSON or SSE (a
//! 2025-11-25 server's stream closed before its answer is resumed with `Last-Event-ID`). An
//! `input_required` result is fulfilled through the handlers the caller registered
//! (elicitation, sampling, roots) and retried with `requestState` echoed byte for byte, for a
//! bounded number of rounds. Every failure is a typed [`ClientError`].

pub mod host;
mod sse;

use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::protocol::types::{CallToolResult, Tool};
use crate::protocol::{LEGACY_VERSIONS, PROTOCOL_VERSION, meta};
use crate::server::HeaderParam;
use crate::transport::headers::encode_value;

/// Why a client operation failed.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientError {
    /// The request could not be sent or the response not read.
    Transport(String),
    /// An HTTP status with no JSON-RPC body.
    Http(u16, String),
    /// A JSON-RPC error.
    Rpc {
        /// The code.
        code: i64,
        /// The message.
        message: String,
        /// The data.
        data: Option<Value>,
    },
    /// The server asked for input the caller has no handler for, or kept asking.
    InputRequired(String),
    /// The response was not valid MCP.
    Protocol(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transport(m) => write!(f, "transport error: {m}"),
            Self::Http(status, m) => write!(f, "HTTP {status}: {m}"),
            Self::Rpc { code, message, .. } => write!(f, "{message} ({code})"),
            Self::InputRequired(m) => write!(f, "input required: {m}"),
            Self::Protocol(m) => write!(f, "protocol error: {m}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// A boxed future returned by input handlers.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, ClientError>> + Send>>;
/// Answers one input request (`params` in, the result object out).
pub type InputHandler = Arc<dyn Fn(Value) -> HandlerFuture + Send + Sync>;

/// Receives notifications from response streams.
pub type NotificationFn = Arc<dyn Fn(&Value) + Send + Sync>;

/// Which protocol generation the client ended up speaking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Negotiated {
    /// 2026-07-28.
    Modern,
    /// A 2025 revision after `initialize`.
    Legacy(&'static str),
}

/// How to connect.
#[derive(Clone)]
pub struct ClientOptions {
    /// `clientInfo`.
    pub name: String,
    /// `clientInfo.version`.
    pub version: String,
    /// Extra headers on every request (e.g. `Authorization`).
    pub headers: Vec<(String, String)>,
    /// Handlers by method: `elicitation/create`, `sampling/createMessage`, `roots/list`. Their
    /// presence declares the matching capability.
    pub handlers: HashMap<String, InputHandler>,
    /// Most `input_required` rounds fulfilled for one call.
    pub max_rounds: usize,
    /// How long the server may keep the client waiting: for a response's head, for all of a
    /// JSON body, for each frame of a call's SSE response (a long tool may stream progress), and
    /// for a call made in process. A listen stream's frames wait `listen_silence` instead.
    pub timeout: Duration,
    /// The longest one SSE response is read, however often it sends: a server that drips
    /// comments forever cannot hold a call for longer.
    pub max_stream_duration: Duration,
    /// How long a listen stream may go without a byte before the client takes it for dead (a
    /// server gone, a connection half-open) and closes it. Keep it above the server's keep-alive
    /// period: this kit's servers send one every 15 s by default (`MCP_KEEPALIVE_SECONDS`, up to
    /// 300).
    pub listen_silence: Duration,
    /// Most input requests one `input_required` round may carry, and most server requests one
    /// response stream of a 2025-11-25 server may carry (each runs a handler: a prompt to the
    /// user, a model call).
    pub max_input_requests: usize,
    /// Try modern first (default) or go straight to the legacy handshake.
    pub modern: bool,
    /// Called with every notification a response stream carries (progress, log messages).
    pub on_notification: Option<NotificationFn>,
    /// Largest response a call reads: a JSON body, or everything one SSE response carries
    /// (with the streams that resume it).
    pub max_response_bytes: usize,
    /// Largest single SSE event (on a call's response or a listen stream).
    pub max_event_bytes: usize,
    /// Most `tools/list` pages followed through `nextCursor`.
    pub max_pages: usize,
    /// Most tools one server's listing may hold, across its pages: past it, listing fails
    /// rather than hold whatever a server sends (each tool is kept, with its schema).
    pub max_tools: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            name: "vercel-mcp-client".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            headers: Vec::new(),
            handlers: HashMap::new(),
            max_rounds: 8,
            timeout: Duration::from_secs(30),
            max_stream_duration: Duration::from_secs(15 * 60),
            listen_silence: Duration::from_secs(60),
            max_input_requests: 16,
            modern: true,
            on_notification: None,
            max_response_bytes: 16 << 20,
            max_event_bytes: 4 << 20,
            max_pages: 100,
            max_tools: 10_000,
        }
    }
}

impl ClientOptions {
    /// Registers a handler for an input request method.
    pub fn handler<F, Fut>(mut self, method: &str, handler: F) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ClientError>> + Send + 'static,
    {
        self.handlers.insert(method.to_owned(), Arc::new(move |params| Box::pin(handler(params))));
        self
    }

    /// Adds a header sent with every request.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    fn capabilities(&self) -> Value {
        let mut caps = Map::new();
        if self.handlers.contains_key("elicitation/create") {
            caps.insert("elicitation".into(), json!({ "form": {} }));
        }
        if self.handlers.contains_key("sampling/createMessage") {
            caps.insert("sampling".into(), json!({}));
        }
        if self.handlers.contains_key("roots/list") {
            caps.insert("roots".into(), json!({}));
        }
        Value::Object(caps)
    }
}

/// Where a client's requests go.
#[derive(Clone)]
enum Target {
    /// A server over HTTP.
    Http(String),
    /// An application in this process, called without a socket (tests of one's own tools).
    InProcess(Arc<crate::transport::App>),
}

/// A response body from either target.
type ResponseBody = http_body_util::combinators::UnsyncBoxBody<Bytes, String>;

/// A connection to one MCP server.
pub struct Client {
    target: Target,
    options: ClientOptions,
    negotiated: Negotiated,
    /// A 2025-11-25 server's session id; renewed when the server no longer knows it.
    session: Mutex<Option<String>>,
    next_id: AtomicU64,
    /// `x-mcp-header` annotations of listed tools, by tool name.
    header_params: Mutex<HashMap<String, Vec<HeaderParam>>>,
    /// Whether the tools were listed (by the caller, or before a call of an unseen tool).
    listed: std::sync::atomic::AtomicBool,
    server: Value,
}

/// Whether server requests on a response stream are answered (a call's stream) or refused (the
/// reply to an answer).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answers {
    Requests,
    None,
}

/// The outcome of one HTTP exchange.
struct Exchange {
    status: StatusCode,
    message: Option<Value>,
    session: Option<String>,
}

impl Client {
    /// Connects: probes `server/discover`, and falls back to `initialize` when the server does
    /// not answer with a modern response.
    pub async fn connect(url: &str, options: ClientOptions) -> Result<Self, ClientError> {
        refuse_headers_in_clear(url, &options.headers)?;
        Self::connect_to(Target::Http(url.to_owned()), options).await
    }

    /// Connects to `app` in this process: every request goes through the same transport a
    /// deployment runs (headers, `_meta`, authentication, MRTR, SSE), without a socket.
    pub async fn in_process(app: Arc<crate::transport::App>, options: ClientOptions) -> Result<Self, ClientError> {
        Self::connect_to(Target::InProcess(app), options).await
    }

    async fn connect_to(target: Target, options: ClientOptions) -> Result<Self, ClientError> {
        let mut client = Self {
            target,
            options,
            negotiated: Negotiated::Modern,
            session: Mutex::new(None),
            next_id: AtomicU64::new(1),
            header_params: Mutex::new(HashMap::new()),
            listed: std::sync::atomic::AtomicBool::new(false),
            server: Value::Null,
        };
        if client.options.modern {
            match client.request("server/discover", Map::new()).await {
                Ok(result) if result.get("supportedVersions").is_some() => {
                    client.server = result;
                    return Ok(client);
                }
                Ok(_) => {}
                // A recognized modern rejection means the server is modern but refused us.
                Err(ClientError::Rpc { code, message, data }) if matches!(code, -32022..=-32020) => {
                    return Err(ClientError::Rpc { code, message, data });
                }
                Err(ClientError::Transport(m)) => return Err(ClientError::Transport(m)),
                Err(_) => {}
            }
        }
        client.initialize().await?;
        Ok(client)
    }

    async fn initialize(&mut self) -> Result<(), ClientError> {
        self.negotiated = Negotiated::Legacy(LEGACY_VERSIONS[0]);
        let (version, result, session) = self.open_session().await?;
        *self.session.lock().expect("session lock") = session;
        // Before the notification: it carries the version the server chose.
        self.negotiated = Negotiated::Legacy(version);
        self.server = result;
        self.acknowledge_session().await
    }

    /// `initialize`: the version the server chose, its answer and the session id it issued. The
    /// caller decides whether the session replaces the one held (kept while a renewal fails, so
    /// the renewal owed is tried again at the next 404).
    async fn open_session(&self) -> Result<(&'static str, Value, Option<String>), ClientError> {
        let params = json!({
            "protocolVersion": LEGACY_VERSIONS[0],
            "capabilities": self.options.capabilities(),
            "clientInfo": { "name": self.options.name, "version": self.options.version },
        });
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "initialize", "params": params });
        let exchange = self.exchange(&body, "initialize", None, Answers::None).await?;
        let session = exchange.session.clone();
        let result = Self::result_of(exchange)?;
        let version = result.get("protocolVersion").and_then(Value::as_str).unwrap_or("");
        let Some(version) = LEGACY_VERSIONS.iter().find(|v| **v == version) else {
            return Err(ClientError::Protocol(format!("the server chose an unsupported version {version}")));
        };
        Ok((version, result, session))
    }

    /// `notifications/initialized`, on the session just opened.
    async fn acknowledge_session(&self) -> Result<(), ClientError> {
        let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        let ack = self.exchange(&initialized, "notifications/initialized", None, Answers::None).await?;
        if !ack.status.is_success() {
            return Err(ClientError::Http(ack.status.as_u16(), "notifications/initialized was refused".into()));
        }
        Ok(())
    }

    /// The generation negotiated.
    pub fn negotiated(&self) -> Negotiated {
        self.negotiated
    }

    /// The `server/discover` (or `initialize`) result.
    pub fn server(&self) -> &Value {
        &self.server
    }

    /// Sends one request and returns its result (fulfilling nothing).
    pub async fn request(&self, method: &str, mut params: Map<String, Value>) -> Result<Value, ClientError> {
        if self.negotiated == Negotiated::Modern {
            let mut envelope = match params.remove("_meta") {
                Some(Value::Object(meta)) => meta,
                _ => Map::new(),
            };
            envelope.entry(meta::PROTOCOL_VERSION).or_insert_with(|| json!(PROTOCOL_VERSION));
            envelope.entry(meta::CLIENT_CAPABILITIES).or_insert_with(|| self.options.capabilities());
            envelope
                .entry(meta::CLIENT_INFO)
                .or_insert_with(|| json!({ "name": self.options.name, "version": self.options.version }));
            params.insert("_meta".into(), Value::Object(envelope));
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let exchange = self.post(&body, method, Some(&params)).await?;
        match Self::result_of(exchange) {
            // A server that refuses the version but lists ours as supported (a version switch,
            // a stale edge) gets one retry of the same request.
            Err(ClientError::Rpc { code: -32022, data: Some(data), .. })
                if self.negotiated == Negotiated::Modern
                    && data
                        .get("supported")
                        .and_then(Value::as_array)
                        .is_some_and(|s| s.iter().any(|v| v == PROTOCOL_VERSION)) =>
            {
                let id = self.next_id.fetch_add(1, Ordering::SeqCst);
                let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
                Self::result_of(self.post(&body, method, Some(&params)).await?)
            }
            outcome => outcome,
        }
    }

    fn result_of(exchange: Exchange) -> Result<Value, ClientError> {
        match exchange.message {
            Some(message) if message.get("jsonrpc").is_none() => {
                let detail =
                    message.get("error_description").or(message.get("error")).and_then(Value::as_str).unwrap_or("");
                Err(ClientError::Http(exchange.status.as_u16(), detail.to_owned()))
            }
            Some(message) => {
                if let Some(error) = message.get("error").filter(|e| e.is_object()) {
                    return Err(ClientError::Rpc {
                        code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                        message: error.get("message").and_then(Value::as_str).unwrap_or("").to_owned(),
                        data: error.get("data").cloned(),
                    });
                }
                message
                    .get("result")
                    .cloned()
                    .ok_or_else(|| ClientError::Protocol("a response without a result".into()))
            }
            None => Err(ClientError::Http(exchange.status.as_u16(), "no JSON-RPC response".into())),
        }
    }

    fn headers_for(&self, method: &str, params: Option<&Map<String, Value>>) -> Vec<(String, String)> {
        let mut headers = vec![("Content-Type".to_owned(), "application/json".to_owned())];
        headers.push(("Accept".into(), "application/json, text/event-stream".into()));
        match self.negotiated {
            Negotiated::Modern => {
                headers.push(("MCP-Protocol-Version".into(), PROTOCOL_VERSION.into()));
                headers.push(("Mcp-Method".into(), method.into()));
                let name_field = match method {
                    "tools/call" | "prompts/get" => Some("name"),
                    "resources/read" => Some("uri"),
                    "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
                    _ => None,
                };
                if let Some(name) = name_field.and_then(|f| params?.get(f)?.as_str()) {
                    headers.push(("Mcp-Name".into(), encode_value(name).into_owned()));
                }
                if method == "tools/call" {
                    headers.extend(self.param_headers(params));
                }
            }
            Negotiated::Legacy(version) if method != "initialize" => {
                headers.push(("MCP-Protocol-Version".into(), version.into()));
                if let Some(session) = self.session.lock().expect("session lock").clone() {
                    headers.push(("Mcp-Session-Id".into(), session));
                }
            }
            Negotiated::Legacy(_) => {}
        }
        headers.extend(self.options.headers.iter().cloned());
        headers
    }

    /// `Mcp-Param-*` for the arguments a listed tool annotates with `x-mcp-header`.
    fn param_headers(&self, params: Option<&Map<String, Value>>) -> Vec<(String, String)> {
        let Some(params) = params else { return Vec::new() };
        let Some(tool) = params.get("name").and_then(Value::as_str) else { return Vec::new() };
        let annotations = self.header_params.lock().expect("header params lock");
        let Some(list) = annotations.get(tool) else { return Vec::new() };
        let arguments = params.get("arguments");
        list.iter()
            .filter_map(|param| {
                let value = match param.value_in(arguments?)? {
                    Value::String(s) => s.clone(),
                    Value::Bool(b) => b.to_string(),
                    Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
                    // A whole number written as a float is the integer the server takes it for.
                    number @ Value::Number(_) => crate::server::schema::whole_numbers_as_integers(number)?.to_string(),
                    _ => return None,
                };
                Some((format!("Mcp-Param-{}", param.header), encode_value(&value).into_owned()))
            })
            .collect()
    }

    async fn post(
        &self,
        body: &Value,
        method: &str,
        params: Option<&Map<String, Value>>,
    ) -> Result<Exchange, ClientError> {
        let exchange = self.exchange(body, method, params, Answers::Requests).await?;
        // A 2025-11-25 server answers 404 to a session it no longer knows (expired, or its
        // sealing key rotated): the client starts a new session and sends the request again, once.
        let session_lost = exchange.status == StatusCode::NOT_FOUND
            && matches!(self.negotiated, Negotiated::Legacy(_))
            && self.session.lock().expect("session lock").is_some();
        if !session_lost {
            return Ok(exchange);
        }
        let (version, _, session) = self.open_session().await?;
        if self.negotiated != Negotiated::Legacy(version) {
            // The session held is kept: the one just opened speaks another version.
            return Err(ClientError::Protocol(format!("the new session chose another version, {version}")));
        }
        *self.session.lock().expect("session lock") = session;
        self.acknowledge_session().await?;
        self.exchange(body, method, params, Answers::Requests).await
    }

    /// One POST and its response. A 2025-11-25 server may ask the client things on the stream
    /// of a call (answered by POST, at most `max_input_requests` of them), never on the reply
    /// to such an answer: that would let a server keep the client answering for ever.
    async fn exchange(
        &self,
        body: &Value,
        method: &str,
        params: Option<&Map<String, Value>>,
        answers: Answers,
    ) -> Result<Exchange, ClientError> {
        let response = self.send(body, method, params).await?;
        let status = response.status();
        let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let is_sse = is_event_stream(response.headers());
        let id = body.get("id").cloned();
        let mut body_stream = response.into_body();
        let limit = self.options.max_response_bytes;
        let too_large = || ClientError::Transport(format!("the response is larger than {limit} bytes"));
        if !is_sse {
            let bytes =
                tokio::time::timeout(self.options.timeout, http_body_util::Limited::new(body_stream, limit).collect())
                    .await
                    .map_err(|_| ClientError::Transport("timed out".into()))?
                    .map_err(|error| {
                        if error.is::<http_body_util::LengthLimitError>() {
                            too_large()
                        } else {
                            ClientError::Transport("response unreadable".into())
                        }
                    })?
                    .to_bytes();
            let message = serde_json::from_slice::<Value>(&bytes).ok().filter(Value::is_object);
            // An answer to a request names that request (an error that could not read the id
            // may name none); one naming another is not this request's answer.
            if let (Some(sent), Some(named)) =
                (&id, message.as_ref().and_then(|m| m.get("id")).filter(|n| !n.is_null()))
            {
                if sent != named {
                    return Err(ClientError::Protocol("the server answered another request's id".into()));
                }
            }
            return Ok(Exchange { status, message, session });
        }
        // SSE: read events until the response to our id arrives.
        let mut reader = sse::EventReader::new(self.options.max_event_bytes);
        let mut read = 0usize;
        let mut answered = 0usize;
        let ends = tokio::time::Instant::now() + self.options.max_stream_duration;
        // Events read, and how many resumptions in a row brought none (each waits twice as long).
        let (mut events, mut events_when_resumed, mut idle_resumptions) = (0usize, 0usize, 0u32);
        loop {
            // Checked before each read, not left to the timeout: a server that keeps the socket
            // full always has a frame ready, which a timeout polls before its clock.
            let left = ends.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(ClientError::Transport("timed out".into()));
            }
            let frame = tokio::time::timeout(self.options.timeout.min(left), body_stream.frame())
                .await
                .map_err(|_| ClientError::Transport("timed out".into()))?;
            let frame = match frame {
                Some(Ok(frame)) => frame,
                // Ended or cut before the answer. A 2025-11-25 server may close a stream on
                // purpose once it has given it an event id (SSE polling), and then expects the
                // client to ask for the rest; a connection cut on the way is resumed alike.
                ended => {
                    let Some(last_event_id) = self.resumable_from(&reader) else {
                        if ended.is_some() {
                            return Err(ClientError::Transport("stream broken".into()));
                        }
                        break;
                    };
                    idle_resumptions = if events == events_when_resumed { idle_resumptions + 1 } else { 0 };
                    events_when_resumed = events;
                    let wait = reconnect_wait(reader.retry(), idle_resumptions);
                    let session = session.clone().or_else(|| self.session.lock().expect("session lock").clone());
                    body_stream = self.resume(last_event_id, wait, session, ends).await?;
                    reader.reconnected();
                    continue;
                }
            };
            let Some(bytes) = frame.data_ref() else { continue };
            read += bytes.len();
            if read > limit {
                return Err(too_large());
            }
            for data in reader.push(bytes).map_err(|e| ClientError::Transport(e.to_string()))? {
                events += 1;
                let Ok(message) = serde_json::from_str::<Value>(&data) else { continue };
                match (message.get("method").and_then(Value::as_str), message.get("id")) {
                    (Some(_), None) => {
                        if let Some(callback) = &self.options.on_notification {
                            callback(&message);
                        }
                    }
                    // A 2025 server asking us something on the call's stream: answer by POST.
                    (Some(method), Some(request_id)) if self.negotiated != Negotiated::Modern => {
                        if answers == Answers::None {
                            return Err(ClientError::Protocol(
                                "the server asked something on the reply to an answer".into(),
                            ));
                        }
                        // A ping asks for nothing of the user: answered, and not counted.
                        answered += usize::from(method != "ping");
                        if answered > self.options.max_input_requests {
                            return Err(ClientError::InputRequired(format!(
                                "the server asked more than {} things on one call",
                                self.options.max_input_requests
                            )));
                        }
                        self.answer_server_request(method, request_id.clone(), message.get("params").cloned()).await?;
                    }
                    (Some(_), Some(_)) => {
                        return Err(ClientError::Protocol(
                            "a 2026-07-28 server sent a request on a response stream".into(),
                        ));
                    }
                    (None, response_id) if response_id == id.as_ref() => {
                        return Ok(Exchange { status, message: Some(message), session });
                    }
                    // An error that could not read the request's id names none: on this
                    // response it can only be this request's.
                    (None, None | Some(Value::Null)) if message.get("error").is_some() => {
                        return Ok(Exchange { status, message: Some(message), session });
                    }
                    (None, _) => {}
                }
            }
        }
        Ok(Exchange { status, message: None, session })
    }

    /// The event id a response stream that ended early can be resumed from: only a 2025-11-25
    /// stream (2026-07-28 has no resumability) that named one, short enough and fit to be sent
    /// back as a header. The id is the server's to choose, so anything else is not resumed.
    fn resumable_from<'r>(&self, reader: &'r sse::EventReader) -> Option<&'r str> {
        let id = reader.last_event_id();
        let fit = !id.is_empty() && id.len() <= MAX_EVENT_ID_BYTES && HeaderValue::from_str(id).is_ok();
        (matches!(self.negotiated, Negotiated::Legacy(_)) && fit).then_some(id)
    }

    /// Asks a 2025-11-25 server for the rest of a response stream it closed: after `wait`, a GET
    /// carrying `Last-Event-ID`, `session` (the one the response named, else the one held) and
    /// the caller's headers, if that can be before `ends`. Anything but a stream in answer ends
    /// the call.
    async fn resume(
        &self,
        last_event_id: &str,
        wait: Duration,
        session: Option<String>,
        ends: tokio::time::Instant,
    ) -> Result<ResponseBody, ClientError> {
        let too_late = || {
            ClientError::Transport(
                "timed out: the server closed the stream and asked to be called back too late".into(),
            )
        };
        if wait >= ends.saturating_duration_since(tokio::time::Instant::now()) {
            return Err(too_late());
        }
        tokio::time::sleep(wait).await;
        let mut headers = vec![("Accept".to_owned(), "text/event-stream".to_owned())];
        if let Negotiated::Legacy(version) = self.negotiated {
            headers.push(("MCP-Protocol-Version".into(), version.into()));
        }
        if let Some(session) = session {
            headers.push(("Mcp-Session-Id".into(), session));
        }
        headers.push(("Last-Event-ID".into(), last_event_id.to_owned()));
        headers.extend(self.options.headers.iter().cloned());
        let left = ends.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(too_late());
        }
        let response = self.send_with(http::Method::GET, headers, Bytes::new(), self.options.timeout.min(left)).await?;
        if response.status() != StatusCode::OK || !is_event_stream(response.headers()) {
            return Err(ClientError::Http(response.status().as_u16(), "the server did not resume the stream".into()));
        }
        Ok(response.into_body())
    }

    /// POSTs `body` with the headers `method` needs, to whichever target this client has.
    async fn send(
        &self,
        body: &Value,
        method: &str,
        params: Option<&Map<String, Value>>,
    ) -> Result<http::Response<ResponseBody>, ClientError> {
        let headers = self.headers_for(method, params);
        let payload = Bytes::from(serde_json::to_vec(body).expect("json"));
        self.send_with(http::Method::POST, headers, payload, self.options.timeout).await
    }

    /// One request to whichever target this client has; `timeout` bounds the wait for its head.
    async fn send_with(
        &self,
        method: http::Method,
        headers: Vec<(String, String)>,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<http::Response<ResponseBody>, ClientError> {
        let with_headers = |url: &str| {
            let mut request = Request::builder().method(method.clone()).uri(url);
            for (name, value) in &headers {
                let value = HeaderValue::from_str(value)
                    .map_err(|_| ClientError::Protocol(format!("invalid {name} header value")))?;
                request = request.header(name, value);
            }
            Ok::<_, ClientError>(request)
        };
        match &self.target {
            Target::Http(url) => {
                let request = with_headers(url)?
                    .body(Full::new(payload))
                    .map_err(|_| ClientError::Protocol("invalid request".into()))?;
                let response = crate::outbound::open(request, timeout).await.map_err(ClientError::Transport)?;
                Ok(response.map(|body| body.map_err(|error| error.to_string()).boxed_unsync()))
            }
            Target::InProcess(app) => {
                let request = with_headers("/api/mcp")?
                    .body(payload)
                    .map_err(|_| ClientError::Protocol("invalid request".into()))?;
                let response = tokio::time::timeout(timeout, crate::transport::handle(app, request))
                    .await
                    .map_err(|_| ClientError::Transport("timed out".into()))?;
                Ok(response.map(|body| body.map_err(|never| match never {}).boxed_unsync()))
            }
        }
    }

    async fn answer_server_request(&self, method: &str, id: Value, params: Option<Value>) -> Result<(), ClientError> {
        refuse_undeclared(method, params.as_ref())?;
        let reply = match self.options.handlers.get(method) {
            // Every party answers a ping with an empty result (2025-11-25 basic/utilities/ping).
            None if method == "ping" => json!({ "jsonrpc": "2.0", "id": id, "result": {} }),
            Some(handler) => match handler(params.unwrap_or(json!({}))).await {
                Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
                Err(error) => {
                    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32603, "message": error.to_string() } })
                }
            },
            None => {
                json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32601, "message": format!("Method not found: {method}") } })
            }
        };
        let exchange = Box::pin(self.exchange(&reply, "", None, Answers::None)).await?;
        if !exchange.status.is_success() {
            return Err(ClientError::Http(exchange.status.as_u16(), "the server refused our answer".into()));
        }
        Ok(())
    }

    /// Opens `subscriptions/listen` with `notifications` (the filter) and returns the messages
    /// of the stream as they arrive: the acknowledgement first, then notifications, and the
    /// final result when the server closes the stream gracefully.
    pub async fn listen(&self, notifications: Value) -> Result<tokio::sync::mpsc::Receiver<Value>, ClientError> {
        if self.negotiated != Negotiated::Modern {
            return Err(ClientError::Protocol("subscriptions/listen needs a 2026-07-28 server".into()));
        }
        let mut params = Map::new();
        params.insert("notifications".into(), notifications);
        params.insert(
            "_meta".into(),
            json!({
                meta::PROTOCOL_VERSION: PROTOCOL_VERSION,
                meta::CLIENT_CAPABILITIES: self.options.capabilities(),
            }),
        );
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": params });
        let response = self.send(&body, "subscriptions/listen", Some(&params)).await?;
        let is_sse = is_event_stream(response.headers());
        if !response.status().is_success() || !is_sse {
            // Refused, or answered at once with a JSON body (an error the server sent with a 2xx):
            // the caller gets the error, not a stream that closes without a word.
            let status = response.status().as_u16();
            let refused = if response.status().is_success() {
                ClientError::Protocol("subscriptions/listen was answered without a stream".into())
            } else {
                ClientError::Http(status, "listen refused".into())
            };
            let limited = http_body_util::Limited::new(response.into_body(), self.options.max_response_bytes);
            let bytes = match tokio::time::timeout(self.options.timeout, limited.collect()).await {
                Ok(Ok(collected)) => collected.to_bytes(),
                _ => Bytes::new(),
            };
            return match serde_json::from_slice::<Value>(&bytes) {
                Ok(message) => {
                    Self::result_of(Exchange { status: StatusCode::OK, message: Some(message), session: None })
                        .and_then(|_| Err(refused))
                }
                Err(_) => Err(refused),
            };
        }
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let mut body_stream = response.into_body();
        let mut reader = sse::EventReader::new(self.options.max_event_bytes);
        let (quiet, ends) =
            (self.options.listen_silence, tokio::time::Instant::now() + self.options.max_stream_duration);
        tokio::spawn(async move {
            loop {
                // Ends when the caller drops the receiver, even while the server sends nothing;
                // when the server is silent for longer than `listen_silence` (a live stream sends
                // keep-alive comments: a silent one is dead, or half-open); and at the longest
                // a stream is read. The receiver then sees it close.
                // The end is checked before each read: a server that keeps the socket full
                // always has a frame ready, which a timeout would take before its clock.
                let left = ends.saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    return;
                }
                let wait = quiet.min(left);
                let frame = tokio::select! {
                    frame = tokio::time::timeout(wait, body_stream.frame()) => frame,
                    () = tx.closed() => return,
                };
                let Ok(Some(Ok(frame))) = frame else { return };
                let Some(bytes) = frame.data_ref() else { continue };
                // An event over the bound ends the stream: the receiver sees it close.
                let Ok(events) = reader.push(bytes) else { return };
                for data in events {
                    if let Ok(message) = serde_json::from_str::<Value>(&data) {
                        if tx.send(message).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Ok(rx)
    }

    /// Every tool (following `nextCursor`), remembering `x-mcp-header` annotations. A tool whose
    /// annotations break the rules is dropped, as the spec asks of clients, and so is an entry
    /// that is not a tool: one bad entry does not cost the caller the server's other tools.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, ClientError> {
        self.listed.store(true, Ordering::SeqCst);
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        // Every cursor followed: a server that hands one back again (at once, or after others)
        // would have the listing go round until the page limit, adding the same tools each time.
        let mut followed = std::collections::HashSet::new();
        for _ in 0..self.options.max_pages {
            let mut params = Map::new();
            if let Some(cursor) = &cursor {
                params.insert("cursor".into(), json!(cursor));
            }
            let mut page = self.request("tools/list", params).await?;
            let listed = match page.get_mut("tools").map(Value::take) {
                Some(Value::Array(listed)) => listed,
                _ => Vec::new(),
            };
            if tools.len().saturating_add(listed.len()) > self.options.max_tools {
                return Err(ClientError::Protocol(format!(
                    "tools/list holds more than {} tools",
                    self.options.max_tools
                )));
            }
            for tool in listed {
                let schema = tool.get("inputSchema");
                let Ok(annotations) = schema.map_or(Ok(Vec::new()), crate::server::input_schema_header_params) else {
                    continue;
                };
                let Ok(typed) = serde_json::from_value::<Tool>(tool) else { continue };
                self.header_params.lock().expect("header params lock").insert(typed.name.clone(), annotations);
                tools.push(typed);
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !followed.insert(next.to_owned()) => {
                    return Err(ClientError::Protocol(
                        "tools/list returned a nextCursor it had returned before".into(),
                    ));
                }
                Some(next) => cursor = Some(next.to_owned()),
                None => return Ok(tools),
            }
        }
        Err(ClientError::Protocol(format!("tools/list has more than {} pages", self.options.max_pages)))
    }

    /// Calls a tool, fulfilling `input_required` rounds through the registered handlers. A
    /// tool that failed is an `Ok` result with `is_error` set (its text says why); a refused
    /// call is a [`ClientError`]. The call asks for progress (`_meta.progressToken`), so a server
    /// that streams answers a long call as it goes: its progress reaches `on_notification`, and
    /// `timeout` bounds each wait between two messages rather than the whole call.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<CallToolResult, ClientError> {
        // Its `x-mcp-header` annotations are learnt from the tool list: read once, before the
        // first call of a tool the client has not seen listed (a strict server refuses a call
        // without the `Mcp-Param-*` headers they ask for).
        let known = self.header_params.lock().expect("header params lock").contains_key(name);
        if !known && !self.listed.swap(true, Ordering::SeqCst) {
            let _ = self.list_tools().await;
        }
        let mut params = Map::new();
        params.insert("name".into(), json!(name));
        params.insert("arguments".into(), arguments);
        // Unique among this client's calls, and the same for each round of this one (one round
        // is in flight at a time).
        let token = format!("call-{}", self.next_id.fetch_add(1, Ordering::SeqCst));
        params.insert("_meta".into(), json!({ "progressToken": token }));
        let result = self.call_with_input("tools/call", params).await?;
        serde_json::from_value(result).map_err(|e| ClientError::Protocol(format!("tools/call result: {e}")))
    }

    /// Sends an MRTR-capable request (`tools/call`, `prompts/get`, `resources/read`) and
    /// fulfils any `input_required` rounds.
    pub async fn call_with_input(&self, method: &str, params: Map<String, Value>) -> Result<Value, ClientError> {
        let mut retry = params.clone();
        for round in 0..=self.options.max_rounds {
            let result = self.request(method, retry.clone()).await?;
            match result.get("resultType") {
                None => return Ok(result),
                Some(Value::String(kind)) if kind == "complete" => return Ok(result),
                Some(Value::String(kind)) if kind == "input_required" => {}
                // `task` included: this client never declares the tasks extension.
                Some(other) => {
                    return Err(ClientError::Protocol(format!("{method} answered with an unknown resultType {other}")));
                }
            }
            if round == self.options.max_rounds {
                // No round left to send answers in: nobody is asked for one that would be dropped.
                break;
            }
            let mut responses = Map::new();
            if let Some(Value::Object(requests)) = result.get("inputRequests") {
                if requests.len() > self.options.max_input_requests {
                    return Err(ClientError::InputRequired(format!(
                        "the server asked {} things in one round (at most {})",
                        requests.len(),
                        self.options.max_input_requests
                    )));
                }
                for (key, request) in requests {
                    let method = request.get("method").and_then(Value::as_str).unwrap_or("");
                    refuse_undeclared(method, request.get("params"))?;
                    let handler = self
                        .options
                        .handlers
                        .get(method)
                        .ok_or_else(|| ClientError::InputRequired(format!("no handler for {method}")))?;
                    let answer = handler(request.get("params").cloned().unwrap_or(json!({}))).await?;
                    responses.insert(key.clone(), answer);
                }
            }
            retry = params.clone();
            retry.insert("inputResponses".into(), Value::Object(responses));
            if let Some(state) = result.get("requestState") {
                // Echoed exactly as received.
                retry.insert("requestState".into(), state.clone());
            }
        }
        Err(ClientError::InputRequired(format!("still asking after {} rounds", self.options.max_rounds)))
    }
}

/// How long a client waits before resuming a stream whose server named no `retry`.
pub const RECONNECT_WAIT: Duration = Duration::from_secs(1);

/// The shortest wait before resuming a stream, whatever `retry` says: a server asking for none
/// would otherwise have the client call it back in a tight loop.
pub const RECONNECT_FLOOR: Duration = Duration::from_millis(100);

/// How far resumptions that bring no event back off (unless `retry` itself asks for longer).
pub const RECONNECT_BACKOFF_CAP: Duration = Duration::from_secs(30);

/// The longest event id a stream is resumed from: it goes back to the server as a header.
pub const MAX_EVENT_ID_BYTES: usize = 1024;

/// The wait before resuming a stream: the server's `retry` (else [`RECONNECT_WAIT`], and never
/// under [`RECONNECT_FLOOR`]), doubled for each resumption in a row that brought no event, up to
/// [`RECONNECT_BACKOFF_CAP`]. A server that polls while a long tool runs may close empty streams
/// for minutes; the call's `max_stream_duration` is what ends that.
fn reconnect_wait(retry: Option<Duration>, idle_resumptions: u32) -> Duration {
    let base = retry.unwrap_or(RECONNECT_WAIT).max(RECONNECT_FLOOR);
    base.saturating_mul(1 << idle_resumptions.min(16)).min(base.max(RECONNECT_BACKOFF_CAP))
}

/// Whether a response is an SSE stream (media types are case-insensitive, RFC 9110 §8.3.1).
fn is_event_stream(headers: &http::HeaderMap) -> bool {
    let content_type = headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("text/event-stream")
}

/// A server request this client never declared it would answer, refused whichever way it came
/// (an `input_required` round, or a 2025 server's request on a call's stream): the client's
/// elicitation is form mode only, so a URL to open is never handed to a form handler.
fn refuse_undeclared(method: &str, params: Option<&Value>) -> Result<(), ClientError> {
    let mode = params.and_then(|p| p.get("mode")).and_then(Value::as_str);
    if method == "elicitation/create" && mode.is_some_and(|mode| mode != "form") {
        return Err(ClientError::InputRequired("the server asked for an undeclared elicitation mode".into()));
    }
    Ok(())
}

/// Headers of the caller's (a token, usually) go over TLS, or to this machine: plain `http://` to
/// another host would hand them to anyone on the path. Refused before anything is sent.
fn refuse_headers_in_clear(url: &str, headers: &[(String, String)]) -> Result<(), ClientError> {
    let parsed = url::Url::parse(url).map_err(|_| ClientError::Protocol(format!("{url:?} is not a URL")))?;
    if !headers.is_empty() && !crate::outbound::encrypted_or_loopback(url) {
        return Err(ClientError::Protocol(format!(
            "refusing to send headers over plain http to {}: use https, or a loopback address",
            parsed.host_str().unwrap_or("")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumption_waits_what_the_server_asked_and_backs_off_while_it_brings_nothing() {
        let ms = Duration::from_millis;
        assert_eq!(reconnect_wait(None, 0), RECONNECT_WAIT);
        assert_eq!(reconnect_wait(Some(ms(250)), 0), ms(250));
        assert_eq!(reconnect_wait(Some(ms(0)), 0), RECONNECT_FLOOR, "never a tight loop");
        assert_eq!(reconnect_wait(Some(ms(250)), 2), ms(1000));
        assert_eq!(reconnect_wait(Some(ms(250)), 40), RECONNECT_BACKOFF_CAP);
        assert_eq!(reconnect_wait(Some(ms(90_000)), 3), ms(90_000), "a longer retry is the server's to ask");
    }
}
