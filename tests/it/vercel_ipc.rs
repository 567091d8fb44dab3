//! On Vercel, `vercel_runtime` talks to the platform over a Unix socket (`VERCEL_IPC_PATH`): it
//! announces its port, and ends each request with an `end` message tagged with the request's
//! invocation. A stand-in for that socket records every message the real `api/mcp.rs` executable
//! sends: the request's log line arrives as a `log` message tagged with its invocation, not as
//! untagged standard error.

use crate::common::process::{Launch, Process};
use base64::Engine;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::net::UnixListener;
use std::sync::mpsc;
use std::time::Duration;

/// Reads NUL-terminated JSON messages from the runtime into `messages`.
fn record(listener: UnixListener, messages: mpsc::Sender<Value>) {
    std::thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else { return };
        let mut reader = BufReader::new(stream);
        let mut frame = Vec::new();
        while reader.read_until(0, &mut frame).is_ok_and(|n| n > 0) {
            frame.pop();
            if let Ok(message) = serde_json::from_slice(&frame) {
                if messages.send(message).is_err() {
                    return;
                }
            }
            frame.clear();
        }
    });
}

fn next(messages: &mpsc::Receiver<Value>, kind: &str) -> Value {
    loop {
        let message = messages.recv_timeout(Duration::from_secs(20)).expect("the runtime sends its messages");
        if message["type"] == kind {
            return message;
        }
    }
}

/// A function executable started as Vercel starts it: its IPC socket is a stand-in whose messages
/// arrive on the receiver, and its port is announced in `server-started`.
struct Function {
    process: Process,
    messages: mpsc::Receiver<Value>,
    server: crate::common::TestServer,
    dir: std::path::PathBuf,
}

/// The function's directory is removed however the test ends (its process is killed by
/// `Process`).
impl Drop for Function {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn launch(executable: &str, name: &str) -> Function {
    launch_with(executable, name, &[])
}

/// [`launch`], with `settings` in the function's environment.
fn launch_with(executable: &str, name: &str, settings: &[(&str, &str)]) -> Function {
    let dir = std::env::temp_dir().join(format!("vercel-ipc-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("ipc.sock");
    let _ = std::fs::remove_file(&socket);
    let (sender, messages) = mpsc::channel();
    record(UnixListener::bind(&socket).unwrap(), sender);
    let launch = Launch::binary(executable);
    let port = launch.port();
    let process = launch
        .envs(settings)
        .env("VERCEL_IPC_PATH", &socket)
        .env("MCP_STATE_SECRET", "ipc=0123456789abcdef0123456789abcdef")
        // The platform's socket makes the posture deployed, where authentication must be chosen
        // (`off` only where the platform says the deployment is not production).
        .env("MCP_AUTH_MODE", "off")
        .env("VERCEL_ENV", "preview")
        .stderr_piped()
        .spawn();
    let function =
        Function { process, messages, server: crate::common::TestServer { addr: ([127, 0, 0, 1], port).into() }, dir };
    let started = next(&function.messages, "server-started");
    assert_eq!(started["payload"]["httpPort"], port);
    function
}

/// The request line logged for the invocation `context`, decoded.
fn tagged_request_line(messages: &mpsc::Receiver<Value>, context: &Value) -> Value {
    loop {
        let message = messages.recv_timeout(Duration::from_secs(20)).expect("the request's line");
        if message["type"] == "log" && message["payload"]["context"] == *context {
            let text = base64::engine::general_purpose::STANDARD
                .decode(message["payload"]["message"].as_str().unwrap())
                .unwrap();
            let line: Value = serde_json::from_slice(&text).unwrap();
            if line["event"] == "request" {
                return line;
            }
        }
    }
}

#[tokio::test]
async fn request_log_lines_go_through_the_platform_channel_tagged_with_their_request() {
    let mut function = launch(env!("CARGO_BIN_EXE_mcp"), "mcp");
    let (messages, server) = (&function.messages, &function.server);
    let reply = server
        .modern(json!(1), "tools/call", json!({"name": "echo", "arguments": {"message": "hi"}}))
        .header("x-vercel-internal-invocation-id", "inv-41")
        .header("x-vercel-internal-request-id", "7")
        .send()
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let mut logged = Vec::new();
    let end = loop {
        let message = messages.recv_timeout(Duration::from_secs(20)).expect("an end message");
        match message["type"].as_str() {
            Some("log") => logged.push(message),
            Some("end") => break message,
            _ => {}
        }
    };
    assert_eq!(end["payload"]["context"], json!({"invocationId": "inv-41", "requestId": 7}));
    let lines: Vec<Value> = logged
        .iter()
        .filter(|m| m["payload"]["context"] == json!({"invocationId": "inv-41", "requestId": 7}))
        .map(|m| {
            let text =
                base64::engine::general_purpose::STANDARD.decode(m["payload"]["message"].as_str().unwrap()).unwrap();
            serde_json::from_slice(&text).unwrap()
        })
        .collect();
    let request = lines.iter().find(|l| l["event"] == "request").expect("the request line, tagged");
    assert_eq!((request["method"].as_str(), request["name"].as_str()), (Some("tools/call"), Some("echo")));
    assert_eq!(logged.iter().find(|m| m["payload"]["message"].is_string()).unwrap()["payload"]["level"], "info");

    // A body the function refuses before the endpoint runs has its line too, tagged the same way.
    let refused_id = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        let head = "POST /api/mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\nx-vercel-internal-invocation-id: inv-42\r\nx-vercel-internal-request-id: 8\r\nConnection: close\r\n\r\n";
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        crate::common::bounded("the refusal", stream.read_to_end(&mut answer)).await.unwrap();
        let answer = String::from_utf8_lossy(&answer).into_owned();
        assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
        answer
            .lines()
            .find_map(|l| l.strip_prefix("x-mcp-request-id: "))
            .expect("the refusal's request id")
            .trim()
            .to_owned()
    };
    let refused = tagged_request_line(messages, &json!({"invocationId": "inv-42", "requestId": 8}));
    assert_eq!((refused["event"].as_str(), refused["status"].as_u64()), (Some("request"), Some(413)), "{refused}");
    assert_eq!(refused["requestId"], refused_id.as_str(), "the line carries the id the answer does");

    function.process.0.kill().unwrap();
    let mut stderr = String::new();
    function.process.0.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(!stderr.contains("\"event\":\"request\""), "the request line is not also on standard error: {stderr}");
}

/// A streamed answer holds its invocation open for as long as it streams: the runtime ends an
/// invocation once the head is out and the work kept under it has settled, and on the platform an
/// instance whose invocations have all ended may be frozen, its open streams with it. So no `end`
/// comes while a listen stream is open, and one comes once its client has gone.
#[tokio::test]
async fn a_streamed_answer_keeps_its_invocation_open_until_it_ends() {
    let Some((redis_url, _guard)) = crate::common::redis::redis() else { return };
    let prefix = crate::common::redis::unique_prefix("ipc-stream");
    let settings = [
        ("REDIS_URL", redis_url.as_str()),
        ("MCP_REDIS_PREFIX", &prefix),
        // Open far longer than the test looks; a keep-alive each second finds the client gone.
        ("MCP_LISTEN_MAX_SECONDS", "120"),
        ("MCP_KEEPALIVE_SECONDS", "1"),
    ];
    let function = launch_with(env!("CARGO_BIN_EXE_mcp"), "mcp-stream", &settings);
    let (messages, server) = (&function.messages, &function.server);
    let (status, _, mut stream) = server
        .modern(json!("L"), "subscriptions/listen", json!({"notifications": {"toolsListChanged": true}}))
        .header("x-vercel-internal-invocation-id", "inv-44")
        .header("x-vercel-internal-request-id", "10")
        .open()
        .await;
    assert_eq!(status, 200);
    let acknowledged = crate::common::read_events(&mut stream, 1).await;
    assert_eq!(acknowledged[0]["method"], "notifications/subscriptions/acknowledged");
    let context = json!({"invocationId": "inv-44", "requestId": 10});
    let ended = |message: &Value| message["type"] == "end" && message["payload"]["context"] == context;
    // The stream is open (for two minutes yet): its invocation has not ended.
    let open_until = std::time::Instant::now() + Duration::from_millis(1500);
    while let Some(left) = open_until.checked_duration_since(std::time::Instant::now()) {
        if let Ok(message) = messages.recv_timeout(left) {
            assert!(!ended(&message), "the invocation ended while its stream was open");
        }
    }
    drop(stream);
    loop {
        let message = messages.recv_timeout(Duration::from_secs(20)).expect("the end, once the client has gone");
        if ended(&message) {
            break;
        }
    }
}

/// A function that routes by example serves one it knows (`ask` builds the request for an
/// example), and answers one it does not with 404 and the request's line, tagged with its
/// invocation like every other.
async fn an_unknown_example_is_refused_with_a_tagged_line(
    executable: &str,
    name: &str,
    ask: fn(&crate::common::TestServer, &str) -> crate::common::Call,
) {
    let function = launch(executable, name);
    let (messages, server) = (&function.messages, &function.server);
    let known = ask(server, "minimal").send().await;
    assert_eq!(known.status, 200, "{name} serves a known example: {}", known.text());
    let reply = ask(server, "nope")
        .header("x-vercel-internal-invocation-id", "inv-43")
        .header("x-vercel-internal-request-id", "9")
        .send()
        .await;
    assert_eq!(reply.status, 404, "{name}: {}", reply.text());
    let id = reply.header("x-mcp-request-id").expect("the answer's request id").to_owned();
    let line = tagged_request_line(messages, &json!({"invocationId": "inv-43", "requestId": 9}));
    assert_eq!((line["status"].as_u64(), line["requestId"].as_str()), (Some(404), Some(id.as_str())), "{line}");
}

#[tokio::test]
async fn an_unknown_example_is_404_with_a_tagged_line() {
    an_unknown_example_is_refused_with_a_tagged_line(
        env!("CARGO_BIN_EXE_example-routes"),
        "examples",
        |server, example| {
            let params = crate::common::with_meta(json!({}));
            let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params});
            server
                .post_to(&format!("/api/examples?example={example}"), list.to_string())
                .header("MCP-Protocol-Version", "2026-07-28")
                .header("Mcp-Method", "tools/list")
        },
    )
    .await;
}

/// The protected-resource metadata function, which publishes a document per example route.
#[tokio::test]
async fn unknown_example_metadata_is_404_with_a_tagged_line() {
    an_unknown_example_is_refused_with_a_tagged_line(
        env!("CARGO_BIN_EXE_oauth-protected-resource"),
        "metadata",
        |server, example| server.request("GET", &format!("/.well-known/oauth-protected-resource?example={example}")),
    )
    .await;
}

/// The metadata function names the example from the rewrite's query or, when the platform hands
/// it the original path, from the path: either way the document is that route's, and an unknown
/// example is 404 rather than `/api/mcp`'s document under the wrong name.
#[tokio::test]
async fn example_metadata_is_found_by_its_path_as_by_its_query() {
    let function = launch(env!("CARGO_BIN_EXE_oauth-protected-resource"), "metadata-path");
    let server = &function.server;
    for path in [
        "/.well-known/oauth-protected-resource/api/examples/minimal",
        "/.well-known/oauth-protected-resource?example=minimal",
    ] {
        let reply = server.request("GET", path).send().await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        let resource = reply.json()["resource"].as_str().unwrap_or_default().to_owned();
        assert!(resource.ends_with("/api/examples/minimal"), "{path}: {resource}");
    }
    let unknown = server.request("GET", "/.well-known/oauth-protected-resource/api/examples/nope").send().await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    // The path names the example whatever a query says, as the local run routes by path.
    let both =
        server.request("GET", "/.well-known/oauth-protected-resource/api/examples/minimal?example=nope").send().await;
    assert_eq!(both.status, 200, "{}", both.text());
    assert!(both.json()["resource"].as_str().is_some_and(|r| r.ends_with("/api/examples/minimal")), "{}", both.text());
    let mcp = server.request("GET", "/.well-known/oauth-protected-resource/api/mcp").send().await;
    assert!(mcp.json()["resource"].as_str().is_some_and(|r| r.ends_with("/api/mcp")), "{}", mcp.text());
}

/// Under the platform's runtime (its IPC socket set) a function takes the deployed posture even
/// when the project does not expose `VERCEL`: without `MCP_STATE_SECRET` it refuses to start,
/// naming the variable, instead of serving with a key of its own and no authentication.
#[test]
fn under_the_platform_a_function_without_its_secret_refuses_to_start() {
    let mut function = Launch::binary(env!("CARGO_BIN_EXE_mcp"))
        .env("VERCEL_IPC_PATH", std::env::temp_dir().join("no-such-ipc.sock"))
        .stderr_piped()
        .spawn();
    let deadline = std::time::Instant::now() + crate::common::NETWORK_WAIT;
    let status = loop {
        if let Some(status) = function.exited() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "the function started without its secret");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    function.0.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("MCP_STATE_SECRET is required when deployed"), "{stderr}");
}
