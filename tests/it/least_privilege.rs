//! least-privilege-server over HTTP with verified tokens: per-principal listings, call-time
//! authorization, bounds, and the refuse-to-start configuration checks.

use crate::common;

use common::TestServer;
use common::tokens::{auth_config, bearer, stub_jwks};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

use vercel_mcp::catalogue::least_privilege::{self, RefundLedger};
use vercel_mcp::{App, McpServer};

#[derive(Default)]
struct Ledger(Mutex<Vec<(String, i64)>>);

impl RefundLedger for Ledger {
    fn record(&self, invoice_id: &str, amount_cents: i64) {
        self.0.lock().unwrap().push((invoice_id.to_owned(), amount_cents));
    }
}

impl Ledger {
    fn entries(&self) -> Vec<(String, i64)> {
        self.0.lock().unwrap().clone()
    }
}

const AUDITOR: (&str, &str) = ("user:auditor", "billing:mcp invoices:read");
const TREASURY: (&str, &str) = ("user:treasury", "billing:mcp invoices:read refunds:write");
const STRANGER: (&str, &str) = ("user:nobody", "billing:mcp");

async fn env() -> (TestServer, Arc<Ledger>) {
    let (jwks, _) = stub_jwks().await;
    let config = auth_config(jwks, &[("MCP_AUTH_SCOPES", "billing:mcp")]);
    let ledger = Arc::new(Ledger::default());
    let mut server = McpServer::new("least-privilege-server", "0.1.0");
    least_privilege::register(&mut server, ledger.clone());
    (TestServer::start(Arc::new(App::new(server, config.endpoint()))).await, ledger)
}

async fn list(server: &TestServer, who: (&str, &str)) -> Vec<String> {
    let reply = server
        .modern(json!(1), "tools/list", json!({}))
        .header("Authorization", &bearer(who.0, who.1))
        .send()
        .await
        .json();
    reply["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

async fn call(server: &TestServer, who: (&str, &str), tool: &str, arguments: Value) -> common::Reply {
    server
        .modern(json!(1), "tools/call", json!({"name": tool, "arguments": arguments}))
        .header("Authorization", &bearer(who.0, who.1))
        .send()
        .await
}

#[tokio::test]
async fn listings_are_per_principal_and_never_shared() {
    let (server, _) = env().await;
    assert_eq!(list(&server, AUDITOR).await, ["read_invoice"]);
    assert_eq!(list(&server, TREASURY).await, ["read_invoice", "issue_refund"]);
    assert!(list(&server, STRANGER).await.is_empty());
    let (auditor, treasury) = tokio::join!(list(&server, AUDITOR), list(&server, TREASURY));
    assert_eq!((auditor.len(), treasury.len()), (1, 2), "concurrent listings each get their own answer");
    let schema = server
        .modern(json!(1), "tools/list", json!({}))
        .header("Authorization", &bearer(TREASURY.0, TREASURY.1))
        .send()
        .await
        .json();
    let refund =
        schema["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "issue_refund").unwrap().clone();
    let props = &refund["inputSchema"]["properties"];
    assert_eq!(props["invoiceId"]["pattern"], "^inv-[0-9]+$");
    assert_eq!(
        (props["invoiceId"]["minLength"].clone(), props["invoiceId"]["maxLength"].clone()),
        (json!(1), json!(64))
    );
    assert_eq!(
        (props["amountCents"]["minimum"].clone(), props["amountCents"]["maximum"].clone()),
        (json!(1), json!(100000))
    );
    assert_eq!(props["amountCents"]["type"], "integer");
    assert!(props.get("principal").is_none());
    assert_eq!(refund["annotations"], json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false}));
    assert_eq!(schema["result"]["cacheScope"], "private");
    let tools = schema["result"]["tools"].as_array().unwrap();
    let read = tools.iter().find(|t| t["name"] == "read_invoice").unwrap();
    assert_eq!(read["annotations"], json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true}));
    assert_eq!(read["inputSchema"]["properties"]["invoiceId"]["pattern"], "^inv-[0-9]+$");
    assert_eq!(read["inputSchema"]["required"], json!(["invoiceId"]));
    let listed: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        vercel_mcp::catalogue::least_privilege::registered_tool_names(),
        listed,
        "the declared tool list is the registered one"
    );
}

#[tokio::test]
async fn an_unknown_tool_is_not_found_and_changes_nothing() {
    let (server, ledger) = env().await;
    let reply = call(&server, TREASURY, "delete_invoice", json!({"invoiceId": "inv-1"})).await.json();
    let message = reply["error"]["message"].as_str().unwrap_or_default().to_lowercase();
    assert!(message.contains("not found"), "{reply}");
    assert!(ledger.entries().is_empty());
}

#[tokio::test]
async fn happy_paths() {
    let (server, ledger) = env().await;
    let read = call(&server, AUDITOR, "read_invoice", json!({"invoiceId": "inv-1"})).await.json();
    assert_eq!(common::payload(&read["result"]), json!({"invoiceId": "inv-1", "status": "open", "amountCents": 4200}));
    let refund =
        call(&server, TREASURY, "issue_refund", json!({"invoiceId": "inv-1", "amountCents": 100})).await.json();
    assert_eq!(
        common::payload(&refund["result"]),
        json!({"invoiceId": "inv-1", "refundedCents": 100, "status": "refunded"})
    );
    assert_eq!(ledger.entries(), [("inv-1".to_owned(), 100)]);
}

#[tokio::test]
async fn call_time_authorization_denies_by_default() {
    let (server, ledger) = env().await;
    let denied = call(
        &server,
        AUDITOR,
        "issue_refund",
        json!({"invoiceId": "inv-1", "amountCents": 100, "principal": "user:treasury"}),
    )
    .await;
    assert_eq!(denied.status, 403, "a principal argument cannot grant");
    assert!(denied.header("www-authenticate").unwrap().contains("refunds:write"));
    assert_eq!(call(&server, STRANGER, "read_invoice", json!({"invoiceId": "inv-1"})).await.status, 403);
    let anonymous = server
        .modern(json!(1), "tools/call", json!({"name": "read_invoice", "arguments": {"invoiceId": "inv-1"}}))
        .send()
        .await;
    assert_eq!(anonymous.status, 401);
    let still_ok = call(
        &server,
        TREASURY,
        "issue_refund",
        json!({"invoiceId": "inv-2", "amountCents": 5, "principal": "user:attacker"}),
    )
    .await
    .json();
    assert_eq!(common::payload(&still_ok["result"])["status"], "refunded", "nor revoke");
    assert_eq!(ledger.entries().len(), 1);
    let unknown = call(&server, TREASURY, "delete_ledger", json!({})).await;
    assert_eq!(unknown.code(), -32602);
}

#[tokio::test]
async fn refunds_are_bounded_and_rejections_change_nothing() {
    let (server, ledger) = env().await;
    for amount in [json!(0), json!(100001), json!(9007199254740991i64), json!(10.5), json!("100")] {
        let result = call(&server, TREASURY, "issue_refund", json!({"invoiceId": "inv-1", "amountCents": amount}))
            .await
            .json()["result"]
            .clone();
        assert_eq!(result["isError"], true, "{amount}");
    }
    let over = call(&server, TREASURY, "issue_refund", json!({"invoiceId": "inv-1", "amountCents": 4201})).await.json()
        ["result"]
        .clone();
    assert!(common::error_text(&over).contains("exceeds invoice"));
    let long_id = format!("inv-{}", "1".repeat(60));
    let too_long = format!("inv-{}", "1".repeat(61));
    assert_eq!((long_id.len(), too_long.len()), (64, 65));
    let huge = format!("inv-{}", "1".repeat(100_000));
    for id in [too_long.as_str(), huge.as_str(), "", "INV-1", "inv-", "inv-1; drop table", "1", "inv-1\n"] {
        let result =
            call(&server, TREASURY, "issue_refund", json!({"invoiceId": id, "amountCents": 1})).await.json()["result"]
                .clone();
        assert_eq!(result["isError"], true, "{id:.20}");
    }
    let read = call(&server, AUDITOR, "read_invoice", json!({"invoiceId": too_long})).await.json()["result"].clone();
    assert_eq!(read["isError"], true);
    assert!(ledger.entries().is_empty(), "no rejection reached the ledger");
    let at_bounds = call(&server, TREASURY, "issue_refund", json!({"invoiceId": long_id, "amountCents": 4200}))
        .await
        .json()["result"]
        .clone();
    assert_eq!(common::payload(&at_bounds)["refundedCents"], 4200);
    assert_eq!(ledger.entries().len(), 1);
}

#[test]
fn a_grant_that_is_too_narrow_or_too_broad_refuses_to_start() {
    use std::collections::HashMap;
    let load = |grant: Option<&str>| {
        let mut vars: HashMap<&str, &str> = HashMap::from([("MCP_STATE_SECRET", "x=0123456789abcdef0123456789abcdef")]);
        if let Some(grant) = grant {
            vars.insert("LP_GRANTED_SCOPES", grant);
        }
        vercel_mcp::Parts::from_lookup(|k| vars.get(k).map(|v| v.to_string()), Arc::new(vercel_mcp::state::SystemClock))
    };
    assert!(load(None).is_ok(), "unset means exactly the required set");
    assert!(load(Some("invoices:read")).unwrap_err().to_string().contains("refunds:write"));
    assert!(load(Some("invoices:read,refunds:write,tenant:admin")).unwrap_err().to_string().contains("tenant:admin"));
    assert!(load(Some("refunds:write, invoices:read")).is_ok());
}

/// With authentication off every caller is anonymous and holds no scope, and the billing tools
/// authorize each call themselves: so none is listed (the listing never advertises a tool that
/// would refuse its caller), and a call is refused before anything runs.
#[tokio::test]
async fn with_authentication_off_an_anonymous_caller_is_shown_no_billing_tool() {
    let config = vercel_mcp::Parts::for_tests(Arc::new(vercel_mcp::state::SystemClock));
    let ledger = Arc::new(Ledger::default());
    let mut server = McpServer::new("least-privilege-server", "0.1.0");
    least_privilege::register(&mut server, ledger.clone());
    let server = TestServer::start(Arc::new(App::new(server, config.endpoint()))).await;
    let listed = server.modern(json!(1), "tools/list", json!({})).send().await.json();
    assert_eq!(listed["result"]["tools"], json!([]), "{listed}");
    let refund = server.call_tool("issue_refund", json!({"invoiceId": "inv-1", "amountCents": 100})).await;
    assert_eq!(refund["isError"], true, "{refund}");
    assert!(common::error_text(&refund).contains("scope"), "refused for its scopes: {refund}");
    assert!(ledger.entries().is_empty(), "no refund was recorded");
}
