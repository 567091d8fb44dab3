//! OpenTelemetry traces, as a tracing backend receives them: a loopback OTLP/HTTP receiver
//! decodes every export (protobuf) and the tests assert the span tree of a tool call, a failing
//! tool call, an MRTR round trip, a caller's `traceparent`, and a job whose delivery (by a
//! consumer with a tracer of its own, as another process has) links to the request that
//! submitted it; that no argument value or token reaches any attribute; that a request's log
//! line names its span's trace; that one export at a time is in flight, its failures counted; and
//! that spans and metrics name one resource.

use crate::common;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use vercel_mcp::Parts;
use vercel_mcp::client::{ClientError, ClientOptions};
use vercel_mcp::protocol::types::{CallToolResult, InputRequest};
use vercel_mcp::server::{InputRequired, McpServer, NoArguments, Outcome, ToolDef, ToolError};
use vercel_mcp::state::SystemClock;

const HS256: &str = "telemetry-test-secret-0123456789abcdef";
const ISSUER: &str = "https://issuer.telemetry.test";
const CANARY_ARGUMENT: &str = "canary-argument-5b1e";

/// Every span the receiver was sent, the `service.name` each batch named, and the metric exports.
#[derive(Default)]
pub(crate) struct Received {
    pub spans: Vec<Span>,
    /// Each span's `service.name`, in the order of `spans`.
    pub span_services: Vec<String>,
    services: Vec<String>,
    /// Each span batch's resource attributes.
    span_resources: Vec<HashMap<String, String>>,
    metrics: Vec<opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest>,
}

pub(crate) async fn receiver() -> (String, Arc<Mutex<Received>>) {
    let received = Arc::new(Mutex::new(Received::default()));
    let shared = received.clone();
    let addr = common::upstream::serve(move |request| {
        let received = shared.clone();
        async move {
            assert_eq!(request.header("content-type").as_deref(), Some("application/x-protobuf"));
            assert_eq!(request.header("x-otlp-key").as_deref(), Some("secret value"), "the configured headers");
            let mut received = received.lock().unwrap();
            if request.path() == "/v1/metrics" {
                let export = opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest::decode(
                    request.body,
                )
                .expect("an OTLP protobuf metrics export");
                received.metrics.push(export);
                return (200, Bytes::new());
            }
            assert_eq!(request.path(), "/v1/traces");
            let export = ExportTraceServiceRequest::decode(request.body).expect("an OTLP protobuf export");
            for resource in export.resource_spans {
                let attributes = resource.resource.as_ref().map(|r| key_values(&r.attributes)).unwrap_or_default();
                let service = attributes.get("service.name").cloned().unwrap_or_default();
                received.span_resources.push(attributes);
                for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                    received.span_services.push(service.clone());
                    received.spans.push(span);
                }
                received.services.push(service);
            }
            (200, Bytes::new())
        }
    })
    .await;
    (format!("http://{addr}"), received)
}

fn text(value: &Any) -> Option<String> {
    match value {
        Any::StringValue(s) => Some(s.clone()),
        Any::IntValue(n) => Some(n.to_string()),
        Any::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

pub(crate) fn attributes(span: &Span) -> HashMap<String, String> {
    key_values(&span.attributes)
}

fn key_values(attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> HashMap<String, String> {
    attributes.iter().filter_map(|a| Some((a.key.clone(), text(a.value.as_ref()?.value.as_ref()?)?))).collect()
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parts with tracing on (sampling everything) and authentication required.
fn traced_parts(endpoint: &str, service: &str) -> Parts {
    traced_parts_with(endpoint, service, &[])
}

/// [`traced_parts`], with `more` variables.
fn traced_parts_with(endpoint: &str, service: &str, more: &[(&'static str, &str)]) -> Parts {
    let vars: HashMap<&str, String> = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.to_owned()),
        ("OTEL_SERVICE_NAME", service.to_owned()),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-otlp-key=secret%20value".to_owned()),
        ("MCP_STATE_SECRET", "telemetry=0123456789abcdef0123456789abcdef".to_owned()),
        ("MCP_AUTH_MODE", "required".to_owned()),
        ("MCP_AUTH_HS256_SECRET", HS256.to_owned()),
        ("MCP_AUTH_ISSUER", ISSUER.to_owned()),
    ]
    .into_iter()
    .chain(more.iter().map(|(name, value)| (*name, (*value).to_owned())))
    .collect();
    Parts::from_lookup(|name| vars.get(name).cloned(), Arc::new(SystemClock)).unwrap()
}

/// Parts with tracing on (sampling everything) and Redis behind the stores, under a fresh prefix.
fn redis_traced_parts(endpoint: &str, redis_url: &str) -> Parts {
    let vars: HashMap<&str, String> = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.to_owned()),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-otlp-key=secret%20value".to_owned()),
        ("MCP_STATE_SECRET", "telemetry=0123456789abcdef0123456789abcdef".to_owned()),
        ("REDIS_URL", redis_url.to_owned()),
        ("MCP_REDIS_PREFIX", common::redis::unique_prefix("telemetry")),
    ]
    .into_iter()
    .collect();
    Parts::from_lookup(|name| vars.get(name).cloned(), Arc::new(SystemClock)).unwrap()
}

fn token(parts: &Parts, scopes: &str) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({"iss": ISSUER, "aud": parts.settings.auth.config().resource.url(), "sub": "ada",
                        "scope": scopes, "iat": now, "exp": now + 600});
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(HS256.as_bytes()),
    )
    .unwrap()
}

fn server() -> McpServer {
    let mut server = McpServer::new("traced", "1");
    server.tool(ToolDef::new("echo").description("Echo."), |ctx, args: Echo| async move {
        // A handler's own step, as a fork would trace it.
        ctx.span().child("echo step", vercel_mcp::telemetry::SpanKind::Internal).end();
        args.message
    });
    server.tool(ToolDef::new("fail").description("Fails."), |_, _: NoArguments| async {
        Err::<String, _>(ToolError::Execution("no".into()))
    });
    server.tool(ToolDef::new("boom").description("Panics."), |_, _: NoArguments| async {
        if std::hint::black_box(true) {
            panic!("a bug in the tool");
        }
        "unreachable"
    });
    server.tool(ToolDef::new("early_boom").description("Panics before its first await."), |_, _: NoArguments| {
        if std::hint::black_box(true) {
            panic!("a bug in the tool, before its future");
        }
        async { "unreachable" }
    });
    server.tool(ToolDef::new("confirm").description("Asks first."), |ctx, _: NoArguments| async move {
        if ctx.input_response("ok").is_some() {
            return Outcome::Complete(CallToolResult::text("confirmed"));
        }
        let ask = InputRequest::ElicitForm { message: "Sure?".into(), requested_schema: json!({"type": "object"}) };
        Outcome::InputRequired(InputRequired::new().request("ok", ask))
    });
    vercel_mcp::catalogue::resources::register(&mut server);
    server
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    /// The text.
    message: String,
}

/// A caller cannot have its requests exported past the operator's sampling ratio: neither by
/// flagging its trace sampled (`parentbased_traceidratio` followed that flag) nor by choosing a
/// trace id whose low bits the plain ratio always took. With a ratio of 1 in 10 000, ten such
/// requests under each sampler export nothing; at a ratio of 1 the same requests are exported.
#[tokio::test]
async fn a_caller_cannot_force_its_requests_past_the_sampling_ratio() {
    for (sampler, ratio, exported) in
        [("parentbased_traceidratio", "0.0001", false), ("traceidratio", "0.0001", false), ("traceidratio", "1", true)]
    {
        let (endpoint, received) = receiver().await;
        let settings = [("OTEL_TRACES_SAMPLER", sampler), ("OTEL_TRACES_SAMPLER_ARG", ratio)];
        let parts = traced_parts_with(&endpoint, "sampled", &settings);
        let bearer = token(&parts, "");
        let options = ClientOptions::default()
            .header("Authorization", &format!("Bearer {bearer}"))
            .header("traceparent", "00-4bf92f3577b34da60000000000000000-00f067aa0ba902b7-01");
        let client = vercel_mcp::testing::client_with(server(), &parts, options).await;
        for _ in 0..10 {
            client.call_tool("echo", json!({"message": "m"})).await.unwrap();
        }
        parts.telemetry.flush().await;
        let spans = received.lock().unwrap().spans.len();
        assert_eq!(spans > 0, exported, "{sampler} {ratio}: {spans} spans");
    }
    // The ratio's key comes from the state secret: instances of one deployment decide alike for
    // a trace, and another deployment's decisions say nothing about this one's.
    let key = |secret: &str| {
        let parts = traced_parts_with("http://127.0.0.1:9", "keyed", &[("MCP_STATE_SECRET", secret)]);
        parts.settings.telemetry.expect("tracing on").sampling_key
    };
    let ours = "telemetry=0123456789abcdef0123456789abcdef";
    assert_eq!(key(ours), key(ours));
    assert_ne!(key(ours), key("other=fedcba9876543210fedcba9876543210"));
}

#[tokio::test]
async fn requests_and_tool_calls_become_a_span_tree_without_arguments_or_tokens() {
    let (endpoint, received) = receiver().await;
    let parts = traced_parts(&endpoint, "traced-test");
    let bearer = token(&parts, "");
    let accept = |_| async { Ok(json!({"action": "accept", "content": {}})) };
    let options = ClientOptions::default()
        .header("Authorization", &format!("Bearer {bearer}"))
        .header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .handler("elicitation/create", accept);
    let client = vercel_mcp::testing::client_with(server(), &parts, options).await;
    assert_eq!(
        client.call_tool("echo", json!({"message": CANARY_ARGUMENT})).await.unwrap().joined_text(),
        CANARY_ARGUMENT
    );
    assert!(client.call_tool("fail", json!({})).await.unwrap().is_error);
    assert!(matches!(client.call_tool("boom", json!({})).await, Err(ClientError::Rpc { code: -32603, .. })));
    let early = client.call_tool("early_boom", json!({})).await;
    assert!(matches!(early, Err(ClientError::Rpc { code: -32603, .. })), "{early:?}");
    assert_eq!(client.call_tool("confirm", json!({})).await.unwrap().joined_text(), "confirmed");
    assert!(matches!(client.call_tool("nope", json!({})).await, Err(ClientError::Rpc { code: -32602, .. })));
    assert!(client.request("nope/nothing", serde_json::Map::new()).await.is_err());
    for uri in ["notes://welcome".to_owned(), format!("notes://{CANARY_ARGUMENT}")] {
        let read = client.request("resources/read", json!({ "uri": uri }).as_object().unwrap().clone()).await;
        assert_eq!(read.unwrap()["contents"][0]["uri"], uri);
    }
    parts.telemetry.flush().await;

    let received = received.lock().unwrap();
    assert!(received.services.iter().all(|s| s == "traced-test"), "{:?}", received.services);
    let spans = &received.spans;
    let named = |name: &str| spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();
    // Every request continues the caller's trace, as a child of its span.
    for span in spans.iter().filter(|s| s.kind == 2) {
        assert_eq!(hex(&span.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736", "{}", span.name);
        assert_eq!(hex(&span.parent_span_id), "00f067aa0ba902b7", "{}", span.name);
    }
    let echo = named("tools/call echo");
    assert_eq!(echo.len(), 1);
    let attrs = attributes(echo[0]);
    assert_eq!(attrs["mcp.method.name"], "tools/call");
    assert_eq!(attrs["gen_ai.tool.name"], "echo");
    assert_eq!(attrs["mcp.protocol.version"], "2026-07-28");
    assert_eq!(attrs["mcp.outcome"], "ok");
    assert_eq!(attrs["http.response.status_code"], "200");
    assert!(attrs.contains_key("jsonrpc.request.id"));
    let tool = named("execute_tool echo");
    assert_eq!(tool.len(), 1);
    assert_eq!((tool[0].kind, &tool[0].parent_span_id, &tool[0].trace_id), (1, &echo[0].span_id, &echo[0].trace_id));
    let step = named("echo step");
    assert_eq!(step.len(), 1, "the handler's child span is exported");
    assert_eq!((step[0].kind, &step[0].parent_span_id, &step[0].trace_id), (1, &echo[0].span_id, &echo[0].trace_id));

    let failed = named("tools/call fail");
    assert_eq!(attributes(failed[0])["error.type"], "tool_error");
    assert_eq!(failed[0].status.as_ref().map(|s| s.code), Some(2), "status ERROR");
    assert_eq!(attributes(named("execute_tool fail")[0])["error.type"], "tool_error");
    // A tool that panics: its span says so (it did not just end unmarked), and the request is
    // answered with the contained panic's -32603.
    for name in ["execute_tool boom", "execute_tool early_boom"] {
        let boom = named(name);
        assert_eq!(attributes(boom[0])["error.type"], "panic", "{name}");
        assert_eq!(boom[0].status.as_ref().map(|s| s.code), Some(2), "status ERROR");
    }

    // The MRTR round trip: two requests, the first one asking.
    let rounds = named("tools/call confirm");
    assert_eq!(rounds.len(), 2);
    let asks = named("execute_tool confirm");
    assert_eq!(
        asks.iter()
            .filter(|s| attributes(s).get("mcp.result_type").map(String::as_str) == Some("input_required"))
            .count(),
        1
    );

    // What the client made up (a tool that is not registered, a method that does not exist)
    // names no span and no attribute: trace backends index them, and each caller would get a
    // series of its own choosing. The request's line keeps what was sent.
    let unknown = named("tools/call");
    assert_eq!(unknown.len(), 1, "only the unregistered tool's request span is unnamed");
    assert_eq!(attributes(unknown[0])["rpc.jsonrpc.error_code"], "-32602");
    assert_eq!(attributes(unknown[0])["error.type"], "protocol_error");
    assert!(!attributes(unknown[0]).contains_key("gen_ai.tool.name"));
    let other = named("other");
    assert_eq!(attributes(other[0])["mcp.method.name"], "other");
    for span in spans {
        assert!(!span.name.contains("nope"), "{}", span.name);
        assert!(
            attributes(span).values().all(|value| !value.contains("nope")),
            "{}: {:?}",
            span.name,
            attributes(span)
        );
    }

    // A resource is named by its URI; one read through a template by the template, since the
    // URI carries the argument.
    let welcome = named("resources/read notes://welcome");
    assert_eq!(attributes(welcome[0])["mcp.resource.uri"], "notes://welcome");
    let topic = named("resources/read notes://{topic}");
    assert_eq!(topic.len(), 1);
    assert!(!attributes(topic[0]).contains_key("mcp.resource.uri"), "a template is not a URI");

    for span in spans {
        assert!(!span.name.contains(CANARY_ARGUMENT), "{} carries an argument", span.name);
        for (key, value) in attributes(span) {
            assert!(!value.contains(CANARY_ARGUMENT), "{}: {key} carries an argument", span.name);
            assert!(
                !value.contains(&bearer) && !value.contains("secret value"),
                "{}: {key} carries a secret",
                span.name
            );
        }
    }
}

#[tokio::test]
async fn a_refused_request_is_a_span_too() {
    let (endpoint, received) = receiver().await;
    let parts = traced_parts(&endpoint, "refusals");
    let app = Arc::new(vercel_mcp::App::new(server(), parts.endpoint()));
    let request = http::Request::post("/api/mcp")
        .header("content-type", "application/json")
        .header("authorization", "Bearer not-a-token")
        .body(Bytes::from_static(b"{}"))
        .unwrap();
    assert_eq!(vercel_mcp::transport::handle(&app, request).await.status(), 401);
    let get = http::Request::get("/api/mcp").body(Bytes::new()).unwrap();
    assert_eq!(vercel_mcp::transport::handle(&app, get).await.status(), 405);
    let odd = http::Request::builder().method("BREW").uri("/api/mcp").body(Bytes::new()).unwrap();
    assert_eq!(vercel_mcp::transport::handle(&app, odd).await.status(), 405);
    parts.telemetry.flush().await;
    let received = received.lock().unwrap();
    assert_eq!(received.spans.len(), 3);
    let attrs = attributes(&received.spans[0]);
    assert_eq!((attrs["error.type"].as_str(), attrs["http.response.status_code"].as_str()), ("auth_failure", "401"));
    assert_eq!(attrs["http.request.method"], "POST");
    let attrs = attributes(&received.spans[1]);
    assert_eq!((attrs["http.request.method"].as_str(), attrs["http.response.status_code"].as_str()), ("GET", "405"));
    assert_eq!(
        attributes(&received.spans[2])["http.request.method"],
        "_OTHER",
        "the client's own word is not recorded"
    );
}

/// A job submitted by one process's request and run by another process's consumer: one trace,
/// the delivery's span linked to the submitting request's span. (Two tracers, as two processes
/// have; the message is the only thing that crosses.)
#[tokio::test]
async fn a_job_run_elsewhere_continues_the_trace_of_the_request_that_submitted_it() {
    let (endpoint, received) = receiver().await;
    let submitter = traced_parts(&endpoint, "mcp");
    let worker = traced_parts(&endpoint, "process-job");
    let mut server = McpServer::new("jobs", "1");
    vercel_mcp::catalogue::async_jobs::register(&mut server, submitter.job_service());
    let bearer = token(&submitter, "mcp:read mcp:write");
    let options = ClientOptions::default().header("Authorization", &format!("Bearer {bearer}"));
    let client = vercel_mcp::testing::client_with(server, &submitter, options).await;
    client.call_tool("submit_job", json!({"steps": 2})).await.unwrap();
    // The other process's consumer, reading the same queue and store.
    let mut consumer = vercel_mcp::consumer(&worker);
    consumer.store = submitter.jobs.store.clone();
    consumer.queue = submitter.jobs.queue_api.clone();
    let queue = submitter.jobs.local_queue.clone().unwrap();
    queue.connect_consumer(Arc::new(consumer));
    queue.drain().await;
    submitter.telemetry.flush().await;
    worker.telemetry.flush().await;

    let received = received.lock().unwrap();
    let submit = received.spans.iter().find(|s| s.name == "tools/call submit_job").expect("the request's span");
    let delivery = received.spans.iter().find(|s| s.name == "process jobs").expect("the delivery's span");
    assert_eq!(delivery.kind, 5, "CONSUMER");
    assert_eq!(delivery.trace_id, submit.trace_id, "one trace");
    assert_eq!(delivery.links.len(), 1);
    assert_eq!((&delivery.links[0].trace_id, &delivery.links[0].span_id), (&submit.trace_id, &submit.span_id));
    assert_eq!(attributes(delivery)["mcp.job.state"], "done");
    assert!(received.services.contains(&"mcp".to_owned()) && received.services.contains(&"process-job".to_owned()));
}

#[tokio::test]
async fn off_by_default_and_the_settings_are_checked() {
    let off = Parts::for_tests(Arc::new(SystemClock));
    assert!(!off.telemetry.is_on(), "no endpoint, no tracing");
    let load = |vars: &[(&str, &str)]| {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Parts::from_lookup(|name| vars.get(name).cloned(), Arc::new(SystemClock))
    };
    let disabled = load(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"), ("OTEL_SDK_DISABLED", "true")]);
    assert!(!disabled.unwrap().telemetry.is_on());
    let refused = load(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "broken-pair-with-secret-value"),
        ("OTEL_TRACES_SAMPLER", "sometimes"),
    ])
    .unwrap_err()
    .to_string();
    for problem in ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_TRACES_SAMPLER"] {
        assert!(refused.contains(problem), "{refused}");
    }
    assert!(!refused.contains("secret-value"), "a header value is never echoed: {refused}");
}

/// On Vercel, spans leave after the response through `wait_until`, coalesced: while one flush
/// waits, responses register none, so a busy instance exports once a second.
#[tokio::test]
async fn flushes_after_responses_are_coalesced() {
    let (endpoint, received) = receiver().await;
    let parts = traced_parts(&endpoint, "coalesced");
    let app = Arc::new(vercel_mcp::App::new(server(), parts.endpoint()));
    let refused =
        || http::Request::post("/api/mcp").header("authorization", "Bearer x").body(Bytes::from_static(b"{}")).unwrap();
    vercel_mcp::transport::handle(&app, refused()).await;
    let first = parts.telemetry.flush_soon().expect("the first response registers a flush");
    vercel_mcp::transport::handle(&app, refused()).await;
    assert!(parts.telemetry.flush_soon().is_none(), "one is already waiting");
    first.await;
    assert_eq!(received.lock().unwrap().spans.len(), 2, "both responses' spans in the one export");
    assert!(parts.telemetry.flush_soon().is_some(), "the next response registers the next flush");
}

/// What a tool calls through the outbound client is a CLIENT span under the tool's span, and the
/// call carries that span's `traceparent` to the upstream (host only in the span: paths may carry
/// tokens).
#[tokio::test]
async fn outbound_calls_are_client_spans_and_carry_the_trace_onward() {
    let (endpoint, received) = receiver().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorder = seen.clone();
    let upstream = common::upstream::serve(move |request| {
        let recorder = recorder.clone();
        async move {
            recorder.lock().unwrap().push(request.header("traceparent"));
            (200, Bytes::from_static(b"{}"))
        }
    })
    .await;
    // The trace goes onward only to a host the deployment names (its own backends).
    let parts =
        traced_parts_with(&endpoint, "outbound", &[("MCP_TRACE_PROPAGATE_HOSTS", "backend.example, 127.0.0.1")]);
    let mut server = McpServer::new("calls-out", "1");
    server.tool(ToolDef::new("fetch").description("Calls upstream."), move |_, _: NoArguments| async move {
        let request = http::Request::get(format!("http://{upstream}/private/path?token=canary-in-query"))
            .body(http_body_util::Full::new(Bytes::new()))
            .unwrap();
        let response = vercel_mcp::outbound::send(request, std::time::Duration::from_secs(5)).await.unwrap();
        response.status.as_u16().to_string()
    });
    let bearer = token(&parts, "");
    let options = ClientOptions::default().header("Authorization", &format!("Bearer {bearer}"));
    let client = vercel_mcp::testing::client_with(server, &parts, options).await;
    assert_eq!(client.call_tool("fetch", json!({})).await.unwrap().joined_text(), "200");
    parts.telemetry.flush().await;

    {
        let received = received.lock().unwrap();
        let tool = received.spans.iter().find(|s| s.name == "execute_tool fetch").unwrap();
        let call = received.spans.iter().find(|s| s.kind == 3).expect("a CLIENT span");
        assert_eq!((&call.trace_id, &call.parent_span_id), (&tool.trace_id, &tool.span_id));
        let attrs = attributes(call);
        assert_eq!((attrs["http.request.method"].as_str(), attrs["server.address"].as_str()), ("GET", "127.0.0.1"));
        assert!(attrs.values().all(|v| !v.contains("canary-in-query") && !v.contains("/private")));
        let sent = seen.lock().unwrap()[0].clone().expect("the upstream got a traceparent");
        assert_eq!(sent, format!("00-{}-{}-01", hex(&call.trace_id), hex(&call.span_id)));
    }

    // A host it does not name (an identity provider, the platform's APIs, anyone's) gets the
    // call and its CLIENT span, but not the trace.
    let parts = traced_parts(&endpoint, "outbound-unnamed");
    let mut server = McpServer::new("calls-out", "1");
    server.tool(ToolDef::new("fetch").description("Calls upstream."), move |_, _: NoArguments| async move {
        let request =
            http::Request::get(format!("http://{upstream}/")).body(http_body_util::Full::new(Bytes::new())).unwrap();
        vercel_mcp::outbound::send(request, std::time::Duration::from_secs(5))
            .await
            .unwrap()
            .status
            .as_u16()
            .to_string()
    });
    let bearer = token(&parts, "");
    let options = ClientOptions::default().header("Authorization", &format!("Bearer {bearer}"));
    let client = vercel_mcp::testing::client_with(server, &parts, options).await;
    assert_eq!(client.call_tool("fetch", json!({})).await.unwrap().joined_text(), "200");
    assert_eq!(seen.lock().unwrap().len(), 2);
    assert_eq!(seen.lock().unwrap()[1], None, "no traceparent to a host the deployment did not name");
}

/// Metrics go out with the spans, cumulative: request duration by method and outcome (its count
/// is the request count), tool duration by tool, job submissions, deliveries and queue lag.
#[tokio::test]
async fn metrics_count_requests_tools_and_jobs() {
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value as Number};
    let (endpoint, received) = receiver().await;
    let parts = traced_parts(&endpoint, "metered");
    let mut server = server();
    vercel_mcp::catalogue::async_jobs::register(&mut server, parts.job_service());
    let bearer = token(&parts, "mcp:read mcp:write");
    let options = ClientOptions::default().header("Authorization", &format!("Bearer {bearer}"));
    let client = vercel_mcp::testing::client_with(server, &parts, options).await;
    client.call_tool("echo", json!({"message": "a"})).await.unwrap();
    client.call_tool("echo", json!({"message": "b"})).await.unwrap();
    client.call_tool("fail", json!({})).await.unwrap();
    let submitted = client.call_tool("submit_job", json!({"steps": 1})).await.unwrap();
    // A method the server does not know is one series, whatever the client called it.
    for unknown in ["nope/nothing", "tools/list/"] {
        assert!(client.request(unknown, serde_json::Map::new()).await.is_err());
    }
    // Two copies of the job's message delivered at once: both find no step done, one applies
    // the step, and only that one counts the job's wait in the queue.
    let submitted: Value = serde_json::from_str(&submitted.joined_text()).unwrap();
    let handle = submitted["jobId"].as_str().unwrap().to_owned();
    let owner = vercel_mcp::security::Principal::verified(Some("ada"), None, vec![]);
    let job_id = vercel_mcp::jobs::handle::open(&parts.settings.sealer, owner.id(), &handle).unwrap();
    let message = vercel_mcp::jobs::JobMessage { job_id, owner_id: owner.id().into(), steps: 1, traceparent: None };
    let (first, second) = (vercel_mcp::consumer(&parts), vercel_mcp::consumer(&parts));
    let (a, b) = tokio::join!(first.run(&message), second.run(&message));
    assert!(a.is_ok() && b.is_ok());
    let queue = parts.jobs.local_queue.clone().unwrap();
    queue.connect_consumer(Arc::new(vercel_mcp::consumer(&parts)));
    queue.drain().await;
    parts.telemetry.flush().await;

    let received = received.lock().unwrap();
    let export = received.metrics.last().expect("a metrics export");
    let metrics = &export.resource_metrics[0].scope_metrics[0].metrics;
    let find = |name: &str| metrics.iter().find(|m| m.name == name).unwrap_or_else(|| panic!("{name}"));
    let labels = |attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue]| -> Vec<(String, String)> {
        attributes
            .iter()
            .map(|a| (a.key.clone(), text(a.value.as_ref().unwrap().value.as_ref().unwrap()).unwrap()))
            .collect()
    };
    let count = |name: &str, wanted: &[(&str, &str)]| -> u64 {
        let wanted: Vec<(String, String)> = wanted.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        match find(name).data.as_ref().unwrap() {
            Data::Histogram(h) => {
                h.data_points.iter().filter(|p| labels(&p.attributes) == wanted).map(|p| p.count).sum()
            }
            Data::Sum(s) => s
                .data_points
                .iter()
                .filter(|p| labels(&p.attributes) == wanted)
                .map(|p| match p.value {
                    Some(Number::AsInt(n)) => n as u64,
                    _ => 0,
                })
                .sum(),
            _ => 0,
        }
    };
    let calls = [("mcp.method.name", "tools/call"), ("mcp.outcome", "ok")];
    assert_eq!(count(vercel_mcp::telemetry::OPERATION_DURATION, &calls), 3, "two echoes and a submit");
    let failed = [("mcp.method.name", "tools/call"), ("mcp.outcome", "tool_error")];
    assert_eq!(count(vercel_mcp::telemetry::OPERATION_DURATION, &failed), 1);
    let unknown = [("mcp.method.name", "other"), ("mcp.outcome", "protocol_error")];
    assert_eq!(count(vercel_mcp::telemetry::OPERATION_DURATION, &unknown), 2);
    let echoes = [("gen_ai.tool.name", "echo"), ("mcp.outcome", "ok")];
    assert_eq!(count(vercel_mcp::telemetry::TOOL_DURATION, &echoes), 2);
    assert_eq!(count(vercel_mcp::telemetry::JOBS_SUBMITTED, &[("mcp.job.result", "accepted")]), 1);
    // The two copies, then the queue's own delivery of a job already done.
    assert_eq!(count(vercel_mcp::telemetry::JOB_DELIVERIES, &[("mcp.job.outcome", "done")]), 3);
    assert_eq!(count(vercel_mcp::telemetry::QUEUE_LAG, &[]), 1, "one job waited once");
    assert_eq!(
        key_values(&export.resource_metrics[0].resource.as_ref().unwrap().attributes)["service.name"],
        "metered"
    );
}

/// With Redis, the store's operations are CLIENT spans under whatever span made them: the job's
/// create (which also queues its message on the stream) under the tool call that submitted it,
/// its reads and steps under the delivery.
#[tokio::test]
async fn redis_operations_are_client_spans_under_their_caller() {
    let Some((url, _guard)) = common::redis::redis() else { return };
    let (endpoint, received) = receiver().await;
    let parts = redis_traced_parts(&endpoint, &url);
    let mut server = McpServer::new("jobs", "1");
    vercel_mcp::catalogue::async_jobs::register(&mut server, parts.job_service());
    let client = vercel_mcp::testing::client_with(server, &parts, ClientOptions::default()).await;
    client.call_tool("submit_job", json!({"steps": 2})).await.unwrap();
    let stream = parts.jobs.stream_queue.clone().expect("jobs go through the Redis stream");
    let worker = tokio::spawn(stream.clone().work(Arc::new(vercel_mcp::consumer(&parts))));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        parts.telemetry.flush().await;
        if received.lock().unwrap().spans.iter().any(|s| s.name == "process jobs") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the job never ran");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    stream.shut_down();
    worker.await.unwrap();
    parts.telemetry.flush().await;

    let received = received.lock().unwrap();
    let by_name = |name: &str| received.spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("{name}"));
    let tool = by_name("execute_tool submit_job");
    // The record and its message go in with one script: the submit's only Redis call.
    let under_tool: Vec<&str> =
        received.spans.iter().filter(|s| s.parent_span_id == tool.span_id).map(|s| s.name.as_str()).collect();
    assert_eq!(under_tool, ["redis job.create"], "one round trip per submit");
    let create = by_name("redis job.create");
    assert_eq!(create.kind, 3);
    assert_eq!(attributes(create)["db.system.name"], "redis");
    let delivery = by_name("process jobs");
    let steps = received.spans.iter().filter(|s| s.name == "redis job.advance").collect::<Vec<_>>();
    assert_eq!(steps.len(), 2, "one per step");
    assert!(steps.iter().all(|s| s.parent_span_id == delivery.span_id && s.trace_id == delivery.trace_id));
}

/// A JWKS fetch during authentication happens before the request's own span exists: it is a
/// CLIENT span in the caller's trace (a child of the caller's `traceparent`, beside the request
/// span), carrying the host only.
#[tokio::test]
async fn a_key_fetch_during_authentication_is_a_client_span_in_the_callers_trace() {
    let (caller_trace, caller_span) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let (fetch, call) = key_fetch_and_call_spans(&format!("00-{caller_trace}-{caller_span}-01")).await;
    assert_eq!((hex(&fetch.trace_id), hex(&fetch.parent_span_id)), (caller_trace.into(), caller_span.into()));
    let attrs = attributes(&fetch);
    assert_eq!((attrs["http.request.method"].as_str(), attrs["server.address"].as_str()), ("GET", "127.0.0.1"));
    assert!(attrs.values().all(|v| !v.contains("jwks.json")), "no path in the span");
    assert_eq!(hex(&call.parent_span_id), caller_span, "the request span is the fetch's sibling");
}

/// A malformed `traceparent` (here upper-case hex, which W3C Trace Context forbids and a lenient
/// hex parser would take) names no parent: the fetch starts a trace of its own, and the request
/// is served as usual.
#[tokio::test]
async fn a_malformed_traceparent_makes_the_key_fetch_a_root() {
    let (fetch, call) = key_fetch_and_call_spans("00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01").await;
    assert!(fetch.parent_span_id.is_empty(), "no parent");
    assert!(call.parent_span_id.is_empty(), "no parent for the request either");
    assert_ne!(hex(&fetch.trace_id), "0af7651916cd43dd8448eb211c80319c", "not the malformed header's trace");
    assert_ne!(fetch.trace_id, call.trace_id, "the fetch is not inside a trace the caller did not name");
}

/// Serves one authenticated echo call whose token needs a JWKS fetch, with `traceparent`; the
/// fetch's CLIENT span (the only one) and the request's span.
async fn key_fetch_and_call_spans(traceparent: &str) -> (Span, Span) {
    use common::tokens::{auth_config, bearer, stub_jwks};
    let (endpoint, received) = receiver().await;
    let (jwks_url, fetches) = stub_jwks().await;
    let parts = auth_config(
        jwks_url,
        &[
            ("MCP_AUTH_MODE", "required"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-otlp-key=secret%20value"),
        ],
    );
    let options = ClientOptions::default()
        .header("Authorization", &bearer("alice", "mcp:read"))
        .header("traceparent", traceparent);
    let client = vercel_mcp::testing::client_with(server(), &parts, options).await;
    assert_eq!(client.call_tool("echo", json!({"message": "hi"})).await.unwrap().joined_text(), "hi");
    parts.telemetry.flush().await;
    assert_eq!(fetches.load(std::sync::atomic::Ordering::SeqCst), 1, "one fetch, then the cached keys");
    let received = received.lock().unwrap();
    let fetch = received.spans.iter().filter(|s| s.kind == 3).cloned().collect::<Vec<_>>();
    assert_eq!(fetch.len(), 1, "the one fetch is the one CLIENT span");
    let call = received.spans.iter().find(|s| s.name == "tools/call echo").expect("the request's span").clone();
    (fetch[0].clone(), call)
}

/// With Redis, consuming a `requestState` nonce (the retry of an MRTR round trip) and publishing
/// a change are CLIENT spans under the request and the tool call that made them.
#[tokio::test]
async fn nonce_consumption_and_change_publishes_on_redis_are_spans() {
    let Some((url, _guard)) = common::redis::redis() else { return };
    let (endpoint, received) = receiver().await;
    let parts = redis_traced_parts(&endpoint, &url);
    let mut server = server();
    server.tool(ToolDef::new("touch").description("Changes a resource."), |ctx, _: NoArguments| async move {
        ctx.publish_change(vercel_mcp::state::ChangeEvent::ResourceUpdated("demo://touched".into()));
        "touched"
    });
    let accept = |_| async { Ok(json!({"action": "accept", "content": {}})) };
    let options = ClientOptions::default().handler("elicitation/create", accept);
    let client = vercel_mcp::testing::client_with(server, &parts, options).await;
    assert_eq!(client.call_tool("confirm", json!({})).await.unwrap().joined_text(), "confirmed");
    assert_eq!(client.call_tool("touch", json!({})).await.unwrap().joined_text(), "touched");
    // The publish runs after the tool returns; wait for its span.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        parts.telemetry.flush().await;
        if received.lock().unwrap().spans.iter().any(|s| s.name == "redis changes.publish") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the publish was never traced");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let received = received.lock().unwrap();
    let named = |name: &str| received.spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();
    let consumed = named("redis nonce.consume");
    assert_eq!(consumed.len(), 1, "only the retry carries a state");
    let retry = named("tools/call confirm").into_iter().find(|s| s.span_id == consumed[0].parent_span_id);
    assert!(retry.is_some(), "the nonce is consumed under the retry's request span");
    assert_eq!((consumed[0].kind, attributes(consumed[0])["db.system.name"].as_str()), (3, "redis"));
    let touch = named("execute_tool touch");
    let published = named("redis changes.publish");
    assert_eq!((published.len(), published[0].kind), (1, 3));
    assert_eq!((&published[0].parent_span_id, &published[0].trace_id), (&touch[0].span_id, &touch[0].trace_id));
}

/// A busy instance exports every span: a full batch goes out at once instead of waiting for the
/// next tick (here an hour away), and nothing is dropped.
#[tokio::test]
async fn a_full_batch_is_exported_without_waiting_for_the_tick() {
    let (endpoint, received) = receiver().await;
    let parts = traced_parts(&endpoint, "batched");
    parts.telemetry.flush_periodically(std::time::Duration::from_secs(3600));
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    for _ in 0..1024 {
        parts.telemetry.request_span("tools/list".into(), None, now_ms, Vec::new()).end();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while received.lock().unwrap().spans.len() < 1024 {
        assert!(std::time::Instant::now() < deadline, "the full batch was not exported");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(received.lock().unwrap().spans.len(), 1024);
    assert_eq!(parts.telemetry.dropped_spans(), 0);
}

/// A tool run as a task (tasks extension) is an `execute_tool` span under the request that
/// created the task, though it runs on after that request's response; a failing run is marked.
#[tokio::test]
async fn a_tool_run_as_a_task_is_a_span_under_the_creating_request() {
    use vercel_mcp::tasks::TaskSupport;
    let (endpoint, received) = receiver().await;
    let vars: HashMap<&str, String> = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-otlp-key=secret%20value".to_owned()),
        ("MCP_STATE_SECRET", "telemetry=0123456789abcdef0123456789abcdef".to_owned()),
    ]
    .into_iter()
    .collect();
    let parts = Parts::from_lookup(|name| vars.get(name).cloned(), Arc::new(SystemClock)).unwrap();
    let mut server = McpServer::new("tasks", "1");
    server.enable_tasks(parts.task_service());
    server.tool(
        ToolDef::new("works").description("Works.").task_support(TaskSupport::Required),
        |_, _: NoArguments| async { CallToolResult::text("done") },
    );
    server.tool(
        ToolDef::new("breaks").description("Fails.").task_support(TaskSupport::Required),
        |_, _: NoArguments| async { Err::<String, _>(ToolError::Execution("no".into())) },
    );
    let server = common::TestServer::start(Arc::new(vercel_mcp::App::new(server, parts.endpoint()))).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
    for tool in ["works", "breaks"] {
        let created =
            server.modern(json!(1), "tools/call", json!({"name": tool, "arguments": {}, "_meta": meta})).send();
        assert!(created.await.json()["result"]["taskId"].is_string(), "{tool} became a task");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        parts.telemetry.flush().await;
        let names: Vec<String> = received.lock().unwrap().spans.iter().map(|s| s.name.clone()).collect();
        if names.iter().any(|n| n == "execute_tool works") && names.iter().any(|n| n == "execute_tool breaks") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the task runs were never traced: {names:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let received = received.lock().unwrap();
    let by_name = |name: &str| received.spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("{name}"));
    for tool in ["works", "breaks"] {
        let (request, run) = (by_name(&format!("tools/call {tool}")), by_name(&format!("execute_tool {tool}")));
        assert_eq!((run.kind, &run.parent_span_id, &run.trace_id), (1, &request.span_id, &request.trace_id), "{tool}");
    }
    assert!(!attributes(by_name("execute_tool works")).contains_key("error.type"));
    assert_eq!(attributes(by_name("execute_tool breaks"))["error.type"], "tool_error");
    assert!(received.spans.iter().all(|s| s.kind != 3), "the in-memory task store makes no client calls");
}

/// Whatever serving a request calls runs under its span: `tasks/get` reads the task store on
/// Redis, and that read is a CLIENT span under the `tasks/get` request.
#[tokio::test]
async fn a_store_read_while_serving_a_request_is_under_its_span() {
    use vercel_mcp::tasks::TaskSupport;
    let Some((url, _guard)) = common::redis::redis() else { return };
    let (endpoint, received) = receiver().await;
    let parts = redis_traced_parts(&endpoint, &url);
    let mut server = McpServer::new("tasks", "1");
    server.enable_tasks(parts.task_service());
    server.tool(
        ToolDef::new("works").description("Works.").task_support(TaskSupport::Required),
        |_, _: NoArguments| async { CallToolResult::text("done") },
    );
    let server = common::TestServer::start(Arc::new(vercel_mcp::App::new(server, parts.endpoint()))).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
    let created = server.modern(json!(1), "tools/call", json!({"name": "works", "arguments": {}, "_meta": meta}));
    let task_id = created.send().await.json()["result"]["taskId"].as_str().expect("a task").to_owned();
    let get =
        server.modern(json!(2), "tasks/get", json!({"taskId": task_id, "_meta": meta})).header("Mcp-Name", &task_id);
    assert!(get.send().await.json()["result"]["status"].is_string());
    parts.telemetry.flush().await;
    let received = received.lock().unwrap();
    let request = received.spans.iter().find(|s| s.name.starts_with("tasks/get")).expect("the tasks/get span");
    let reads: Vec<_> = received.spans.iter().filter(|s| s.parent_span_id == request.span_id).collect();
    assert!(!reads.is_empty(), "a store read under tasks/get");
    assert!(
        reads.iter().all(|s| s.kind == 3 && s.name == "redis task.get"),
        "{:?}",
        reads.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
}

/// A request's log line carries its span's trace id: the trace its span began when the caller
/// sent none, for a request served and one refused before its method was read, and the caller's
/// `_meta.traceparent` when the header's is one W3C Trace Context refuses (an all-zero span id),
/// as the span's parent is.
#[tokio::test]
async fn a_requests_log_line_names_its_spans_trace() {
    let (endpoint, received) = receiver().await;
    let mut parts = traced_parts(&endpoint, "correlated");
    let logs = Arc::new(vercel_mcp::observe::MemorySink::default());
    parts.log_sink = logs.clone();
    let bearer = format!("Bearer {}", token(&parts, ""));
    let server = common::TestServer::start(Arc::new(vercel_mcp::App::new(server(), parts.endpoint()))).await;
    let echo = json!({"name": "echo", "arguments": {"message": "hi"}});
    let served = server.modern(json!(1), "tools/call", echo.clone()).header("Authorization", &bearer).send().await;
    assert_eq!(served.status, 200);
    assert_eq!(server.modern(json!(2), "tools/call", echo).send().await.status, 401, "no token");
    let meta_trace = "0af7651916cd43dd8448eb211c80319c";
    let with_meta = json!({"name": "echo", "arguments": {"message": "hi"}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
        "traceparent": format!("00-{meta_trace}-b7ad6b7169203331-01")}});
    let reply = server
        .modern(json!(3), "tools/call", with_meta)
        .header("Authorization", &bearer)
        .header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01")
        .send()
        .await;
    assert_eq!(reply.status, 200);
    parts.telemetry.flush().await;

    let lines: Vec<String> = logs
        .lines()
        .iter()
        .filter(|line| line["event"] == "request")
        .map(|line| line["traceId"].as_str().expect("a trace id").to_owned())
        .collect();
    let received = received.lock().unwrap();
    let spans: Vec<String> = received.spans.iter().filter(|s| s.kind == 2).map(|s| hex(&s.trace_id)).collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines, spans, "each request's line names its span's trace");
    assert_ne!(lines[0], lines[1]);
    assert_eq!(lines[2], meta_trace);
}

/// The body of the one HTTP/1.1 request (sent with a `Content-Length`) arriving on `stream`.
async fn request_body(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut raw = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .expect("a Content-Length")
                .trim()
                .parse()
                .unwrap();
            if raw.len() >= end + 4 + length {
                return raw[end + 4..end + 4 + length].to_vec();
            }
        }
        let read = stream.read(&mut chunk).await.unwrap();
        assert!(read > 0, "the request ended early");
        raw.extend_from_slice(&chunk[..read]);
    }
}

/// At most one export is in flight. Against a collector that takes connections and never
/// answers, a flush while the first export waits sends nothing and ends at once; the spans it
/// found stay queued (up to the queue's bound) and go with the next flush once the first has
/// failed, which is counted.
#[tokio::test]
async fn one_export_at_a_time_to_a_collector_that_never_answers() {
    use vercel_mcp::telemetry::ExportFailures;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (accepted, mut connections) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        // Held, never answered.
        while let Ok((stream, _)) = listener.accept().await {
            if accepted.send(stream).is_err() {
                break;
            }
        }
    });
    let parts = traced_parts(&format!("http://{addr}"), "stalled");
    let telemetry = parts.telemetry.clone();
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let spans = |n: usize| {
        for _ in 0..n {
            telemetry.request_span("tools/list".into(), None, now_ms, Vec::new()).end();
        }
    };
    let bound = std::time::Duration::from_secs(5);
    // A full batch: the flush starts at once.
    spans(1024);
    let first = tokio::spawn(telemetry.flush_soon().expect("the first flush"));
    let stalled = tokio::time::timeout(bound, connections.recv()).await.expect("the first export connects").unwrap();
    for _ in 0..4 {
        spans(1024);
        let later = telemetry.flush_soon().expect("the first flush is past its wait: the next may be asked for");
        tokio::time::timeout(bound, later).await.expect("a flush during an export ends without sending");
    }
    assert!(connections.try_recv().is_err(), "one export connection at a time");
    spans(1024);
    assert_eq!(telemetry.dropped_spans(), 1024, "4096 spans queued behind the stalled export, the rest dropped");
    let dropped = ExportFailures { dropped_spans: 1024, ..ExportFailures::default() };
    assert_eq!(telemetry.export_failures(), dropped, "nothing has failed yet; spans were dropped");
    // The loss is reported (an edge logs it), once for the interval.
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    assert_eq!(telemetry.unreported_export_failures(now_ms, 60_000), Some(dropped));
    assert_eq!(telemetry.unreported_export_failures(now_ms + 1, 60_000), None, "reported already");

    // The collector drops the first export's connection: that export fails, and the next flush
    // sends what waited.
    drop(stalled);
    tokio::time::timeout(bound, first).await.expect("the first export ends").unwrap();
    assert_eq!(telemetry.export_failures(), ExportFailures { count: 1, last_status: None, dropped_spans: 1024 });
    let next = tokio::spawn({
        let telemetry = telemetry.clone();
        async move { telemetry.flush().await }
    });
    let mut stream = tokio::time::timeout(bound, connections.recv()).await.expect("the next export").unwrap();
    let body = tokio::time::timeout(bound, request_body(&mut stream)).await.expect("the whole export");
    let export = ExportTraceServiceRequest::decode(body.as_slice()).expect("an OTLP protobuf export");
    let sent: usize = export.resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum();
    assert_eq!(sent, 4096, "every queued span");
    drop(stream);
    tokio::time::timeout(bound, next).await.expect("the next export ends").unwrap();
    assert_eq!(telemetry.export_failures().count, 2);
}

/// A collector refusing exports (a wrong credential in `OTEL_EXPORTER_OTLP_HEADERS`) is
/// noticed: each refused export is counted with its status; a 2xx is no failure.
#[tokio::test]
async fn refused_exports_are_counted_with_their_status() {
    use std::sync::atomic::{AtomicU16, Ordering};
    use vercel_mcp::telemetry::ExportFailures;
    let status = Arc::new(AtomicU16::new(200));
    let answer = status.clone();
    let addr = common::upstream::serve(move |_| {
        let status = answer.load(Ordering::SeqCst);
        async move { (status, Bytes::new()) }
    })
    .await;
    let parts = traced_parts(&format!("http://{addr}"), "refused");
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let export_one = || async {
        parts.telemetry.request_span("tools/list".into(), None, now_ms, Vec::new()).end();
        parts.telemetry.flush().await;
    };
    export_one().await;
    assert_eq!(parts.telemetry.export_failures(), ExportFailures::default(), "accepted");
    status.store(401, Ordering::SeqCst);
    export_one().await;
    assert_eq!(
        parts.telemetry.export_failures(),
        ExportFailures { count: 1, last_status: Some(401), dropped_spans: 0 }
    );
    status.store(503, Ordering::SeqCst);
    export_one().await;
    assert_eq!(
        parts.telemetry.export_failures(),
        ExportFailures { count: 2, last_status: Some(503), dropped_spans: 0 }
    );
}

/// Failed exports are logged, at most a line a minute whatever the traffic, with how many and
/// the last status; never the endpoint or the credential its headers carry.
#[tokio::test]
async fn failed_exports_are_logged_a_line_a_minute_at_most() {
    let addr = common::upstream::serve(|_| async { (401u16, Bytes::new()) }).await;
    let clock = Arc::new(vercel_mcp::state::ManualClock::new(1_800_000_000_000));
    let logs = Arc::new(vercel_mcp::observe::MemorySink::default());
    let parts = traced_parts(&format!("http://{addr}"), "reported");
    // The logger's clock decides the minute.
    let sealer = vercel_mcp::state::Sealer::new(vec![("k".into(), vec![7; 32])], clock.clone()).unwrap();
    let logger = vercel_mcp::observe::Logger::new(logs.clone(), sealer, parts.random.clone());
    let export_one = || async {
        parts.telemetry.request_span("tools/list".into(), None, 1_800_000_000_000, Vec::new()).end();
        parts.telemetry.flush().await;
    };
    let reported = || logs.lines().into_iter().filter(|l| l["event"] == "telemetry.export_failed").collect::<Vec<_>>();
    vercel_mcp::observe::report_export_failures(&logger, &parts.telemetry);
    assert!(reported().is_empty(), "nothing failed yet");
    export_one().await;
    export_one().await;
    vercel_mcp::observe::report_export_failures(&logger, &parts.telemetry);
    let lines = reported();
    assert_eq!(lines.len(), 1);
    assert_eq!(
        (&lines[0]["level"], &lines[0]["failures"], &lines[0]["lastStatus"], &lines[0]["droppedSpans"]),
        (&json!("warn"), &json!(2), &json!(401), &json!(0))
    );
    assert!(!logs.raw().concat().contains(&addr.to_string()), "no endpoint in the line");
    export_one().await;
    vercel_mcp::observe::report_export_failures(&logger, &parts.telemetry);
    assert_eq!(reported().len(), 1, "within the minute, no second line");
    clock.advance_ms(60_000);
    vercel_mcp::observe::report_export_failures(&logger, &parts.telemetry);
    let lines = reported();
    assert_eq!(lines.len(), 2, "a minute later, the failure since");
    assert_eq!(lines[1]["failures"], 1);
}

/// Spans and metrics name one resource: `OTEL_RESOURCE_ATTRIBUTES`, the service, and a
/// `service.instance.id` of the process's own, so two instances' cumulative metrics are two
/// series.
#[tokio::test]
async fn spans_and_metrics_name_one_resource_with_the_instance() {
    let (endpoint, received) = receiver().await;
    let attributes = [("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=preview,team=mcp")];
    let instances = [
        traced_parts_with(&endpoint, "resourced", &attributes),
        traced_parts_with(&endpoint, "resourced", &attributes),
    ];
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    for parts in &instances {
        parts.telemetry.request_span("tools/list".into(), None, now_ms, Vec::new()).end();
        parts.telemetry.add(vercel_mcp::telemetry::JOBS_SUBMITTED, vec![("mcp.job.result", "accepted".into())], 1);
        parts.telemetry.flush().await;
    }
    let received = received.lock().unwrap();
    assert_eq!((received.span_resources.len(), received.metrics.len()), (2, 2));
    let mut ids = Vec::new();
    for (spans, metrics) in received.span_resources.iter().zip(&received.metrics) {
        let metrics = key_values(&metrics.resource_metrics[0].resource.as_ref().unwrap().attributes);
        assert_eq!(spans, &metrics, "the same resource");
        assert_eq!(
            (metrics["service.name"].as_str(), metrics["deployment.environment.name"].as_str()),
            ("resourced", "preview")
        );
        assert_eq!(metrics["team"], "mcp");
        ids.push(metrics["service.instance.id"].clone());
    }
    assert_ne!(ids[0], ids[1], "each instance its own id");
}
