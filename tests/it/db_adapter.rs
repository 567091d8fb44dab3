//! db-adapter-server: schema bounds, value-only filters, a read-only credential and sanitised
//! output. Every check runs twice, against the in-process fixture and against PostgreSQL
//! through the read-only role of `db/db-adapter.sql` (`TEST_DATABASE_URL`, default the local
//! server; the schema is applied with `TEST_PG_ADMIN_URL`).

use crate::common;

use common::TestServer;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::OnceCell;

use vercel_mcp::catalogue::db_adapter::{
    self, DbAdapter, DbError, PRODUCT_TEMPLATE, ProductBackend, RecordingQueryLog, Write, fixture::ReadOnlyStore,
    postgres::PostgresProducts,
};
use vercel_mcp::state::SystemClock;
use vercel_mcp::{App, McpServer, Parts};

const ESC: char = '\u{1b}';

fn admin_url() -> String {
    std::env::var("TEST_PG_ADMIN_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn reader_url() -> String {
    std::env::var("TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://mcp_products_reader@127.0.0.1:5432/test".into())
}

/// Applies `db/db-adapter.sql` once per test binary (it is idempotent and takes a lock).
async fn schema() {
    static APPLIED: OnceCell<()> = OnceCell::const_new();
    APPLIED
        .get_or_init(|| async {
            let (client, connection) = tokio_postgres::connect(&admin_url(), tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("PostgreSQL is required for these tests (TEST_PG_ADMIN_URL): {e}"));
            let task = tokio::spawn(connection);
            client.batch_execute(include_str!("../../db/db-adapter.sql")).await.expect("db/db-adapter.sql applies");
            drop(client);
            let _ = task.await;
        })
        .await;
}

struct Env {
    server: TestServer,
    adapter: Arc<DbAdapter>,
    log: Arc<RecordingQueryLog>,
}

impl Env {
    async fn over(backend: Arc<dyn ProductBackend>) -> Self {
        let log = Arc::new(RecordingQueryLog::default());
        let adapter = Arc::new(DbAdapter::new(backend, log.clone()));
        let mut server = McpServer::new(db_adapter::SERVER_NAME, "0.1.0");
        db_adapter::register(&mut server, adapter.clone());
        let config = Parts::for_tests(Arc::new(SystemClock));
        Self { server: TestServer::start(Arc::new(App::new(server, config.endpoint()))).await, adapter, log }
    }

    async fn fixture() -> Self {
        Self::over(Arc::new(ReadOnlyStore)).await
    }

    async fn postgres() -> Self {
        schema().await;
        Self::over(Arc::new(PostgresProducts::new(&reader_url()).expect("TEST_DATABASE_URL parses"))).await
    }

    async fn call(&self, tool: &str, arguments: Value) -> Value {
        self.server.call_tool(tool, arguments).await
    }

    async fn products(&self, arguments: Value) -> Value {
        common::payload(&self.call("get_products_by_category", arguments).await)
    }

    async fn read(&self, uri: &str) -> (Value, String) {
        let reply = self.server.modern(json!(1), "resources/read", json!({ "uri": uri })).send().await.json();
        let text = reply["result"]["contents"][0]["text"].as_str().unwrap_or_else(|| panic!("{reply}")).to_owned();
        (serde_json::from_str(&text).unwrap(), text)
    }
}

fn ids(rows: &Value) -> Vec<i64> {
    rows.as_array().unwrap().iter().map(|r| r["id"].as_i64().unwrap()).collect()
}

fn has_raw_control(text: &str) -> bool {
    text.chars().any(|c| c < ' ' || c == '\u{7f}')
}

async fn tools_advertise_their_bounds(env: Env) {
    let reply = env.server.modern(json!(1), "tools/list", json!({})).send().await.json();
    let tools = reply["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["list_categories", "get_products_by_category"]);
    let schema = &tools[1]["inputSchema"];
    let limit = &schema["properties"]["limit"];
    assert_eq!((limit["type"].clone(), limit["minimum"].clone()), (json!("integer"), json!(1)), "{schema}");
    assert_eq!((limit["maximum"].clone(), limit["default"].clone()), (json!(50), json!(10)), "{schema}");
    assert_eq!(schema["properties"]["category"]["maxLength"], 64);
    assert_eq!(schema["required"], json!(["category"]), "limit is optional: {schema}");
}

async fn product_template_resolves_and_echoes_unknown_ids(env: Env) {
    let reply = env.server.modern(json!(1), "resources/templates/list", json!({})).send().await.json();
    let templates: Vec<&str> = reply["result"]["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["uriTemplate"].as_str().unwrap())
        .collect();
    assert_eq!(templates, [PRODUCT_TEMPLATE]);
    let (one, _) = env.read("product://1").await;
    assert_eq!(
        one,
        json!({"found": true, "product": {"id": 1, "name": "Widget", "category": "widgets", "price_cents": 1999}})
    );
    for id in ["9999", "not-a-number"] {
        let (missing, _) = env.read(&format!("product://{id}")).await;
        assert_eq!(missing, json!({"found": false, "product_id": id}));
    }
}

async fn default_limit_lists_widgets_in_id_order(env: Env) {
    assert_eq!(ids(&env.products(json!({"category": "widgets"})).await), [1, 2]);
    assert_eq!(env.log.lines(), ["selectByCategory:widgets:10"]);
    assert_eq!(ids(&env.products(json!({"category": "widgets", "limit": 1})).await), [1]);
    assert_eq!(ids(&env.products(json!({"category": "gadgets", "limit": 5.0})).await), [3, 4], "5.0 is an integer");
}

async fn list_categories_is_distinct_and_sorted(env: Env) {
    assert_eq!(common::payload(&env.call("list_categories", json!({})).await), json!(["gadgets", "gizmos", "widgets"]));
}

async fn limits_out_of_bounds_are_tool_errors_without_a_query(env: Env) {
    for limit in [json!(0), json!(51), json!(2.5), json!("10"), json!(-1)] {
        let result = env.call("get_products_by_category", json!({"category": "widgets", "limit": limit})).await;
        let text = common::error_text(&result);
        assert!(text.contains("limit"), "{limit}: {text}");
    }
    assert!(env.log.lines().is_empty(), "{:?}", env.log.lines());
    let unknown =
        env.server.modern(json!(1), "tools/call", json!({"name": "drop_products", "arguments": {}})).send().await;
    let message = unknown.json()["error"]["message"].as_str().map(str::to_lowercase).unwrap_or_default();
    assert!(message.contains("not found"), "{}", unknown.text());
}

async fn direct_queries_refuse_bad_bounds_before_querying(env: Env) {
    for limit in [0.0, 51.0, 2.5, f64::NAN, f64::INFINITY] {
        let error = env.adapter.query_products_by_category("widgets", limit).await.unwrap_err();
        assert!(matches!(error, DbError::Validation(_)), "{limit}: {error:?}");
    }
    let too_long = "a".repeat(65);
    assert!(matches!(env.adapter.query_products_by_category(&too_long, 10.0).await, Err(DbError::Validation(_))));
    assert!(env.log.lines().is_empty());
}

async fn category_length_is_refused_not_truncated(env: Env) {
    let result = env.call("get_products_by_category", json!({"category": "a".repeat(65)})).await;
    assert!(common::error_text(&result).contains("category"));
    assert!(env.log.lines().is_empty());
    assert_eq!(env.products(json!({"category": "a".repeat(64)})).await, json!([]));
    assert_eq!(env.log.lines().len(), 1);
}

async fn caller_text_is_escaped_in_not_found_payloads(env: Env) {
    let tinted = env.adapter.resolve_product(&format!("9999{ESC}[31m")).await.unwrap();
    assert_eq!(tinted, json!({"found": false, "product_id": "9999\\x1b[31m"}));
    let forged = env.adapter.resolve_product("not-a-number\nforged").await.unwrap();
    assert_eq!(forged["product_id"], "not-a-number\\x0aforged");
    assert!(!has_raw_control(&forged.to_string()));
    let huge = env.adapter.resolve_product("99999999999999999999").await.unwrap();
    assert_eq!(huge, json!({"found": false, "product_id": "99999999999999999999"}));
    assert!(env.log.lines().is_empty(), "a non-numeric or out-of-range id is never queried");
    for uri in ["product://9999%1Bforged".to_owned(), format!("product://9999{ESC}forged")] {
        let (payload, text) = env.read(&uri).await;
        assert_eq!(payload["found"], false);
        assert!(!has_raw_control(&text), "{text:?}");
    }
}

async fn a_newline_in_the_filter_cannot_forge_a_log_line(env: Env) {
    let rows = env.products(json!({"category": "widgets\nselectByCategory:forged:1"})).await;
    assert_eq!(rows, json!([]));
    let lines = env.log.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("\\x0a") && !has_raw_control(&lines[0]), "{lines:?}");
    env.log.reset();
    let direct = env.adapter.query_products_by_category(&format!("gadgets{ESC}[31m"), 1.0).await.unwrap();
    assert!(direct.is_empty());
    let lines = env.log.lines();
    assert!(lines.len() == 1 && lines[0].contains("\\x1b") && !has_raw_control(&lines[0]), "{lines:?}");
}

async fn every_write_is_refused_and_nothing_changes(env: Env) {
    for write in [Write::Insert, Write::Update, Write::Delete, Write::DropTable] {
        let outcome = env.adapter.backend().attempt_write(write).await;
        assert!(matches!(outcome, Err(DbError::ReadOnlyViolation(_))), "{write:?}: {outcome:?}");
    }
    assert_eq!(common::payload(&env.call("list_categories", json!({})).await), json!(["gadgets", "gizmos", "widgets"]));
    assert_eq!(ids(&env.products(json!({"category": "widgets"})).await), [1, 2]);
}

async fn secrets_and_raw_escapes_never_leave_the_adapter(env: Env) {
    let gadgets = env.call("get_products_by_category", json!({"category": "gadgets"})).await;
    let tool_text = gadgets["content"][0]["text"].as_str().unwrap().to_owned();
    let (product, resource_text) = env.read("product://4").await;
    for text in [&tool_text, &resource_text] {
        assert!(!text.contains("secret_cost_cents") && !text.contains("cost"), "{text}");
        assert!(text.contains("\\\\x1b") || text.contains("\\x1b"), "{text}");
        assert!(!text.contains(ESC), "{text:?}");
    }
    assert_eq!(product["product"]["name"], "Sprocket\\x1b[31m");
    assert_eq!(product["product"].as_object().unwrap().len(), 4, "allowlisted columns only: {product}");
    let rows: Value = serde_json::from_str(&tool_text).unwrap();
    assert!(rows.as_array().unwrap().iter().all(|r| r.as_object().unwrap().len() == 4), "{rows}");
}

async fn sql_text_in_a_filter_is_only_a_value(env: Env) {
    assert_eq!(env.products(json!({"category": "widgets'; DROP TABLE products;--"})).await, json!([]));
    assert_eq!(env.products(json!({"category": "x' OR '1'='1"})).await, json!([]));
    assert_eq!(ids(&env.products(json!({"category": "widgets"})).await), [1, 2], "the table is still there");
}

macro_rules! on_both_backends {
    ($($check:ident),* $(,)?) => {
        mod fixture {
            $( #[tokio::test] async fn $check() { super::$check(super::Env::fixture().await).await } )*
        }
        mod postgres {
            $( #[tokio::test] async fn $check() { super::$check(super::Env::postgres().await).await } )*
        }
    };
}

on_both_backends!(
    tools_advertise_their_bounds,
    product_template_resolves_and_echoes_unknown_ids,
    default_limit_lists_widgets_in_id_order,
    list_categories_is_distinct_and_sorted,
    limits_out_of_bounds_are_tool_errors_without_a_query,
    direct_queries_refuse_bad_bounds_before_querying,
    category_length_is_refused_not_truncated,
    caller_text_is_escaped_in_not_found_payloads,
    a_newline_in_the_filter_cannot_forge_a_log_line,
    every_write_is_refused_and_nothing_changes,
    secrets_and_raw_escapes_never_leave_the_adapter,
    sql_text_in_a_filter_is_only_a_value,
);

#[tokio::test]
async fn the_reader_role_cannot_see_the_secret_column_or_write() {
    schema().await;
    let (client, connection) = tokio_postgres::connect(&reader_url(), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let denied = client.query("SELECT secret_cost_cents FROM products", &[]).await.unwrap_err();
    assert_eq!(denied.code(), Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE));
    let row = client
        .query_one(
            "SELECT has_table_privilege('products', 'INSERT'), has_table_privilege('products', 'UPDATE'), \
             has_table_privilege('products', 'DELETE'), current_setting('default_transaction_read_only')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, bool>(1), row.get::<_, bool>(2)), (false, false, false));
    assert_eq!(row.get::<_, String>(3), "on");
}

#[tokio::test]
async fn a_database_outage_is_a_clear_tool_error_that_leaks_nothing() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("postgres://reader:hunter2@127.0.0.1:{port}/test");
    let env = Env::over(Arc::new(PostgresProducts::new(&url).unwrap())).await;
    let result = env.call("get_products_by_category", json!({"category": "widgets"})).await;
    let text = common::error_text(&result);
    assert!(text.contains("product database unavailable"), "{text}");
    assert!(!text.contains("hunter2") && !text.contains(&port.to_string()), "{text}");
    let (payload, _) = env.read("product://not-a-number").await;
    assert_eq!(payload["found"], false, "non-numeric ids never need the database");
    let reply = env.server.modern(json!(2), "resources/read", json!({"uri": "product://1"})).send().await.json();
    assert!(reply["error"]["code"].is_i64(), "{reply}");
    assert!(!reply.to_string().contains("hunter2"));
}

/// A PostgreSQL backend whose server accepts connections and never answers.
async fn silent_postgres() -> Arc<PostgresProducts> {
    let addr = common::black_hole().await;
    Arc::new(PostgresProducts::new(&format!("postgres://reader@{addr}/test")).unwrap())
}

/// A server that accepts connections and never answers: each call ends at its own connect
/// timeout (5 s), though all wait for one shared attempt. Before, the calls queued behind
/// the attempt holding it, and the third answered after 15 s. (Virtual time: the clock is paused
/// and advances when every task waits.)
#[tokio::test(start_paused = true)]
async fn calls_behind_a_connection_that_never_answers_each_end_at_one_timeout() {
    let backend = silent_postgres().await;
    let start = tokio::time::Instant::now();
    let calls = (0..3).map(|_| {
        let backend = backend.clone();
        async move { (backend.categories(10).await, start.elapsed()) }
    });
    for (result, waited) in futures_util::future::join_all(calls).await {
        // Which of the timeouts due at that instant answers first is the runtime's choice.
        let error = result.unwrap_err();
        assert!(matches!(&error, DbError::Unavailable(m) if m.starts_with("product database unavailable")), "{error}");
        assert_eq!(waited, std::time::Duration::from_secs(5), "one timeout, not a queue of them");
    }
}

/// A PostgreSQL stand-in that completes the start-up exchange (trust authentication, ready for
/// a query) and then reads whatever it is sent without answering: a link that stops answering
/// after the connection is made.
async fn postgres_that_stops_answering() -> (Arc<PostgresProducts>, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                // The start-up message: its length (itself included), then the rest.
                let length = stream.read_u32().await.unwrap() as usize;
                let mut startup = vec![0; length - 4];
                stream.read_exact(&mut startup).await.unwrap();
                // AuthenticationOk, then ReadyForQuery (idle).
                stream.write_all(b"R\0\0\0\x08\0\0\0\0Z\0\0\0\x05I").await.unwrap();
                let _ = tokio::io::copy(&mut stream, &mut tokio::io::sink()).await;
            });
        }
    });
    (Arc::new(PostgresProducts::new(&format!("postgres://reader@{addr}/test")).unwrap()), connections)
}

/// Once connected, a statement that gets no answer ends at the statement timeout (5 s), a read
/// on the shared connection and a write on its own alike, with an error that says so. Before,
/// a write had no timeout of its own after connecting, and waited for as long as the link hung.
/// The shared connection is then dropped: the next read connects afresh rather than wait on a
/// link that stopped answering (which a socket can stay for many minutes), as it did before.
/// (Virtual time, as above.)
#[tokio::test(start_paused = true)]
async fn a_statement_that_gets_no_answer_ends_at_its_timeout() {
    use std::sync::atomic::Ordering;
    let (backend, connections) = postgres_that_stops_answering().await;
    for write in [false, true] {
        let start = tokio::time::Instant::now();
        let outcome = async {
            if write {
                backend.attempt_write(db_adapter::Write::Update).await
            } else {
                backend.categories(10).await.map(drop)
            }
        };
        let hung = std::time::Duration::from_secs(60);
        let error = tokio::time::timeout(hung, outcome).await.expect("the call ended on its own").unwrap_err();
        assert!(
            matches!(&error, DbError::Unavailable(m) if m.contains("statement timed out")),
            "write {write}: {error}"
        );
        assert_eq!(start.elapsed(), std::time::Duration::from_secs(5), "write {write}");
    }
    // The read's connection and the write's own.
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    let again = tokio::time::timeout(std::time::Duration::from_secs(60), backend.categories(10)).await.unwrap();
    assert!(again.is_err());
    assert_eq!(connections.load(Ordering::SeqCst), 3, "the read that timed out left no connection to reuse");
}

/// A backend with more categories than a listing should carry, in number or in bytes (and one
/// that ignores the limit it is asked for): the adapter lists the first ones within both bounds
/// and says there are more; a short list has no such note. Before, every category came back.
#[tokio::test]
async fn a_listing_of_categories_is_bounded_and_says_when_there_are_more() {
    struct Categories(Vec<String>);
    impl ProductBackend for Categories {
        fn select_by_category<'a>(
            &'a self,
            _: &'a str,
            _: u32,
        ) -> db_adapter::DbFuture<'a, Vec<db_adapter::ProductRow>> {
            Box::pin(async { Ok(Vec::new()) })
        }
        fn select_by_id(&self, _: i64) -> db_adapter::DbFuture<'_, Option<db_adapter::ProductRow>> {
            Box::pin(async { Ok(None) })
        }
        fn categories(&self, _limit: u32) -> db_adapter::DbFuture<'_, Vec<String>> {
            Box::pin(async { Ok(self.0.clone()) })
        }
        fn attempt_write(&self, _: Write) -> db_adapter::DbFuture<'_, ()> {
            Box::pin(async { Err(DbError::ReadOnlyViolation("no".into())) })
        }
        fn describe(&self) -> String {
            "categories".into()
        }
    }
    let many = Env::over(Arc::new(Categories((0..100_000).map(|n| format!("c{n:06}")).collect()))).await;
    let result = many.call("list_categories", json!({})).await;
    let listed = common::payload(&result);
    assert_eq!(listed.as_array().unwrap().len(), db_adapter::MAX_CATEGORIES);
    assert_eq!((&listed[0], &listed[999]), (&json!("c000000"), &json!("c000999")), "the first ones, in order");
    assert!(
        result["content"][1]["text"].as_str().unwrap().starts_with("More categories exist"),
        "{}",
        result["content"][1]
    );
    let long = Env::over(Arc::new(Categories((0..100).map(|n| format!("{n:03}{}", "x".repeat(1021))).collect()))).await;
    let result = long.call("list_categories", json!({})).await;
    let per_kib = db_adapter::MAX_CATEGORY_LIST_BYTES / 1024;
    assert_eq!(common::payload(&result).as_array().unwrap().len(), per_kib, "64 KiB of 1 KiB names");
    assert!(
        result["content"][1]["text"].as_str().unwrap().starts_with("More categories exist"),
        "{}",
        result["content"][1]
    );
    let few = Env::over(Arc::new(Categories(vec!["a".into(), "b".into()]))).await;
    let result = few.call("list_categories", json!({})).await;
    assert_eq!((common::payload(&result), result["content"].as_array().unwrap().len()), (json!(["a", "b"]), 1));
}

/// A call that arrives while another's connection attempt is under way waits for that attempt,
/// and hears its outcome when it ends: three seconds in, against a server that never answers, it
/// fails at the attempt's five-second mark, two seconds after it came. (Waiting its own turn
/// for the connection, it failed at eight, after an attempt of its own cut short.)
#[tokio::test(start_paused = true)]
async fn a_call_during_a_connection_attempt_shares_it() {
    let backend = silent_postgres().await;
    let start = tokio::time::Instant::now();
    let first = {
        let backend = backend.clone();
        async move { (backend.categories(10).await, start.elapsed()) }
    };
    let later = {
        let backend = backend.clone();
        async move {
            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            (backend.categories(10).await, start.elapsed())
        }
    };
    let ((first, first_at), (later, later_at)) = tokio::join!(first, later);
    for error in [first.unwrap_err(), later.unwrap_err()] {
        assert!(matches!(&error, DbError::Unavailable(m) if m.starts_with("product database unavailable")), "{error}");
    }
    assert_eq!(first_at, std::time::Duration::from_secs(5));
    assert_eq!(later_at, std::time::Duration::from_secs(5), "the later call ended with the attempt it shared");
}

#[tokio::test]
async fn database_url_selects_postgres_and_a_bad_one_is_a_startup_error() {
    let config = |url: &str| {
        let url = url.to_owned();
        Parts::from_lookup(
            move |name| match name {
                "DATABASE_URL" => Some(url.clone()),
                "MCP_STATE_SECRET" => Some("test=0123456789abcdef0123456789abcdef".into()),
                _ => None,
            },
            Arc::new(SystemClock),
        )
    };
    assert_eq!(config(&reader_url()).unwrap().examples.products.describe(), "PostgreSQL (DATABASE_URL)");
    let error = config("postgres://u:hunter2@h:notaport/db").unwrap_err().to_string();
    assert!(error.contains("DATABASE_URL") && !error.contains("hunter2"), "{error}");
    assert_eq!(Parts::for_tests(Arc::new(SystemClock)).examples.products.describe(), "in-process read-only fixture");
}

#[tokio::test]
async fn tls_is_verified_and_never_downgraded() {
    schema().await;
    // The local server offers TLS with a self-signed certificate (or no TLS at all): either way
    // `sslmode=require` must refuse rather than fall back to plain text or trust the certificate.
    let url = format!("{}?sslmode=require", reader_url());
    let env = Env::over(Arc::new(PostgresProducts::new(&url).unwrap())).await;
    let result = env.call("list_categories", json!({})).await;
    assert_eq!(common::error_text(&result), "product database unavailable", "{result}");
    // The same role in plain text on loopback (the default there) works, so the refusal was TLS.
    let plain = Env::postgres().await;
    assert_eq!(
        common::payload(&plain.call("list_categories", json!({})).await),
        json!(["gadgets", "gizmos", "widgets"])
    );
}

/// The deployed server's `db_query` log line names the read and its limit, and carries the
/// caller's filter and id only as keyed digests: argument values never reach the logs.
#[tokio::test]
async fn the_query_log_line_carries_no_argument_value() {
    let logs = Arc::new(vercel_mcp::observe::MemorySink::default());
    let mut config = Parts::for_tests(Arc::new(SystemClock));
    config.log_sink = logs.clone();
    let adapter = DbAdapter::new(Arc::new(ReadOnlyStore), Arc::new(db_adapter::LoggedQueries(config.logger())));
    let canary = "canary-category-3c9f";
    adapter.query_products_by_category(canary, 5.0).await.unwrap();
    adapter.resolve_product("424242").await.unwrap();
    let raw = logs.raw().join("\n");
    assert!(!raw.contains(canary) && !raw.contains("424242"), "{raw}");
    let lines = logs.lines();
    let queries: Vec<&Value> = lines.iter().filter(|l| l["event"] == "db_query").collect();
    assert_eq!(queries.len(), 2, "{raw}");
    assert_eq!((queries[0]["query"].as_str(), queries[0]["limit"].as_u64()), (Some("selectByCategory"), Some(5)));
    assert!(queries[0]["category"].as_str().is_some_and(|d| !d.is_empty()), "a digest stands for the category");
    assert_eq!(queries[1]["query"], "selectById");
}

/// With tracing on, each PostgreSQL query is a CLIENT span under the tool call that ran it, named
/// after its operation; the category asked for (a value) is in no span, and a query that fails
/// (the server unreachable) marks its span.
#[tokio::test]
async fn postgres_queries_are_client_spans_under_their_tool_call_without_their_values() {
    schema().await;
    let (endpoint, received) = crate::telemetry::receiver().await;
    let vars: std::collections::HashMap<&str, String> = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        // The test receiver checks that configured headers are sent.
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-otlp-key=secret%20value".to_owned()),
        ("MCP_STATE_SECRET", "db-spans=0123456789abcdef0123456789abcdef".to_owned()),
    ]
    .into_iter()
    .collect();
    let parts = Parts::from_lookup(|name| vars.get(name).cloned(), Arc::new(SystemClock)).unwrap();
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let reachable = PostgresProducts::new(&reader_url()).expect("TEST_DATABASE_URL parses");
    let unreachable =
        PostgresProducts::new(&format!("postgres://mcp_products_reader@127.0.0.1:{closed_port}/test")).unwrap();
    let mut server = McpServer::new(db_adapter::SERVER_NAME, "0.1.0");
    db_adapter::register(
        &mut server,
        Arc::new(DbAdapter::new(Arc::new(reachable), Arc::new(RecordingQueryLog::default()))),
    );
    let mut down = McpServer::new(db_adapter::SERVER_NAME, "0.1.0");
    db_adapter::register(
        &mut down,
        Arc::new(DbAdapter::new(Arc::new(unreachable), Arc::new(RecordingQueryLog::default()))),
    );
    let options = vercel_mcp::client::ClientOptions::default();
    let client = vercel_mcp::testing::client_with(server, &parts, options.clone()).await;
    let listed = client.call_tool("get_products_by_category", json!({"category": "gadgets-7f2c"})).await.unwrap();
    assert!(!listed.is_error, "{listed:?}");
    let failing = vercel_mcp::testing::client_with(down, &parts, options).await;
    let refused = failing.call_tool("list_categories", json!({})).await.unwrap();
    assert!(refused.is_error, "the database is down: {refused:?}");
    parts.telemetry.flush().await;

    let received = received.lock().unwrap();
    let named = |name: &str| received.spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();
    let [query] = named("postgresql products.by_category")[..] else { panic!("one query span") };
    let [tool] = named("execute_tool get_products_by_category")[..] else { panic!("one tool span") };
    assert_eq!((query.parent_span_id.clone(), query.trace_id.clone()), (tool.span_id.clone(), tool.trace_id.clone()));
    assert_eq!(query.kind, 3, "CLIENT");
    let attributes = crate::telemetry::attributes(query);
    assert_eq!(attributes["db.system.name"], "postgresql");
    assert_eq!(attributes["db.operation.name"], "products.by_category");
    assert!(query.status.as_ref().is_none_or(|s| s.code != 2), "a query that worked is not an error");
    let [failed] = named("postgresql products.categories")[..] else { panic!("one failed query span") };
    assert_eq!(failed.status.as_ref().map(|s| s.code), Some(2), "status ERROR");
    let everything = format!("{:?}", received.spans);
    assert!(!everything.contains("gadgets-7f2c"), "a value reached a span");
}
