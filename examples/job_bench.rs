//! Job path benchmark against Redis: latency of `submit_job` and of a status poll through the
//! job service, and Redis round trips per operation (read from `INFO commandstats`).
//!
//! `cargo run --release --example job_bench [redis-url] [operations]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use vercel_mcp::jobs::redis_store::RedisJobStore;
use vercel_mcp::jobs::{Jobs, LocalQueue};
use vercel_mcp::security::Principal;
use vercel_mcp::state::{Sealer, SystemClock, SystemRandom};

/// Calls of the commands a client sends for the job path (script invocations and plain GETs).
/// Commands run inside a script are counted by Redis under their own names but are not round
/// trips; neither job script uses GET, so scripts + GET is exactly the client's round trips.
async fn round_trip_commands(client: &redis::Client) -> u64 {
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut connection).await.unwrap();
    ["cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_get:"]
        .iter()
        .filter_map(|name| info.lines().find_map(|l| l.strip_prefix(name)))
        .filter_map(|stats| stats.split(',').find_map(|f| f.strip_prefix("calls="))?.parse::<u64>().ok())
        .sum()
}

fn report(name: &str, mut latencies: Vec<Duration>, commands: u64) {
    latencies.sort();
    let n = latencies.len();
    let pick = |p: f64| latencies[((n as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e6;
    let per_op = commands as f64 / n as f64;
    println!(
        "{name:<12} p50 {:>7.1} us   p99 {:>7.1} us   Redis round trips per operation: {per_op:.2}",
        pick(0.5),
        pick(0.99)
    );
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = args.get(1).cloned().unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let operations: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(250); // the deployment holds at most 256 jobs
    let prefix = format!("bench:{}", std::process::id());
    let store = Arc::new(RedisJobStore::new(vercel_mcp::store::Redis::connect(&url, &prefix).unwrap()));
    let clock = Arc::new(SystemClock);
    let sealer = Sealer::new(vec![("bench".into(), vec![9; 32])], clock.clone()).unwrap();
    let jobs = Jobs::new(store, Arc::new(LocalQueue::new()), sealer, clock, Arc::new(SystemRandom::default()));
    let client = redis::Client::open(url.as_str()).unwrap();
    let principals: Vec<Principal> =
        (0..operations).map(|i| Principal::verified(Some(&format!("bench-{i}")), None, vec![])).collect();

    // Warm up: connect and load the scripts.
    let warm = Principal::verified(Some("warm"), None, vec![]);
    let handle = jobs.submit(&warm, 1, None).await.unwrap()["jobId"].as_str().unwrap().to_owned();
    jobs.status(&warm, &handle).await.unwrap();

    let before = round_trip_commands(&client).await;
    let mut handles = Vec::with_capacity(operations);
    let mut latencies = Vec::with_capacity(operations);
    for principal in &principals {
        let started = Instant::now();
        let submitted = jobs.submit(principal, 3, None).await.unwrap();
        latencies.push(started.elapsed());
        handles.push(submitted["jobId"].as_str().unwrap().to_owned());
    }
    report("submit_job", latencies, round_trip_commands(&client).await - before);

    let before = round_trip_commands(&client).await;
    let mut latencies = Vec::with_capacity(operations);
    for (principal, handle) in principals.iter().zip(&handles) {
        let started = Instant::now();
        jobs.status(principal, handle).await.unwrap();
        latencies.push(started.elapsed());
    }
    report("status poll", latencies, round_trip_commands(&client).await - before);
    println!("({operations} operations each, sequential, one connection, {url})");
}
