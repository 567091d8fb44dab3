//! Executing one request against the registry.
//!
//! `execute` produces the era-neutral body of a result (the transport adds `resultType`,
//! `serverInfo` and legacy shaping) or an `input_required` answer for the MRTR layer to seal.
//! Methods that need a capability the server does not advertise are `-32601`, like unknown ones
//! (a 2025 client's `resources/subscribe` aside: answered `{}`, as 2025 clients call it anyway).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value, json};

use super::{
    CacheableMethod, CompletionRef, CompletionRequest, InputRequired, McpServer, Outcome, RequestContext, ToolError,
};
use crate::protocol::params::{
    CallToolParams, CompleteParams, CompletionReference, GetPromptParams, ListParams, ReadResourceParams,
    RequestParams, TaskParams, invalid_cursor,
};
use crate::protocol::types::{CallToolResult, ResourceContents};
use crate::protocol::{Era, ErrorCode, McpError, SUPPORTED_VERSIONS, TASKS_EXTENSION};
use crate::security::Principal;
use crate::tasks::{self, NewTask, TaskSupport};

/// The outcome of executing a request. New kinds of reply may be added.
#[derive(Debug)]
#[non_exhaustive]
pub enum Reply {
    /// The result object, without `resultType` or `serverInfo`.
    Complete(Map<String, Value>),
    /// A finished tool call, kept typed so the modern path serialises it straight into the
    /// response (it has no `_meta` or `resultType` of its own to merge).
    Tool(CallToolResult),
    /// A list result whose items are already serialised (`tools/list`): `items` is a JSON array
    /// to be placed under `key` next to the fields of `result`.
    Listing {
        /// The other fields (`nextCursor`, cache hints).
        result: Map<String, Value>,
        /// The name of the items field.
        key: &'static str,
        /// The items, as a JSON array.
        items: String,
    },
    /// The handler needs input from the client.
    InputRequired(InputRequired),
    /// A tool call refused before its handler ran, its arguments against the input schema: a
    /// tool error for the client, told apart in the request's log line.
    InvalidArguments(CallToolResult),
}

impl McpServer {
    /// Runs `method` with `params`. `subscriptions/listen` is not handled here: it streams.
    pub async fn execute(&self, ctx: RequestContext, method: &str, params: &RequestParams) -> Result<Reply, McpError> {
        let complete = |v: Value| match v {
            Value::Object(map) => Ok(Reply::Complete(map)),
            _ => Err(McpError::internal("result is not an object")),
        };
        match method {
            "server/discover" if ctx.era == Era::Modern => complete(self.discover()),
            // Answered even with no tools (an empty list), as the reference SDK does: generic
            // clients list tools unconditionally, and an empty list is the honest answer.
            "tools/list" => {
                // Each principal sees only the tools it may call; the list is then per caller.
                let mut visible: Vec<&str> = Vec::with_capacity(self.tools.len());
                visible.extend(
                    self.tools.iter().filter(|t| self.may_use(&ctx.principal, t)).map(|t| t.listing_json.as_str()),
                );
                let (start, end) = self.page_bounds(&ListParams::parse(params)?, visible.len())?;
                let mut items =
                    String::with_capacity(visible[start..end].iter().map(|t| t.len() + 1).sum::<usize>() + 2);
                items.push('[');
                for (i, tool) in visible[start..end].iter().enumerate() {
                    if i > 0 {
                        items.push(',');
                    }
                    items.push_str(tool);
                }
                items.push(']');
                let mut result = json!({});
                if end < visible.len() {
                    result["nextCursor"] = json!(encode_cursor(end));
                }
                let filtered = self.scopes_enforced && self.tools.iter().any(|t| !t.scopes.is_empty());
                self.attach_cache_hint(&mut result, CacheableMethod::ToolsList, None, filtered);
                Ok(Reply::Listing { result: into_map(result), key: "tools", items })
            }
            "tools/call" if !self.tools.is_empty() => {
                let params = CallToolParams::parse(params)?;
                self.call_tool(ctx, params).await
            }
            "resources/list" if self.has_resources() => {
                let listing: Vec<Value> = self
                    .resources
                    .iter()
                    .filter(|r| self.may_read(&ctx.principal, &r.scopes))
                    .map(|r| json!(r.resource))
                    .collect();
                let filtered = self.resources.iter().any(|r| !r.scopes.is_empty());
                complete(self.page(params, "resources", listing.iter(), CacheableMethod::ResourcesList, filtered)?)
            }
            "resources/templates/list" if self.has_resources() => {
                let listing: Vec<Value> = self
                    .templates
                    .iter()
                    .filter(|t| self.may_read(&ctx.principal, &t.scopes))
                    .map(|t| json!(t.template))
                    .collect();
                let filtered = self.templates.iter().any(|t| !t.scopes.is_empty());
                let method = CacheableMethod::ResourceTemplatesList;
                complete(self.page(params, "resourceTemplates", listing.iter(), method, filtered)?)
            }
            "resources/read" if self.has_resources() => {
                let params = ReadResourceParams::parse(params)?;
                self.read_resource(ctx, params).await
            }
            "prompts/list" if !self.prompts.is_empty() => {
                let listing: Vec<Value> = self.prompts.iter().map(|p| json!(p.prompt)).collect();
                complete(self.page(params, "prompts", listing.iter(), CacheableMethod::PromptsList, false)?)
            }
            "prompts/get" if !self.prompts.is_empty() => {
                let params = GetPromptParams::parse(params)?;
                self.get_prompt(ctx, params).await
            }
            "completion/complete" if !self.completions.is_empty() => {
                complete(self.complete(&ctx.principal, CompleteParams::parse(params)?)?)
            }
            "tasks/get" | "tasks/update" | "tasks/cancel" if ctx.era == Era::Modern && self.tasks.is_some() => {
                // Boxed, as the task path of tools/call is: its store futures are large.
                Box::pin(self.task_method(ctx, method, TaskParams::parse(params))).await
            }
            // 2025-era methods with no state behind them, answered only on the legacy path.
            "ping" | "logging/setLevel" if ctx.era == Era::Legacy => complete(json!({})),
            "resources/subscribe" | "resources/unsubscribe" if ctx.era == Era::Legacy && self.has_resources() => {
                complete(json!({}))
            }
            _ => Err(McpError::method_not_found(method)),
        }
    }

    fn has_resources(&self) -> bool {
        !self.resources.is_empty() || !self.templates.is_empty()
    }

    /// The `server/discover` result body.
    pub fn discover(&self) -> Value {
        let mut result = json!({
            "supportedVersions": SUPPORTED_VERSIONS,
            "capabilities": self.capabilities(),
        });
        if let Some(instructions) = &self.instructions {
            result["instructions"] = json!(instructions);
        }
        self.attach_cache_hint(&mut result, CacheableMethod::Discover, None, false);
        result
    }

    /// The legacy `initialize` result body.
    pub fn initialize(&self, requested: Option<&str>) -> Value {
        use crate::protocol::NEGOTIATED_LEGACY_VERSIONS;
        let version =
            requested.filter(|v| NEGOTIATED_LEGACY_VERSIONS.contains(v)).unwrap_or(NEGOTIATED_LEGACY_VERSIONS[0]);
        // What the stateless 2025 path can deliver: it keeps no stream open (GET is 405), so no
        // list change or resource update ever reaches a 2025 client, and the tasks extension is a
        // 2026-07-28 one. Subscribing is still answered (clients call it regardless).
        let mut capabilities = self.capabilities();
        capabilities.as_object_mut().expect("capabilities are an object").remove("extensions");
        for (_, capability) in capabilities.as_object_mut().expect("capabilities are an object").iter_mut() {
            for promise in ["listChanged", "subscribe"] {
                if let Some(value) = capability.get_mut(promise) {
                    *value = Value::Bool(false);
                }
            }
        }
        let mut result = json!({
            "protocolVersion": version,
            "capabilities": capabilities,
            "serverInfo": self.info,
        });
        if let Some(instructions) = &self.instructions {
            result["instructions"] = json!(instructions);
        }
        result
    }

    /// Sets `method`'s cache hint (or `overriding`) on `result`. An answer that is `callers_own`
    /// (filtered by the caller's scopes, or shaped by the caller's answers to an input round) is
    /// never cacheable for others, whatever hint the server set: its scope is written private.
    fn attach_cache_hint(
        &self,
        result: &mut Value,
        method: CacheableMethod,
        overriding: Option<super::CacheHint>,
        callers_own: bool,
    ) {
        let hint = overriding.unwrap_or_else(|| self.cache_hint(method));
        let scope = if callers_own { super::CacheScope::Private } else { hint.scope };
        result["ttlMs"] = json!(hint.ttl_ms);
        result["cacheScope"] = json!(scope.as_str());
    }

    fn page<'a>(
        &self,
        params: &RequestParams,
        key: &str,
        items: impl ExactSizeIterator<Item = &'a Value>,
        method: CacheableMethod,
        filtered: bool,
    ) -> Result<Value, McpError> {
        let total = items.len();
        let (start, end) = self.page_bounds(&ListParams::parse(params)?, total)?;
        let page: Vec<Value> = items.skip(start).take(end - start).cloned().collect();
        let mut result = json!({ key: page });
        if end < total {
            result["nextCursor"] = json!(encode_cursor(end));
        }
        self.attach_cache_hint(&mut result, method, None, self.scopes_enforced && filtered);
        Ok(result)
    }

    /// The `[start, end)` slice of a list of `total` entries that the cursor asks for.
    fn page_bounds(&self, params: &ListParams<'_>, total: usize) -> Result<(usize, usize), McpError> {
        let start = match params.cursor {
            None => 0,
            Some(cursor) => decode_cursor(cursor).filter(|s| *s <= total).ok_or_else(invalid_cursor)?,
        };
        Ok((start, (start + self.page_size).min(total)))
    }

    // A function returning an `async move` block, not an `async fn`: an `async fn` whose
    // by-value argument is borrowed before an await stores it twice (as captured and as a local),
    // and this argument is the request context, a few hundred bytes in the future of every tool
    // call. Held once, the boxed future of a request stays small enough for glibc's per-thread
    // cache (docs/performance.md, "A typed floor"). Hence the lint's exception, here and on the
    // two below.
    #[allow(clippy::manual_async_fn)]
    fn call_tool<'a>(
        &'a self,
        ctx: RequestContext,
        params: CallToolParams<'a>,
    ) -> impl Future<Output = Result<Reply, McpError>> + Send + 'a {
        async move {
            let name = params.name;
            let tool = self.tool_index.get(name).map(|&i| &self.tools[i]).ok_or_else(|| unknown_tool(name))?;
            if !self.may_use(&ctx.principal, tool) {
                // Defence in depth: the transport refuses with 403 before dispatch.
                return tool_reply(CallToolResult::error(format!(
                    "insufficient scope: {name} requires {}",
                    tool.scopes.join(" ")
                )));
            }
            let empty = Value::Object(Map::new());
            let given = params.arguments.unwrap_or(&empty);
            // Validated where they are, and handed to the handler where they are unless a member
            // must be dropped (or a task must keep them).
            let input_schema = tool.input_schema.compiled();
            if let Err(problem) = input_schema.validate_arguments(given) {
                let refused = CallToolResult::error(format!("Invalid arguments for tool {name}: {problem}"));
                return Ok(Reply::InvalidArguments(refused));
            }
            let arguments = input_schema.known_arguments(given);
            let as_task = match tool.task_support {
                TaskSupport::Forbidden => false,
                TaskSupport::Optional => ctx.has_extension(TASKS_EXTENSION) && self.tasks.is_some(),
                TaskSupport::Required if !ctx.has_extension(TASKS_EXTENSION) => return Err(tasks::extension_required()),
                TaskSupport::Required => true,
            };
            if as_task {
                // Boxed: the task path's futures are large, and inline they would size every call's.
                let Value::Object(arguments) = arguments.into_owned() else {
                    unreachable!("CallToolParams keeps objects only")
                };
                return Box::pin(self.call_tool_as_task(tool, ctx, arguments)).await;
            }
            let span = ctx.span.execute_tool_span(name);
            let started = std::time::Instant::now();
            // Its call is contained as its future is: reading its arguments and a closure's code
            // before its first await can panic too.
            let handled = match crate::handler::catch_unwind_call(|| (tool.handler)(ctx, arguments.as_ref())) {
                Ok(running) => crate::handler::catch_unwind(span.in_context(running)).await,
                Err(panic) => Err(panic),
            };
            let said = match &handled {
                Ok(outcome) => crate::handler::mark_tool_span(&span, outcome),
                Err(_) => {
                    span.fail("panic");
                    "panic"
                }
            };
            span.end();
            if let Some(telemetry) = span.telemetry() {
                let series = vec![("gen_ai.tool.name", name.to_owned().into()), ("mcp.outcome", said.into())];
                telemetry.record(crate::telemetry::TOOL_DURATION, series, started.elapsed());
            }
            // Its span ended and its duration counted, the panic goes on to the request's
            // containment, which logs where it happened and answers with a correlation id.
            let outcome = handled.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            match outcome {
                Ok(Outcome::Complete(result)) => {
                    check_output(name, tool.output_schema.as_deref(), &result)?;
                    tool_reply(result)
                }
                Ok(Outcome::InputRequired(input)) => Ok(Reply::InputRequired(input)),
                Err(ToolError::Execution(message)) => tool_reply(CallToolResult::error(message)),
                Err(ToolError::Protocol(error)) => Err(error),
            }
        }
    }

    /// Answers a `tools/call` with a task. With `input_before_task`, the handler runs inline
    /// first and any input it needs is asked for synchronously (MRTR) before a task exists.
    async fn call_tool_as_task(
        &self,
        tool: &super::ToolEntry,
        ctx: RequestContext,
        arguments: Map<String, Value>,
    ) -> Result<Reply, McpError> {
        let tasks = self.tasks.as_ref().ok_or_else(|| McpError::internal("the tasks extension is not enabled"))?;
        let (principal, capabilities) = (ctx.principal.clone(), ctx.client_capabilities.clone());
        let task = NewTask { principal: &principal, tool: &tool.name, arguments, client_capabilities: capabilities };
        // The run's span is a child of this request's, and may outlive it.
        let span = ctx.span.execute_tool_span(&tool.name);
        if !tool.input_before_task {
            return Ok(Reply::Complete(tasks.start(task, task_handler(tool), span).await?));
        }
        let arguments = Value::Object(task.arguments.clone());
        let handled = match crate::handler::catch_unwind_call(|| (tool.handler)(ctx, &arguments)) {
            Ok(running) => crate::handler::catch_unwind(span.in_context(running)).await,
            Err(panic) => Err(panic),
        };
        let outcome = match handled {
            Ok(outcome) => outcome,
            // Its span says so; the panic goes on to the request's containment.
            Err(panic) => {
                span.fail("panic");
                span.end();
                std::panic::resume_unwind(panic)
            }
        };
        crate::handler::mark_tool_span(&span, &outcome);
        span.end();
        let result = match outcome {
            Ok(Outcome::InputRequired(input)) => return Ok(Reply::InputRequired(input)),
            Ok(Outcome::Complete(result)) => {
                check_output(&tool.name, tool.output_schema.as_deref(), &result)?;
                result
            }
            Err(ToolError::Execution(message)) => CallToolResult::error(message),
            Err(ToolError::Protocol(error)) => return Err(error),
        };
        let mut recorded = json!(result);
        recorded["resultType"] = json!("complete");
        // The work is done: a task the store will not take (the caller's quota, an outage) must
        // not cost the caller its result, nor make a retry run the handler again.
        match tasks.finished(task, recorded).await {
            Ok(created) => Ok(Reply::Complete(created)),
            Err(_) => tool_reply(result),
        }
    }

    /// `tasks/get`, `tasks/update`, `tasks/cancel`: only for requests declaring the extension.
    async fn task_method(
        &self,
        ctx: RequestContext,
        method: &str,
        params: Result<TaskParams<'_>, McpError>,
    ) -> Result<Reply, McpError> {
        let tasks = self.tasks.as_ref().ok_or_else(|| McpError::method_not_found(method))?;
        if !ctx.has_extension(TASKS_EXTENSION) {
            return Err(tasks::extension_required());
        }
        // Parsed before, refused after: a request without the extension learns nothing else.
        let TaskParams { task_id, input_responses } = params?;
        // A task is its tool's work: reading, cancelling or answering it needs the tool's scopes
        // now, as a call of it would (a token of the same subject may carry fewer).
        let may = |doing: &'static str| {
            let principal = &ctx.principal;
            move |tool: &str| match self.missing_tool_scopes(principal, tool) {
                None => Ok(()),
                Some(required) => Err(insufficient_scope(doing, &required)),
            }
        };
        match method {
            "tasks/get" => Ok(Reply::Complete(tasks.get(&ctx.principal, task_id, may("reading this task")).await?)),
            "tasks/update" => {
                // The update and the round it resumes are one piece of work past the request: a
                // caller that goes away while the update is in flight (its future dropped, the
                // command already sent) would otherwise leave the task working with nothing
                // running it. So what the work needs of this server is taken now: the tools'
                // handlers and scopes, and whether scopes are enforced.
                let updating = tasks.update_slot(&ctx.principal)?;
                let tools = self.task_tools.get_or_init(|| std::sync::Arc::new(TaskTools::of(&self.tools))).clone();
                let enforced = self.scopes_enforced;
                let (service, principal, task_id) = (tasks.clone(), ctx.principal.clone(), task_id.to_owned());
                let parent = ctx.span.clone();
                let (answered_tx, answered) = tokio::sync::oneshot::channel();
                crate::state::background::spawn(async move {
                    let may_answer = |tool: &str| match tools.scopes(tool) {
                        Some(required) if enforced && !principal.has_scopes(required) => {
                            Err(insufficient_scope("answering this task", required))
                        }
                        _ => Ok(()),
                    };
                    let updated = service.update_if(&principal, &task_id, &input_responses, may_answer).await;
                    drop(updating);
                    let resumed = match updated {
                        Ok(resumed) => resumed,
                        Err(error) => {
                            let _ = answered_tx.send(Err(error));
                            return;
                        }
                    };
                    let _ = answered_tx.send(Ok(()));
                    if let Some(resumed) = resumed {
                        let span = parent.execute_tool_span(&resumed.record.tool);
                        let handler = tools.handler(&resumed.record.tool);
                        service.resume(resumed, handler, span);
                    }
                });
                answered.await.map_err(|_| tasks.work_lost("answer"))??;
                Ok(Reply::Complete(Map::new()))
            }
            _ => {
                tasks.cancel(&ctx.principal, task_id, may("cancelling this task")).await?;
                Ok(Reply::Complete(Map::new()))
            }
        }
    }

    /// As [`McpServer::call_tool`], a function returning its future (one copy of the context).
    #[allow(clippy::manual_async_fn)]
    fn read_resource<'a>(
        &'a self,
        ctx: RequestContext,
        params: ReadResourceParams<'a>,
    ) -> impl Future<Output = Result<Reply, McpError>> + Send + 'a {
        async move {
            let uri = params.uri;
            if let Some(required) = self.missing_resource_scopes(&ctx.principal, uri) {
                // Defence in depth: the transport refuses with 403 before dispatch.
                return Err(insufficient_scope("reading this resource", &required));
            }
            // A read completed with the caller's answers (a retry, or answers sent up front) is
            // theirs, like a read filtered by their scopes.
            let answered = ctx.request_state.is_some() || !ctx.input_responses.is_empty();
            let (outcome, cache, scoped) = if let Some(&i) = self.resource_index.get(uri) {
                let entry = &self.resources[i];
                let scoped = !entry.scopes.is_empty();
                ((entry.handler)(ctx, uri.to_owned()).await?, entry.cache, scoped)
            } else if let Some((entry, vars)) =
                self.templates.iter().find_map(|t| t.matcher.matches(uri).map(|v| (t, v)))
            {
                let scoped = !entry.scopes.is_empty();
                ((entry.handler)(ctx, uri.to_owned(), vars).await?, None, scoped)
            } else {
                return Err(resource_not_found(uri, ctx.era));
            };
            match outcome {
                Outcome::Complete(contents) => {
                    let contents: Vec<_> = contents.into_iter().map(ResourceContents::with_escaped_uri).collect();
                    let mut result = json!({ "contents": contents });
                    // What only some callers may read is never cacheable for others.
                    let callers_own = (self.scopes_enforced && scoped) || answered;
                    self.attach_cache_hint(&mut result, CacheableMethod::ResourcesRead, cache, callers_own);
                    Ok(Reply::Complete(into_map(result)))
                }
                Outcome::InputRequired(input) => Ok(Reply::InputRequired(input)),
            }
        }
    }

    /// As [`McpServer::call_tool`], a function returning its future (one copy of the context).
    #[allow(clippy::manual_async_fn)]
    fn get_prompt<'a>(
        &'a self,
        ctx: RequestContext,
        params: GetPromptParams<'a>,
    ) -> impl Future<Output = Result<Reply, McpError>> + Send + 'a {
        async move {
            let GetPromptParams { name, arguments } = params;
            let entry = self.prompt_index.get(name).map(|&i| &self.prompts[i]).ok_or_else(|| {
                McpError::invalid_params(format!(
                    "Prompt {} not found",
                    crate::protocol::error::truncate_for_message(name)
                ))
            })?;
            if let Some(missing) =
                entry.prompt.arguments.iter().find(|a| a.required && !arguments.contains_key(&a.name))
            {
                return Err(McpError::invalid_params(format!("Missing required argument: {}", missing.name)));
            }
            match (entry.handler)(ctx, arguments).await? {
                Outcome::Complete(result) => Ok(Reply::Complete(into_map(json!(result)))),
                Outcome::InputRequired(input) => Ok(Reply::InputRequired(input)),
            }
        }
    }

    fn complete(&self, principal: &Principal, params: CompleteParams<'_>) -> Result<Value, McpError> {
        let CompleteParams { reference, argument, value, context } = params;
        let reference = match reference {
            CompletionReference::Prompt(name) => CompletionRef::Prompt(name.to_owned()),
            CompletionReference::ResourceTemplate(uri) => CompletionRef::ResourceTemplate(uri.to_owned()),
        };
        // A template the caller may not read is as unknown to it as one never registered: its
        // completions (the names of what it holds, say) are part of what its scopes guard.
        let known = match &reference {
            CompletionRef::Prompt(name) => self.prompt_index.contains_key(name),
            CompletionRef::ResourceTemplate(uri) => {
                self.template_at(uri).is_some_and(|t| self.may_read(principal, &t.scopes))
            }
        };
        if !known {
            return Err(McpError::invalid_params("completion/complete: unknown reference"));
        }
        let mut completion = match self.completions.get(&reference) {
            Some(handler) => handler(&CompletionRequest {
                reference,
                argument: argument.to_owned(),
                value: value.to_owned(),
                context,
            }),
            None => Default::default(),
        };
        if completion.values.len() > 100 {
            completion.total.get_or_insert(completion.values.len() as u64);
            completion.values.truncate(100);
            completion.has_more = Some(true);
        }
        Ok(json!({ "completion": completion }))
    }
}

fn tool_reply(result: CallToolResult) -> Result<Reply, McpError> {
    Ok(Reply::Tool(result))
}

fn into_map(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// `-32602` for a tool name nobody registered.
pub(crate) fn unknown_tool(name: &str) -> McpError {
    McpError::invalid_params(format!("Tool {} not found", crate::protocol::error::truncate_for_message(name)))
}

/// "Resource not found" with the URI in `data`: `-32602` in 2026-07-28, `-32002` (its code in
/// 2025-11-25) on the legacy path.
pub(crate) fn resource_not_found(uri: &str, era: Era) -> McpError {
    let error = McpError::invalid_params("Resource not found")
        .with_data(json!({ "uri": crate::protocol::error::truncate_for_message(uri) }));
    match era {
        Era::Modern => error,
        Era::Legacy => McpError { code: ErrorCode::LEGACY_RESOURCE_NOT_FOUND, ..error },
    }
}

fn encode_cursor(offset: usize) -> String {
    URL_SAFE_NO_PAD.encode(format!("o:{offset}"))
}

fn decode_cursor(cursor: &str) -> Option<usize> {
    if cursor.is_empty() {
        return Some(0);
    }
    if cursor.len() > 32 {
        return None;
    }
    let raw = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let offset = std::str::from_utf8(&raw).ok()?.strip_prefix("o:")?;
    if offset.starts_with('+') || (offset.len() > 1 && offset.starts_with('0')) {
        return None;
    }
    offset.parse().ok()
}

/// Refuses a tool's complete, successful output that breaks its `outputSchema`: a server bug,
/// not the caller's, so the caller gets `-32603` saying where it broke (the path is the tool's
/// own) rather than output that breaks the contract.
fn check_output(
    name: &str,
    schema: Option<&super::schema::LazySchema>,
    result: &CallToolResult,
) -> Result<(), McpError> {
    let Some(schema) = schema.filter(|_| !result.is_error) else { return Ok(()) };
    let structured = result.structured_content.as_ref().unwrap_or(&Value::Null);
    schema.compiled().validate(structured).map_err(|problem| {
        McpError::internal(format!(
            "Internal error: tool {name} produced output that does not match its outputSchema ({})",
            crate::protocol::error::truncate_for_message(&problem)
        ))
    })
}

/// Each tool's handler for a task's round ([`task_handler`]) and the scopes answering its task
/// needs, by name: what a resumed round needs of the server once its request is gone.
pub(crate) struct TaskTools(std::collections::HashMap<String, (crate::handler::ToolFn, Vec<String>)>);

impl TaskTools {
    fn of(tools: &[super::ToolEntry]) -> Self {
        Self(tools.iter().map(|tool| (tool.name.clone(), (task_handler(tool), tool.scopes.clone()))).collect())
    }

    /// The scopes tool `name` needs; `None` if it is not served.
    fn scopes(&self, name: &str) -> Option<&[String]> {
        self.0.get(name).map(|(_, scopes)| scopes.as_slice())
    }

    /// Tool `name`'s handler for a round. A tool served no more (renamed or removed by a deploy
    /// while its task waited) gets one that fails the round at once, rather than leave the task
    /// working with nothing running it.
    fn handler(&self, name: &str) -> crate::handler::ToolFn {
        if let Some((handler, _)) = self.0.get(name) {
            return handler.clone();
        }
        let gone = unknown_tool(name);
        std::sync::Arc::new(move |_, _: &Value| Box::pin(std::future::ready(Err(ToolError::Protocol(gone.clone())))))
    }
}

/// `tool`'s handler for a task's round: its output is checked as a synchronous call's is, and a
/// round that breaks the contract fails the task.
fn task_handler(tool: &super::ToolEntry) -> crate::handler::ToolFn {
    let Some(schema) = tool.output_schema.clone() else { return tool.handler.clone() };
    let (handler, name) = (tool.handler.clone(), std::sync::Arc::<str>::from(tool.name.as_str()));
    std::sync::Arc::new(move |ctx, arguments: &Value| {
        let running = handler(ctx, arguments);
        let (schema, name) = (schema.clone(), name.clone());
        Box::pin(async move {
            let outcome = running.await;
            if let Ok(Outcome::Complete(result)) = &outcome {
                check_output(&name, Some(&schema), result).map_err(ToolError::Protocol)?;
            }
            outcome
        })
    })
}

/// The 403 for a caller without the scopes `doing` needs.
fn insufficient_scope(doing: &str, required: &[String]) -> McpError {
    McpError::new(
        ErrorCode::INVALID_PARAMS,
        http::StatusCode::FORBIDDEN,
        format!("insufficient scope: {doing} requires {}", required.join(" ")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::types::{Resource, ResourceContents, ResourceTemplate};
    use crate::security::Principal;
    use crate::server::{CacheHint, CacheScope};

    /// A server with tasks over `store` (a clock at 0, seeded randomness, an in-process bus), and
    /// its bus.
    fn server_with_tasks(
        store: std::sync::Arc<dyn crate::tasks::TaskStore>,
    ) -> (McpServer, std::sync::Arc<dyn crate::state::ChangeBus>) {
        let bus: std::sync::Arc<dyn crate::state::ChangeBus> = std::sync::Arc::new(crate::state::LocalBus::default());
        let clock = std::sync::Arc::new(crate::state::ManualClock::new(0));
        let random = std::sync::Arc::new(crate::state::SeededRandom::new(1));
        let mut server = McpServer::new("t", "1");
        server.enable_tasks(std::sync::Arc::new(crate::tasks::TaskService::new(store, clock, random, bus.clone())));
        (server, bus)
    }

    /// `completion/complete` answers at most 100 values: past that it says how many there were
    /// (unless the handler said) and that there are more. A reference the server does not serve
    /// is `-32602`; a served one without a handler completes to nothing.
    #[tokio::test]
    async fn completions_are_cut_at_a_hundred_values_and_say_so() {
        use crate::protocol::types::{Completion, GetPromptResult, Prompt};
        use crate::server::{CompletionRef, NoArguments};
        let mut server = McpServer::new("t", "1");
        for name in ["many", "counted", "bare"] {
            server.prompt(Prompt::new(name), |_, _: NoArguments| async {
                Ok::<_, McpError>(GetPromptResult { description: None, messages: vec![] })
            });
        }
        let values = |n: usize| (0..n).map(|i| format!("v{i}")).collect::<Vec<_>>();
        server.completion(CompletionRef::Prompt("many".into()), move |request| Completion {
            values: values(150).into_iter().filter(|v| v.starts_with(&request.value)).collect(),
            ..Default::default()
        });
        server.completion(CompletionRef::Prompt("counted".into()), move |_| Completion {
            values: values(120),
            total: Some(500),
            has_more: None,
        });
        let bus: std::sync::Arc<dyn crate::state::ChangeBus> = std::sync::Arc::new(crate::state::LocalBus::default());
        let complete = async |prompt: &str, value: &str| {
            let ctx = RequestContext::new(
                crate::protocol::RequestId::from_value(json!(1)).unwrap(),
                Era::Modern,
                Principal::anonymous(),
                bus.clone(),
            );
            let params =
                json!({"ref": {"type": "ref/prompt", "name": prompt}, "argument": {"name": "a", "value": value}});
            match server.execute(ctx, "completion/complete", &params.as_object().unwrap().clone().into()).await {
                Ok(Reply::Complete(result)) => Ok(result["completion"].clone()),
                Ok(_) => panic!("not a plain result"),
                Err(error) => Err(error),
            }
        };
        let many = complete("many", "v").await.unwrap();
        assert_eq!(many["values"].as_array().unwrap().len(), 100);
        assert_eq!((&many["values"][99], &many["total"], &many["hasMore"]), (&json!("v99"), &json!(150), &json!(true)));
        let few = complete("many", "v14").await.unwrap();
        assert_eq!(
            few,
            json!({"values": ["v14", "v140", "v141", "v142", "v143", "v144", "v145", "v146", "v147", "v148", "v149"]})
        );
        let counted = complete("counted", "").await.unwrap();
        assert_eq!((&counted["total"], &counted["hasMore"]), (&json!(500), &json!(true)), "the handler's total stands");
        assert_eq!(complete("bare", "x").await.unwrap(), json!({"values": []}));
        let unknown = complete("nope", "x").await.unwrap_err();
        assert_eq!(unknown.code, ErrorCode::INVALID_PARAMS, "{}", unknown.message);
    }

    /// The tools a resumed task round may run are taken once, at the first `tasks/update`, and
    /// taken again after a tool is registered: an update finds every registered tool's handler
    /// and scopes, whenever it was added.
    #[tokio::test]
    async fn the_task_tools_are_taken_at_the_first_update_and_again_after_a_registration() {
        let (mut server, bus) = server_with_tasks(std::sync::Arc::new(crate::tasks::MemoryTaskStore::default()));
        let tool = |name: &'static str| crate::server::ToolDef::new(name).scopes(&["s"]);
        server.tool(tool("first"), |_, _: crate::server::NoArguments| async { "x" });
        let update = async |server: &McpServer| {
            let mut ctx = RequestContext::new(
                crate::protocol::RequestId::from_value(json!(1)).unwrap(),
                Era::Modern,
                Principal::anonymous(),
                bus.clone(),
            );
            ctx.client_capabilities =
                json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}).as_object().unwrap().clone();
            let params: RequestParams =
                json!({"taskId": "none", "inputResponses": {}}).as_object().unwrap().clone().into();
            server.execute(ctx, "tasks/update", &params).await.map(drop).unwrap_err()
        };
        assert!(server.task_tools.get().is_none(), "nothing is taken before an update");
        update(&server).await;
        let taken = server.task_tools.get().expect("taken at the first update");
        assert_eq!((taken.scopes("first"), taken.scopes("second")), (Some(&["s".to_owned()][..]), None));
        server.tool(tool("second"), |_, _: crate::server::NoArguments| async { "y" });
        update(&server).await;
        assert!(server.task_tools.get().expect("taken again").scopes("second").is_some());
    }

    /// A `tasks/update`'s store work goes on past its request, so it holds one of its caller's
    /// places until the store answers: a caller who sends updates and leaves, while the store
    /// hangs, has at most eight in flight; the ninth is a 429, another caller is not held up,
    /// and the places come free once the store answers.
    #[tokio::test]
    async fn updates_in_flight_are_capped_per_caller_until_the_store_answers() {
        use crate::tasks::{TaskQuota, TaskRecord, TaskRefused, TaskStore};
        use std::sync::Arc;
        /// Answers each read once the test lets it, with nothing.
        struct Gated(tokio::sync::Semaphore);
        impl TaskStore for Gated {
            fn create<'a>(
                &'a self,
                _: &'a TaskRecord,
                _: TaskQuota,
            ) -> crate::store::StoreFuture<'a, Result<(), TaskRefused>> {
                Box::pin(async { Ok(Ok(())) })
            }
            fn get<'a>(&'a self, _: &'a str, _: &'a str) -> crate::store::StoreFuture<'a, Option<TaskRecord>> {
                Box::pin(async {
                    self.0.acquire().await.expect("never closed").forget();
                    Ok(None)
                })
            }
            fn replace<'a>(&'a self, _: &'a TaskRecord) -> crate::store::StoreFuture<'a, bool> {
                Box::pin(async { Ok(false) })
            }
        }
        let store = Arc::new(Gated(tokio::sync::Semaphore::new(0)));
        let (server, bus) = server_with_tasks(store.clone());
        let server = Arc::new(server);
        let update = |who: &str| {
            let mut ctx = RequestContext::new(
                crate::protocol::RequestId::from_value(json!(1)).unwrap(),
                Era::Modern,
                Principal::verified(Some(who), None, vec![]),
                bus.clone(),
            );
            ctx.client_capabilities =
                json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}).as_object().unwrap().clone();
            let params: RequestParams =
                json!({"taskId": "AAAAAAAAAAAAAAAAAAAAAQ", "inputResponses": {}}).as_object().unwrap().clone().into();
            let server = server.clone();
            async move { server.execute(ctx, "tasks/update", &params).await.map(drop) }
        };
        let callers: Vec<_> = (0..8).map(|_| tokio::spawn(update("alice"))).collect();
        // Turns for the eight (this runtime has one thread): each reaches the store and waits.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(callers.iter().all(|caller| !caller.is_finished()), "all eight wait on the store");
        let answered = |call| async move {
            tokio::time::timeout(std::time::Duration::from_secs(5), call)
                .await
                .expect("answered, not waiting on the store")
        };
        let refused = answered(update("alice")).await.unwrap_err();
        assert_eq!(refused.status, http::StatusCode::TOO_MANY_REQUESTS, "{refused:?}");
        assert!(refused.message.contains("too many task updates in flight (limit 8)"), "{}", refused.message);
        // The callers leave; their work goes on, and still holds their places.
        for caller in &callers {
            caller.abort();
        }
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            answered(update("alice")).await.unwrap_err().status,
            http::StatusCode::TOO_MANY_REQUESTS,
            "leaving frees nothing"
        );
        let bob = tokio::spawn(update("bob"));
        // The store answers: every update ends ("not found"), and the places come free.
        store.0.add_permits(1000);
        let bobs = bob.await.unwrap().unwrap_err();
        assert_ne!(bobs.status, http::StatusCode::TOO_MANY_REQUESTS, "another caller is not held up: {bobs:?}");
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        let after = update("alice").await.unwrap_err();
        assert_ne!(after.status, http::StatusCode::TOO_MANY_REQUESTS, "free once the store answered: {after:?}");
    }

    /// A 2025 client's `initialize` offers only what the stateless path delivers: no list
    /// changes, no resource subscriptions, no 2026 extension; discovery still offers them all.
    #[test]
    fn legacy_initialize_offers_only_what_the_legacy_path_delivers() {
        use crate::protocol::types::{Resource, ResourceContents};
        let (mut server, _) = server_with_tasks(std::sync::Arc::new(crate::tasks::MemoryTaskStore::default()));
        server.tool(crate::server::ToolDef::new("t"), |_, _: crate::server::NoArguments| async { "x" });
        let read = |_, uri: String| async move { Ok(vec![ResourceContents::text(uri, "text/plain", "x")]) };
        server.resource(Resource::new("a://r", "r"), read);
        let modern = server.capabilities();
        assert_eq!((&modern["resources"]["subscribe"], modern.get("extensions").is_some()), (&json!(true), true));
        let legacy = server.initialize(Some("2025-11-25"))["capabilities"].clone();
        assert_eq!(legacy["tools"]["listChanged"], false);
        assert_eq!(
            (&legacy["resources"]["subscribe"], &legacy["resources"]["listChanged"]),
            (&json!(false), &json!(false))
        );
        assert!(legacy.get("extensions").is_none(), "{legacy}");
    }

    /// An outputSchema the validator cannot enforce is refused when the tool is registered,
    /// rather than failing every call.
    #[test]
    #[should_panic(expected = "its outputSchema uses JSON Schema keywords the validator cannot enforce")]
    fn an_output_schema_that_cannot_be_checked_is_refused_at_registration() {
        let mut server = McpServer::new("t", "1");
        let schema = json!({"type": "object", "patternProperties": {"^[0-9]+$": {"type": "string"}}});
        server
            .tool(crate::server::ToolDef::new("map").output_schema(schema), |_, _: crate::server::NoArguments| async {
                "{}"
            });
    }

    /// A server whose resource and template listings are filtered by scope must not let a
    /// public cache hint share one caller's listing with another.
    #[tokio::test]
    async fn scope_filtered_listings_are_private_whatever_the_hint() {
        let mut server = McpServer::new("t", "1");
        let read = |_, uri: String| async move { Ok(vec![ResourceContents::text(uri, "text/plain", "x")]) };
        server.resource(Resource::new("a://open", "open"), read);
        server.resource(Resource::new("a://secret", "secret"), read).scopes(&["secret:read"]);
        server
            .resource_template(ResourceTemplate::new("a://t/{x}", "t"), |_, uri, _| async move {
                Ok(vec![ResourceContents::text(uri, "text/plain", "x")])
            })
            .scopes(&["secret:read"]);
        let public = CacheHint { ttl_ms: 300_000, scope: CacheScope::Public };
        server.set_cache_hint(CacheableMethod::ResourcesList, public);
        server.set_cache_hint(CacheableMethod::ResourceTemplatesList, public);
        server.scopes_enforced = true;
        let bus: std::sync::Arc<dyn crate::state::ChangeBus> = std::sync::Arc::new(crate::state::LocalBus::default());
        for principal in [Principal::anonymous(), Principal::verified(Some("ada"), None, vec!["secret:read".into()])] {
            for (method, key) in [("resources/list", "resources"), ("resources/templates/list", "resourceTemplates")] {
                let ctx = RequestContext::new(
                    crate::protocol::RequestId::from_value(json!(1)).unwrap(),
                    Era::Modern,
                    principal.clone(),
                    bus.clone(),
                );
                let Ok(Reply::Complete(result)) = server.execute(ctx, method, &RequestParams::default()).await else {
                    panic!()
                };
                assert_eq!(result["cacheScope"], "private", "{method} for {}", principal.id());
                assert!(result[key].is_array());
            }
        }
        server.scopes_enforced = false;
        let ctx = RequestContext::new(
            crate::protocol::RequestId::from_value(json!(1)).unwrap(),
            Era::Modern,
            Principal::anonymous(),
            bus,
        );
        let Ok(Reply::Complete(result)) = server.execute(ctx, "resources/list", &RequestParams::default()).await else {
            panic!()
        };
        assert_eq!(result["cacheScope"], "public", "unfiltered, the server's hint stands");
    }

    /// A task's output is checked against the tool's outputSchema as a synchronous call's is:
    /// output that breaks it fails the task with -32603 saying where, and never becomes its result.
    #[tokio::test]
    async fn a_task_whose_output_breaks_its_schema_fails() {
        use crate::tasks::{MemoryTaskStore, TaskStatus, TaskStore, TaskSupport};
        let store = std::sync::Arc::new(MemoryTaskStore::default());
        let (mut server, bus) = server_with_tasks(store.clone());
        let promised = json!({"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]});
        server.tool(
            crate::server::ToolDef::new("sum").output_schema(promised).task_support(TaskSupport::Required),
            |_, _: crate::server::NoArguments| async { CallToolResult::structured(json!({"total": "many"})) },
        );
        let alice = Principal::verified(Some("alice"), None, vec![]);
        let mut ctx = RequestContext::new(
            crate::protocol::RequestId::from_value(json!(1)).unwrap(),
            Era::Modern,
            alice.clone(),
            bus,
        );
        ctx.client_capabilities =
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}).as_object().unwrap().clone();
        let params: RequestParams = json!({"name": "sum", "arguments": {}}).as_object().unwrap().clone().into();
        let Ok(Reply::Complete(created)) = server.execute(ctx, "tools/call", &params).await else { panic!("a task") };
        let task_id = created["taskId"].as_str().unwrap().to_owned();
        let failed = loop {
            let record = store.get(alice.id(), &task_id).await.unwrap().unwrap();
            if record.status.is_terminal() {
                break record;
            }
            tokio::task::yield_now().await;
        };
        assert_eq!(failed.status, TaskStatus::Failed, "{failed:?}");
        let error = failed.error.expect("its error");
        assert_eq!(error["code"], -32603);
        assert!(error["message"].as_str().unwrap().contains("does not match its outputSchema (total"), "{error}");
        assert!(failed.result.is_none(), "the broken output is not its result");
    }

    /// A caller that goes away while its task's create, or its answering update, is in flight
    /// (the request's future dropped after the store took the write) still gets its work run:
    /// the write and the round it starts are one piece of work past the request. Before, the
    /// task read working, with nothing running it, until its TTL. (Virtual time: each write
    /// lands, then takes a second to answer.)
    #[tokio::test(start_paused = true)]
    async fn a_task_whose_caller_goes_away_midway_still_runs() {
        use crate::store::StoreFuture;
        use crate::tasks::{MemoryTaskStore, TaskQuota, TaskRecord, TaskRefused, TaskStatus};
        use crate::tasks::{TaskStore, TaskSupport};
        struct SlowAnswers(std::sync::Arc<MemoryTaskStore>);
        impl TaskStore for SlowAnswers {
            fn create<'a>(
                &'a self,
                record: &'a TaskRecord,
                quota: TaskQuota,
            ) -> StoreFuture<'a, Result<(), TaskRefused>> {
                Box::pin(async move {
                    let created = self.0.create(record, quota).await;
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    created
                })
            }
            fn get<'a>(&'a self, owner: &'a str, task_id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
                self.0.get(owner, task_id)
            }
            fn replace<'a>(&'a self, record: &'a TaskRecord) -> StoreFuture<'a, bool> {
                Box::pin(async move {
                    let replaced = self.0.replace(record).await;
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    replaced
                })
            }
        }
        let store = std::sync::Arc::new(MemoryTaskStore::default());
        let (mut server, bus) = server_with_tasks(std::sync::Arc::new(SlowAnswers(store.clone())));
        server.tool(
            crate::server::ToolDef::new("ask").description("Asks, then answers").task_support(TaskSupport::Required),
            |ctx: RequestContext, _: crate::server::NoArguments| async move {
                if ctx.input_response("a").is_some() {
                    return crate::server::Outcome::Complete(CallToolResult::text("answered"));
                }
                let ask = crate::protocol::types::InputRequest::ElicitForm {
                    message: "a?".into(),
                    requested_schema: json!({"type": "object"}),
                };
                crate::server::Outcome::InputRequired(crate::server::InputRequired::new().request("a", ask))
            },
        );
        let alice = Principal::verified(Some("alice"), None, vec![]);
        let request = |method: &'static str, params: Value| {
            let mut ctx = RequestContext::new(
                crate::protocol::RequestId::from_value(json!(1)).unwrap(),
                Era::Modern,
                alice.clone(),
                bus.clone(),
            );
            ctx.client_capabilities = json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}})
                .as_object()
                .unwrap()
                .clone();
            let params: RequestParams = params.as_object().unwrap().clone().into();
            let server = &server;
            async move {
                let gone =
                    tokio::time::timeout(std::time::Duration::from_millis(50), server.execute(ctx, method, &params));
                assert!(gone.await.is_err(), "{method}: the caller left before the store answered");
            }
        };
        let settled = |status: TaskStatus| {
            let store = store.clone();
            async move {
                for _ in 0..100 {
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    let records: Vec<TaskRecord> = store.tasks.lock().unwrap().values().cloned().collect();
                    if records.len() == 1 && records[0].status == status {
                        return records[0].task_id.clone();
                    }
                }
                panic!(
                    "the task never reached {status:?}: {:?}",
                    store.tasks.lock().unwrap().values().collect::<Vec<_>>()
                );
            }
        };
        request("tools/call", json!({"name": "ask", "arguments": {}})).await;
        let task_id = settled(TaskStatus::InputRequired).await;
        request("tasks/update", json!({"taskId": task_id, "inputResponses": {"a": {"action": "accept"}}})).await;
        settled(TaskStatus::Completed).await;
    }

    /// A task is its tool's work, so reading, answering or cancelling it needs the tool's scopes
    /// now: a token of the task's own subject without them is refused (403) and changes
    /// nothing; one with them reads, resumes and cancels it. (Before, only answering checked.)
    #[tokio::test]
    async fn reading_answering_or_cancelling_a_task_needs_its_tools_scopes() {
        use crate::tasks::{MemoryTaskStore, TaskQuota, TaskRecord, TaskStatus, TaskStore};
        let store = std::sync::Arc::new(MemoryTaskStore::default());
        let (mut server, bus) = server_with_tasks(store.clone());
        server.tool(
            crate::server::ToolDef::new("write").description("Writes").scopes(&["w"]),
            |_, _: crate::server::NoArguments| async { std::future::pending::<&str>().await },
        );
        server.scopes_enforced = true;
        let record: TaskRecord = serde_json::from_value(json!({
            "version": 1, "taskId": "AAAAAAAAAAAAAAAAAAAAAQ", "owner": "sub:alice", "ownerVerified": true, "ownerScopes": ["w"],
            "tool": "write", "arguments": {}, "status": "input_required", "createdAt": 0, "updatedAt": 0,
            "ttlMs": 60000, "inputRequests": {"a": {"method": "elicitation/create"}}
        }))
        .unwrap();
        store.create(&record, TaskQuota::default()).await.unwrap().unwrap();
        let call = |method: &'static str, scopes: Vec<String>| {
            let mut ctx = RequestContext::new(
                crate::protocol::RequestId::from_value(json!(1)).unwrap(),
                Era::Modern,
                Principal::verified(Some("alice"), None, scopes),
                bus.clone(),
            );
            ctx.client_capabilities =
                json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}).as_object().unwrap().clone();
            let params: RequestParams =
                json!({"taskId": "AAAAAAAAAAAAAAAAAAAAAQ", "inputResponses": {"a": {"action": "accept"}}})
                    .as_object()
                    .unwrap()
                    .clone()
                    .into();
            let server = &server;
            async move { server.execute(ctx, method, &params).await }
        };
        let status = || async { store.get("sub:alice", "AAAAAAAAAAAAAAAAAAAAAQ").await.unwrap().unwrap().status };
        for (method, before, after) in [
            ("tasks/get", TaskStatus::InputRequired, TaskStatus::InputRequired),
            ("tasks/update", TaskStatus::InputRequired, TaskStatus::Working),
            ("tasks/cancel", TaskStatus::Working, TaskStatus::Cancelled),
        ] {
            let Err(refused) = call(method, vec![]).await else { panic!("{method} without the scope") };
            assert_eq!(refused.status, http::StatusCode::FORBIDDEN, "{method}: {}", refused.message);
            assert!(refused.message.contains("requires w"), "{method}: {}", refused.message);
            assert_eq!(status().await, before, "{method} refused changes nothing");
            assert!(call(method, vec!["w".into()]).await.is_ok(), "{method} with the scope");
            assert_eq!(status().await, after, "{method}");
        }
    }

    /// A read of what only some callers may read, or one shaped by the caller's answers, is never
    /// publicly cacheable, whatever hint the resource carries; an unscoped resource keeps its own.
    /// The static resource and the template alike.
    #[tokio::test]
    async fn a_scoped_read_is_private_whatever_the_hint() {
        let mut server = McpServer::new("t", "1");
        let read = |_, uri: String| async move { Ok(vec![ResourceContents::text(uri, "text/plain", "x")]) };
        let public = CacheHint { ttl_ms: 300_000, scope: CacheScope::Public };
        server.resource(Resource::new("a://open", "open"), read).cache(public);
        server.resource(Resource::new("a://secret", "secret"), read).cache(public).scopes(&["secret:read"]);
        server.set_cache_hint(CacheableMethod::ResourcesRead, public);
        server
            .resource_template(ResourceTemplate::new("a://t/{x}", "t"), |_, uri, _| async move {
                Ok(vec![ResourceContents::text(uri, "text/plain", "x")])
            })
            .scopes(&["secret:read"]);
        server.scopes_enforced = true;
        let bus: std::sync::Arc<dyn crate::state::ChangeBus> = std::sync::Arc::new(crate::state::LocalBus::default());
        let reader = Principal::verified(Some("ada"), None, vec!["secret:read".into()]);
        for (uri, scope) in [("a://open", "public"), ("a://secret", "private"), ("a://t/1", "private")] {
            let ctx = RequestContext::new(
                crate::protocol::RequestId::from_value(json!(1)).unwrap(),
                Era::Modern,
                reader.clone(),
                bus.clone(),
            );
            let params: RequestParams = json!({ "uri": uri }).as_object().unwrap().clone().into();
            let Ok(Reply::Complete(result)) = server.execute(ctx, "resources/read", &params).await else { panic!() };
            assert_eq!(result["cacheScope"], scope, "{uri}");
        }
        // A read completed with the caller's answers is theirs too, on a retry or with answers
        // sent up front: the unscoped resource's public hint gives way.
        let answers = json!({"confirm": {"action": "accept"}}).as_object().unwrap().clone();
        for (state, responses) in [(Some(json!({"step": 1})), answers.clone()), (None, answers)] {
            let mut ctx = RequestContext::new(
                crate::protocol::RequestId::from_value(json!(1)).unwrap(),
                Era::Modern,
                reader.clone(),
                bus.clone(),
            );
            (ctx.request_state, ctx.input_responses) = (state, responses);
            let params: RequestParams = json!({ "uri": "a://open" }).as_object().unwrap().clone().into();
            let Ok(Reply::Complete(result)) = server.execute(ctx, "resources/read", &params).await else { panic!() };
            assert_eq!(result["cacheScope"], "private");
        }
    }

    /// What a registry could never serve is refused when it is built, not found by a caller:
    /// a second template or completion at the same place, a completion for nothing registered,
    /// and a tool requiring the tasks extension on a server without it.
    #[test]
    fn registrations_that_could_never_be_served_are_refused_at_start_up() {
        use crate::protocol::types::{Completion, GetPromptResult, Prompt};
        use crate::server::{CompletionRef, NoArguments, ToolDef};
        use crate::tasks::TaskSupport;
        fn refusal(build: impl FnOnce(&mut McpServer)) -> String {
            let mut server = McpServer::new("t", "1");
            let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                build(&mut server);
                server.check_registrations();
            }))
            .expect_err("refused");
            panic.downcast_ref::<String>().cloned().unwrap_or_default()
        }
        fn template(server: &mut McpServer) {
            server.resource_template(ResourceTemplate::new("a://t/{x}", "t"), |_, uri, _| async move {
                Ok(vec![ResourceContents::text(uri, "text/plain", "x")])
            });
        }
        fn none(_: &crate::server::CompletionRequest) -> Completion {
            Completion::default()
        }
        assert!(
            refusal(|s| {
                template(s);
                template(s)
            })
            .contains("\"a://t/{x}\" is registered twice")
        );
        assert!(
            refusal(|s| {
                template(s);
                s.completion(CompletionRef::ResourceTemplate("a://t/{x}".into()), none);
                s.completion(CompletionRef::ResourceTemplate("a://t/{x}".into()), none);
            })
            .contains("is registered twice")
        );
        assert!(refusal(|s| s.completion(CompletionRef::Prompt("typo".into()), none)).contains("not registered"));
        let required = refusal(|s| {
            s.tool(ToolDef::new("long").task_support(TaskSupport::Required), |_, _: NoArguments| async { "" });
        });
        assert!(required.contains("\"long\" requires the tasks extension"), "{required}");
        // Registered in either order, a completion finds what it completes.
        let mut server = McpServer::new("t", "1");
        server.completion(CompletionRef::Prompt("p".into()), none);
        server.prompt(Prompt::new("p"), |_, _: NoArguments| async {
            Ok::<_, McpError>(GetPromptResult { description: None, messages: vec![] })
        });
        template(&mut server);
        server.completion(CompletionRef::ResourceTemplate("a://t/{x}".into()), none);
        server.check_registrations();
    }

    /// A template's completions are guarded by its scopes as its reads are: a caller without
    /// them is told the reference is unknown, exactly as for one never registered.
    #[tokio::test]
    async fn a_scoped_template_completes_only_for_who_may_read_it() {
        let mut server = McpServer::new("t", "1");
        server
            .resource_template(ResourceTemplate::new("a://t/{x}", "t"), |_, uri, _| async move {
                Ok(vec![ResourceContents::text(uri, "text/plain", "x")])
            })
            .scopes(&["secret:read"]);
        server.completion(super::super::CompletionRef::ResourceTemplate("a://t/{x}".into()), |_| {
            crate::protocol::types::Completion { values: vec!["payroll-2026".into()], ..Default::default() }
        });
        server.scopes_enforced = true;
        let bus: std::sync::Arc<dyn crate::state::ChangeBus> = std::sync::Arc::new(crate::state::LocalBus::default());
        let complete = |principal: Principal, template: &str| {
            let ctx = RequestContext::new(
                crate::protocol::RequestId::from_value(json!(1)).unwrap(),
                Era::Modern,
                principal,
                bus.clone(),
            );
            let params: RequestParams = json!({"ref": {"type": "ref/resource", "uri": template},
                "argument": {"name": "x", "value": "p"}})
            .as_object()
            .unwrap()
            .clone()
            .into();
            let server = &server;
            async move { server.execute(ctx, "completion/complete", &params).await }
        };
        let reader = Principal::verified(Some("ada"), None, vec!["secret:read".into()]);
        let Ok(Reply::Complete(result)) = complete(reader, "a://t/{x}").await else { panic!("the reader completes") };
        assert_eq!(result["completion"]["values"], json!(["payroll-2026"]));
        let stranger = Principal::verified(Some("eve"), None, vec!["other".into()]);
        let Err(refused) = complete(stranger, "a://t/{x}").await else { panic!("a stranger gets nothing") };
        let Err(unknown) = complete(Principal::verified(Some("ada"), None, Vec::new()), "a://none/{x}").await else {
            panic!()
        };
        assert_eq!((refused.code, &refused.message), (unknown.code, &unknown.message), "no oracle");
    }

    /// A typed handler reads its parameters from the request's own arguments; a member the
    /// schema does not declare is dropped first, so even a type that refuses unknown fields runs.
    #[tokio::test]
    async fn typed_arguments_are_read_in_place_and_strays_are_dropped_first() {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[serde(deny_unknown_fields)]
        struct Strict {
            n: u32,
        }
        let mut server = McpServer::new("t", "1");
        server.tool(super::super::ToolDef::new("strict"), |_, args: Strict| async move {
            CallToolResult::text(args.n.to_string())
        });
        let bus: std::sync::Arc<dyn crate::state::ChangeBus> = std::sync::Arc::new(crate::state::LocalBus::default());
        let calls = [("strict", json!({"n": 3}), "3"), ("strict", json!({"n": 4, "principal": "sub:admin"}), "4")];
        for (tool, arguments, expected) in calls {
            let ctx = RequestContext::new(
                crate::protocol::RequestId::from_value(json!(1)).unwrap(),
                Era::Modern,
                Principal::anonymous(),
                bus.clone(),
            );
            let params = json!({"name": tool, "arguments": arguments});
            let Ok(Reply::Tool(result)) =
                server.execute(ctx, "tools/call", &params.as_object().unwrap().clone().into()).await
            else {
                panic!("{params}")
            };
            assert!(!result.is_error, "{params}: {result:?}");
            assert_eq!(json!(result)["content"][0]["text"], expected);
        }
    }

    #[test]
    fn cursors_round_trip_and_reject_junk() {
        assert_eq!(decode_cursor(&encode_cursor(0)), Some(0));
        assert_eq!(decode_cursor(&encode_cursor(250)), Some(250));
        assert_eq!(decode_cursor(""), Some(0));
        for junk in [
            "x",
            "!!!",
            "b2Q6MQ",
            &URL_SAFE_NO_PAD.encode("o:-1"),
            &URL_SAFE_NO_PAD.encode("o:+1"),
            &URL_SAFE_NO_PAD.encode("o:01"),
            &"A".repeat(64),
        ] {
            assert_eq!(decode_cursor(junk), None, "{junk}");
        }
    }
}
