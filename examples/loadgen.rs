//! A small closed-loop load generator for loopback benchmarks (used by `scripts/bench.sh`).
//!
//! `loadgen <server-binary> [seconds] [connections]` starts the server on a free port, measures
//! cold start (spawn to first successful `tools/call`, median of 5 starts), then drives each
//! workload over keep-alive connections and prints requests/s, p50/p99 latency and resident memory.

#[path = "support/loopback.rs"]
mod loopback;

use loopback::{free_port, percentile, proc_kib as rss_kib, read_response};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

struct Workload {
    name: &'static str,
    method: &'static str,
    mcp_name: Option<&'static str>,
    params: String,
}

fn workloads() -> Vec<Workload> {
    vec![
        Workload {
            name: "tools/call echo",
            method: "tools/call",
            mcp_name: Some("echo"),
            params: format!(r#"{{"name":"echo","arguments":{{"message":"hello"}},{META}}}"#),
        },
        Workload { name: "tools/list", method: "tools/list", mcp_name: None, params: format!("{{{META}}}") },
    ]
}

fn request(w: &Workload, addr: SocketAddr) -> Vec<u8> {
    let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{}","params":{}}}"#, w.method, w.params);
    let name = w.mcp_name.map(|n| format!("Mcp-Name: {n}\r\n")).unwrap_or_default();
    format!(
        "POST /api/mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {}\r\n{name}Content-Length: {}\r\n\r\n{body}",
        w.method,
        body.len()
    )
    .into_bytes()
}

fn spawn(binary: &str, port: u16) -> Child {
    Command::new(binary)
        .env("PORT", port.to_string())
        .env("VERCEL_DEV_PORT", port.to_string())
        .env("MCP_STATE_SECRET", "bench=0123456789abcdef0123456789abcdef")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server binary starts")
}

/// Spawn to first successful echo call.
fn cold_start(binary: &str) -> Duration {
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let echo = &workloads()[0];
    let started = Instant::now();
    let mut child = spawn(binary, port);
    let mut buffer = Vec::new();
    let elapsed = loop {
        if let Ok(mut stream) = TcpStream::connect(addr) {
            stream.write_all(&request(echo, addr)).unwrap();
            if read_response(&mut stream, &mut buffer).0 == 200 {
                break started.elapsed();
            }
        }
        std::thread::yield_now();
        assert!(started.elapsed() < Duration::from_secs(10), "the server did not start");
    };
    child.kill().unwrap();
    child.wait().unwrap();
    elapsed
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let binary = args.get(1).expect("usage: loadgen <server-binary> [seconds] [connections]").clone();
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let connections: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(2);

    let mut starts: Vec<Duration> = (0..5).map(|_| cold_start(&binary)).collect();
    starts.sort();
    println!("binary: {binary}");
    println!("cold start (spawn to first tools/call, median of 5): {:.1} ms", starts[2].as_secs_f64() * 1e3);

    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut child = spawn(&binary, port);
    while TcpStream::connect(addr).is_err() {
        std::thread::yield_now();
    }
    println!("idle RSS: {} KiB", rss_kib(child.id(), "VmRSS:"));
    for workload in workloads() {
        let payload = request(&workload, addr);
        let run = |duration: Duration| {
            let threads: Vec<_> = (0..connections)
                .map(|_| {
                    let payload = payload.clone();
                    std::thread::spawn(move || {
                        let mut stream = TcpStream::connect(addr).unwrap();
                        stream.set_nodelay(true).unwrap();
                        let mut buffer = Vec::with_capacity(16 * 1024);
                        let mut latencies = Vec::with_capacity(200_000);
                        let deadline = Instant::now() + duration;
                        while Instant::now() < deadline {
                            let t = Instant::now();
                            stream.write_all(&payload).unwrap();
                            assert_eq!(read_response(&mut stream, &mut buffer).0, 200);
                            latencies.push(t.elapsed());
                        }
                        latencies
                    })
                })
                .collect();
            threads.into_iter().flat_map(|t| t.join().unwrap()).collect::<Vec<_>>()
        };
        run(Duration::from_secs(1));
        let mut latencies = run(Duration::from_secs(seconds));
        latencies.sort();
        println!(
            "{:<16} {:>9.0} req/s   p50 {:>7.1} us   p99 {:>7.1} us   ({} requests, {} connections)",
            workload.name,
            latencies.len() as f64 / seconds as f64,
            percentile(&latencies, 0.50).as_secs_f64() * 1e6,
            percentile(&latencies, 0.99).as_secs_f64() * 1e6,
            latencies.len(),
            connections
        );
    }
    println!("peak RSS: {} KiB", rss_kib(child.id(), "VmHWM:"));
    child.kill().unwrap();
    child.wait().unwrap();
}
