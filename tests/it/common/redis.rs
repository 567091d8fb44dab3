//! Finding a Redis for tests: `TEST_REDIS_URL`, else 127.0.0.1:6379, else a private
//! `redis-server` started on a free port. When none can be had the test fails, unless
//! `MCP_TEST_SKIP_REDIS=1` says skipping is fine; a skip is then recorded in
//! `target/test-skips.log`, which `scripts/test.sh` prints in its summary.

#![allow(dead_code)]

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private redis-server, stopped when dropped.
pub struct PrivateRedis {
    pub port: u16,
    child: Option<Child>,
    /// With persistence: where its append-only file lives (every write is on disk before it
    /// is acknowledged, so a kill and a restart lose nothing).
    dir: Option<std::path::PathBuf>,
}

impl PrivateRedis {
    /// Starts `redis-server` on a free port, if the binary exists.
    pub fn start() -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let mut redis = Self { port, child: None, dir: None };
        redis.restart().then_some(redis)
    }

    /// Starts one that keeps its data across a restart (`appendonly`, `appendfsync always`).
    pub fn start_persistent() -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let dir = std::env::temp_dir().join(format!("vercel-mcp-redis-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let mut redis = Self { port, child: None, dir: Some(dir) };
        redis.restart().then_some(redis)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops the server (an outage).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port; false if it could not start.
    pub fn restart(&mut self) -> bool {
        self.stop();
        let port = self.port.to_string();
        let mut args = vec!["--port", &port, "--bind", "127.0.0.1", "--save", ""];
        let dir = self.dir.as_ref().map(|d| d.to_string_lossy().into_owned());
        match &dir {
            Some(dir) => args.extend(["--appendonly", "yes", "--appendfsync", "always", "--dir", dir]),
            None => args.extend(["--appendonly", "no"]),
        }
        let child = Command::new("redis-server").args(&args).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
        let Ok(child) = child else { return false };
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return true;
            }
            std::thread::yield_now();
        }
        false
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A Redis URL to test against, keeping any private server alive in the returned guard.
pub fn redis() -> Option<(String, Option<PrivateRedis>)> {
    if let Ok(url) = std::env::var("TEST_REDIS_URL") {
        return Some((url, None));
    }
    if TcpStream::connect_timeout(&"127.0.0.1:6379".parse().unwrap(), Duration::from_millis(300)).is_ok() {
        return Some(("redis://127.0.0.1:6379".into(), None));
    }
    match PrivateRedis::start() {
        Some(private) => Some((private.url(), Some(private))),
        None => {
            skip_or_fail("no Redis at 127.0.0.1:6379 and no redis-server on PATH");
            None
        }
    }
}

/// A private `redis-server` that keeps its data across a restart (outage tests stop and restart
/// it, and then check what it holds), under the same policy as [`redis`].
pub fn private_redis() -> Option<PrivateRedis> {
    let private = PrivateRedis::start_persistent();
    if private.is_none() {
        skip_or_fail("no redis-server on PATH (the outage tests start their own)");
    }
    private
}

/// Fails the calling test, unless `MCP_TEST_SKIP_REDIS=1`: then records the skip where the test
/// command's summary reads it (a passing test's output is hidden, so a message alone is lost).
pub fn skip_or_fail(why: &str) {
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    if std::env::var("MCP_TEST_SKIP_REDIS").as_deref() != Ok("1") {
        panic!("{test}: Redis is required: {why}. Start one, or set MCP_TEST_SKIP_REDIS=1 to skip the Redis tests");
    }
    use std::io::Write;
    let log = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-skips.log");
    if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
        let _ = writeln!(file, "SKIPPED {test}: {why}");
    }
}

/// A key prefix no other test uses.
pub fn unique_prefix(test: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("test:{test}:{}:{nanos}", std::process::id())
}
