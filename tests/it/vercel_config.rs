//! `vercel.json` is part of the product: these checks fail if a function loses its settings.

use serde_json::Value;

fn vercel_json() -> Value {
    serde_json::from_str(include_str!("../../vercel.json")).expect("vercel.json is valid JSON")
}

fn api_entrypoints() -> Vec<String> {
    let in_api = |file: std::path::PathBuf| format!("api/{}", file.to_string_lossy());
    crate::common::rust_files_under("api").into_iter().map(in_api).collect()
}

#[test]
fn declares_the_schema_and_fluid_compute() {
    let config = vercel_json();
    assert_eq!(config["$schema"], "https://openapi.vercel.sh/vercel.json");
    assert_eq!(config["fluid"], true);
}

#[test]
fn the_mcp_route_sets_exactly_its_max_duration() {
    let config = vercel_json();
    let keys: Vec<&String> = config["functions"]["api/mcp.rs"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["maxDuration"]);
}

#[test]
fn the_metadata_paths_are_rewritten_to_their_function() {
    let config = vercel_json();
    let rewrites = config["rewrites"].as_array().expect("rewrites");
    for source in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/api/mcp"] {
        let rule = rewrites.iter().find(|r| r["source"] == source).unwrap_or_else(|| panic!("no rewrite for {source}"));
        assert_eq!(rule["destination"], "/api/oauth-protected-resource");
    }
    assert!(config["functions"]["api/oauth-protected-resource.rs"].is_object());
    let examples =
        rewrites.iter().find(|r| r["source"] == "/api/examples/:name").expect("a rewrite for the example routes");
    assert_eq!(examples["destination"], "/api/examples?example=:name");
}

#[test]
fn streams_are_not_buffered_and_no_secret_is_configured_here() {
    let config = vercel_json();
    let mcp_headers =
        config["headers"].as_array().unwrap().iter().find(|h| h["source"] == "/api/mcp").expect("headers for /api/mcp");
    assert!(
        mcp_headers["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["key"] == "X-Accel-Buffering" && h["value"] == "no")
    );
    assert!(
        config.get("env").is_none() && config.get("build").is_none(),
        "secrets belong in project environment variables"
    );
}

/// What the repository tracks carries no credential: `.env.example` has names only, no other
/// `.env` file is tracked, the one private key is the documented test fixture, and no file holds
/// a token in a well-known provider format or, outside Rust code (whose tests use made-up
/// passwords), a URL with a password.
#[test]
fn no_credential_is_tracked() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // A checkout owned by another user is still this repository's.
    let safe = format!("safe.directory={}", root.display());
    let listed = std::process::Command::new("git")
        .args(["-c", &safe, "ls-files", "-z"])
        .current_dir(root)
        .output()
        .expect("git runs");
    assert!(listed.status.success(), "git ls-files: {}", String::from_utf8_lossy(&listed.stderr));
    let files: Vec<String> = listed
        .stdout
        .split(|b| *b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect();
    assert!(files.len() > 100 && files.iter().any(|f| f == "src/lib.rs"), "the tracked files were listed");
    let tokens = regex_lite::Regex::new(concat!(
        r"(A[KS]IA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{40,}|xox[abprs]-[A-Za-z0-9-]{10,}",
        r"|[sr]k_live_[A-Za-z0-9]{16,}|-----BEGIN [A-Z ]*PRIVATE KEY-----",
        r"|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{20,})",
    ))
    .unwrap();
    let url_password = regex_lite::Regex::new(r#"[a-z]+://[^/\s:@"'<>]+:[^\s@"'<>{}$]+@"#).unwrap();
    let mut found = Vec::new();
    let mut unread = Vec::new();
    for file in &files {
        let name = file.rsplit('/').next().unwrap();
        if (name.starts_with(".env") || name.ends_with(".env")) && name != ".env.example" {
            found.push(format!("{file}: an environment file is tracked"));
        }
        if file == "tests/fixtures/rsa_private.pem" {
            continue;
        }
        let Ok(bytes) = std::fs::read(root.join(file)) else { continue };
        let Ok(text) = String::from_utf8(bytes) else {
            unread.push(file.clone());
            continue;
        };
        // Rust code is scanned for tokens but not for URL passwords: its tests use made-up ones,
        // and a signed-looking JWT in one is a unit test's, refused by every check it meets.
        if let Some(token) = tokens.find(&text).filter(|t| !(file.ends_with(".rs") && t.as_str().starts_with("eyJ"))) {
            found.push(format!("{file}: {}", &token.as_str()[..12.min(token.as_str().len())]));
        }
        if !file.ends_with(".rs") && !file.ends_with(".lock") {
            if let Some(url) = url_password.find(&text) {
                found.push(format!("{file}: a URL with a password ({})", url.as_str()));
            }
        }
    }
    let example = std::fs::read_to_string(root.join(".env.example")).unwrap();
    for line in example.lines().map(str::trim_end).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        if !line.ends_with('=') {
            found.push(format!(".env.example: a value is set: {}", line.split('=').next().unwrap()));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
    // Binary files (none is tracked today) would go unread: each one is a decision.
    assert!(unread.is_empty(), "tracked files that are not text, so not scanned: {unread:?}");
    // Put together here, so that this file does not hold what it looks for.
    let access_key = format!("AKIA{}", "ABCDEFGHIJKLMNOP");
    let url = format!("redis://default:{}@host", "s3/cr+t");
    assert!(tokens.is_match(&access_key) && url_password.is_match(&url), "the check catches what it names");
    assert!(!url_password.is_match("postgres://reader@host/db") && !url_password.is_match("https://host:443/x"));
}

#[test]
fn the_mcp_function_has_a_max_duration_that_outlasts_listen_streams() {
    let config = vercel_json();
    let max = config["functions"]["api/mcp.rs"]["maxDuration"]
        .as_u64()
        .expect("functions[\"api/mcp.rs\"].maxDuration is a positive integer");
    assert!(max > 0);
    let defaults =
        vercel_mcp::Parts::from_lookup(|_| None, std::sync::Arc::new(vercel_mcp::state::SystemClock)).unwrap();
    assert!(
        defaults.settings.listen_max_duration.as_secs() + vercel_mcp::settings::LISTEN_CLOSE_MARGIN_SECONDS <= max,
        "listen streams must close before the function is cut off"
    );
}

#[test]
fn every_entrypoint_is_a_binary_with_function_settings() {
    let config = vercel_json();
    let cargo = include_str!("../../Cargo.toml");
    for file in api_entrypoints() {
        assert!(cargo.contains(&format!("path = \"{file}\"")), "{file} needs a [[bin]] in Cargo.toml");
        assert!(
            config["functions"][&file]["maxDuration"].as_u64().is_some_and(|m| m > 0),
            "{file} needs functions.maxDuration"
        );
    }
    let configured: Vec<&String> = config["functions"].as_object().unwrap().keys().collect();
    let entrypoints = api_entrypoints();
    assert_eq!(
        configured,
        entrypoints.iter().collect::<Vec<_>>(),
        "vercel.json functions must be exactly the api/ files"
    );
}

#[test]
fn the_queue_trigger_is_on_the_consumer_only() {
    let config = vercel_json();
    let functions = config["functions"].as_object().unwrap();
    let with_trigger: Vec<&String> =
        functions.iter().filter(|(_, f)| f.get("experimentalTriggers").is_some()).map(|(k, _)| k).collect();
    assert_eq!(with_trigger, ["api/queues/process-job.rs"], "exactly one function consumes the queue");
    assert_eq!(
        functions["api/queues/process-job.rs"]["experimentalTriggers"],
        serde_json::json!([{ "type": "queue/v2beta", "topic": vercel_mcp::jobs::model::JOBS_TOPIC }])
    );
    assert!(
        functions["api/mcp.rs"].get("experimentalTriggers").is_none(),
        "the public MCP route never consumes the queue"
    );
    let consumer_max = functions["api/queues/process-job.rs"]["maxDuration"].as_u64().unwrap();
    let defaults =
        vercel_mcp::Parts::from_lookup(|_| None, std::sync::Arc::new(vercel_mcp::state::SystemClock)).unwrap();
    assert!(
        defaults.settings.consumer_budget.as_secs() + vercel_mcp::settings::CONSUMER_DEFER_MARGIN_SECONDS
            <= consumer_max,
        "the consumer defers before it is cut off"
    );
    assert!(
        vercel_mcp::settings::CONSUMER_DEFER_MARGIN_SECONDS > vercel_mcp::jobs::queue::QUEUE_CALL_TIMEOUT.as_secs(),
        "the margin after the budget holds the acknowledgement's call, whole"
    );
}

#[test]
fn the_sweep_is_a_cron_on_its_own_function() {
    let config = vercel_json();
    let crons = config["crons"].as_array().expect("crons");
    assert!(crons.iter().any(|c| c["path"] == "/api/cron/sweep-jobs" && c["schedule"].is_string()));
    assert!(config["functions"]["api/cron/sweep-jobs.rs"]["maxDuration"].as_u64().is_some());
}

/// The Hobby plan refuses the whole deployment over one cron that runs more than once a day, or
/// a function whose `maxDuration` is above 300 s; `vercel.json` must deploy there as it is.
#[test]
fn deploys_on_the_hobby_plan() {
    let config = vercel_json();
    for cron in config["crons"].as_array().expect("crons") {
        let schedule = cron["schedule"].as_str().unwrap();
        let fields: Vec<&str> = schedule.split_whitespace().collect();
        assert_eq!(fields.len(), 5, "{schedule}");
        let fixed = |field: &str, max: u32| field.parse::<u32>().is_ok_and(|n| n <= max);
        assert!(
            fixed(fields[0], 59) && fixed(fields[1], 23) && fields[2..] == ["*", "*", "*"],
            "{schedule} runs more than once a day (Hobby allows daily crons only)"
        );
    }
    assert!(config["crons"].as_array().unwrap().len() <= 2, "Hobby allows two cron jobs");
    for (name, function) in config["functions"].as_object().unwrap() {
        let max = function["maxDuration"].as_u64().unwrap();
        assert!((1..=300).contains(&max), "{name}: maxDuration {max} is above Hobby's 300 s");
    }
}

/// Deployed (`VERCEL` set), nothing that outlives a request may live in one instance's memory:
/// without `REDIS_URL` every store refuses, naming the variable, instead of quietly keeping
/// records in memory; the queue is Vercel Queues, never the in-process one. With `REDIS_URL`
/// the stores are Redis.
#[tokio::test]
async fn a_deployment_never_falls_back_to_instance_memory() {
    let deployed = |redis: bool| {
        vercel_mcp::Parts::from_lookup(
            move |name| match name {
                "VERCEL" => Some("1".into()),
                "VERCEL_ENV" => Some("preview".into()),
                "MCP_STATE_SECRET" => Some("0123456789abcdef".repeat(2)),
                "MCP_AUTH_MODE" => Some("off".into()),
                "REDIS_URL" if redis => Some("redis://127.0.0.1:1".into()),
                _ => None,
            },
            std::sync::Arc::new(vercel_mcp::state::SystemClock),
        )
        .unwrap()
    };
    let config = deployed(false);
    assert!(config.jobs.local_queue.is_none(), "no in-process queue when deployed");
    assert!(config.describe().contains("Vercel Queues"), "{}", config.describe());
    let record = vercel_mcp::jobs::model::JobRecord::new("A".repeat(22), "sub:a".into(), 1, 0);
    let quota = vercel_mcp::jobs::store::Quota::new(8, 256);
    let job = config.jobs.store.create(&record, &quota, 0).await.unwrap_err();
    let task = config.task_store.get("sub:a", "t").await.unwrap_err();
    let item = config.examples.items.list("sub:a").await.unwrap_err();
    let name = config.examples.names.append("n").await.unwrap_err();
    for error in [job.message(), task.message(), item.message(), name.message()] {
        assert!(error.contains("REDIS_URL"), "{error}");
    }
    let nonces = config.request_state_nonces.as_ref().expect("single use is on by default");
    assert!(nonces.consume("n", 0, 1000).await.unwrap_err().contains("REDIS_URL"));
    // A listen stream would hear only the changes of the instance holding it: refused, naming
    // the variable, before any stream opens.
    let response = vercel_mcp::transport::handle(&vercel_mcp::mcp_app(&config), listen_request("/api/mcp")).await;
    let is_stream = response.body().is_stream();
    let text = String::from_utf8(response.into_body().collect().await.to_vec()).unwrap();
    assert!(!is_stream, "refused before a stream opens: {text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("REDIS_URL is not set"), "{answer}");

    let with_redis = deployed(true);
    assert!(with_redis.describe().contains("Redis store"), "{}", with_redis.describe());
    assert!(with_redis.jobs.local_queue.is_none());
    // Redis (here unreachable): the error is an outage, not a missing variable.
    let outage = with_redis.jobs.store.create(&record, &quota, 0).await.unwrap_err();
    assert!(!outage.message().contains("REDIS_URL is not set"), "{}", outage.message());
}

/// A `subscriptions/listen` (id `L`) for tool list changes, posted to `path`.
fn listen_request(path: &str) -> http::Request<bytes::Bytes> {
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
        "params": {
            "notifications": {"toolsListChanged": true},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    });
    http::Request::post(path)
        .header("content-type", "application/json")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "subscriptions/listen")
        .body(bytes::Bytes::from(body.to_string()))
        .unwrap()
}

/// A listen stream ends with its graceful result before the platform would cut its function
/// off: on `/api/mcp` after `MCP_LISTEN_MAX_SECONDS`, and on an example route (a function with a
/// shorter `maxDuration`) earlier, whatever that setting says. Virtual time: the clock is paused
/// and jumps to each timer.
#[tokio::test(start_paused = true)]
async fn listen_streams_close_before_their_function_is_cut_off() {
    use std::time::Duration;
    let config = vercel_mcp::Parts::from_lookup(|_| None, std::sync::Arc::new(vercel_mcp::state::SystemClock)).unwrap();
    let examples_max = vercel_json()["functions"]["api/examples.rs"]["maxDuration"].as_u64().unwrap();
    let example_limit = Duration::from_secs(examples_max - vercel_mcp::settings::LISTEN_CLOSE_MARGIN_SECONDS);
    assert!(config.settings.listen_max_duration > example_limit, "the default outlasts the examples' function");
    let routes = [
        ("/api/mcp", vercel_mcp::mcp_app(&config), config.settings.listen_max_duration),
        ("/api/examples/minimal", vercel_mcp::example_app("minimal", &config).unwrap(), example_limit),
    ];
    for (path, app, limit) in routes {
        let started = tokio::time::Instant::now();
        let response = vercel_mcp::transport::handle(&app, listen_request(path)).await;
        assert_eq!(response.status(), 200, "{path}");
        let text = String::from_utf8(response.into_body().collect().await.to_vec()).unwrap();
        let elapsed = started.elapsed();
        let last = text.lines().rev().find_map(|line| line.strip_prefix("data: ")).expect("events");
        let last: Value = serde_json::from_str(last).unwrap();
        assert_eq!(last["id"], "L", "{path}: the stream ends with the listen result, not a cut: {text}");
        assert!(last["result"].is_object(), "{path}: {last}");
        assert_eq!(elapsed.as_secs(), limit.as_secs(), "{path}: closed after {elapsed:?}, want {limit:?}");
    }
}
