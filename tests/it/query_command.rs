//! query-command-server: read-only queries, an idempotency-keyed command scoped per caller,
//! validation before any store call, and the same store behaviour in memory and in Redis.

use crate::common;

use common::TestServer;
use common::redis::{redis, unique_prefix};
use common::tokens::{auth_config, bearer, stub_jwks};
use serde_json::{Value, json};
use std::sync::Arc;

use vercel_mcp::catalogue::query_command::{
    self, ITEM_TTL_MS, ItemStore, MAX_ITEMS_PER_PRINCIPAL, MemoryItemStore, RedisItemStore, UnconfiguredItemStore,
    scoped_key,
};
use vercel_mcp::observe::MemorySink;
use vercel_mcp::security::Principal;
use vercel_mcp::state::SystemClock;
use vercel_mcp::store::Redis;
use vercel_mcp::store::StoreErrorKind;
use vercel_mcp::{App, McpServer, Parts};

async fn server_with(store: Arc<dyn ItemStore>, config: &Parts) -> TestServer {
    let mut server = McpServer::new("query-command-server", "0.1.0");
    query_command::register(&mut server, store, config.logger());
    TestServer::start(Arc::new(App::new(server, config.endpoint()))).await
}

async fn server() -> TestServer {
    server_with(Arc::new(MemoryItemStore::default()), &Parts::for_tests(Arc::new(SystemClock))).await
}

/// Calls `tool`; returns the result object (or the whole reply for protocol errors).
async fn call(server: &TestServer, tool: &str, arguments: Value, authorization: Option<&str>) -> Value {
    let mut request = server.modern(json!(1), "tools/call", json!({"name": tool, "arguments": arguments}));
    if let Some(authorization) = authorization {
        request = request.header("Authorization", authorization);
    }
    let reply = request.send().await.json();
    if reply.get("result").is_some() { reply["result"].clone() } else { reply }
}

fn text(result: &Value) -> Value {
    assert_ne!(result["isError"], true, "{result}");
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

async fn create(server: &TestServer, name: Value, key: Value) -> Value {
    call(server, "create_item", json!({"name": name, "idempotency_key": key}), None).await
}

async fn list(server: &TestServer) -> Value {
    text(&call(server, "list_items", json!({}), None).await)
}

#[tokio::test]
async fn lists_two_queries_and_one_command_with_their_annotations() {
    let server = server().await;
    let tools = server.modern(json!(1), "tools/list", json!({})).send().await.json()["result"]["tools"].clone();
    let by_name = |name: &str| tools.as_array().unwrap().iter().find(|t| t["name"] == name).unwrap().clone();
    assert_eq!(tools.as_array().unwrap().len(), 3);
    let query = json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true});
    assert_eq!(by_name("list_items")["annotations"], query);
    assert_eq!(by_name("get_item")["annotations"], query);
    let create = by_name("create_item");
    assert_eq!(create["annotations"], json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true}));
    let properties = &create["inputSchema"]["properties"];
    assert_eq!((&properties["name"]["minLength"], &properties["name"]["maxLength"]), (&json!(1), &json!(64)));
    assert_eq!(
        (&properties["idempotency_key"]["minLength"], &properties["idempotency_key"]["maxLength"]),
        (&json!(1), &json!(128))
    );
    let required = create["inputSchema"]["required"].as_array().unwrap();
    assert!(required.contains(&json!("name")) && required.contains(&json!("idempotency_key")));
    for query in ["list_items", "get_item"] {
        assert!(by_name(query)["inputSchema"]["properties"].get("idempotency_key").is_none(), "{query}");
    }
}

#[tokio::test]
async fn queries_change_nothing_and_reflect_creates() {
    let server = server().await;
    for _ in 0..3 {
        assert_eq!(list(&server).await, json!([]));
    }
    let item = text(&create(&server, json!("alpha"), json!("k1")).await);
    assert_eq!(item, json!({"id": "item-1", "name": "alpha"}));
    assert_eq!(text(&call(&server, "get_item", json!({"item_id": "item-1"}), None).await), item);
    assert_eq!(list(&server).await, json!([item]));
}

#[tokio::test]
async fn refused_calls_leave_no_state_and_do_not_consume_the_key() {
    let server = server().await;
    let unknown = call(&server, "get_item", json!({"item_id": "item-99"}), None).await;
    assert_eq!(unknown["isError"], true);
    assert!(common::error_text(&unknown).contains("item-99"));
    // A quoted id keeps its control characters as escapes, never raw (a newline or an escape
    // sequence would reach the model or a terminal as if the server had written it).
    let forged = call(&server, "get_item", json!({"item_id": "x\n\u{1b}[31my"}), None).await;
    assert_eq!(common::error_text(&forged), "no item with id x\\n\\u{1b}[31my");
    let bad = [
        (json!(""), json!("k")),
        (json!("x".repeat(65)), json!("k")),
        (json!("a\u{0}b"), json!("k")),
        (json!("a\u{1b}b"), json!("k")),
        (json!("a\u{7f}b"), json!("k")),
        (json!("ok"), json!("")),
        (json!("ok"), json!("k".repeat(129))),
        (json!(42), json!("k")),
    ];
    for (name, key) in bad {
        let result = create(&server, name.clone(), key).await;
        assert_eq!(result["isError"], true, "{name}: {result}");
    }
    assert_eq!(list(&server).await, json!([]));
    // The key "k" was never consumed: the corrected retry creates the first item.
    assert_eq!(text(&create(&server, json!("ok"), json!("k")).await), json!({"id": "item-1", "name": "ok"}));
    let nope = server.modern(json!(1), "tools/call", json!({"name": "nope", "arguments": {}})).send().await.json();
    assert!(nope["error"]["message"].as_str().unwrap().contains("not found"));
}

#[tokio::test]
async fn the_same_key_replays_the_first_write() {
    let server = server().await;
    let first = text(&create(&server, json!("alice"), json!("k1")).await);
    assert_eq!(text(&create(&server, json!("alice"), json!("k1")).await), first);
    assert_eq!(text(&create(&server, json!("bob"), json!("k1")).await), first, "first write wins");
    assert_eq!(list(&server).await.as_array().unwrap().len(), 1);
    let second = text(&create(&server, json!("carol"), json!("k2")).await);
    assert_ne!(second["id"], first["id"]);
    let mut ids: Vec<Value> = Vec::new();
    for n in 3..8 {
        ids.push(text(&create(&server, json!("n"), json!(format!("k{n}"))).await)["id"].clone());
    }
    ids.sort_by_key(|id| id.to_string());
    ids.dedup();
    assert_eq!(ids.len(), 5);
}

#[tokio::test]
async fn keys_are_scoped_to_the_verified_caller() {
    let (jwks, _) = stub_jwks().await;
    let config = auth_config(jwks, &[("MCP_AUTH_MODE", "optional")]);
    let server = server_with(Arc::new(MemoryItemStore::default()), &config).await;
    let (a, b) = (bearer("user:a", "mcp:read mcp:write"), bearer("user:b", "mcp:read mcp:write"));
    let args = |name: &str| json!({"name": name, "idempotency_key": "shared-key"});
    let alpha = text(&call(&server, "create_item", args("alpha"), Some(&a)).await);
    let bravo = text(&call(&server, "create_item", args("bravo"), Some(&b)).await);
    assert_eq!((alpha["name"].as_str(), bravo["name"].as_str()), (Some("alpha"), Some("bravo")), "two items");
    assert_eq!(text(&call(&server, "create_item", args("other"), Some(&a)).await), alpha);
    assert_eq!(text(&call(&server, "create_item", args("other"), Some(&b)).await), bravo);
    // Anonymous callers hold no scopes, so the write is refused rather than landing in a
    // namespace everyone shares (401: what they lack is a token).
    let anonymous =
        server.modern(json!(1), "tools/call", json!({"name": "create_item", "arguments": args("anon")})).send().await;
    assert_eq!(anonymous.status, 401);
    // Items belong to their creator: each caller lists and reads only its own.
    let listed = text(&call(&server, "list_items", json!({}), Some(&a)).await);
    assert_eq!(listed, json!([alpha]), "A sees only A's item");
    assert_eq!(text(&call(&server, "list_items", json!({}), Some(&b)).await), json!([bravo]));
    let c = bearer("user:c", "mcp:read mcp:write");
    assert_eq!(text(&call(&server, "list_items", json!({}), Some(&c)).await), json!([]), "a third caller sees nothing");
    let foreign = call(&server, "get_item", json!({"item_id": alpha["id"]}), Some(&c)).await;
    assert_eq!(foreign["isError"], true, "another caller's id reads as unknown: {foreign}");
}

#[test]
fn scoped_keys_cannot_collide_across_principals() {
    let a = Principal::verified(Some("a\",\"b"), None, vec![]);
    let b = Principal::verified(Some("a"), None, vec![]);
    assert_ne!(scoped_key(&a, "k"), scoped_key(&b, "b\",\"k"));
    assert_eq!(scoped_key(&Principal::anonymous(), "k1"), r#"["anonymous","k1"]"#);
}

/// The store contract, run against each implementation.
async fn store_contract(store: &dyn ItemStore) {
    assert_eq!(store.list("p").await.unwrap(), []);
    let first = store.create_if_absent("p", "[\"p\",\"k1\"]", "alice").await.unwrap();
    assert_eq!((first.id.as_str(), first.name.as_str()), ("item-1", "alice"));
    assert_eq!(store.create_if_absent("p", "[\"p\",\"k1\"]", "bob").await.unwrap(), first);
    let second = store.create_if_absent("p", "[\"p\",\"k2\"]", "carol").await.unwrap();
    assert_eq!(second.id, "item-2");
    for n in 3..=11 {
        store.create_if_absent("p", &format!("k{n}"), "n").await.unwrap();
    }
    let ids: Vec<String> = store.list("p").await.unwrap().into_iter().map(|i| i.id).collect();
    assert_eq!(ids.len(), 11);
    assert_eq!(ids[9], "item-10", "creation order, not lexical order");
    assert_eq!(store.get("p", "item-2").await.unwrap(), Some(second));
    assert_eq!(store.get("p", "item-99").await.unwrap(), None);
    // Another owner has its own namespace: nothing of p's is visible, and numbering starts over.
    assert_eq!(store.list("q").await.unwrap(), []);
    assert_eq!(store.get("q", "item-2").await.unwrap(), None);
    assert_eq!(store.create_if_absent("q", "[\"p\",\"k1\"]", "dave").await.unwrap().name, "dave");
}

/// One owner fills its own allowance, not the store: it is refused as an answer (not a fault),
/// its replays still work, and another owner still creates.
async fn cap_contract(store: &dyn ItemStore) {
    for n in 0..MAX_ITEMS_PER_PRINCIPAL {
        store.create_if_absent("filler", &format!("fill{n}"), "f").await.unwrap();
    }
    assert_eq!(store.list("filler").await.unwrap().len(), MAX_ITEMS_PER_PRINCIPAL);
    let refused = store.create_if_absent("filler", "one-more", "x").await.unwrap_err();
    assert_eq!(refused.kind(), StoreErrorKind::Full, "a full allowance is an answer, not a fault");
    assert!(refused.message().contains(&MAX_ITEMS_PER_PRINCIPAL.to_string()), "{refused}");
    assert_eq!(store.create_if_absent("filler", "fill2", "replay").await.unwrap().id, "item-3", "replays still work");
    assert!(store.create_if_absent("someone-else", "k", "fine").await.is_ok(), "other callers are not affected");
}

#[tokio::test]
async fn memory_store_keeps_the_contract_and_its_cap() {
    let store = MemoryItemStore::default();
    store_contract(&store).await;
    cap_contract(&store).await;
}

#[tokio::test]
async fn redis_store_keeps_the_contract_its_cap_and_expires_items() {
    let Some((url, _guard)) = redis() else { return };
    let prefix = unique_prefix("items");
    let store = RedisItemStore::new(Redis::connect(&url, &prefix).unwrap());
    store_contract(&store).await;
    cap_contract(&store).await;
    let client = ::redis::Client::open(url.as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> =
        ::redis::cmd("KEYS").arg(format!("{prefix}:items:*")).query_async(&mut connection).await.unwrap();
    assert!(keys.len() >= 12, "four keys for each of three owners: {keys:?}");
    for key in keys {
        let ttl: i64 = ::redis::cmd("PTTL").arg(&key).query_async(&mut connection).await.unwrap();
        assert!(ttl > 0 && ttl <= ITEM_TTL_MS as i64, "{key} expires within a day, got {ttl}");
    }
}

/// Many identities cannot grow the Redis store without end: a new caller is refused (as an
/// answer) once the store keeps items for its most callers, callers it keeps are not affected, and
/// a caller stops counting when its items expire.
#[tokio::test]
async fn the_redis_store_keeps_items_for_a_bounded_number_of_callers() {
    let Some((url, _guard)) = redis() else { return };
    let prefix = unique_prefix("owners");
    let store = RedisItemStore::new(Redis::connect(&url, &prefix).unwrap()).with_max_principals(3);
    for owner in ["a", "b", "c"] {
        store.create_if_absent(owner, "k1", "x").await.unwrap();
    }
    let refused = store.create_if_absent("d", "k1", "x").await.unwrap_err();
    assert_eq!(refused.kind(), StoreErrorKind::Full, "a full store is an answer, not a fault: {refused}");
    assert!(refused.message().contains("3 callers"), "{refused}");
    assert!(store.list("d").await.unwrap().is_empty(), "nothing was stored for the refused caller");
    assert_eq!(store.create_if_absent("a", "k2", "y").await.unwrap().id, "item-2", "a kept caller still creates");
    assert_eq!(store.create_if_absent("c", "k1", "replay").await.unwrap().name, "x", "and replays");

    let client = ::redis::Client::open(url.as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let owners = store.owners_key();
    let ttl: i64 = ::redis::cmd("PTTL").arg(&owners).query_async(&mut connection).await.unwrap();
    assert!(ttl > 0 && ttl <= ITEM_TTL_MS as i64, "the owners' index expires too, got {ttl}");
    // Time passing, as Redis would see it: every caller's items expired a moment ago.
    let members: Vec<String> =
        ::redis::cmd("ZRANGE").arg(&owners).arg(0).arg(-1).query_async(&mut connection).await.unwrap();
    assert_eq!(members.len(), 3);
    for member in &members {
        let _: i64 =
            ::redis::cmd("ZADD").arg(&owners).arg("XX").arg(1).arg(member).query_async(&mut connection).await.unwrap();
    }
    assert_eq!(store.create_if_absent("d", "k1", "x").await.unwrap().id, "item-1", "expired callers no longer count");
    let left: i64 = ::redis::cmd("ZCARD").arg(&owners).query_async(&mut connection).await.unwrap();
    assert_eq!(left, 1, "and are dropped from the index");
}

#[tokio::test]
async fn store_outages_are_tool_errors_and_deployed_without_redis_nothing_is_kept() {
    // Redis that is not there: a port nothing listens on.
    let unreachable = RedisItemStore::new(Redis::connect("redis://127.0.0.1:1", "down").unwrap());
    for store in [Arc::new(unreachable) as Arc<dyn ItemStore>, Arc::new(UnconfiguredItemStore)] {
        let logs = Arc::new(MemorySink::default());
        let mut config = Parts::for_tests(Arc::new(SystemClock));
        config.log_sink = logs.clone();
        let server = server_with(store, &config).await;
        let result = create(&server, json!("x"), json!("k")).await;
        assert_eq!(result["isError"], true, "{result}");
        let message = common::error_text(&result);
        assert!(message.contains("unavailable") || message.contains("REDIS_URL"), "{message}");
        assert!(!message.contains("127.0.0.1"), "no address in the caller's text: {message}");
        common::assert_fault_logged(&message, &logs, "store.fault", "items.create");
        let listed = call(&server, "list_items", json!({}), None).await;
        common::assert_fault_logged(&common::error_text(&listed), &logs, "store.fault", "items.list");
    }
}

#[tokio::test]
async fn a_full_store_is_an_answer_not_a_fault() {
    let store = Arc::new(MemoryItemStore::default());
    for n in 0..MAX_ITEMS_PER_PRINCIPAL {
        store.create_if_absent(Principal::anonymous().id(), &format!("fill{n}"), "f").await.unwrap();
    }
    let logs = Arc::new(MemorySink::default());
    let mut config = Parts::for_tests(Arc::new(SystemClock));
    config.log_sink = logs.clone();
    let server = server_with(store, &config).await;
    let result = create(&server, json!("x"), json!("one-more")).await;
    assert_eq!(common::error_text(&result), format!("you hold the most items allowed ({MAX_ITEMS_PER_PRINCIPAL})"));
    assert!(logs.lines().iter().all(|l| l["event"] != "store.fault"), "no fault line for an expected limit");
}
