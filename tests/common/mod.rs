//! Test support: a loopback server on a free port and a minimal HTTP/1.1 client, so tests
//! exercise the real socket path without extra dependencies.

#![allow(dead_code)]

use serde_json::{Value, json};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use vercel_mcp::{App, local};

/// A server running on 127.0.0.1 for the duration of a test.
pub struct TestServer {
    pub addr: std::net::SocketAddr,
}

impl TestServer {
    pub async fn start(app: Arc<App>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(local::serve_listener(local::Routes::with_mcp(app), listener));
        Self { addr }
    }

    /// A request builder for `/api/mcp`.
    pub fn post(&self, body: impl Into<String>) -> Call {
        Call { addr: self.addr, method: "POST", path: "/api/mcp".into(), headers: vec![("Content-Type".into(), "application/json".into())], body: body.into() }
    }

    pub fn request(&self, method: &'static str, path: &str) -> Call {
        Call { addr: self.addr, method, path: path.into(), headers: vec![], body: String::new() }
    }

    /// A modern request with every header set from the body.
    pub fn modern(&self, id: Value, method: &str, params: Value) -> Call {
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": with_meta(params) });
        let mut call = self.post(body.to_string()).header("MCP-Protocol-Version", "2026-07-28").header("Mcp-Method", method);
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

/// Adds the required `_meta` keys (unless the params already carry `_meta`).
pub fn with_meta(mut params: Value) -> Value {
    if params.get("_meta").is_none() {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
    }
    params
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

    fn head(&self) -> String {
        let mut head = format!("{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n", self.method, self.path, self.addr);
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", self.body.len()));
        head
    }

    /// Sends the request and reads the whole response.
    pub async fn send(self) -> Reply {
        let mut stream = TcpStream::connect(self.addr).await.unwrap();
        stream.write_all(self.head().as_bytes()).await.unwrap();
        stream.write_all(self.body.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        parse(&raw)
    }

    /// Sends the request and returns the open stream after the response head, for SSE tests.
    pub async fn open(self) -> (u16, String, TcpStream) {
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
    }
}

/// Reads SSE `data:` messages from an open chunked stream until `n` have arrived.
pub async fn read_events(stream: &mut TcpStream, n: usize) -> Vec<Value> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&buffer).into_owned();
        let events: Vec<Value> = text.lines().filter_map(|l| l.strip_prefix("data: ")).filter_map(|d| serde_json::from_str(d).ok()).collect();
        if events.len() >= n {
            return events;
        }
        let read = stream.read(&mut chunk).await.unwrap();
        assert!(read > 0, "stream ended after {} events: {text}", events.len());
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
    if headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked")) {
        body = dechunk(&body);
    }
    Reply { status, headers, body }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = raw.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..line_end]).unwrap().trim(), 16).unwrap();
        raw = &raw[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}
