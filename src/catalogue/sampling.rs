//! sampling-server: `summarize` asks the host's model for a completion instead of holding a
//! model or an API key itself.
//!
//! Sampling is deprecated in 2026-07-28 and kept here for the deprecation window; new servers
//! should call a model provider directly. The request travels as a multi round-trip
//! `input_required` answer, so no invocation waits for the client: the retry carries the
//! completion. A client that did not declare `sampling` is never sent the request; the call
//! ends in a tool error naming the capability.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ask, solicited_answer};
use crate::protocol::types::{CallToolResult, InputRequest};
use crate::server::{McpServer, Outcome, RequestContext, ToolDef, ToolError};

/// The completion budget requested from the host.
pub const MAX_TOKENS: u32 = 512;

/// The `inputRequests` key of the completion request.
const SAMPLE_KEY: &str = "summary";

/// Arguments of `summarize`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SummarizeArgs {
    /// The text to summarise.
    pub text: String,
}

/// The `sampling/createMessage` params for `text`.
pub fn summary_request(text: &str) -> InputRequest {
    InputRequest::Sampling(json!({
        "messages": [{
            "role": "user",
            "content": {
                "type": "text",
                "text": format!("Summarize the following text in one or two sentences:\n\n{text}"),
            },
        }],
        "maxTokens": MAX_TOKENS,
        "modelPreferences": { "intelligencePriority": 0.8 },
    }))
}

/// Registers `summarize`.
pub fn register(server: &mut McpServer) {
    server.tool(
        ToolDef::new("summarize")
            .description("Summarize text by asking the host's model for a completion via sampling.")
            .scopes(&[super::READ_SCOPE]),
        |ctx: RequestContext, args: SummarizeArgs| async move { summarize(&ctx, &args.text) },
    );
}

fn summarize(ctx: &RequestContext, text: &str) -> Result<Outcome<CallToolResult>, ToolError> {
    let Some(completion) = solicited_answer(ctx, SAMPLE_KEY) else {
        return ask(ctx, SAMPLE_KEY, summary_request(text));
    };
    // A sampling result is the assistant's turn and names its model: an answer that is not one
    // (an elicitation's `{action, content}`, say) is not taken as the summary.
    let is_sampling_result = completion.get("role").and_then(Value::as_str) == Some("assistant")
        && completion.get("model").is_some_and(Value::is_string);
    if !is_sampling_result {
        return Ok(Outcome::Complete(CallToolResult::text("Host returned an answer that is not a sampling result.")));
    }
    // `content` is one block, or (since 2025-11-25) an array of blocks.
    let block = match completion.get("content") {
        Some(Value::Array(blocks)) if blocks.len() == 1 => blocks.first(),
        Some(block @ Value::Object(_)) => Some(block),
        _ => None,
    };
    let kind = block.and_then(|b| b.get("type")).and_then(Value::as_str);
    let summary = match (kind, block.and_then(|b| b.get("text")).and_then(Value::as_str)) {
        (Some("text"), Some(summary)) => summary.to_owned(),
        (Some(kind), _) if kind != "text" && kind.len() <= 32 => {
            format!("Host returned non-text sampling content of type {kind}.")
        }
        _ => "Host returned sampling content that is not a single content block.".to_owned(),
    };
    Ok(Outcome::Complete(CallToolResult::text(summary)))
}
