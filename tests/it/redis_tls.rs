//! Redis over TLS (`rediss://`, what every Marketplace Redis hands out), against a real
//! `redis-server` listening with TLS on loopback, its certificate signed by an authority made
//! for the test with `openssl`. The public roots do not know that authority, so the test trusts
//! it through `MCP_REDIS_CA_PEM`, and the refusals show the certificate is checked.

use crate::common;

use common::process::{Launch, Process};
use common::redis::{skip_or_fail, unique_prefix};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vercel_mcp::store::Redis;

/// A `redis-server` that speaks only TLS, and the authority that signed its certificate.
struct TlsRedis {
    port: u16,
    ca_pem: String,
    _server: Process,
    dir: PathBuf,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn openssl(dir: &Path, args: &[&str]) -> bool {
    Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A test authority, a certificate it signed for `localhost`, and a server presenting it.
fn start_tls_redis() -> Option<TlsRedis> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
    let dir = std::env::temp_dir().join(format!("vercel-mcp-redis-tls-{port}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::write(dir.join("server.ext"), "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n").ok()?;
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    let made = openssl(
        &dir,
        &[
            &["req", "-x509"],
            &ec[..],
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test authority"],
        ]
        .concat(),
    ) && openssl(
        &dir,
        &[&["req"], &ec[..], &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]].concat(),
    ) && openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
    if !made {
        let _ = std::fs::remove_dir_all(&dir);
        return None;
    }
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let child = Process(
        Command::new("redis-server")
            .args(["--port", "0", "--tls-port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no", "--tls-auth-clients", "no"])
            .args(["--tls-cert-file", &path("server.pem"), "--tls-key-file", &path("server.key")])
            .args(["--tls-ca-cert-file", &path("ca.pem")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?,
    );
    let ca_pem = std::fs::read_to_string(dir.join("ca.pem")).ok()?;
    let server = TlsRedis { port, ca_pem, _server: child, dir };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(server)
}

fn tls_redis() -> Option<TlsRedis> {
    let server = start_tls_redis();
    if server.is_none() {
        skip_or_fail("no redis-server with TLS, or no openssl, on PATH");
    }
    server
}

async fn ping(redis: &Redis) -> Result<String, redis::RedisError> {
    redis::cmd("PING").query_async(&mut redis.connection()).await
}

/// A store reaches a `rediss://` server whose certificate chains to the authority it was told
/// to trust and names the host it was asked for, and only then: with the public roots alone,
/// another authority, by an address the certificate does not name, or over plain `redis://`,
/// the same server is refused (an error, within the connection timeout, never a hang or a
/// plain-text fallback).
#[tokio::test]
async fn a_store_reaches_redis_over_tls_and_checks_its_certificate() {
    let Some(server) = tls_redis() else { return };
    let url = format!("rediss://localhost:{}", server.port);
    let trusted = Redis::connect_trusting(&url, &unique_prefix("tls"), Some(&server.ca_pem)).unwrap();
    assert_eq!(ping(&trusted).await.unwrap(), "PONG");

    // Refused for the certificate, not for some other reason (a timeout, say).
    let refused_for_the_certificate = |refused: Result<String, redis::RedisError>, what: &str| {
        let error = refused.expect_err(what).to_string();
        assert!(error.contains("certificate"), "{what}: {error}");
    };
    let public_roots = Redis::connect(&url, &unique_prefix("tls")).unwrap();
    refused_for_the_certificate(ping(&public_roots).await, "a certificate the public roots do not know is refused");
    // The right authority, but the certificate names `localhost` only: the address is not it.
    let by_address = format!("rediss://127.0.0.1:{}", server.port);
    let misnamed = Redis::connect_trusting(&by_address, &unique_prefix("tls"), Some(&server.ca_pem)).unwrap();
    refused_for_the_certificate(ping(&misnamed).await, "a certificate for another name is refused");
    let plain = Redis::connect(&format!("redis://localhost:{}", server.port), &unique_prefix("tls")).unwrap();
    assert!(ping(&plain).await.is_err(), "plain text to a TLS port gets nothing");
    // Another authority's certificate: refused too.
    let other = start_tls_redis().expect("a second authority");
    let misplaced = Redis::connect_trusting(&url, &unique_prefix("tls"), Some(&other.ca_pem)).unwrap();
    refused_for_the_certificate(ping(&misplaced).await, "trusting another authority does not trust this one");
}

/// `MCP_REDIS_CA_PEM` is only for TLS, and must hold a certificate: anything else is a start-up
/// problem naming it, not a connection that fails later. A URL asking to skip verification
/// (`#insecure`) is refused at start-up too: that mode is not built in.
#[tokio::test]
async fn a_ca_that_cannot_apply_is_refused_at_start_up() {
    let pem = "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n";
    for (url, ca, expected) in [
        ("redis://localhost:6379", Some(pem), "must be a rediss:// (TLS) URL"),
        ("rediss://localhost:6379", Some("just text"), "holds no PEM certificate"),
        ("rediss://localhost:6379", Some(pem), "not a readable PEM certificate"),
    ] {
        let refused = Redis::connect_trusting(url, "p", ca).unwrap_err();
        assert!(refused.contains(expected) && refused.contains("MCP_REDIS_CA_PEM"), "{url} {ca:?}: {refused}");
    }
    let refused = Redis::connect("rediss://localhost:6379/#insecure", "p").unwrap_err();
    assert!(refused.contains("#insecure") && refused.contains("never done"), "{refused}");

    // Through the settings: the process refuses to start, naming the variable.
    let vars = [("REDIS_URL", "redis://127.0.0.1:6379"), ("MCP_REDIS_CA_PEM", pem)];
    let lookup = |name: &str| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned());
    let clock = std::sync::Arc::new(vercel_mcp::state::SystemClock);
    let refused = vercel_mcp::Parts::from_lookup(lookup, clock).expect_err("refused").to_string();
    assert!(refused.contains("MCP_REDIS_CA_PEM"), "{refused}");
}

/// The local run on a TLS Redis, as a deployment on a Marketplace Redis: a job submitted is
/// stored there, and read back by a second process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_keeps_its_jobs_in_redis_over_tls() {
    let Some(server) = tls_redis() else { return };
    let url = format!("rediss://localhost:{}", server.port);
    let prefix = unique_prefix("tls-run");
    let spawn = || {
        Launch::local()
            .env("REDIS_URL", &url)
            .env("MCP_REDIS_CA_PEM", &server.ca_pem)
            .env("MCP_REDIS_PREFIX", &prefix)
            .env("MCP_QUEUE", "redis")
            .env("MCP_STATE_SECRET", "tls=0123456789abcdef0123456789abcdef")
            .env("MCP_JOB_STEP_MS", "0")
            .start()
    };
    let (_first, first) = spawn();
    let submitted = common::payload(&first.call_tool("submit_job", json!({"steps": 2})).await);
    let handle = submitted["jobId"].as_str().expect("a job handle").to_owned();
    let (_second, second) = spawn();
    let status = common::payload(&second.call_tool("get_job_status", json!({"jobId": handle})).await);
    assert!(status["state"].is_string(), "the second process read the first's job: {status}");
    common::bounded("the job finishes through the TLS Redis stream", async {
        loop {
            let status = common::payload(&second.call_tool("get_job_status", json!({"jobId": handle})).await);
            if status["state"] == "done" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}
