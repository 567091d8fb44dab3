//! elicitation-server: `book_meeting` pauses mid-call for the user's confirmation and a start
//! time, through form-mode elicitation.
//!
//! On 2026-07-28 the pause is a multi round-trip request: the first call answers
//! `input_required` with the form and a sealed `requestState`; the retry carries the user's
//! `ElicitResult`. A response is honoured only next to state this server sealed for the same
//! caller and arguments, so a client cannot skip the question by sending an answer up front.
//! Accept, decline and cancel stay distinct, and only an approved accept whose confirmed
//! topic passes the same rule as the argument books anything.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

use super::{ask, solicited_answer};
use crate::protocol::types::{CallToolResult, InputRequest, ToolAnnotations};
use crate::server::{McpServer, Outcome, RequestContext, ToolDef, ToolError};

/// The longest topic, in characters.
pub const TOPIC_MAX_LENGTH: usize = 120;

/// The fixed question: it never carries model-provided text, so a topic cannot speak to the
/// user in the server's voice.
pub const CONFIRM_MESSAGE: &str = "The book_meeting tool wants to add a meeting to your calendar. Review the topic it was given, choose a start time, and approve or reject.";

/// The start time used when the user gives none.
pub const DEFAULT_TIME: &str = "09:00";

/// The `inputRequests` key of the confirmation form.
const CONFIRM_KEY: &str = "confirm";

/// The topic rule as a JSON Schema pattern: no C0 or C1 control characters, no DEL, no quotes.
/// [`topic_is_allowed`] applies the same rule to the topic the user confirms.
pub const TOPIC_PATTERN: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F\"'`]*$";

/// Where confirmed meetings go.
pub trait Calendar: Send + Sync + 'static {
    /// Books one meeting.
    fn book(&self, topic: &str, time: &str);
}

/// The default calendar: the example has no upstream, so a booking is only reported back.
#[derive(Debug, Default)]
pub struct NoCalendar;

impl Calendar for NoCalendar {
    fn book(&self, _: &str, _: &str) {}
}

/// Arguments of `book_meeting`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BookMeetingArgs {
    /// What the meeting is about.
    #[schemars(length(min = 1, max = 120), regex(pattern = TOPIC_PATTERN))]
    pub topic: String,
}

/// Whether a topic is 1 to 120 characters with no control or quote characters.
pub fn topic_is_allowed(topic: &str) -> bool {
    shown_safely(topic, TOPIC_MAX_LENGTH)
}

/// The longest start time the form takes: `14:30`, `2026-07-28T14:30:00+02:00`, `tomorrow at 2pm`.
pub const TIME_MAX_LENGTH: usize = 40;

/// Whether the confirmed start time may be booked and repeated to the model: the topic's rule
/// at the time's length. What comes back from a form is the client's to say, so a control
/// character or a megabyte of text is refused here, never truncated.
pub fn time_is_allowed(time: &str) -> bool {
    shown_safely(time, TIME_MAX_LENGTH)
}

fn shown_safely(text: &str, max_length: usize) -> bool {
    (1..=max_length).contains(&text.chars().count())
        && !text.chars().any(|c| matches!(c, '\u{0}'..='\u{1F}' | '\u{7F}'..='\u{9F}' | '"' | '\'' | '`'))
}

/// The confirmation form, pre-filled with the topic the model gave.
pub fn confirm_form(topic: &str) -> InputRequest {
    InputRequest::ElicitForm {
        message: CONFIRM_MESSAGE.into(),
        requested_schema: json!({
            "type": "object",
            "properties": {
                "topic": {
                    "type": "string",
                    "title": "Meeting topic",
                    "description": "Topic requested by the model. Edit it if it is wrong.",
                    "minLength": 1,
                    "maxLength": TOPIC_MAX_LENGTH,
                    "default": topic,
                },
                "approved": { "type": "boolean", "title": "Approve", "description": "Approve booking this meeting?" },
                "time": {
                    "type": "string",
                    "title": "Start time",
                    "description": "Preferred start time, e.g. 14:30",
                    "minLength": 1,
                    "maxLength": TIME_MAX_LENGTH,
                    "default": DEFAULT_TIME,
                },
            },
            "required": ["approved"],
        }),
    }
}

/// Registers `book_meeting`, booking into `calendar`.
pub fn register(server: &mut McpServer, calendar: Arc<dyn Calendar>) {
    server.with_state(calendar).tool(
        ToolDef::new("book_meeting")
            .description(
                "Book a meeting on the user's calendar. The user confirms the topic and picks a start time \
                 through a form before anything is booked.",
            )
            .annotations(ToolAnnotations {
                read_only_hint: Some(false),
                destructive_hint: Some(false),
                idempotent_hint: Some(false),
                ..Default::default()
            })
            .scopes(&[super::WRITE_SCOPE]),
        |ctx: RequestContext, calendar: Arc<dyn Calendar>, args: BookMeetingArgs| async move {
            book_meeting(&ctx, &args.topic, calendar.as_ref())
        },
    );
}

fn book_meeting(
    ctx: &RequestContext,
    topic: &str,
    calendar: &dyn Calendar,
) -> Result<Outcome<CallToolResult>, ToolError> {
    let Some(response) = solicited_answer(ctx, CONFIRM_KEY) else {
        return ask(ctx, CONFIRM_KEY, confirm_form(topic));
    };
    let content = response.get("content");
    let field = |name: &str| content.and_then(|c| c.get(name));
    let text = match response.get("action").and_then(Value::as_str) {
        Some("accept") if field("approved") == Some(&Value::Bool(true)) => {
            // `content.topic ?? topic`: an absent or null field keeps the asked topic; any other
            // non-string is refused below as empty.
            let confirmed = match field("topic") {
                Some(Value::String(edited)) => edited.as_str(),
                None | Some(Value::Null) => topic,
                Some(_) => "",
            };
            if !topic_is_allowed(confirmed) {
                return Ok(Outcome::Complete(CallToolResult::text(
                    "Not booked: the confirmed topic is empty, too long, or contains characters that are not allowed.",
                )));
            }
            let time = field("time").and_then(Value::as_str).unwrap_or(DEFAULT_TIME);
            if !time_is_allowed(time) {
                return Ok(Outcome::Complete(CallToolResult::text(
                    "Not booked: the confirmed time is empty, too long, or contains characters that are not allowed.",
                )));
            }
            calendar.book(confirmed, time);
            format!("Booked: meeting about '{confirmed}' at {time}.")
        }
        Some("accept") => format!("Not booked: user did not approve the meeting about '{topic}'."),
        Some("decline") => format!("Not booked: user declined the meeting about '{topic}'."),
        _ => format!("Not booked: user cancelled the request to book '{topic}'."),
    };
    Ok(Outcome::Complete(CallToolResult::text(text)))
}
