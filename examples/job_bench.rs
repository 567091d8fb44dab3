//! Job path benchmark against Redis: latency of `submit_job` and of a status poll through the
//! job service, and Redis round trips per operation (read from `INFO commandstats`); then the
//! same submits onto the Redis stream, and the round trips a stream worker makes per job step.
//!
//! `cargo run --release --example job_bench [redis-url] [operations]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use vercel_mcp::jobs::consumer::Consumer;
use vercel_mcp::jobs::queue::{RedisStreamQueue, StreamSettings};
use vercel_mcp::jobs::redis_store::RedisJobStore;
use vercel_mcp::jobs::{Jobs, LocalQueue};
use vercel_mcp::security::Principal;
use vercel_mcp::state::{Sealer, SystemClock, SystemRandom};

/// Counts the commands clients send Redis, exactly: a `MONITOR` connection sees each command
/// once, marks those a script ran as `lua` (they are not round trips), and the benchmark leaves
/// out its own `XLEN` polling and `INFO`. (`INFO commandstats` cannot tell the two apart: the job
/// scripts' own `GET`s and `XACK`s count there too.)
struct RoundTrips(Arc<std::sync::atomic::AtomicU64>);

impl RoundTrips {
    fn watch(url: &str) -> Self {
        use std::io::{BufRead, BufReader, Write};
        let address = url.trim_start_matches("redis://").trim_end_matches('/').to_owned();
        let counted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut stream = std::net::TcpStream::connect(&address).expect("a MONITOR connection");
        stream.write_all(b"MONITOR\r\n").unwrap();
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap(); // +OK
        let count = counted.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                let from_client = !line.contains(" lua] ");
                let own = ["\"XLEN\"", "\"INFO\"", "\"DEL\""].iter().any(|c| line.contains(c));
                if from_client && !own {
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                line.clear();
            }
        });
        Self(counted)
    }

    /// Commands counted so far, once the monitor has caught up.
    async fn now(&self) -> u64 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
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
    let trips = RoundTrips::watch(&url);
    let principals: Vec<Principal> =
        (0..operations).map(|i| Principal::verified(Some(&format!("bench-{i}")), None, vec![])).collect();

    // Warm up: connect and load the scripts.
    let warm = Principal::verified(Some("warm"), None, vec![]);
    let handle = jobs.submit(&warm, 1, None).await.unwrap().job_id;
    jobs.status(&warm, &handle).await.unwrap();

    let before = trips.now().await;
    let mut handles = Vec::with_capacity(operations);
    let mut latencies = Vec::with_capacity(operations);
    for principal in &principals {
        let started = Instant::now();
        let submitted = jobs.submit(principal, 3, None).await.unwrap();
        latencies.push(started.elapsed());
        handles.push(submitted.job_id);
    }
    report("submit_job", latencies, trips.now().await - before);

    let before = trips.now().await;
    let mut latencies = Vec::with_capacity(operations);
    for (principal, handle) in principals.iter().zip(&handles) {
        let started = Instant::now();
        jobs.status(principal, handle).await.unwrap();
        latencies.push(started.elapsed());
    }
    report("status poll", latencies, trips.now().await - before);
    println!("({operations} operations each, sequential, one connection, {url})");

    // The Redis stream on the store's connection: a submit is one script (the record and its
    // message together); a worker then runs every job.
    let prefix = format!("bench-stream:{}", std::process::id());
    let redis = vercel_mcp::store::Redis::connect(&url, &prefix).unwrap();
    let store = Arc::new(RedisJobStore::new(redis.clone()));
    let queue = Arc::new(RedisStreamQueue::new(redis.clone(), "bench", StreamSettings::default()));
    let sealer = Sealer::new(vec![("bench".into(), vec![9; 32])], Arc::new(SystemClock)).unwrap();
    let jobs =
        Jobs::new(store.clone(), queue.clone(), sealer, Arc::new(SystemClock), Arc::new(SystemRandom::default()));
    let steps = 5;
    let before = trips.now().await;
    let mut latencies = Vec::with_capacity(operations);
    for principal in &principals {
        let started = Instant::now();
        jobs.submit(principal, steps, None).await.unwrap();
        latencies.push(started.elapsed());
    }
    report("stream submit", latencies, trips.now().await - before);
    let consumer = Arc::new(Consumer {
        store,
        queue: queue.clone(),
        clock: Arc::new(SystemClock),
        step_delay: Duration::ZERO,
        budget: Duration::from_secs(60),
        logger: None,
        telemetry: vercel_mcp::telemetry::Telemetry::off(),
        platform: Default::default(),
        confirm_faults: Default::default(),
    });
    let before = trips.now().await;
    let started = Instant::now();
    let worker = tokio::spawn(queue.clone().work(consumer));
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    loop {
        let waiting: u64 = redis::cmd("XLEN").arg(queue.stream_key()).query_async(&mut connection).await.unwrap();
        if waiting == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    let commands = trips.now().await - before;
    queue.shut_down();
    worker.await.unwrap();
    let total_steps = operations as u64 * steps as u64;
    println!(
        "stream worker: {operations} jobs of {steps} steps in {:.0} ms; Redis round trips per step: {:.2} ({commands} for {total_steps} steps)",
        elapsed.as_secs_f64() * 1e3,
        commands as f64 / total_steps as f64
    );
    let _: () = redis::cmd("DEL").arg(queue.stream_key()).query_async(&mut connection).await.unwrap();
}
