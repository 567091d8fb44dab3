//! The conformance fixture: the tools, prompts and resources the official MCP conformance
//! suite expects, built only from this crate's public API.
//!
//! `cargo run --example conformance` serves it on 127.0.0.1:$PORT (3000) at `/api/mcp`.
//! The texts follow the suite's reference server where the suite reads them.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

use vercel_mcp::protocol::types::{
    CallToolResult, Completion, Content, GetPromptResult, InputRequest, Prompt, PromptMessage, Resource,
    ResourceContents, ResourceTemplate,
};
use vercel_mcp::protocol::{LogLevel, McpError};
use vercel_mcp::server::{
    CacheHint, CacheScope, CacheableMethod, CompletionRef, InputRequired, McpServer, NoArguments, Outcome,
    RequestContext, ToolDef, ToolError,
};
use vercel_mcp::state::ChangeEvent;
use vercel_mcp::{App, local};

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

type Reply = Result<Outcome<CallToolResult>, ToolError>;

fn text(s: impl Into<String>) -> Reply {
    Ok(CallToolResult::text(s).into())
}

fn ask(requests: Vec<(&str, InputRequest)>, state: Option<Value>) -> Reply {
    let mut input = InputRequired::new();
    for (key, request) in requests {
        input = input.request(key, request);
    }
    if let Some(state) = state {
        input = input.state(state);
    }
    Ok(Outcome::InputRequired(input))
}

fn elicit(message: &str, field: &str, kind: &str) -> InputRequest {
    InputRequest::ElicitForm {
        message: message.into(),
        requested_schema: json!({ "type": "object", "properties": { field: { "type": kind } }, "required": [field] }),
    }
}

fn sample(prompt: &str, max_tokens: u32) -> InputRequest {
    InputRequest::Sampling(json!({
        "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
        "maxTokens": max_tokens,
    }))
}

/// `content.<field>` of an accepted elicitation answer.
fn answer<'a>(ctx: &'a RequestContext, key: &str, field: &str) -> Option<&'a Value> {
    ctx.input_response(key)?.get("content")?.get(field)
}

fn sampled_text(ctx: &RequestContext, key: &str) -> Option<String> {
    ctx.input_response(key)?.get("content")?.get("text")?.as_str().map(str::to_owned)
}

fn roots_count(ctx: &RequestContext, key: &str) -> Option<usize> {
    ctx.input_response(key)?.get("roots")?.as_array().map(Vec::len)
}

fn state_kind(ctx: &RequestContext) -> Option<&str> {
    ctx.request_state()?.get("kind")?.as_str()
}

#[derive(Deserialize, JsonSchema)]
struct SamplingArgs {
    /// The prompt to send to the client's model.
    prompt: String,
}

#[derive(Deserialize, JsonSchema)]
struct ElicitationArgs {
    /// The message to show the user.
    message: String,
}

#[derive(Deserialize, JsonSchema)]
struct CustomHeaderArgs {
    /// The region; mirrored in the `Mcp-Param-Region` header.
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
}

fn register_content_tools(server: &mut McpServer) {
    server.tool(
        ToolDef::new("test_simple_text").description("Returns a simple text response"),
        |_, _: NoArguments| async { text("This is a simple text response for testing.") },
    );
    server.tool(ToolDef::new("test_image_content").description("Returns an image"), |_, _: NoArguments| async {
        CallToolResult::new(vec![Content::image(PNG, "image/png")])
    });
    server.tool(ToolDef::new("test_audio_content").description("Returns audio"), |_, _: NoArguments| async {
        CallToolResult::new(vec![Content::audio(WAV, "audio/wav")])
    });
    server.tool(
        ToolDef::new("test_embedded_resource").description("Returns an embedded resource"),
        |_, _: NoArguments| async {
            CallToolResult::new(vec![Content::resource(ResourceContents::text(
                "test://embedded-resource",
                "text/plain",
                "This is an embedded resource content.",
            ))])
        },
    );
    server.tool(
        ToolDef::new("test_multiple_content_types").description("Returns text, image and resource content"),
        |_, _: NoArguments| async {
            CallToolResult::new(vec![
                Content::text("Multiple content types test:"),
                Content::image(PNG, "image/png"),
                Content::resource(ResourceContents::text(
                    "test://mixed-content-resource",
                    "application/json",
                    r#"{"test":"data","value":123}"#,
                )),
            ])
        },
    );
    server.tool(
        ToolDef::new("test_tool_with_logging").description("Emits log messages while running"),
        |ctx, _: NoArguments| async move {
            for message in ["Tool execution started", "Tool processing data", "Tool execution completed"] {
                ctx.log(LogLevel::Info, None, json!(message)).await;
            }
            text("Tool with logging executed successfully")
        },
    );
    server.tool(
        ToolDef::new("test_tool_with_progress").description("Reports progress while running"),
        |ctx, _: NoArguments| async move {
            for (step, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                ctx.progress(progress, Some(100.0), Some(&format!("Completed step {} of 3", step + 1))).await;
            }
            let token = match ctx.progress_token() {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => "0".into(),
            };
            text(token)
        },
    );
    server.tool(
        ToolDef::new("test_error_handling").description("Always fails with a tool error"),
        |_, _: NoArguments| async {
            Err::<CallToolResult, _>(ToolError::Execution(
                "This tool intentionally returns an error for testing".into(),
            ))
        },
    );
    server.tool_raw(
        ToolDef::new("json_schema_2020_12_tool")
            .description("Accepts arguments described with JSON Schema 2020-12 keywords")
            .input_schema(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": { "address": { "$anchor": "addressDef", "type": "object",
                    "properties": { "street": { "type": "string" }, "city": { "type": "string" } } } },
                "properties": {
                    "name": { "type": "string" },
                    "address": { "$ref": "#/$defs/address" },
                    "contactMethod": { "type": "string", "enum": ["phone", "email"] },
                    "phone": { "type": "string" },
                    "email": { "type": "string" }
                },
                "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
                "if": { "properties": { "contactMethod": { "const": "phone" } }, "required": ["contactMethod"] },
                "then": { "required": ["phone"] },
                "else": { "required": ["email"] },
                "additionalProperties": false
            })),
        |_, args| async move { text(format!("JSON Schema 2020-12 tool called with: {}", Value::Object(args))) },
    );
    server.tool(
        ToolDef::new("test_custom_header")
            .description("Echoes a region that is also sent as the Mcp-Param-Region header"),
        |_, args: CustomHeaderArgs| async move { text(format!("Region: {}", args.region)) },
    );
}

fn register_client_feature_tools(server: &mut McpServer) {
    server.tool(
        ToolDef::new("test_sampling").description("Asks the client's model to answer a prompt"),
        |ctx, args: SamplingArgs| async move {
            match sampled_text(&ctx, "sampling") {
                Some(answer) => text(format!("LLM response: {answer}")),
                None => ask(vec![("sampling", sample(&args.prompt, 100))], None),
            }
        },
    );
    server.tool(
        ToolDef::new("test_elicitation").description("Asks the user for information"),
        |ctx, args: ElicitationArgs| async move {
            match ctx.input_response("elicitation") {
                Some(response) => {
                    let action = response.get("action").and_then(Value::as_str).unwrap_or("unknown");
                    let content = response.get("content").cloned().unwrap_or(Value::Null);
                    text(format!("User response: action={action}, content={content}"))
                }
                None => ask(
                    vec![(
                        "elicitation",
                        InputRequest::ElicitForm {
                            message: args.message,
                            requested_schema: json!({ "type": "object",
                                "properties": { "response": { "type": "string", "description": "User's response" } },
                                "required": ["response"] }),
                        },
                    )],
                    None,
                ),
            }
        },
    );
    server.tool(
        ToolDef::new("test_elicitation_sep1034_defaults").description("Elicits a form whose fields have defaults"),
        |ctx, _: NoArguments| async move { elicitation_form(&ctx, "Please review and update the form fields with defaults", json!({
            "name": { "type": "string", "description": "User name", "default": "John Doe" },
            "age": { "type": "integer", "description": "User age", "default": 30 },
            "score": { "type": "number", "description": "User score", "default": 95.5 },
            "status": { "type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active" },
            "verified": { "type": "boolean", "description": "Verification status", "default": true }
        })) },
    );
    server.tool(
        ToolDef::new("test_elicitation_sep1330_enums").description("Elicits a form with every enum style"),
        |ctx, _: NoArguments| async move { elicitation_form(&ctx, "Please select options from the enum fields", json!({
            "untitledSingle": { "type": "string", "enum": ["option1", "option2", "option3"] },
            "titledSingle": { "type": "string", "oneOf": [
                { "const": "value1", "title": "First Option" },
                { "const": "value2", "title": "Second Option" },
                { "const": "value3", "title": "Third Option" }] },
            "legacyEnum": { "type": "string", "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"] },
            "untitledMulti": { "type": "array", "minItems": 1, "maxItems": 3, "items": { "type": "string", "enum": ["option1", "option2", "option3"] } },
            "titledMulti": { "type": "array", "minItems": 1, "maxItems": 3, "items": { "anyOf": [
                { "const": "value1", "title": "First Choice" },
                { "const": "value2", "title": "Second Choice" },
                { "const": "value3", "title": "Third Choice" }] } }
        })) },
    );
    server.tool(
        ToolDef::new("test_missing_capability").description("Test tool requiring sampling"),
        |ctx, _: NoArguments| async move {
            if !ctx.has_capability("sampling") {
                return Err(McpError::missing_capability(
                    "Server requires the sampling capability for this request",
                    json!({ "sampling": {} }),
                )
                .into());
            }
            text("Success")
        },
    );
    server.tool(
        ToolDef::new("test_streaming_elicitation").description("Diagnostic tool validating response progress streams"),
        |_, _: NoArguments| async { text("Streaming complete") },
    );
    server.tool(
        ToolDef::new("test_logging_tool").description("Diagnostic logging validator tool"),
        |ctx, _: NoArguments| async move {
            ctx.log(LogLevel::Info, Some("conformance"), json!("Logging tool invoked")).await;
            text("Logging evaluated")
        },
    );
    server.tool(
        ToolDef::new("test_trigger_tool_change").description("Announces a tool list change"),
        |ctx, _: NoArguments| async move {
            ctx.publish_change(ChangeEvent::ToolsListChanged);
            text("Mutation triggered")
        },
    );
    server.tool(
        ToolDef::new("test_trigger_prompt_change").description("Announces a prompt list change"),
        |ctx, _: NoArguments| async move {
            ctx.publish_change(ChangeEvent::PromptsListChanged);
            text("Mutation triggered")
        },
    );
}

fn elicitation_form(ctx: &RequestContext, message: &str, properties: Value) -> Reply {
    match ctx.input_response("form") {
        Some(response) => {
            let action = response.get("action").and_then(Value::as_str).unwrap_or("unknown");
            let content = response.get("content").cloned().unwrap_or(Value::Null);
            text(format!("Elicitation completed: action={action}, content={content}"))
        }
        None => ask(
            vec![(
                "form",
                InputRequest::ElicitForm {
                    message: message.into(),
                    requested_schema: json!({ "type": "object", "properties": properties, "required": [] }),
                },
            )],
            None,
        ),
    }
}

fn register_mrtr_tools(server: &mut McpServer) {
    server.tool(
        ToolDef::new("test_input_required_result_elicitation").description("MRTR: asks for the user's name"),
        |ctx, _: NoArguments| async move {
            if ctx.input_response("user_name").is_some() {
                let name = answer(&ctx, "user_name", "name").and_then(Value::as_str).unwrap_or("unknown");
                return text(format!("Hello, {name}!"));
            }
            ask(vec![("user_name", elicit("What is your name?", "name", "string"))], None)
        },
    );
    server.tool(
        ToolDef::new("test_input_required_result_sampling").description("MRTR: asks the client's model a question"),
        |ctx, _: NoArguments| async move {
            if ctx.input_response("sample_request").is_some() {
                let answer = sampled_text(&ctx, "sample_request").unwrap_or_else(|| "no response".into());
                return text(format!("Sampling result: {answer}"));
            }
            ask(vec![("sample_request", sample("What is the capital of France?", 100))], None)
        },
    );
    server.tool(
        ToolDef::new("test_input_required_result_list_roots").description("MRTR: asks for the client's roots"),
        |ctx, _: NoArguments| async move {
            match roots_count(&ctx, "roots_request") {
                Some(n) => text(format!("Found {n} root(s)")),
                None => ask(vec![("roots_request", InputRequest::ListRoots)], None),
            }
        },
    );
    server.tool(
        ToolDef::new("test_input_required_result_request_state").description("MRTR: round-trips sealed requestState"),
        |ctx, _: NoArguments| async move {
            let confirmed = answer(&ctx, "confirm", "ok") == Some(&json!(true));
            if confirmed && state_kind(&ctx) == Some("request-state") {
                return text("state-ok: requestState validated");
            }
            ask(vec![("confirm", elicit("Please confirm", "ok", "boolean"))], Some(json!({ "kind": "request-state" })))
        },
    );
    server.tool(
        ToolDef::new("test_input_required_result_multiple_inputs").description("MRTR: asks for several inputs at once"),
        |ctx, _: NoArguments| async move {
            let name = answer(&ctx, "user_name", "name").and_then(Value::as_str).map(str::to_owned);
            let greeting = sampled_text(&ctx, "greeting");
            let roots = roots_count(&ctx, "client_roots");
            if let (Some(name), Some(greeting), Some(roots)) = (&name, &greeting, roots) {
                return text(format!("Name: {name}; Greeting: {greeting}; Roots: {roots}"));
            }
            let mut requests = Vec::new();
            if name.is_none() {
                requests.push(("user_name", elicit("What is your name?", "name", "string")));
            }
            if greeting.is_none() {
                requests.push(("greeting", sample("Generate a greeting", 50)));
            }
            if roots.is_none() {
                requests.push(("client_roots", InputRequest::ListRoots));
            }
            ask(requests, Some(json!({ "kind": "multiple-inputs" })))
        },
    );
    server.tool(
        ToolDef::new("test_input_required_result_multi_round").description("MRTR: two rounds of questions"),
        |ctx, _: NoArguments| async move {
            let state = ctx.request_state().cloned().unwrap_or(Value::Null);
            match state.get("round").and_then(Value::as_u64) {
                Some(1) => match answer(&ctx, "step1", "name").and_then(Value::as_str) {
                    Some(name) => ask(
                        vec![("step2", elicit("Step 2: What is your favorite color?", "color", "string"))],
                        Some(json!({ "round": 2, "name": name })),
                    ),
                    None => ask(
                        vec![("step1", elicit("Step 1: What is your name?", "name", "string"))],
                        Some(json!({ "round": 1 })),
                    ),
                },
                Some(2) => {
                    let name = state.get("name").and_then(Value::as_str).unwrap_or("unknown");
                    match answer(&ctx, "step2", "color").and_then(Value::as_str) {
                        Some(color) => text(format!("Multi-round complete for {name} who likes {color}")),
                        None => ask(
                            vec![("step2", elicit("Step 2: What is your favorite color?", "color", "string"))],
                            Some(json!({ "round": 2, "name": name })),
                        ),
                    }
                }
                _ => ask(
                    vec![("step1", elicit("Step 1: What is your name?", "name", "string"))],
                    Some(json!({ "round": 1 })),
                ),
            }
        },
    );
    server.tool(
        ToolDef::new("test_input_required_result_tampered_state")
            .description("MRTR: state whose integrity is verified"),
        |ctx, _: NoArguments| async move {
            if state_kind(&ctx) == Some("tamper-test") && ctx.input_response("confirm").is_some() {
                return text("integrity-ok: state verified");
            }
            ask(vec![("confirm", elicit("Please confirm", "ok", "boolean"))], Some(json!({ "kind": "tamper-test" })))
        },
    );
    server.tool(
        ToolDef::new("test_input_required_result_capabilities")
            .description("MRTR: asks only for what the client declared"),
        |ctx, _: NoArguments| async move {
            if !ctx.input_responses().is_empty() {
                let keys: Vec<&str> = ctx.input_responses().keys().map(String::as_str).collect();
                return text(format!("capabilities-ok: received {}", keys.join(", ")));
            }
            let mut requests = Vec::new();
            if ctx.has_capability("elicitation") {
                requests.push(("elicit_input", elicit("Elicitation input", "value", "string")));
            }
            if ctx.has_capability("sampling") {
                requests.push(("sample_input", sample("Sample request", 50)));
            }
            if requests.is_empty() {
                return text("No supported capabilities declared");
            }
            ask(requests, Some(json!({ "kind": "capabilities-test" })))
        },
    );
}

/// The arguments of `test_prompt_with_arguments`.
#[derive(Deserialize, JsonSchema)]
struct TwoArguments {
    /// First test argument
    arg1: String,
    /// Second test argument
    arg2: String,
}

/// The argument of `test_prompt_with_embedded_resource`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct EmbedArguments {
    /// URI of the resource to embed
    resource_uri: String,
}

fn register_prompts(server: &mut McpServer) {
    server.prompt(
        Prompt::new("test_simple_prompt").title("Simple Test Prompt").description("A simple prompt without arguments"),
        |_, _: NoArguments| async {
            Ok(GetPromptResult {
                description: None,
                messages: vec![PromptMessage::user(Content::text("This is a simple prompt for testing."))],
            })
        },
    );
    server.prompt(
        Prompt::new("test_prompt_with_arguments")
            .title("Prompt With Arguments")
            .description("A prompt with required arguments"),
        |_, args: TwoArguments| async move {
            let text = format!("Prompt with arguments: arg1='{}', arg2='{}'", args.arg1, args.arg2);
            Ok(GetPromptResult { description: None, messages: vec![PromptMessage::user(Content::text(text))] })
        },
    );
    server.prompt(
        Prompt::new("test_prompt_with_embedded_resource")
            .title("Prompt With Embedded Resource")
            .description("A prompt that includes an embedded resource"),
        |_, args: EmbedArguments| async move {
            Ok(GetPromptResult {
                description: None,
                messages: vec![
                    PromptMessage::user(Content::resource(ResourceContents::text(
                        args.resource_uri,
                        "text/plain",
                        "Embedded resource content for testing.",
                    ))),
                    PromptMessage::user(Content::text("Please process the embedded resource above.")),
                ],
            })
        },
    );
    server.prompt(
        Prompt::new("test_prompt_with_image")
            .title("Prompt With Image")
            .description("A prompt that includes image content"),
        |_, _: NoArguments| async {
            Ok(GetPromptResult {
                description: None,
                messages: vec![
                    PromptMessage::user(Content::image(PNG, "image/png")),
                    PromptMessage::user(Content::text("Please analyze the image above.")),
                ],
            })
        },
    );
    server.prompt(
        Prompt::new("test_input_required_result_prompt")
            .title("MRTR Prompt")
            .description("MRTR: prompt that requires elicitation input"),
        |ctx, _: NoArguments| async move {
            match answer(&ctx, "user_context", "context").and_then(Value::as_str) {
                Some(context) => Ok(Outcome::Complete(GetPromptResult {
                    description: None,
                    messages: vec![PromptMessage::user(Content::text(format!("Prompt with context: {context}")))],
                })),
                None => Ok(Outcome::InputRequired(
                    InputRequired::new()
                        .request("user_context", elicit("What context should the prompt use?", "context", "string")),
                )),
            }
        },
    );
    server.completion(CompletionRef::Prompt("test_prompt_with_arguments".into()), |request| {
        let values: Vec<String> = ["test", "testValue1", "testValue2"]
            .iter()
            .filter(|v| v.starts_with(&request.value))
            .map(|v| v.to_string())
            .collect();
        Completion { total: Some(values.len() as u64), has_more: Some(false), values }
    });
}

fn register_resources(server: &mut McpServer) {
    server.resource(
        Resource::new("test://static-text", "static-text")
            .title("Static Text Resource")
            .description("A static text resource for testing")
            .mime_type("text/plain"),
        |_, uri| async move {
            Ok(vec![ResourceContents::text(uri, "text/plain", "This is the content of the static text resource.")])
        },
    );
    server.resource(
        Resource::new("test://static-binary", "static-binary")
            .title("Static Binary Resource")
            .description("A static binary resource (image) for testing")
            .mime_type("image/png"),
        |_, uri| async move { Ok(vec![ResourceContents::blob(uri, "image/png", PNG)]) },
    );
    server
        .resource(
            Resource::new("test://watched-resource", "watched-resource")
                .title("Watched Resource")
                .description("A resource clients can subscribe to")
                .mime_type("text/plain"),
            |_, uri| async move { Ok(vec![ResourceContents::text(uri, "text/plain", "Watched resource content")]) },
        )
        .cache(CacheHint { ttl_ms: 0, scope: CacheScope::Private });
    server.resource_template(
        ResourceTemplate::new("test://template/{id}/data", "template")
            .title("Resource Template")
            .description("A resource template with parameter substitution")
            .mime_type("application/json"),
        |_, uri, vars: HashMap<String, String>| async move {
            let id = &vars["id"];
            let body = json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") });
            Ok(vec![ResourceContents::text(uri, "application/json", body.to_string())])
        },
    );
    let public = CacheHint { ttl_ms: 300_000, scope: CacheScope::Public };
    for method in [
        CacheableMethod::ToolsList,
        CacheableMethod::PromptsList,
        CacheableMethod::ResourcesList,
        CacheableMethod::ResourceTemplatesList,
    ] {
        server.set_cache_hint(method, public);
    }
    server.set_cache_hint(CacheableMethod::ResourcesRead, CacheHint { ttl_ms: 300_000, scope: CacheScope::Private });
}

#[derive(Deserialize, JsonSchema)]
struct GreetArgs {
    /// Who to greet.
    name: String,
}

#[derive(Deserialize, JsonSchema)]
struct SlowComputeArgs {
    /// How long the computation takes.
    #[schemars(range(min = 0, max = 600))]
    #[serde(default)]
    seconds: u64,
    /// A label echoed in the result.
    #[serde(default)]
    label: String,
}

#[derive(Deserialize, JsonSchema)]
struct ConfirmDeleteArgs {
    /// The file to delete.
    filename: String,
}

fn accepted<'a>(ctx: &'a RequestContext, key: &str) -> Option<&'a Value> {
    let response = ctx.input_response(key)?;
    (response.get("action").and_then(Value::as_str) == Some("accept")).then(|| response.get("content")).flatten()
}

fn register_task_tools(server: &mut McpServer) {
    use vercel_mcp::tasks::TaskSupport::{Optional, Required};
    server.tool(ToolDef::new("greet").description("Greets someone synchronously"), |_, args: GreetArgs| async move {
        text(format!("Hello, {}!", args.name))
    });
    server.tool(
        ToolDef::new("slow_compute")
            .description("A computation that takes `seconds`; runs as a task when the client supports tasks")
            .task_support(Optional),
        |_, args: SlowComputeArgs| async move {
            tokio::time::sleep(std::time::Duration::from_secs(args.seconds)).await;
            text(format!("Computation \"{}\" completed after {} seconds. Result: 42.", args.label, args.seconds))
        },
    );
    server.tool(
        ToolDef::new("failing_job").description("A task whose tool call fails").task_support(Required),
        |_, _: NoArguments| async {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            Err::<CallToolResult, _>(ToolError::Execution("The job failed on purpose".into()))
        },
    );
    server.tool(
        ToolDef::new("protocol_error_job").description("A task that ends with a JSON-RPC error").task_support(Required),
        |_, _: NoArguments| async {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            Err::<CallToolResult, _>(ToolError::Protocol(McpError::internal("The job hit an internal error")))
        },
    );
    server.tool(
        ToolDef::new("confirm_delete").description("Deletes a file after the user confirms, as a task").task_support(Required),
        |ctx, args: ConfirmDeleteArgs| async move {
            if ctx.input_response("confirm").is_some() {
                let confirmed = accepted(&ctx, "confirm").and_then(|c| c.get("confirm")) == Some(&json!(true));
                return text(if confirmed { format!("Deleted {}", args.filename) } else { format!("Kept {}", args.filename) });
            }
            let request = InputRequest::ElicitForm {
                message: format!("Delete {}?", args.filename),
                requested_schema: json!({ "type": "object", "properties": { "confirm": { "type": "boolean" } }, "required": ["confirm"] }),
            };
            ask(vec![("confirm", request)], None)
        },
    );
    server.tool(
        ToolDef::new("multi_input").description("A task that asks two questions at once").task_support(Required),
        |ctx, _: NoArguments| async move {
            let name = |key: &str| accepted(&ctx, key).and_then(|c| c.get("name")).and_then(Value::as_str).map(str::to_owned);
            let (first, second) = (name("first"), name("second"));
            if let (Some(first), Some(second)) = (&first, &second) {
                return text(format!("Received {first} and {second}"));
            }
            let schema = json!({ "type": "object", "properties": { "name": { "type": "string" }, "confirm": { "type": "boolean" } } });
            let mut requests = Vec::new();
            for (key, answered) in [("first", first.is_some()), ("second", second.is_some())] {
                if !answered {
                    requests.push((key, InputRequest::ElicitForm { message: format!("The {key} name?"), requested_schema: schema.clone() }));
                }
            }
            ask(requests, None)
        },
    );
    server.tool(
        ToolDef::new("test_tool_with_task")
            .description("Asks for a name synchronously, then continues as a task")
            .task_support(Required)
            .input_before_task(),
        |ctx, _: NoArguments| async move {
            match answer(&ctx, "user_name", "name").and_then(Value::as_str) {
                Some(name) => text(format!("Hello, {name}!")),
                None => ask(vec![("user_name", elicit("What is your name?", "name", "string"))], None),
            }
        },
    );
}

/// The fixture's registry.
fn fixture(config: &vercel_mcp::Parts) -> McpServer {
    let mut server = McpServer::new("mcp-conformance-test-server", "1.0.0");
    server.enable_tasks(config.task_service());
    register_content_tools(&mut server);
    register_client_feature_tools(&mut server);
    register_mrtr_tools(&mut server);
    register_prompts(&mut server);
    register_resources(&mut server);
    register_task_tools(&mut server);
    server
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let config = vercel_mcp::parts_or_exit();
    let app = Arc::new(App::new(fixture(&config), config.endpoint()));
    local::serve(local::Routes::with_mcp(app), local::port_from_env()?).await
}
