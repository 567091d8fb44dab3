//! A bounded load test with job accounting, on loopback against the local run with Redis.
//!
//! `soak <local-binary> [seconds=20] [connections=4] [principals=4]` starts the server with
//! Redis (`SOAK_REDIS_URL`, default 127.0.0.1:6379, a fresh key prefix), authentication on
//! (a development HS256 secret; one token per principal), and jobs that finish at once. Each
//! connection is one principal's client mixing `tools/list` (40%), `tools/call echo` (40%),
//! `submit_job` (10%) and `get_job_status` polls (10%). Afterwards it waits for every job,
//! checks each finished with exactly its steps, that no other principal can see it, and that
//! the server's own log has exactly one `job.finish` per submitted job. It prints throughput,
//! p50/p99/p999 latency, the error count (must be 0) and resident memory over the run, and
//! exits non-zero on any error or accounting mismatch.

#[path = "support/loopback.rs"]
mod loopback;

use jsonwebtoken::{EncodingKey, Header};
use loopback::{free_port, percentile, proc_kib, read_response};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "soak-development-secret-0123456789abcdef";
const ISSUER: &str = "https://issuer.soak.local";
const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

/// One principal's keep-alive connection.
struct Client {
    stream: TcpStream,
    addr: SocketAddr,
    token: String,
    buffer: Vec<u8>,
}

impl Client {
    fn new(addr: SocketAddr, token: String) -> Self {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        Self { stream, addr, token, buffer: Vec::with_capacity(16 * 1024) }
    }

    /// One JSON-RPC call; returns the HTTP status and the parsed reply.
    fn call(&mut self, method: &str, name: Option<&str>, params: &str) -> (u16, Value) {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#);
        let name = name.map(|n| format!("Mcp-Name: {n}\r\n")).unwrap_or_default();
        let request = format!(
            "POST /api/mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n{name}Content-Length: {}\r\n\r\n{body}",
            self.addr,
            self.token,
            body.len()
        );
        self.stream.write_all(request.as_bytes()).unwrap();
        let (status, body) = read_response(&mut self.stream, &mut self.buffer);
        (status, serde_json::from_slice(body).unwrap_or(Value::Null))
    }

    fn tool(&mut self, name: &str, arguments: Value) -> (u16, Value) {
        self.call("tools/call", Some(name), &format!(r#"{{"name":"{name}","arguments":{arguments},{META}}}"#))
    }
}

/// The JSON payload of a successful tool result, or `None` for any kind of error.
fn payload(status: u16, reply: &Value) -> Option<Value> {
    let result = reply.get("result").filter(|_| status == 200)?;
    if result["isError"] == true {
        return None;
    }
    serde_json::from_str(result["content"][0]["text"].as_str()?).ok()
}

fn token(subject: &str) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({"iss": ISSUER, "aud": "http://127.0.0.1/api/mcp", "sub": subject,
                        "scope": "mcp:read mcp:write", "iat": now, "exp": now + 3600});
    jsonwebtoken::encode(&Header::default(), &claims, &EncodingKey::from_secret(SECRET.as_bytes())).unwrap()
}

#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    errors: Vec<String>,
    jobs: Vec<(String, u64)>,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let binary = args.get(1).expect("usage: soak <local-binary> [seconds] [connections] [principals]").clone();
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20);
    let connections: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4);
    let principals: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(4);
    let redis = std::env::var("SOAK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());

    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let log_path = std::env::temp_dir().join(format!("soak-{}.log", std::process::id()));
    let mut child = Command::new(&binary)
        .env("PORT", port.to_string())
        .env("MCP_STATE_SECRET", "soak=0123456789abcdef0123456789abcdef")
        .env("REDIS_URL", &redis)
        .env("MCP_REDIS_PREFIX", format!("soak:{}", std::process::id()))
        .env("MCP_AUTH_MODE", "required")
        .env("MCP_AUTH_HS256_SECRET", SECRET)
        .env("MCP_AUTH_ISSUER", ISSUER)
        .env("MCP_RESOURCE_URL", "http://127.0.0.1/api/mcp")
        .env("MCP_JOB_STEP_MS", "0")
        .env("MCP_JOB_CAP_VERIFIED", "1000000")
        .env("MCP_MAX_JOBS_TOTAL", "10000000")
        .env("MCP_JOB_SHARE", "10000000")
        .env("MCP_JOBS_PER_MINUTE", "1000000")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("the local binary starts");
    let pid = child.id();
    let started = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(started.elapsed() < Duration::from_secs(10), "the server did not start");
        std::thread::yield_now();
    }

    let running = Arc::new(AtomicBool::new(true));
    let rss = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (running, rss) = (running.clone(), rss.clone());
        std::thread::spawn(move || {
            while running.load(Ordering::Relaxed) {
                rss.lock().unwrap().push(proc_kib(pid, "VmRSS:"));
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let workers: Vec<_> = (0..connections)
        .map(|worker| {
            let subject = format!("soak-user-{}", worker % principals);
            std::thread::spawn(move || {
                let mut client = Client::new(addr, token(&subject));
                let mut tally = Tally::default();
                let mut n: u64 = 0;
                while Instant::now() < deadline {
                    n += 1;
                    let t = Instant::now();
                    let (status, reply) = match n % 10 {
                        0..=3 => client.call("tools/list", None, &format!("{{{META}}}")),
                        4..=7 => client.tool("echo", json!({"message": format!("m{n}")})),
                        8 => client.tool("submit_job", json!({"steps": 1 + n % 3})),
                        _ => match tally.jobs.get((n as usize) % tally.jobs.len().max(1)) {
                            Some((handle, _)) => client.tool("get_job_status", json!({"jobId": handle})),
                            None => client.call("tools/list", None, &format!("{{{META}}}")),
                        },
                    };
                    tally.latencies.push(t.elapsed());
                    let ok = if n % 10 < 4 {
                        status == 200 && reply["result"]["tools"].is_array()
                    } else {
                        status == 200 && reply["result"].is_object() && reply["result"]["isError"] != true
                    };
                    if !ok {
                        tally.errors.push(format!("{status} {reply}"));
                    } else if n % 10 == 8 {
                        let job = payload(status, &reply).expect("a job payload");
                        tally.jobs.push((job["jobId"].as_str().unwrap().to_owned(), 1 + n % 3));
                    }
                }
                (subject, tally)
            })
        })
        .collect();
    let results: Vec<(String, Tally)> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let load_elapsed = started.elapsed().as_secs_f64().min(seconds as f64 + 1.0);

    // Every job finishes with exactly its steps, and only its owner can see it (one checker
    // thread per worker, so the check is as parallel as the load was).
    let wait_until = Instant::now() + Duration::from_secs(60);
    let checkers: Vec<_> = results
        .iter()
        .enumerate()
        .map(|(index, (subject, tally))| {
            let (subject, jobs) = (subject.clone(), tally.jobs.clone());
            std::thread::spawn(move || {
                let mut owner = Client::new(addr, token(&subject));
                let mut stranger = Client::new(addr, token(&format!("soak-stranger-{index}")));
                let (mut finished, mut problems) = (0usize, Vec::new());
                for (handle, steps) in &jobs {
                    let status = loop {
                        let (code, reply) = owner.tool("get_job_status", json!({"jobId": handle}));
                        let status = payload(code, &reply).unwrap_or(Value::Null);
                        let active = status["state"] == "pending" || status["state"] == "running";
                        if !active || Instant::now() > wait_until {
                            break status;
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    };
                    if status["state"] == "done" && status["completedSteps"] == *steps && status["totalSteps"] == *steps
                    {
                        finished += 1;
                    } else {
                        problems.push(format!("a job of {subject} ended as {status}"));
                    }
                    let (code, reply) = stranger.tool("get_job_status", json!({"jobId": handle}));
                    if code != 200 || reply["result"]["isError"] != true {
                        problems.push(format!("another principal saw a job of {subject}: {code} {reply}"));
                    }
                }
                (finished, problems)
            })
        })
        .collect();
    let mut problems: Vec<String> = Vec::new();
    let mut finished = 0usize;
    for checker in checkers {
        let (done, mut found) = checker.join().unwrap();
        finished += done;
        problems.append(&mut found);
    }
    running.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = proc_kib(pid, "VmHWM:");
    child.kill().unwrap();
    child.wait().unwrap();

    // The server's own account: one job.finish per submitted job, no more, no fewer.
    let log = std::fs::read_to_string(&log_path).unwrap();
    let mut submitted: HashMap<String, u32> = HashMap::new();
    let mut finishes: HashMap<String, u32> = HashMap::new();
    for line in log.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()) {
        let job = line["job"].as_str().unwrap_or_default().to_owned();
        match line["event"].as_str() {
            Some("job.submit") => *submitted.entry(job).or_default() += 1,
            Some("job.finish") => *finishes.entry(job).or_default() += 1,
            _ => {}
        }
    }
    let twice: Vec<_> = finishes.iter().filter(|(_, n)| **n != 1).collect();
    let unfinished = submitted.keys().filter(|job| !finishes.contains_key(*job)).count();
    let unknown = finishes.keys().filter(|job| !submitted.contains_key(*job)).count();
    if !twice.is_empty() || unfinished > 0 || unknown > 0 {
        problems.push(format!(
            "log accounting: {} jobs finished more than once, {unfinished} never finished, {unknown} finished unsubmitted",
            twice.len()
        ));
    }
    let _ = std::fs::remove_file(&log_path);
    remove_keys(&redis, &format!("soak:{}:*", std::process::id()));

    let mut latencies: Vec<Duration> = results.iter().flat_map(|(_, t)| t.latencies.iter().copied()).collect();
    latencies.sort();
    let errors: Vec<&String> = results.iter().flat_map(|(_, t)| &t.errors).collect();
    let jobs: usize = results.iter().map(|(_, t)| t.jobs.len()).sum();
    let rss = rss.lock().unwrap();
    println!(
        "binary: {binary} (Redis {redis}, auth on, {connections} connections, {principals} principals, {seconds} s)"
    );
    println!(
        "requests: {}   throughput: {:.0} req/s   p50 {:.0} us   p99 {:.0} us   p999 {:.0} us",
        latencies.len(),
        latencies.len() as f64 / load_elapsed,
        percentile(&latencies, 0.50).as_secs_f64() * 1e6,
        percentile(&latencies, 0.99).as_secs_f64() * 1e6,
        percentile(&latencies, 0.999).as_secs_f64() * 1e6
    );
    println!("errors: {}", errors.len());
    println!(
        "jobs: {jobs} submitted, {finished} done with exactly their steps; server log: {} submits, {} finishes",
        submitted.len(),
        finishes.values().sum::<u32>()
    );
    println!(
        "RSS over the run: min {} KiB, max {} KiB, last {} KiB; peak (VmHWM) {peak} KiB",
        rss.iter().min().unwrap_or(&0),
        rss.iter().max().unwrap_or(&0),
        rss.last().unwrap_or(&0)
    );
    for problem in errors.iter().map(|e| e.as_str()).chain(problems.iter().map(String::as_str)).take(10) {
        eprintln!("problem: {}", problem.chars().take(300).collect::<String>());
    }
    if problems.len() > 10 {
        eprintln!("... {} problems in all", problems.len());
    }
    if !errors.is_empty() || !problems.is_empty() {
        std::process::exit(1);
    }
}

/// Deletes the run's keys so repeated runs do not accumulate records in a shared Redis.
fn remove_keys(url: &str, pattern: &str) {
    let Ok(mut connection) = redis::Client::open(url).and_then(|client| client.get_connection()) else {
        eprintln!("could not reach {url} to remove {pattern}");
        return;
    };
    let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut connection).unwrap_or_default();
    for chunk in keys.chunks(500) {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(chunk).query(&mut connection);
    }
}
