//! facade-server: namespaced tools over two backends, expected errors passed through, faults
//! contained behind a correlation id, and an audit trail that never holds keys or answers.

use crate::common;

use common::TestServer;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

use vercel_mcp::catalogue::facade::{self, AuditLog, Facade, FaultLogEntry, FaultLogger, contained_fault_message};
use vercel_mcp::state::{SeededRandom, SystemClock};
use vercel_mcp::{App, McpServer, Parts};

const RAW_FAULT: &str = "simulated uncaught backend fault";

#[derive(Default)]
struct Recorder {
    faults: Mutex<Vec<FaultLogEntry>>,
    audit: Mutex<Vec<(&'static str, &'static str)>>,
}

impl FaultLogger for Recorder {
    fn log_fault(&self, entry: &FaultLogEntry) {
        self.faults.lock().unwrap().push(entry.clone());
    }
}

impl AuditLog for Recorder {
    fn record(&self, backend: &'static str, scope: &'static str) {
        self.audit.lock().unwrap().push((backend, scope));
    }
}

impl Recorder {
    fn faults(&self) -> Vec<FaultLogEntry> {
        self.faults.lock().unwrap().clone()
    }
    fn audit(&self) -> Vec<(&'static str, &'static str)> {
        self.audit.lock().unwrap().clone()
    }
}

fn facade() -> (Arc<Facade>, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    (Arc::new(Facade::new(recorder.clone(), recorder.clone(), Arc::new(SeededRandom::new(7)))), recorder)
}

async fn env() -> (TestServer, Arc<Recorder>) {
    vercel_mcp::observe::install_panic_hook();
    let (facade, recorder) = facade();
    let mut server = McpServer::new("facade-server", "0.1.0");
    facade::register(&mut server, facade);
    let config = Parts::for_tests(Arc::new(SystemClock));
    (TestServer::start(Arc::new(App::new(server, config.endpoint()))).await, recorder)
}

async fn call(server: &TestServer, tool: &str, arguments: Value) -> Value {
    let reply =
        server.modern(json!(1), "tools/call", json!({"name": tool, "arguments": arguments})).send().await.json();
    if reply.get("result").is_some() { reply["result"].clone() } else { reply }
}

fn is_uuid(id: &str) -> bool {
    let parts: Vec<&str> = id.split('-').collect();
    parts.iter().map(|p| p.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && parts.iter().all(|p| p.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()))
        && parts[2].starts_with('4')
}

#[tokio::test]
async fn lists_namespaced_tools_only() {
    let (server, _) = env().await;
    let tools = server.modern(json!(1), "tools/list", json!({})).send().await.json()["result"]["tools"].clone();
    let names: Vec<&str> = tools.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["weather_get", "directory_lookup"]);
    assert_eq!(tools[0]["inputSchema"]["properties"]["city"]["type"], "string");
    assert_eq!(tools[1]["inputSchema"]["properties"]["person"]["type"], "string");
    for backend in facade().0.backend_names() {
        assert!(!names.contains(&backend), "the bare backend {backend} is never a tool");
    }
}

#[tokio::test]
async fn lookups_answer_and_audit_only_backend_and_scope() {
    let (server, recorder) = env().await;
    assert_eq!(call(&server, "weather_get", json!({"city": "London"})).await["content"][0]["text"], "rain");
    assert_eq!(recorder.audit(), [("weather", "weather:read")]);
    let audit = format!("{:?}", recorder.audit()).to_lowercase();
    assert!(!audit.contains("london") && !audit.contains("rain"));
    assert_eq!(call(&server, "weather_get", json!({"city": "tokyo"})).await["content"][0]["text"], "clear");
    assert_eq!(
        call(&server, "directory_lookup", json!({"person": "ALICE"})).await["content"][0]["text"],
        "alice@example.com"
    );
    use facade::Backend;
    assert_eq!((facade::Weather.scope(), facade::Directory.scope()), ("weather:read", "directory:read"));
}

#[tokio::test]
async fn expected_errors_pass_through_and_nothing_cross_routes() {
    let (server, recorder) = env().await;
    let unknown_tool = call(&server, "weather", json!({"city": "london"})).await;
    assert!(unknown_tool["error"]["message"].as_str().unwrap().contains("not found"));
    assert!(recorder.audit().is_empty(), "an unknown tool reaches no backend");
    for (tool, arguments, expected) in [
        ("weather_get", json!({"city": "atlantis"}), "unknown city"),
        ("weather_get", json!({"city": "alice"}), "unknown city"),
        ("directory_lookup", json!({"person": "london"}), "unknown person"),
    ] {
        let result = call(&server, tool, arguments).await;
        assert_eq!(result["isError"], true);
        assert!(common::error_text(&result).contains(expected));
    }
    assert_eq!(call(&server, "weather_get", json!({"city": 42})).await["isError"], true);
    assert!(recorder.faults().is_empty(), "expected errors are not faults");
    // Over its bound, an argument is refused by the schema before any backend is asked.
    let audited = recorder.audit().len();
    for (tool, member) in [("weather_get", "city"), ("directory_lookup", "person")] {
        let long = call(&server, tool, json!({ member: "x".repeat(101) })).await;
        assert_eq!(long["isError"], true, "{long}");
        assert!(common::error_text(&long).contains(member), "{tool}: {long}");
        let at_bound = call(&server, tool, json!({ member: "x".repeat(100) })).await;
        assert!(common::error_text(&at_bound).contains("unknown"), "{tool}: read at 100 characters: {at_bound}");
    }
    assert_eq!(recorder.audit().len(), audited + 2, "only the two calls within the bound reached a backend");
}

#[tokio::test]
async fn faults_are_contained_behind_a_correlation_id() {
    let (server, recorder) = env().await;
    let result = call(&server, "directory_lookup", json!({"person": "__boom__"})).await;
    assert_eq!(result["isError"], true);
    let faults = recorder.faults();
    assert_eq!(faults.len(), 1);
    let fault = &faults[0];
    assert!(is_uuid(&fault.correlation_id), "{}", fault.correlation_id);
    assert_eq!((fault.backend, fault.scope, fault.detail.as_str()), ("directory", "directory:read", RAW_FAULT));
    assert!(fault.stack.as_deref().unwrap_or_default().contains(RAW_FAULT), "{:?}", fault.stack);
    assert_eq!(common::error_text(&result), contained_fault_message("directory", &fault.correlation_id));
    let wire = result.to_string();
    for leak in [RAW_FAULT, "simulated", "facade.rs", "panicked"] {
        assert!(!wire.contains(leak), "{leak} leaked: {wire}");
    }
    assert!(recorder.audit().contains(&("directory", "directory:read")));
    assert!(!format!("{:?}", recorder.audit()).contains("__boom__"));
    // The server keeps serving, and a second fault gets its own id.
    assert_eq!(call(&server, "weather_get", json!({"city": "Tokyo"})).await["content"][0]["text"], "clear");
    call(&server, "directory_lookup", json!({"person": "__boom__"})).await;
    let faults = recorder.faults();
    assert_eq!(faults.len(), 2);
    assert_ne!(faults[0].correlation_id, faults[1].correlation_id);
}

#[test]
fn dispatch_refuses_unknown_backends_before_auditing() {
    let (facade, recorder) = facade();
    let error = facade.dispatch("nonexistent", "anything").unwrap_err();
    assert_eq!(error.message, "unknown backend: \"nonexistent\"");
    assert!(error.correlation_id.is_none());
    assert!(recorder.audit().is_empty() && recorder.faults().is_empty());
    let error = facade.dispatch("weather", "atlantis").unwrap_err();
    assert!(error.message.contains("unknown city") && error.correlation_id.is_none());
    assert!(recorder.faults().is_empty());
    let contained = facade.dispatch("directory", "__boom__").unwrap_err();
    let id = contained.correlation_id.clone().unwrap();
    assert_eq!(contained.message, contained_fault_message("directory", &id));
    // The chosen wording of the reconstructed template, pinned literally.
    assert_eq!(contained.message, format!("backend \"directory\" failed; see server logs for correlation id {id}"));
    assert!(is_uuid(&id));
}
