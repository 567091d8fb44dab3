//! Test support: a loopback server on a free port and a minimal HTTP/1.1 client, so tests
//! exercise the real socket path without extra dependencies.

#![allow(dead_code)]

pub mod process;
pub mod redis;
pub mod tokens;
pub mod upstream;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use vercel_mcp::protocol::LogLevel;
use vercel_mcp::protocol::types::{CallToolResult, InputRequest, Resource, ResourceContents};
use vercel_mcp::server::{InputRequired, McpServer, NoArguments, Outcome, ToolDef, ToolError};
use vercel_mcp::state::{ChangeEvent, ManualClock};
use vercel_mcp::{App, Parts, local};

/// The request `_meta` of a 2026-07-28 client that declares `capabilities`.
pub fn meta(capabilities: Value) -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": capabilities})
}

/// The request `_meta` of a client that declares the tasks extension (and elicitation).
pub fn with_tasks() -> Value {
    meta(json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}))
}

/// A server running on 127.0.0.1 for the duration of a test.
pub struct TestServer {
    pub addr: std::net::SocketAddr,
}

impl TestServer {
    pub async fn start(app: Arc<App>) -> Self {
        Self::start_routes(local::Routes::with_mcp(app)).await
    }

    pub async fn start_routes(routes: local::Routes) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(local::serve_listener(routes, listener));
        Self { addr }
    }

    /// A request builder for `/api/mcp`.
    pub fn post(&self, body: impl Into<String>) -> Call {
        Call {
            addr: self.addr,
            method: "POST",
            path: "/api/mcp".into(),
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.into(),
        }
    }

    /// A POST to another route of the project.
    pub fn post_to(&self, path: &str, body: impl Into<String>) -> Call {
        Call {
            addr: self.addr,
            method: "POST",
            path: path.into(),
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.into(),
        }
    }

    /// Calls a tool and returns its result object.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Value {
        let reply = self.modern(json!(1), "tools/call", json!({ "name": name, "arguments": arguments })).send().await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        reply.json()["result"].clone()
    }

    pub fn request(&self, method: &'static str, path: &str) -> Call {
        Call { addr: self.addr, method, path: path.into(), headers: vec![], body: String::new() }
    }

    /// A `tools/call` of `tool` (no arguments) from a client that declares the tasks extension:
    /// a tool that requires a task answers with one.
    pub fn call_as_task(&self, tool: &str) -> Call {
        self.modern(json!(1), "tools/call", json!({"name": tool, "arguments": {}, "_meta": with_tasks()}))
    }

    /// A 2025-11-25 request: the body as given, under that revision's version header.
    pub fn legacy(&self, body: Value) -> Call {
        self.post(body.to_string()).header("MCP-Protocol-Version", "2025-11-25")
    }

    /// A 2025-11-25 `initialize` declaring `capabilities`; the sealed session id that carries them.
    pub async fn legacy_session(&self, capabilities: Value) -> String {
        let body = json!({"jsonrpc":"2.0","id":0,"method":"initialize",
            "params":{"protocolVersion":"2025-11-25","capabilities":capabilities,"clientInfo":{"name":"c","version":"1"}}});
        self.legacy(body).send().await.header("mcp-session-id").expect("a session id").to_owned()
    }

    /// A modern request with every header set from the body.
    pub fn modern(&self, id: Value, method: &str, params: Value) -> Call {
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": with_meta(params) });
        let mut call =
            self.post(body.to_string()).header("MCP-Protocol-Version", "2026-07-28").header("Mcp-Method", method);
        let name = match method {
            "tools/call" | "prompts/get" => body["params"]["name"].as_str().map(str::to_owned),
            "resources/read" => body["params"]["uri"].as_str().map(str::to_owned),
            _ => None,
        };
        if let Some(name) = name {
            call = call.header("Mcp-Name", &vercel_mcp::transport::headers::encode_value(&name));
        }
        call
    }
}

/// Every `.rs` file under the crate's `dir` (recursively), as paths below that directory, sorted.
pub fn rust_files_under(dir: &str) -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path.strip_prefix(&root).unwrap().to_owned());
            }
        }
    }
    files.sort();
    files
}

/// The JSON payload of a tool result's single text block (the job tools' convention).
pub fn payload(result: &Value) -> Value {
    assert_ne!(result["isError"], true, "unexpected tool error: {result}");
    serde_json::from_str(result["content"][0]["text"].as_str().expect("a text block")).expect("a JSON payload")
}

/// The text of a tool error result.
pub fn error_text(result: &Value) -> String {
    assert_eq!(result["isError"], true, "expected a tool error: {result}");
    result["content"][0]["text"].as_str().unwrap().to_owned()
}

/// `params` with the required `_meta` keys, declaring `capabilities`.
pub fn with_capabilities(mut params: Value, capabilities: Value) -> Value {
    params["_meta"] = meta(capabilities);
    params
}

/// Adds the required `_meta` keys (unless the params already carry `_meta`).
pub fn with_meta(params: Value) -> Value {
    if params.get("_meta").is_some() { params } else { with_capabilities(params, json!({})) }
}

pub struct Call {
    addr: std::net::SocketAddr,
    method: &'static str,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// How many chunks carried a chunked body (`None` when it was not chunked): how many frames
    /// the server's body yielded, since hyper sends each data frame as a chunk.
    pub chunks: Option<usize>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// The JSON messages of an SSE body, in order.
    pub fn events(&self) -> Vec<Value> {
        self.text().lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect()
    }

    /// The error code of a JSON-RPC error body.
    pub fn code(&self) -> i64 {
        self.json()["error"]["code"].as_i64().unwrap_or_else(|| panic!("no error code in {}", self.text()))
    }
}

impl Call {
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn without(mut self, name: &str) -> Self {
        self.headers.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
        self
    }

    pub fn replace(self, name: &str, value: &str) -> Self {
        self.without(name).header(name, value)
    }

    /// Sends the same request to another route.
    #[allow(dead_code)]
    pub fn at(mut self, path: &str) -> Self {
        self.path = path.into();
        self
    }

    fn head(&self) -> String {
        let mut head =
            format!("{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n", self.method, self.path, self.addr);
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", self.body.len()));
        head
    }

    /// Sends the request and reads the whole response.
    pub async fn send(self) -> Reply {
        bounded("a request", async {
            let mut stream = TcpStream::connect(self.addr).await.unwrap();
            stream.write_all(self.head().as_bytes()).await.unwrap();
            stream.write_all(self.body.as_bytes()).await.unwrap();
            let mut raw = Vec::new();
            stream.read_to_end(&mut raw).await.unwrap();
            parse(&raw)
        })
        .await
    }

    /// Sends the request and returns the open stream after the response head, for SSE tests.
    pub async fn open(self) -> (u16, String, TcpStream) {
        bounded("a response head", async {
            let mut stream = TcpStream::connect(self.addr).await.unwrap();
            stream.write_all(self.head().as_bytes()).await.unwrap();
            stream.write_all(self.body.as_bytes()).await.unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                stream.read_exact(&mut byte).await.unwrap();
                head.push(byte[0]);
            }
            let head = String::from_utf8(head).unwrap();
            let status = head[9..12].parse().unwrap();
            (status, head, stream)
        })
        .await
    }
}

/// How long any network wait of a test may take before the test fails (rather than hangs).
pub const NETWORK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A loopback address that accepts connections and never answers (what it is sent is read and
/// dropped): a store or database that hangs rather than refuses.
pub async fn black_hole() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut stream, &mut tokio::io::sink()).await;
            });
        }
    });
    addr
}

/// Runs `future`, failing the test if it takes longer than [`NETWORK_WAIT`].
pub async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(NETWORK_WAIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what} took more than {} s", NETWORK_WAIT.as_secs()),
    }
}

/// Waits, at most [`NETWORK_WAIT`], until a child process prints a line containing `listening`
/// on `stdout` (the local run and the edge announce their bound socket so), failing the test if
/// it exits or stays silent instead. The rest of its output is read and dropped on a thread until
/// the process closes it, so a late write never meets a closed pipe.
pub fn await_listening(stdout: std::process::ChildStdout, what: &str) {
    use std::io::BufRead;
    let (heard, listening) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("listening") {
                let _ = heard.send(());
            }
        }
    });
    match listening.recv_timeout(NETWORK_WAIT) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} was not listening after {} s", NETWORK_WAIT.as_secs())
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what} exited before listening"),
    }
}

/// Reads SSE `data:` messages from an open chunked stream until `n` have arrived.
pub async fn read_events(stream: &mut TcpStream, n: usize) -> Vec<Value> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let (text, events) = sse_events(&buffer);
        if events.len() >= n {
            return events;
        }
        let read = bounded("the next SSE event", stream.read(&mut chunk)).await.unwrap();
        assert!(read > 0, "stream ended after {} events: {text}", events.len());
        buffer.extend_from_slice(&chunk[..read]);
    }
}

/// The bytes read so far as text, and the JSON events in them.
fn sse_events(buffer: &[u8]) -> (String, Vec<Value>) {
    let text = String::from_utf8_lossy(buffer).into_owned();
    let events =
        text.lines().filter_map(|l| l.strip_prefix("data: ")).filter_map(|d| serde_json::from_str(d).ok()).collect();
    (text, events)
}

/// Every event of an SSE stream up to and including its answer (the event with an `id`).
pub async fn read_until_answer(stream: &mut TcpStream) -> Vec<Value> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let (text, events) = sse_events(&buffer);
        if let Some(answer) = events.iter().position(|e| e.get("id").is_some()) {
            return events[..=answer].to_vec();
        }
        let read = bounded("the stream's answer", stream.read(&mut chunk)).await.unwrap();
        assert!(read > 0, "stream ended before its answer, after {} events: {text}", events.len());
        buffer.extend_from_slice(&chunk[..read]);
    }
}

fn parse(raw: &[u8]) -> Reply {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap()[9..12].parse().unwrap();
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned())).collect();
    let mut body = raw[split + 4..].to_vec();
    let mut chunks = None;
    if headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked")) {
        let (whole, count) = dechunk(&body);
        (body, chunks) = (whole, Some(count));
    }
    Reply { status, headers, body, chunks }
}

/// A chunked body's bytes, and how many chunks carried them.
fn dechunk(mut raw: &[u8]) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut chunks = 0;
    loop {
        let line_end = raw.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..line_end]).unwrap().trim(), 16).unwrap();
        raw = &raw[line_end + 2..];
        if size == 0 {
            return (out, chunks);
        }
        chunks += 1;
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

#[derive(Deserialize, JsonSchema)]
struct CountArgs {
    /// How much to add.
    #[schemars(range(min = 1, max = 10))]
    n: u32,
}

#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    #[serde(default)]
    broken: bool,
}

#[derive(Deserialize, JsonSchema)]
struct RegionArgs {
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
    /// An annotated argument below the root (SEP-2243 allows any depth through `properties`).
    #[serde(default)]
    placement: Option<Placement>,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(inline)]
struct Placement {
    #[schemars(extend("x-mcp-header" = "Zone"))]
    zone: String,
}

pub struct Fixture {
    pub server: TestServer,
    pub calls: Arc<AtomicUsize>,
    pub cancelled: Arc<Notify>,
    pub clock: Arc<ManualClock>,
}

struct DropSignal(Arc<Notify>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// A server with test tools covering every pipeline path.
pub async fn fixture() -> Fixture {
    let calls = Arc::new(AtomicUsize::new(0));
    let cancelled = Arc::new(Notify::new());
    let clock = Arc::new(ManualClock::new(1_000_000));
    let server = fixture_server(&calls, &cancelled);
    let mut config = Parts::for_tests(clock.clone());
    config.settings.listen_max_duration = std::time::Duration::from_millis(300);
    config.settings.max_body_bytes = 4096;
    let app = Arc::new(App::new(server, config.endpoint()));
    Fixture { server: TestServer::start(app).await, calls, cancelled, clock }
}

/// The fixture's registry: `calls` counts the `count` tool's calls, `cancelled` is notified when
/// a cancelled call's work is dropped.
pub fn fixture_server(calls: &Arc<AtomicUsize>, cancelled: &Arc<Notify>) -> McpServer {
    let mut server = McpServer::new("test-server", "9.9.9");
    vercel_mcp::catalogue::minimal::register(&mut server);
    let counter = calls.clone();
    server.tool(ToolDef::new("count").description("Counts calls"), move |_, args: CountArgs| {
        let counter = counter.clone();
        async move {
            counter.fetch_add(args.n as usize, Ordering::SeqCst);
            CallToolResult::text("counted")
        }
    });
    server.tool(ToolDef::new("fail").description("Fails"), |_, _: NoArguments| async {
        Err::<CallToolResult, _>(ToolError::Execution("backend said no: exactly this".into()))
    });
    server.tool(ToolDef::new("boom").description("Panics"), |_, _: NoArguments| async {
        if true {
            panic!("tool bug");
        }
        CallToolResult::text("unreachable")
    });
    let signal = cancelled.clone();
    server.tool(
        ToolDef::new("wait").description("Reports progress, then waits for cancellation"),
        move |ctx, _: NoArguments| {
            let guard = DropSignal(signal.clone());
            async move {
                let _guard = guard;
                ctx.progress(1.0, Some(2.0), Some("started")).await;
                std::future::pending::<()>().await;
                CallToolResult::text("never")
            }
        },
    );
    server.tool(ToolDef::new("region").description("Has an x-mcp-header"), |_, args: RegionArgs| async move {
        match args.placement {
            Some(placement) => CallToolResult::text(format!("{} {}", args.region, placement.zone)),
            None => CallToolResult::text(args.region),
        }
    });
    server.tool(ToolDef::new("logs").description("Logs at three levels"), |ctx, _: NoArguments| async move {
        for level in [LogLevel::Debug, LogLevel::Info, LogLevel::Error] {
            ctx.log(level, None, json!(level.as_str())).await;
        }
        CallToolResult::text("logged")
    });
    server.tool(ToolDef::new("ask").description("MRTR round trip"), |ctx, _: NoArguments| async move {
        let name = ctx.input_response("name").and_then(|r| r["content"]["name"].as_str());
        match (name, ctx.request_state()) {
            (Some(name), Some(state)) if state["step"] == 1 => {
                Outcome::Complete(CallToolResult::text(format!("hi {name}")))
            }
            _ => Outcome::InputRequired(
                InputRequired::new()
                    .request(
                        "name",
                        InputRequest::ElicitForm {
                            message: "Name?".into(),
                            requested_schema: json!({"type":"object","properties":{"name":{"type":"string"}}}),
                        },
                    )
                    .state(json!({ "step": 1 })),
            ),
        }
    });
    server.tool(
        ToolDef::new("weather")
            .title("Weather")
            .description("Structured output with an outputSchema")
            .output_schema(
                json!({"type":"object","properties":{"temperature":{"type":"number"}},"required":["temperature"]}),
            )
            .annotations(vercel_mcp::protocol::types::ToolAnnotations {
                read_only_hint: Some(true),
                open_world_hint: Some(false),
                ..Default::default()
            }),
        |_, args: WeatherArgs| async move {
            let mut result = if args.broken {
                CallToolResult::structured(json!({"temp": "warm"}))
            } else {
                CallToolResult::structured(json!({"temperature": 22.5}))
            };
            result.content.push(vercel_mcp::protocol::types::Content::resource_link("test://a", "a"));
            result
        },
    );
    server.tool(ToolDef::new("change").description("Announces a tool list change"), |ctx, _: NoArguments| async move {
        ctx.publish_change(ChangeEvent::ToolsListChanged);
        CallToolResult::text("changed")
    });
    server.resource(Resource::new("test://a", "a").mime_type("text/plain"), |_, uri| async move {
        Ok(vec![ResourceContents::text(uri, "text/plain", "A")])
    });
    server.set_page_size(4);
    server
}

/// Asserts that `message` ends with a correlation id and that exactly one `event` log line
/// carries that id with `operation` and the same description, so an operator can find it.
#[allow(dead_code)]
pub fn assert_fault_logged(message: &str, logs: &vercel_mcp::observe::MemorySink, event: &str, operation: &str) {
    let (description, rest) = message.rsplit_once(" (correlation id ").expect("a correlation id in the message");
    let id = rest.strip_suffix(')').expect("the id closes the message");
    let lines: Vec<Value> =
        logs.lines().into_iter().filter(|l| l["event"] == event && l["correlationId"] == id).collect();
    assert_eq!(lines.len(), 1, "one {event} line for {id}: {:?}", logs.raw());
    assert_eq!((lines[0]["operation"].as_str(), lines[0]["detail"].as_str()), (Some(operation), Some(description)));
    assert_eq!(lines[0]["level"], "warn");
}

/// `/api/mcp` as it would be with every reference example opted in (the tests of the examples'
/// behaviour behind `/api/mcp`: scopes, legacy calls, the combined listing).
pub fn everything_app(parts: &Parts) -> Arc<App> {
    let mut server = vercel_mcp::McpServer::new(parts.settings.server_name.clone(), vercel_mcp::VERSION);
    vercel_mcp::catalogue::register_all(&mut server, &parts.services());
    Arc::new(App::new(server, parts.endpoint()))
}
