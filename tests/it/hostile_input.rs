//! Hostile input over HTTP: each gets a bounded, spec-correct error, and the next request on
//! the same server still succeeds.

use crate::common;

use common::fixture;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn still_serving(f: &common::Fixture) {
    let reply = f
        .server
        .modern(json!("after"), "tools/call", json!({"name": "echo", "arguments": {"message": "ok"}}))
        .send()
        .await;
    assert_eq!(reply.json()["result"]["content"][0]["text"], "ok");
}

#[tokio::test]
async fn malformed_json_shapes() {
    let f = fixture().await;
    // Nesting far past the parser's depth limit, yet under the fixture's 4 KiB body limit, so
    // the parser (not the size check) must refuse it without exhausting the stack.
    let deep = format!("{}{}", "[".repeat(1_500), "]".repeat(1_500));
    let deep_params = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"x":{}}}}}"#,
        "[".repeat(1_500) + &"]".repeat(1_500)
    );
    let meta = common::with_meta(json!({}));
    let cases: Vec<(String, u16, i64)> = vec![
        (deep, 400, -32700),
        (deep_params, 400, -32700),
        ("\u{feff}{}".to_owned(), 400, -32700),
        // A duplicated key resolves to its last value, which must still agree with Mcp-Method.
        (format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{meta},"method":"x"}}"#), 400, -32020),
        (r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"tools/list"}"#.to_owned(), 400, -32600),
        (r#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#.to_owned(), 400, -32600),
        (r#"{"jsonrpc":"2.0","id":true,"method":"tools/list"}"#.to_owned(), 400, -32600),
        ("null".to_owned(), 400, -32600),
        ("\"string\"".to_owned(), 400, -32600),
    ];
    for (body, status, code) in cases {
        let reply = f
            .server
            .post(body.clone())
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "tools/list")
            .send()
            .await;
        assert_eq!((reply.status, reply.code()), (status, code), "{:.60} -> {}", body, reply.text());
    }
    still_serving(&f).await;
}

#[tokio::test]
async fn invalid_utf8_and_control_characters() {
    let f = fixture().await;
    // Invalid UTF-8 inside a JSON string.
    let reply = send_raw(f.server.addr, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/\xff\xfelist\"}").await;
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    // Control characters and lookalikes in names are data, not structure: they are refused as
    // unknown, never executed as another tool.
    for name in ["echo\u{0000}", "e\u{0441}ho", "echo\n", "ECHO", "echo "] {
        let reply =
            f.server.modern(json!(1), "tools/call", json!({"name": name, "arguments": {"message": "x"}})).send().await;
        assert!(reply.status == 400 || reply.code() == -32602, "{name:?}: {}", reply.text());
    }
    still_serving(&f).await;
}

async fn send_raw(addr: std::net::SocketAddr, body: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /api/mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut out = Vec::new();
    common::bounded("a raw response", stream.read_to_end(&mut out)).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn a_body_declared_over_the_limit_is_refused_before_it_is_sent() {
    let f = fixture().await;
    // The head promises more than the fixture's 4 KiB limit, and the body never comes: the answer
    // is 413 at once, not a wait for bytes that could never be served (408 after the body timeout).
    let mut stream = TcpStream::connect(f.server.addr).await.unwrap();
    let head = "POST /api/mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\nContent-Length: 100000\r\nConnection: close\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    common::bounded("the refusal", stream.read_to_end(&mut out)).await.unwrap();
    let reply = String::from_utf8_lossy(&out);
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    still_serving(&f).await;
}

#[tokio::test]
async fn huge_values_are_bounded_by_the_body_limit() {
    let f = fixture().await;
    // The fixture's limit is 4 KiB: a huge string or array is refused before parsing.
    for arguments in [json!({"message": "x".repeat(100_000)}), json!({"message": "m", "pad": vec![0; 50_000]})] {
        let reply =
            f.server.modern(json!(1), "tools/call", json!({"name": "echo", "arguments": arguments})).send().await;
        assert_eq!(reply.status, 413);
    }
    still_serving(&f).await;
}

#[tokio::test]
async fn header_injection_and_truncated_bodies() {
    let f = fixture().await;
    // A CR/LF smuggled through the sentinel ("count\r\nX-Injected: 1") decodes to a value that
    // cannot match the body: refused before dispatch, so the tool never runs.
    let reply = f
        .server
        .modern(json!(1), "tools/call", json!({"name": "count", "arguments": {"n": 1}}))
        .replace("Mcp-Name", "=?base64?Y291bnQNClgtSW5qZWN0ZWQ6IDE=?=")
        .send()
        .await;
    assert_eq!((reply.status, reply.code()), (400, -32020));
    assert_eq!(f.calls.load(std::sync::atomic::Ordering::SeqCst), 0, "the tool never ran");
    // A body shorter than its Content-Length: the server waits, then the client gives up; the
    // connection closes without a crash and the next request is served.
    {
        let mut stream = TcpStream::connect(f.server.addr).await.unwrap();
        stream
            .write_all(b"POST /api/mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"")
            .await
            .unwrap();
        stream.shutdown().await.unwrap();
        let mut sink = Vec::new();
        let read = common::bounded("the answer to a cut-off body", stream.read_to_end(&mut sink)).await;
        // Closed in order (no reset, as a crashed connection task would leave), with at most a
        // refusal written first.
        assert!(read.is_ok(), "{read:?}");
        assert!(sink.is_empty() || sink.starts_with(b"HTTP/1.1 4"), "{}", String::from_utf8_lossy(&sink));
    }
    still_serving(&f).await;
}

/// More connections than the process has file descriptors (the connection cap is above its
/// limit) make `accept` fail: the local run logs it, pauses, and serves again once they close,
/// instead of exiting.
#[tokio::test]
async fn running_out_of_file_descriptors_does_not_end_the_local_run() {
    let mut shell = std::process::Command::new("sh");
    shell.arg("-c").arg(r#"ulimit -n 64 && exec "$0""#).arg(env!("CARGO_BIN_EXE_local"));
    let launch = common::process::Launch::command(shell, "the local run");
    let port = launch.port();
    let log = std::env::temp_dir().join(format!("fd-limit-{}-{port}.log", std::process::id()));
    let (mut server, address) =
        launch.env("MCP_STATE_SECRET", "fd=0123456789abcdef0123456789abcdef").log_to(&log).start();

    let mut held = Vec::new();
    for _ in 0..100 {
        held.push(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap());
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        assert!(server.exited().is_none(), "the local run exited when accept failed");
        let logged = std::fs::read_to_string(&log).unwrap();
        let failed = logged
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|l| l["event"] == "accept.failed");
        if let Some(line) = failed {
            assert!(line["error"].as_str().unwrap().contains("Too many open files"), "{line}");
            assert!(line["times"].as_u64().unwrap() >= 1, "{line}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no accept ever failed: is the limit applied?");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drop(held);
    let reply =
        common::bounded("a request after the flood", address.modern(json!(1), "tools/list", json!({})).send()).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(server.exited().is_none(), "still serving");
    let _ = std::fs::remove_file(&log);
}
