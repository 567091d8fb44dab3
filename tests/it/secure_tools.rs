//! secure-tools-server over HTTP with verified tokens: default-deny on the token's subject,
//! strict names, a count-only result, and no change on any refusal.

use crate::common;

use common::TestServer;
use common::redis::{redis, unique_prefix};
use common::tokens::{auth_config, bearer, stub_jwks};
use serde_json::{Value, json};
use std::sync::Arc;

use vercel_mcp::catalogue::secure_tools::{
    self, MAX_NAMES, MemoryNameList, NameList, RedisNameList, UnconfiguredNameList, authorize, name_is_valid,
};
use vercel_mcp::observe::MemorySink;
use vercel_mcp::security::Principal;
use vercel_mcp::store::Redis;
use vercel_mcp::store::StoreErrorKind;
use vercel_mcp::{App, McpServer};

async fn env_with(list: Arc<dyn NameList>, mode: &str) -> TestServer {
    env_logging_to(list, mode, Arc::new(MemorySink::default())).await
}

async fn env_logging_to(list: Arc<dyn NameList>, mode: &str, logs: Arc<MemorySink>) -> TestServer {
    let (jwks, _) = stub_jwks().await;
    let mut config = auth_config(jwks, &[("MCP_AUTH_MODE", mode)]);
    config.log_sink = logs;
    let mut server = McpServer::new("secure-tools-server", "0.1.0");
    secure_tools::register(&mut server, list, config.logger());
    TestServer::start(Arc::new(App::new(server, config.endpoint()))).await
}

async fn env() -> (TestServer, Arc<MemoryNameList>) {
    let list = Arc::new(MemoryNameList::default());
    (env_with(list.clone(), "required").await, list)
}

fn demo() -> String {
    bearer("user:demo", "items:write")
}

async fn add(server: &TestServer, arguments: Value, authorization: Option<&str>) -> common::Reply {
    let mut call = server.modern(json!(1), "tools/call", json!({"name": "add_item", "arguments": arguments}));
    if let Some(authorization) = authorization {
        call = call.header("Authorization", authorization);
    }
    call.send().await
}

#[tokio::test]
async fn lists_add_item_with_a_bounded_name_and_no_principal() {
    let (server, _) = env().await;
    let reply = server.modern(json!(1), "tools/list", json!({})).header("Authorization", &demo()).send().await.json();
    let tools = reply["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    let schema = &tools[0]["inputSchema"];
    assert_eq!(schema["properties"]["name"]["type"], "string");
    assert_eq!(
        (&schema["properties"]["name"]["minLength"], &schema["properties"]["name"]["maxLength"]),
        (&json!(1), &json!(64))
    );
    assert!(schema["properties"].get("principal").is_none());
    assert_eq!(schema["required"], json!(["name"]));
    assert_eq!(
        tools[0]["annotations"],
        json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false})
    );
}

#[tokio::test]
async fn the_demo_subject_adds_and_sees_only_a_count() {
    let (server, list) = env().await;
    let first = add(&server, json!({"name": "alpha"}), Some(&demo())).await.json()["result"].clone();
    assert_eq!(first["content"], json!([{"type": "text", "text": "ok: 1 items"}]));
    // A principal argument is stripped: identity comes only from the token.
    let second = add(&server, json!({"name": "bravo", "principal": "user:attacker"}), Some(&demo())).await.json();
    assert_eq!(second["result"]["content"][0]["text"], "ok: 2 items");
    assert!(!second.to_string().contains("bravo") && !first.to_string().contains("alpha"), "names are never echoed");
    assert_eq!(list.names(), ["alpha", "bravo"]);
    let longest = "x".repeat(64);
    assert_eq!(
        add(&server, json!({"name": longest}), Some(&demo())).await.json()["result"]["content"][0]["text"],
        "ok: 3 items"
    );
}

#[tokio::test]
async fn everyone_else_is_denied_and_nothing_changes() {
    let (server, list) = env().await;
    // A valid, correctly scoped token for another subject: a tool error naming authorization.
    let other = add(&server, json!({"name": "x"}), Some(&bearer("user:other", "items:write"))).await.json();
    assert_eq!(other["result"]["isError"], true);
    assert!(common::error_text(&other["result"]).contains("authorized"));
    // The demo subject without the scope: refused before the handler with 403.
    assert_eq!(add(&server, json!({"name": "x"}), Some(&bearer("user:demo", "mcp:read"))).await.status, 403);
    // No token: 401, even when claiming the demo principal in the arguments.
    assert_eq!(add(&server, json!({"name": "x", "principal": "user:demo"}), None).await.status, 401);
    assert!(list.names().is_empty());
}

#[tokio::test]
async fn without_authentication_every_call_is_denied() {
    let list = Arc::new(MemoryNameList::default());
    let server = env_with(list.clone(), "optional").await;
    for arguments in [json!({"name": "x"}), json!({"name": "x", "principal": "user:demo"})] {
        let reply = add(&server, arguments, None).await;
        assert!(reply.status == 401 || reply.json()["result"]["isError"] == true, "{}", reply.text());
    }
    assert!(list.names().is_empty());
}

#[tokio::test]
async fn bad_names_are_refused_without_change() {
    let (server, list) = env().await;
    for name in [
        json!(""),
        json!("x".repeat(65)),
        json!("a\nb"),
        json!("a\u{0}b"),
        json!("a\tb"),
        json!("a\u{1b}b"),
        json!("a\u{7f}b"),
        json!(42),
    ] {
        let result = add(&server, json!({"name": name}), Some(&demo())).await.json()["result"].clone();
        assert_eq!(result["isError"], true, "{name}");
    }
    let nope = server
        .modern(json!(1), "tools/call", json!({"name": "nope", "arguments": {}}))
        .header("Authorization", &demo())
        .send()
        .await
        .json();
    assert!(nope["error"]["message"].as_str().unwrap().contains("not found"));
    assert!(list.names().is_empty());
}

#[test]
fn authorization_and_validation_rules() {
    assert!(authorize(&Principal::verified(Some("user:demo"), None, vec![])).is_ok());
    for principal in [
        Principal::anonymous(),
        Principal::verified(Some("user:other"), None, vec![]),
        Principal::verified(None, Some("user:demo"), vec![]),
        Principal::restore("sub:user:demo", false, vec![]),
    ] {
        assert!(authorize(&principal).is_err(), "{principal:?}");
    }
    assert!(name_is_valid("alpha") && name_is_valid(&"x".repeat(64)) && name_is_valid("naïve"));
    for name in ["", "a\nb", "a\tb", "a\u{1b}[31mb", "a\u{0}b", "a\u{7f}b", &"x".repeat(65)] {
        assert!(!name_is_valid(name), "{name:?}");
    }
}

#[tokio::test]
async fn redis_list_counts_atomically_and_outages_are_tool_errors() {
    if let Some((url, _guard)) = redis() {
        let prefix = unique_prefix("names");
        let list = Arc::new(RedisNameList::new(Redis::connect(&url, &prefix).unwrap()));
        let appends = (0..10).map(|n| {
            let list = list.clone();
            tokio::spawn(async move { list.append(&format!("n{n}")).await.unwrap() })
        });
        let mut counts = Vec::new();
        for append in appends {
            counts.push(append.await.unwrap());
        }
        counts.sort_unstable();
        assert_eq!(counts, (1..=10).collect::<Vec<_>>(), "every append sees a distinct count");
        let client = ::redis::Client::open(url.as_str()).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let ttl: i64 =
            ::redis::cmd("PTTL").arg(format!("{prefix}:secure-items")).query_async(&mut connection).await.unwrap();
        assert!(ttl > 0, "the list expires, got {ttl}");
    }
    let unreachable = RedisNameList::new(Redis::connect("redis://127.0.0.1:1", "down").unwrap());
    for list in [Arc::new(unreachable) as Arc<dyn NameList>, Arc::new(UnconfiguredNameList)] {
        let logs = Arc::new(MemorySink::default());
        let server = env_logging_to(list, "required", logs.clone()).await;
        let result = add(&server, json!({"name": "x"}), Some(&demo())).await.json()["result"].clone();
        assert_eq!(result["isError"], true);
        let message = common::error_text(&result);
        assert!(message.contains("unavailable") || message.contains("REDIS_URL"), "{message}");
        assert!(!message.contains("127.0.0.1"), "no address in the caller's text: {message}");
        common::assert_fault_logged(&message, &logs, "store.fault", "names.append");
    }
}

#[tokio::test]
async fn a_full_list_is_an_answer_not_a_fault() {
    let list = Arc::new(MemoryNameList::default());
    for n in 0..MAX_NAMES {
        list.append(&format!("n{n}")).await.unwrap();
    }
    let logs = Arc::new(MemorySink::default());
    let server = env_logging_to(list.clone(), "required", logs.clone()).await;
    let result = add(&server, json!({"name": "x"}), Some(&demo())).await.json()["result"].clone();
    assert_eq!(common::error_text(&result), format!("the item list is full ({MAX_NAMES} items)"));
    assert!(logs.lines().iter().all(|l| l["event"] != "store.fault"), "no fault line for an expected limit");
    let refused = list.append("probe").await.unwrap_err();
    assert_eq!(refused.kind(), StoreErrorKind::Full);
    assert_eq!(refused.message(), format!("the item list is full ({MAX_NAMES} items)"));
}
