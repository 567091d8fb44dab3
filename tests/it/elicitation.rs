//! elicitation-server over HTTP: `book_meeting` asks through a 2026-07-28 `input_required`
//! form, books only on an approved accept of an allowed topic, and keeps decline and cancel
//! apart. Every negative also checks that nothing was booked.

use crate::common;

use common::TestServer;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

use vercel_mcp::catalogue::elicitation::{self, Calendar};
use vercel_mcp::state::SystemClock;
use vercel_mcp::{App, McpServer, Parts};

#[derive(Default)]
struct Recorded(Mutex<Vec<(String, String)>>);

impl Calendar for Recorded {
    fn book(&self, topic: &str, time: &str) {
        self.0.lock().unwrap().push((topic.to_owned(), time.to_owned()));
    }
}

impl Recorded {
    fn bookings(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap().clone()
    }
}

async fn env() -> (TestServer, Arc<Recorded>) {
    let config = Parts::for_tests(Arc::new(SystemClock));
    let calendar = Arc::new(Recorded::default());
    let mut server = McpServer::new("elicitation-server", "0.1.0");
    elicitation::register(&mut server, calendar.clone());
    (TestServer::start(Arc::new(App::new(server, config.endpoint()))).await, calendar)
}

/// `book_meeting` params from a client that declares form elicitation.
fn params(topic: Value) -> Value {
    json!({
        "name": "book_meeting",
        "arguments": {"topic": topic},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        },
    })
}

async fn send(server: &TestServer, params: Value) -> Value {
    server.modern(json!(1), "tools/call", params).send().await.json()
}

/// The first call, which must ask; returns the form's params and the sealed state.
async fn ask(server: &TestServer, topic: &str) -> (Value, String) {
    let first = send(server, params(json!(topic))).await["result"].clone();
    assert_eq!(first["resultType"], "input_required", "{first}");
    let requests = first["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "one question per call");
    assert_eq!(requests["confirm"]["method"], "elicitation/create");
    (requests["confirm"]["params"].clone(), first["requestState"].as_str().unwrap().to_owned())
}

/// The whole exchange: ask, then retry with `answer`; returns the final result's text.
async fn book(server: &TestServer, topic: &str, answer: Value) -> String {
    let (_, state) = ask(server, topic).await;
    let mut retry = params(json!(topic));
    retry["inputResponses"] = json!({ "confirm": answer });
    retry["requestState"] = json!(state);
    let result = send(server, retry).await["result"].clone();
    assert_eq!(result["resultType"], "complete", "{result}");
    assert_ne!(result["isError"], true, "every outcome is a normal result: {result}");
    result["content"][0]["text"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn lists_book_meeting_with_a_bounded_topic() {
    let (server, _) = env().await;
    let tools = server.modern(json!(1), "tools/list", json!({})).send().await.json()["result"]["tools"].clone();
    assert_eq!(tools.as_array().unwrap().len(), 1);
    assert_eq!(tools[0]["name"], "book_meeting");
    let topic = &tools[0]["inputSchema"]["properties"]["topic"];
    assert_eq!(
        (topic["type"].as_str(), topic["minLength"].as_u64(), topic["maxLength"].as_u64()),
        (Some("string"), Some(1), Some(120))
    );
    assert_eq!(
        tools[0]["annotations"],
        json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false})
    );
}

#[tokio::test]
async fn an_approved_accept_books_with_the_elicited_time() {
    let (server, calendar) = env().await;
    let (form, _) = ask(&server, "Q3 roadmap").await;
    // The message is fixed: it names the tool and the calendar, never the model's topic.
    let message = form["message"].as_str().unwrap();
    assert!(message.contains("book_meeting") && message.contains("calendar") && !message.contains("Q3 roadmap"));
    assert_eq!(form["mode"], "form");
    let schema = &form["requestedSchema"];
    assert_eq!(schema["required"], json!(["approved"]));
    assert_eq!(schema["properties"]["topic"]["default"], "Q3 roadmap");
    assert_eq!(schema["properties"]["topic"]["maxLength"], 120);
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["topic"]["type"], "string");
    assert_eq!(schema["properties"]["topic"]["title"], "Meeting topic");
    assert_eq!(schema["properties"]["time"]["type"], "string");
    assert_eq!(schema["properties"].as_object().unwrap().len(), 3, "flat, three primitives: {schema}");
    assert_eq!(schema["properties"]["approved"]["type"], "boolean");
    assert_eq!(schema["properties"]["time"]["default"], "09:00");
    assert_eq!(
        (&schema["properties"]["time"]["minLength"], &schema["properties"]["time"]["maxLength"]),
        (&json!(1), &json!(40))
    );
    assert!(calendar.bookings().is_empty(), "asking books nothing");

    let text =
        book(&server, "Q3 roadmap", json!({"action": "accept", "content": {"approved": true, "time": "14:30"}})).await;
    assert_eq!(text, "Booked: meeting about 'Q3 roadmap' at 14:30.");
    assert_eq!(calendar.bookings(), [("Q3 roadmap".to_owned(), "14:30".to_owned())]);
}

#[tokio::test]
async fn the_user_may_edit_the_topic_and_omit_the_time() {
    let (server, calendar) = env().await;
    let answer = json!({"action": "accept", "content": {"approved": true, "topic": "Q4 roadmap"}});
    assert_eq!(book(&server, "Q3 roadmap", answer).await, "Booked: meeting about 'Q4 roadmap' at 09:00.");
    assert_eq!(calendar.bookings(), [("Q4 roadmap".to_owned(), "09:00".to_owned())]);
}

/// A topic left null (a client that sends unedited fields as null) keeps the asked topic, as
/// `content.topic ?? topic` does; before, it booked nothing.
#[tokio::test]
async fn a_null_topic_keeps_the_asked_one() {
    let (server, calendar) = env().await;
    let answer = json!({"action": "accept", "content": {"approved": true, "topic": null}});
    assert_eq!(book(&server, "Q3 roadmap", answer).await, "Booked: meeting about 'Q3 roadmap' at 09:00.");
    assert_eq!(calendar.bookings(), [("Q3 roadmap".to_owned(), "09:00".to_owned())]);
}

#[tokio::test]
async fn anything_but_an_approved_accept_of_an_allowed_topic_books_nothing() {
    let (server, calendar) = env().await;
    let cases = [
        (
            json!({"action": "accept", "content": {"approved": true, "topic": "bad\u{1b}topic"}}),
            "Not booked: the confirmed topic is empty, too long, or contains characters that are not allowed.",
        ),
        (
            json!({"action": "accept", "content": {"approved": true, "topic": ""}}),
            "Not booked: the confirmed topic is empty, too long, or contains characters that are not allowed.",
        ),
        (
            json!({"action": "accept", "content": {"approved": true, "topic": 7}}),
            "Not booked: the confirmed topic is empty, too long, or contains characters that are not allowed.",
        ),
        (
            json!({"action": "accept", "content": {"approved": false}}),
            "Not booked: user did not approve the meeting about 'Q3 roadmap'.",
        ),
        (
            json!({"action": "accept", "content": {"approved": "true"}}),
            "Not booked: user did not approve the meeting about 'Q3 roadmap'.",
        ),
        // The time comes back from the client too, and is repeated to the model: held to the
        // topic's rule at its own length (40), refused rather than cut.
        (
            json!({"action": "accept", "content": {"approved": true, "time": "\u{1b}[2J14:30"}}),
            "Not booked: the confirmed time is empty, too long, or contains characters that are not allowed.",
        ),
        (
            json!({"action": "accept", "content": {"approved": true, "time": "9".repeat(41)}}),
            "Not booked: the confirmed time is empty, too long, or contains characters that are not allowed.",
        ),
        (
            json!({"action": "accept", "content": {"approved": true, "time": ""}}),
            "Not booked: the confirmed time is empty, too long, or contains characters that are not allowed.",
        ),
        (json!({"action": "decline"}), "Not booked: user declined the meeting about 'Q3 roadmap'."),
        (json!({"action": "cancel"}), "Not booked: user cancelled the request to book 'Q3 roadmap'."),
        (json!({"action": "something-else"}), "Not booked: user cancelled the request to book 'Q3 roadmap'."),
    ];
    for (answer, expected) in cases {
        assert_eq!(book(&server, "Q3 roadmap", answer.clone()).await, expected, "{answer}");
    }
    assert!(calendar.bookings().is_empty());
    let longest = "9".repeat(40);
    let answer = json!({"action": "accept", "content": {"approved": true, "time": longest}});
    assert_eq!(book(&server, "Q3 roadmap", answer).await, format!("Booked: meeting about 'Q3 roadmap' at {longest}."));
}

#[tokio::test]
async fn bad_topics_are_refused_before_anything_is_asked() {
    let (server, calendar) = env().await;
    let mut topics: Vec<Value> = ["a\nb", "a\rb", "a\u{1b}b", "a\u{85}b", "a\u{0}b", "a\"b", "a'b", "a`b", ""]
        .into_iter()
        .map(Value::from)
        .collect();
    topics.push(json!("x".repeat(121)));
    topics.push(json!(42));
    for topic in topics {
        let result = send(&server, params(topic.clone())).await["result"].clone();
        assert_eq!(result["isError"], true, "{topic}: {result}");
        assert!(result.get("inputRequests").is_none(), "{topic}: nothing elicited");
    }
    // 120 characters is allowed: asked once, then booked.
    let longest = "x".repeat(120);
    let text =
        book(&server, &longest, json!({"action": "accept", "content": {"approved": true, "time": "10:00"}})).await;
    assert_eq!(text, format!("Booked: meeting about '{longest}' at 10:00."));
    assert_eq!(calendar.bookings(), [(longest, "10:00".to_owned())]);
}

#[tokio::test]
async fn an_answer_is_honoured_only_with_state_sealed_for_this_call() {
    let (server, calendar) = env().await;
    let approve = json!({"action": "accept", "content": {"approved": true}});
    // An answer sent up front, with no state, is not a confirmation: the server still asks.
    let mut unsolicited = params(json!("Q3 roadmap"));
    unsolicited["inputResponses"] = json!({ "confirm": approve });
    assert_eq!(send(&server, unsolicited).await["result"]["resultType"], "input_required");
    // State sealed for one topic does not carry an answer over to another.
    let (_, state) = ask(&server, "Q3 roadmap").await;
    let mut swapped = params(json!("Payroll"));
    swapped["inputResponses"] = json!({ "confirm": approve });
    swapped["requestState"] = json!(state);
    assert_eq!(send(&server, swapped).await["error"]["code"], -32602);
    // Without the elicitation capability the server does not ask: a tool error names it.
    // Nor with URL elicitation only, for its form question: the same tool error as on the
    // 2025 path (it was -32021 here).
    for capabilities in [json!({"sampling": {}}), json!({"elicitation": {"url": {}}})] {
        let mut undeclared = params(json!("Q3 roadmap"));
        undeclared["_meta"]["io.modelcontextprotocol/clientCapabilities"] = capabilities.clone();
        let reply = send(&server, undeclared).await;
        let result = reply["result"].clone();
        assert_eq!(result["isError"], true, "{capabilities}: {reply}");
        assert!(common::error_text(&result).contains("elicitation capability"));
        assert!(result.get("inputRequests").is_none());
    }
    assert!(calendar.bookings().is_empty());
}

#[tokio::test]
async fn unknown_tools_are_not_found() {
    let (server, calendar) = env().await;
    let reply = send(&server, json!({"name": "nope", "arguments": {}, "_meta": params(json!("x"))["_meta"]})).await;
    assert_eq!(reply["error"]["code"], -32602);
    assert!(reply["error"]["message"].as_str().unwrap().contains("not found"));
    assert!(calendar.bookings().is_empty());
}

#[test]
fn the_schema_pattern_and_the_confirmation_check_agree() {
    let schema = serde_json::to_value(schemars::schema_for!(elicitation::BookMeetingArgs)).unwrap();
    let topic_schema = &schema["properties"]["topic"];
    for topic in
        ["ok", "Q3 roadmap", "naïve café", "a\u{1f}b", "a\u{7f}b", "a\u{9f}b", "a\u{a0}b", "a'b", "", &"y".repeat(121)]
    {
        let by_schema = vercel_mcp::server::schema::validate(topic_schema, &json!(topic)).is_ok();
        assert_eq!(by_schema, elicitation::topic_is_allowed(topic), "{topic:?}");
    }
}

#[tokio::test]
async fn state_sealed_for_one_caller_is_refused_for_another() {
    let (jwks, _) = common::tokens::stub_jwks().await;
    let config = common::tokens::auth_config(jwks, &[("MCP_AUTH_MODE", "required")]);
    let calendar = Arc::new(Recorded::default());
    let mut server = McpServer::new("elicitation-server", "0.1.0");
    elicitation::register(&mut server, calendar.clone());
    let server = TestServer::start(Arc::new(App::new(server, config.endpoint()))).await;
    let (alice, mallory) =
        (common::tokens::bearer("user:alice", "mcp:write"), common::tokens::bearer("user:mallory", "mcp:write"));
    let send_as = |who: String, params: Value| {
        let call = server.modern(json!(1), "tools/call", params).header("Authorization", &who);
        async move { call.send().await.json() }
    };
    let first = send_as(alice.clone(), params(json!("Q3 roadmap"))).await["result"].clone();
    assert_eq!(first["resultType"], "input_required", "{first}");
    let mut replay = params(json!("Q3 roadmap"));
    replay["inputResponses"] = json!({"confirm": {"action": "accept", "content": {"approved": true}}});
    replay["requestState"] = first["requestState"].clone();
    let refused = send_as(mallory, replay.clone()).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(calendar.bookings().is_empty());
    // The caller it was sealed for completes the booking with the same retry.
    let booked = send_as(alice, replay).await["result"].clone();
    assert_eq!(booked["content"][0]["text"], "Booked: meeting about 'Q3 roadmap' at 09:00.");
    assert_eq!(calendar.bookings().len(), 1);
}
