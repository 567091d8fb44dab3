//! The job queue under load and a crash: `jobs` jobs submitted across three instances of the
//! local run sharing one Redis (jobs on the Redis stream), one instance killed with SIGKILL a
//! third of the way through the submissions and restarted a second later; then the same jobs
//! on one instance with the in-process queue and no kill, for comparison. Reports jobs lost
//! (a handle was returned, the job never finished), steps stored twice (from the instances'
//! logs), and the time from submit to done (from the stored records).
//!
//! `cargo run --release --example queue_load -- target/release/local [jobs=300] [steps=5] [step-ms=20]`
//! (Redis at `QUEUE_LOAD_REDIS_URL`, default 127.0.0.1:6379.)

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vercel_mcp::client::{Client, ClientOptions};

const SECRET: &str = "load=0123456789abcdef0123456789abcdef";

struct Instance {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Instance {
    fn start(binary: &str, vars: &[(&str, String)], name: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::env::temp_dir().join(format!("queue-load-{}-{name}-{port}.log", std::process::id()));
        let mut command = Command::new(binary);
        for inherited in ["VERCEL", "REDIS_URL", "MCP_QUEUE_BASE_URL", "MCP_QUEUE"] {
            command.env_remove(inherited);
        }
        command
            .env("PORT", port.to_string())
            .env("MCP_STATE_SECRET", SECRET)
            .env("MCP_JOB_CAP_ANONYMOUS", "1000000")
            .env("MCP_MAX_JOBS_TOTAL", "10000000")
            .env("MCP_JOB_SHARE", "10000000")
            .env("MCP_JOBS_PER_MINUTE", "1000000")
            .env("MCP_QUEUE_RECLAIM_IDLE_MS", "1000");
        for (name, value) in vars {
            command.env(name, value);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the local run starts");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("listening") {
            line.clear();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "the instance exited before listening");
        }
        std::thread::spawn(move || for _ in stdout.lines() {});
        Self { child, url: format!("http://127.0.0.1:{port}/api/mcp"), log }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Submits on `url`, retrying on the next instance when one is down; the handle.
async fn submit(urls: &[String], first: usize, steps: u32) -> Option<String> {
    for attempt in 0..urls.len() * 3 {
        let url = &urls[(first + attempt) % urls.len()];
        let Ok(client) = Client::connect(url, ClientOptions::default()).await else { continue };
        if let Ok(result) = client.call_tool("submit_job", json!({ "steps": steps })).await {
            if !result.is_error {
                let payload: Value = serde_json::from_str(&result.joined_text()).ok()?;
                return payload["jobId"].as_str().map(str::to_owned);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

struct Outcome {
    submitted: usize,
    lost: usize,
    orphaned: usize,
    twice: usize,
    latencies: Vec<u64>,
    wall: Duration,
}

/// Every stored job record under `prefix`.
async fn records(redis: &redis::Client, prefix: &str) -> Vec<Value> {
    let mut connection = redis.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("{prefix}:job:*")).query_async(&mut connection).await.unwrap();
    let mut out = Vec::new();
    for key in keys {
        let raw: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut connection).await.unwrap();
        if let Some(record) = raw.and_then(|raw| serde_json::from_str(&raw).ok()) {
            out.push(record);
        }
    }
    out
}

async fn run(binary: &str, redis_url: &str, jobs: usize, steps: u32, step_ms: u64, streams: bool) -> Outcome {
    let prefix = format!("queue-load:{}:{}", std::process::id(), if streams { "streams" } else { "local" });
    let mut vars = vec![
        ("REDIS_URL", redis_url.to_owned()),
        ("MCP_REDIS_PREFIX", prefix.clone()),
        ("MCP_JOB_STEP_MS", step_ms.to_string()),
    ];
    if !streams {
        vars.push(("MCP_QUEUE", "local".to_owned()));
    }
    let count = if streams { 3 } else { 1 };
    let mut instances: Vec<Instance> = (0..count).map(|i| Instance::start(binary, &vars, &i.to_string())).collect();
    let mut logs: Vec<PathBuf> = instances.iter().map(|i| i.log.clone()).collect();
    let urls: Arc<Vec<String>> = Arc::new(instances.iter().map(|i| i.url.clone()).collect());
    let started = Instant::now();
    let mut handles = Vec::new();
    let (batch, kill_at) = (16, jobs / 3);
    let mut killed = false;
    for first in (0..jobs).step_by(batch) {
        if streams && !killed && first >= kill_at {
            instances[0].kill();
            killed = true;
            let (binary, vars) = (binary.to_owned(), vars.clone());
            let restarted = tokio::task::spawn_blocking(move || {
                std::thread::sleep(Duration::from_secs(1));
                Instance::start(&binary, &vars, "0-restarted")
            });
            // Submissions go on meanwhile; the restarted instance joins when it is up.
            instances.push(restarted.await.unwrap());
            logs.push(instances.last().unwrap().log.clone());
        }
        let submissions = (first..(first + batch).min(jobs)).map(|n| {
            let urls = urls.clone();
            tokio::spawn(async move { submit(&urls, n, steps).await })
        });
        for submission in submissions.collect::<Vec<_>>() {
            handles.extend(submission.await.unwrap());
        }
    }
    let redis = redis::Client::open(redis_url).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let stored = loop {
        let stored = records(&redis, &prefix).await;
        let active = stored.iter().filter(|r| matches!(r["state"].as_str(), Some("pending" | "running"))).count();
        if active == 0 || Instant::now() > deadline {
            break stored;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let wall = started.elapsed();
    let done: Vec<&Value> = stored.iter().filter(|r| r["state"] == "done").collect();
    let mut latencies: Vec<u64> =
        done.iter().filter_map(|r| Some(r["finishedAt"].as_u64()? - r["createdAt"].as_u64()?)).collect();
    latencies.sort_unstable();
    // A record that never finished: its handle was returned (lost) or its submit was cut short
    // by the kill before the message was published (orphaned: the caller got an error; only
    // possible where the create and the publish are two steps).
    let unfinished = stored.len() - done.len();
    let lost = handles.len().saturating_sub(done.len());
    let mut steps_by_job: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for log in &logs {
        for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
            let Ok(line) = serde_json::from_str::<Value>(line) else { continue };
            if matches!(line["event"].as_str(), Some("job.progress" | "job.finish")) {
                let job = line["job"].as_str().unwrap_or_default().to_owned();
                steps_by_job.entry(job).or_default().push(line["completedSteps"].as_u64().unwrap_or(0));
            }
        }
    }
    let twice = steps_by_job
        .values_mut()
        .map(|steps| {
            let before = steps.len();
            steps.sort_unstable();
            steps.dedup();
            before - steps.len()
        })
        .sum();
    for instance in &mut instances {
        instance.kill();
    }
    for log in logs {
        let _ = std::fs::remove_file(log);
    }
    let mut connection = redis.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut connection).await.unwrap();
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut connection).await.unwrap();
    }
    Outcome { submitted: handles.len(), lost, orphaned: unfinished.saturating_sub(lost), twice, latencies, wall }
}

fn report(name: &str, outcome: &Outcome) {
    let pick = |p: f64| {
        let l = &outcome.latencies;
        if l.is_empty() { 0 } else { l[((l.len() - 1) as f64 * p).round() as usize] }
    };
    println!(
        "| {name} | {} | {} | {} | {} | {} ms | {} ms | {} ms | {:.1} s |",
        outcome.submitted,
        outcome.lost,
        outcome.orphaned,
        outcome.twice,
        pick(0.5),
        pick(0.99),
        pick(1.0),
        outcome.wall.as_secs_f64()
    );
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let binary = args.get(1).expect("usage: queue_load <local-binary> [jobs] [steps] [step-ms]").clone();
    let jobs = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(300);
    let steps = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(5);
    let step_ms = args.get(4).and_then(|n| n.parse().ok()).unwrap_or(20);
    let redis = std::env::var("QUEUE_LOAD_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    println!("{jobs} jobs of {steps} steps at {step_ms} ms a step; reclaim after 1 s idle");
    println!("| run | jobs submitted | lost | orphaned | steps stored twice | submit→done p50 | p99 | max | wall |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let streams = run(&binary, &redis, jobs, steps, step_ms, true).await;
    report("Redis Streams, 3 instances, one SIGKILLed and restarted", &streams);
    let local = run(&binary, &redis, jobs, steps, step_ms, false).await;
    report("in-process queue, 1 instance, no kill", &local);
    assert_eq!((streams.lost, streams.twice, local.lost, local.twice), (0, 0, 0, 0), "jobs lost or steps stored twice");
}
