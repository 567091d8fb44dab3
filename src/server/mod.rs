//! The server registry: what a deployment offers (tools, resources, templates, prompts,
//! completions) and how one request is executed against it.
//!
//! Registration happens once, in `configure_server`, before the first request. Everything a
//! list method returns is derived from the registry alone, so lists never vary per connection
//! or as a side effect of other requests. Handlers are plain async functions that receive a
//! [`RequestContext`] and typed arguments.

mod context;
mod dispatch;
pub mod listen;
pub mod mrtr;
pub mod schema;
mod template;

pub use context::{RequestContext, StreamEvent};
pub use dispatch::Reply;
pub use template::UriTemplate;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::protocol::McpError;
use crate::protocol::types::{
    CallToolResult, Completion, GetPromptResult, InputRequest, Prompt, Resource, ResourceContents, ResourceTemplate,
    ToolAnnotations,
};
use crate::security::Principal;
use crate::tasks::{TaskService, TaskSupport};

/// A boxed, sendable future: the erased shape of every handler.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a handler of an MRTR-capable method returns: a final value, or a request for input.
#[derive(Debug)]
pub enum Outcome<T> {
    /// The final result.
    Complete(T),
    /// Ask the client for input, then expect a retry.
    InputRequired(InputRequired),
}

impl<T> From<T> for Outcome<T> {
    fn from(value: T) -> Self {
        Self::Complete(value)
    }
}

/// An `input_required` answer: the questions, and the state to get back on the retry.
///
/// The state is sealed by the library (HMAC, bound to principal, method and arguments, with an
/// expiry), so handlers put plain JSON here and read it back from
/// [`RequestContext::request_state`] already verified.
#[derive(Debug, Default)]
pub struct InputRequired {
    pub(crate) requests: Vec<(String, InputRequest)>,
    pub(crate) state: Option<Value>,
}

impl InputRequired {
    /// An empty answer; add requests and/or state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a request under `key` (keys are unique within the answer).
    pub fn request(mut self, key: impl Into<String>, request: InputRequest) -> Self {
        let key = key.into();
        self.requests.retain(|(k, _)| *k != key);
        self.requests.push((key, request));
        self
    }

    /// Attaches state to receive back on the retry.
    pub fn state(mut self, state: Value) -> Self {
        self.state = Some(state);
        self
    }
}

/// Why a tool call failed.
#[derive(Debug)]
pub enum ToolError {
    /// A tool execution error: reported as an `isError: true` result whose text is exactly
    /// this message.
    Execution(String),
    /// A protocol error: reported as a JSON-RPC error.
    Protocol(McpError),
}

impl From<McpError> for ToolError {
    fn from(e: McpError) -> Self {
        Self::Protocol(e)
    }
}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        Self::Execution(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        Self::Execution(message.to_owned())
    }
}

/// The result every tool handler produces.
pub type ToolResult = Result<Outcome<CallToolResult>, ToolError>;

/// An erased tool handler.
pub(crate) type ToolFn = Arc<dyn Fn(RequestContext, Map<String, Value>) -> BoxFuture<ToolResult> + Send + Sync>;
type ResourceFn =
    Arc<dyn Fn(RequestContext, String) -> BoxFuture<Result<Outcome<Vec<ResourceContents>>, McpError>> + Send + Sync>;
type TemplateFn = Arc<
    dyn Fn(
            RequestContext,
            String,
            HashMap<String, String>,
        ) -> BoxFuture<Result<Outcome<Vec<ResourceContents>>, McpError>>
        + Send
        + Sync,
>;
type PromptFn = Arc<
    dyn Fn(RequestContext, HashMap<String, String>) -> BoxFuture<Result<Outcome<GetPromptResult>, McpError>>
        + Send
        + Sync,
>;
type CompletionFn = Arc<dyn Fn(&CompletionRequest) -> Completion + Send + Sync>;

/// Arguments for a tool that takes none: advertises `{"type":"object","additionalProperties":false}`.
#[derive(Clone, Copy, Debug, Default, serde::Deserialize)]
pub struct NoArguments {}

impl JsonSchema for NoArguments {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NoArguments".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "object", "additionalProperties": false })
    }
}

/// How long and for whom a cacheable result may be reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheHint {
    /// Freshness in milliseconds; 0 means immediately stale.
    pub ttl_ms: u64,
    /// Whether shared caches may reuse it.
    pub scope: CacheScope,
}

impl Default for CacheHint {
    /// `0` / `"private"`: the conservative default when nothing is configured.
    fn default() -> Self {
        Self { ttl_ms: 0, scope: CacheScope::Private }
    }
}

/// `cacheScope` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheScope {
    /// Any cache may reuse the result.
    Public,
    /// Only the requesting principal's cache may reuse it.
    Private,
}

impl CacheScope {
    fn as_str(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Private => "private",
        }
    }
}

/// The six results that carry cache hints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheableMethod {
    /// `server/discover`.
    Discover,
    /// `tools/list`.
    ToolsList,
    /// `prompts/list`.
    PromptsList,
    /// `resources/list`.
    ResourcesList,
    /// `resources/templates/list`.
    ResourceTemplatesList,
    /// `resources/read` (overridable per resource).
    ResourcesRead,
}

/// Name and version reported in every result's `_meta`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ServerInfo {
    /// Programmatic name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Display title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// A tool's advertised definition.
#[derive(Clone, Debug)]
pub struct ToolDef {
    name: String,
    title: Option<String>,
    description: Option<String>,
    input_schema: Option<Value>,
    output_schema: Option<Value>,
    annotations: Option<ToolAnnotations>,
    meta: Option<Value>,
    task_support: TaskSupport,
    input_before_task: bool,
    scopes: Vec<String>,
    scopes_always: bool,
}

impl ToolDef {
    /// A tool named `name` (1-128 characters of `[A-Za-z0-9_.-]`).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            title: None,
            description: None,
            input_schema: None,
            output_schema: None,
            annotations: None,
            meta: None,
            task_support: TaskSupport::Forbidden,
            input_before_task: false,
            scopes: Vec::new(),
            scopes_always: false,
        }
    }

    /// Scopes a caller's token must grant to see and call this tool (when authentication is on).
    pub fn scopes(mut self, scopes: &[&str]) -> Self {
        self.scopes = scopes.iter().map(|s| s.to_string()).collect();
        self
    }

    /// The tool authorizes every call against its scopes itself, even where the deployment does
    /// not enforce scopes (authentication off): list and dispatch it only to callers holding
    /// them, rather than advertising a tool that would refuse them.
    pub fn scopes_always_enforced(mut self) -> Self {
        self.scopes_always = true;
        self
    }

    /// Whether the tool may (or must) run as a task of the tasks extension.
    pub fn task_support(mut self, support: TaskSupport) -> Self {
        self.task_support = support;
        self
    }

    /// Run the handler inline first: an `input_required` answer goes back as a plain MRTR
    /// result, and only a call that needs no (more) input becomes a task.
    pub fn input_before_task(mut self) -> Self {
        self.input_before_task = true;
        self
    }

    /// Display title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Description for the model.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// An explicit input schema, for [`McpServer::tool_raw`].
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// The schema `structuredContent` conforms to.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Behavioural hints.
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = Some(annotations);
        self
    }

    /// `_meta` on the tool definition.
    pub fn meta(mut self, meta: Value) -> Self {
        self.meta = Some(meta);
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The `tools/list` entry as JSON text, written straight from the definition: building a
    /// `Value` first copied every schema and cost most of start-up's tool registration.
    fn listing_json(&self, input_schema: &Value) -> String {
        let listing = ToolListing {
            meta: self.meta.as_ref(),
            annotations: self.annotations.as_ref(),
            description: self.description.as_deref(),
            input_schema,
            name: &self.name,
            output_schema: self.output_schema.as_ref(),
            title: self.title.as_deref(),
        };
        serde_json::to_string(&listing).expect("tool definitions serialise")
    }
}

/// A tool's `tools/list` entry. Members in sorted order, as a `Value` map writes them.
#[derive(Serialize)]
struct ToolListing<'a> {
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<&'a ToolAnnotations>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(rename = "inputSchema")]
    input_schema: &'a Value,
    name: &'a str,
    #[serde(rename = "outputSchema", skip_serializing_if = "Option::is_none")]
    output_schema: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<&'a str>,
}

/// An `x-mcp-header` annotation: `Mcp-Param-{header}` mirrors argument `property`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeaderParam {
    pub header: String,
    pub property: String,
}

pub(crate) struct ToolEntry {
    pub name: String,
    /// The tool's definition serialised once at registration: `tools/list` splices it in as is.
    pub listing_json: String,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub header_params: Vec<HeaderParam>,
    pub task_support: TaskSupport,
    pub input_before_task: bool,
    pub scopes: Vec<String>,
    pub scopes_always: bool,
    pub handler: ToolFn,
}

pub(crate) struct ResourceEntry {
    pub resource: Resource,
    pub cache: Option<CacheHint>,
    pub scopes: Vec<String>,
    pub handler: ResourceFn,
}

pub(crate) struct TemplateEntry {
    pub template: ResourceTemplate,
    pub matcher: UriTemplate,
    pub scopes: Vec<String>,
    pub handler: TemplateFn,
}

/// What registering a resource or template hands back: `.scopes(&[…])` makes listing and
/// reading it need them, as a tool's scopes do. Ignore it for a resource anyone may read.
pub struct ResourceScopes<'a>(&'a mut Vec<String>);

impl ResourceScopes<'_> {
    /// The scopes a caller needs to see and read this resource.
    pub fn scopes(self, scopes: &[&str]) {
        *self.0 = scopes.iter().map(|s| s.to_string()).collect();
    }
}

pub(crate) struct PromptEntry {
    pub prompt: Prompt,
    pub handler: PromptFn,
}

/// What `completion/complete` asks for.
#[derive(Clone, Debug)]
pub struct CompletionRequest {
    /// The prompt name or the template URI being completed.
    pub reference: CompletionRef,
    /// The argument being completed.
    pub argument: String,
    /// What the user typed so far.
    pub value: String,
    /// Already-resolved arguments.
    pub context: HashMap<String, String>,
}

/// The target of a completion.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CompletionRef {
    /// `ref/prompt` by name.
    Prompt(String),
    /// `ref/resource` by URI template.
    ResourceTemplate(String),
}

/// The registry and its configuration.
pub struct McpServer {
    pub(crate) info: ServerInfo,
    pub(crate) instructions: Option<String>,
    pub(crate) tools: Vec<ToolEntry>,
    pub(crate) tool_index: HashMap<String, usize>,
    pub(crate) resources: Vec<ResourceEntry>,
    pub(crate) resource_index: HashMap<String, usize>,
    pub(crate) templates: Vec<TemplateEntry>,
    pub(crate) prompts: Vec<PromptEntry>,
    pub(crate) prompt_index: HashMap<String, usize>,
    pub(crate) completions: HashMap<CompletionRef, CompletionFn>,
    pub(crate) cache_hints: HashMap<CacheableMethod, CacheHint>,
    pub(crate) page_size: usize,
    pub(crate) tasks: Option<Arc<TaskService>>,
    pub(crate) scopes_enforced: bool,
    /// `{"io.modelcontextprotocol/serverInfo":{...}}`, serialised once: every result carries it.
    pub(crate) meta_json: String,
}

impl McpServer {
    /// An empty server reporting `name` and `version`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            info: ServerInfo { name: name.into(), version: version.into(), title: None },
            instructions: None,
            tools: Vec::new(),
            tool_index: HashMap::new(),
            resources: Vec::new(),
            resource_index: HashMap::new(),
            templates: Vec::new(),
            prompts: Vec::new(),
            prompt_index: HashMap::new(),
            completions: HashMap::new(),
            cache_hints: HashMap::new(),
            page_size: 100,
            tasks: None,
            scopes_enforced: false,
            meta_json: String::new(),
        }
        .with_meta_json()
    }

    fn with_meta_json(mut self) -> Self {
        self.meta_json = json!({ crate::protocol::meta::SERVER_INFO: self.info }).to_string();
        self
    }

    /// The scopes `principal` lacks for tool `name`, when scopes are enforced and some are
    /// missing (`None` for unknown tools: dispatch reports those).
    pub fn missing_tool_scopes(&self, principal: &Principal, name: &str) -> Option<Vec<String>> {
        let tool = &self.tools[*self.tool_index.get(name)?];
        (self.scopes_enforced && !tool.scopes.iter().all(|s| principal.scopes().contains(s)))
            .then(|| tool.scopes.clone())
    }

    /// Whether `principal` may see and call `tool`.
    pub(crate) fn may_use(&self, principal: &Principal, tool: &ToolEntry) -> bool {
        (!self.scopes_enforced && !tool.scopes_always) || tool.scopes.iter().all(|s| principal.scopes().contains(s))
    }

    /// Whether `principal` holds `scopes` where scopes are enforced (resources and templates).
    pub(crate) fn may_read(&self, principal: &Principal, scopes: &[String]) -> bool {
        !self.scopes_enforced || scopes.iter().all(|s| principal.scopes().contains(s))
    }

    /// The scopes `principal` lacks to read `uri` (the resource, else the first template that
    /// matches it, as `resources/read` resolves it), when scopes are enforced and some are missing.
    pub fn missing_resource_scopes(&self, principal: &Principal, uri: &str) -> Option<Vec<String>> {
        let scopes = match self.resource_index.get(uri) {
            Some(&i) => &self.resources[i].scopes,
            None => &self.templates.iter().find(|t| t.matcher.matches(uri).is_some())?.scopes,
        };
        (!self.may_read(principal, scopes)).then(|| scopes.clone())
    }

    /// Every scope some registered tool, resource or template requires (for the metadata's
    /// `scopes_supported`).
    pub fn scopes_in_use(&self) -> Vec<String> {
        let tools = self.tools.iter().map(|t| &t.scopes);
        let resources = self.resources.iter().map(|r| &r.scopes).chain(self.templates.iter().map(|t| &t.scopes));
        let mut scopes: Vec<String> = tools.chain(resources).flatten().cloned().collect();
        scopes.sort();
        scopes.dedup();
        scopes
    }

    /// Enables the tasks extension, backed by `service`.
    pub fn enable_tasks(&mut self, service: Arc<TaskService>) {
        self.tasks = Some(service);
    }

    /// The name and version this server reports.
    pub fn info(&self) -> &ServerInfo {
        &self.info
    }

    /// Guidance for the model, returned by `server/discover` and legacy `initialize`.
    pub fn set_instructions(&mut self, instructions: impl Into<String>) {
        self.instructions = Some(instructions.into());
    }

    /// Sets the cache hint of one cacheable result.
    pub fn set_cache_hint(&mut self, method: CacheableMethod, hint: CacheHint) {
        self.cache_hints.insert(method, hint);
    }

    /// How many entries one page of a list holds (at least 1).
    pub fn set_page_size(&mut self, page_size: usize) {
        self.page_size = page_size.max(1);
    }

    /// Names of the registered tools, in listing order.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|t| t.name.as_str())
    }

    /// Registers a tool whose arguments are the typed `A`. The advertised `inputSchema` is
    /// generated from `A`, and every call is validated against that same schema before `A` is
    /// deserialised and the handler runs.
    ///
    /// # Panics
    /// On a duplicate or ill-formed name, or a schema using keywords the validator cannot
    /// enforce: both are programming errors that must fail at start-up, not at call time.
    pub fn tool<A, F, Fut, R>(&mut self, def: ToolDef, handler: F)
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(RequestContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: Into<Outcome<CallToolResult>> + 'static,
    {
        let mut schema = schemars::SchemaGenerator::new(schemars::generate::SchemaSettings::draft2020_12())
            .into_root_schema_for::<A>()
            .to_value();
        if let Value::Object(map) = &mut schema {
            map.remove("$schema");
            map.remove("title");
        }
        let unsupported = schema::unsupported_keywords(&schema);
        assert!(
            unsupported.is_empty(),
            "tool {}: its argument type uses JSON Schema keywords the validator cannot enforce: {unsupported:?}",
            def.name
        );
        let handler = Arc::new(handler);
        let erased: ToolFn = Arc::new(move |ctx, arguments| {
            let handler = handler.clone();
            Box::pin(async move {
                let args: A = serde_json::from_value(Value::Object(arguments))
                    .map_err(|e| ToolError::Execution(format!("Invalid arguments: {e}")))?;
                handler(ctx, args).await.map(Into::into)
            })
        });
        self.insert_tool(def.input_schema(schema), erased);
    }

    /// Registers a tool with a hand-written `inputSchema` (set on `def`); the handler receives
    /// the validated argument object. Keywords the validator does not know are advertised but
    /// not enforced, so the handler must check what they express.
    pub fn tool_raw<F, Fut, R>(&mut self, def: ToolDef, handler: F)
    where
        F: Fn(RequestContext, Map<String, Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: Into<Outcome<CallToolResult>> + 'static,
    {
        let handler = Arc::new(handler);
        let erased: ToolFn = Arc::new(move |ctx, arguments| {
            let handler = handler.clone();
            Box::pin(async move { handler(ctx, arguments).await.map(Into::into) })
        });
        self.insert_tool(def, erased);
    }

    fn insert_tool(&mut self, mut def: ToolDef, handler: ToolFn) {
        let name = def.name.clone();
        assert!(valid_tool_name(&name), "tool name {name:?} must be 1-128 characters of [A-Za-z0-9_.-]");
        assert!(!self.tool_index.contains_key(&name), "tool {name:?} is registered twice");
        let input_schema = def.input_schema.take().unwrap_or_else(|| json!({ "type": "object" }));
        assert_eq!(
            input_schema.get("type"),
            Some(&json!("object")),
            "tool {name:?}: inputSchema root must be an object"
        );
        let header_params = header_params(&name, &input_schema);
        let listing_json = def.listing_json(&input_schema);
        let output_schema = def.output_schema.take();
        self.tool_index.insert(name.clone(), self.tools.len());
        let (task_support, input_before_task, scopes, scopes_always) =
            (def.task_support, def.input_before_task, std::mem::take(&mut def.scopes), def.scopes_always);
        self.tools.push(ToolEntry {
            name,
            listing_json,
            input_schema,
            output_schema,
            header_params,
            task_support,
            input_before_task,
            scopes,
            scopes_always,
            handler,
        });
    }

    /// Registers a static resource.
    pub fn resource<F, Fut, R>(
        &mut self,
        resource: Resource,
        cache: Option<CacheHint>,
        handler: F,
    ) -> ResourceScopes<'_>
    where
        F: Fn(RequestContext, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, McpError>> + Send + 'static,
        R: Into<Outcome<Vec<ResourceContents>>> + 'static,
    {
        assert!(!self.resource_index.contains_key(&resource.uri), "resource {} is registered twice", resource.uri);
        let handler = Arc::new(handler);
        self.resource_index.insert(resource.uri.clone(), self.resources.len());
        self.resources.push(ResourceEntry {
            resource,
            cache,
            scopes: Vec::new(),
            handler: Arc::new(move |ctx, uri| {
                let handler = handler.clone();
                Box::pin(async move { handler(ctx, uri).await.map(Into::into) })
            }),
        });
        ResourceScopes(&mut self.resources.last_mut().expect("just pushed").scopes)
    }

    /// Registers a resource template; the handler receives the URI and its variables.
    pub fn resource_template<F, Fut, R>(&mut self, template: ResourceTemplate, handler: F) -> ResourceScopes<'_>
    where
        F: Fn(RequestContext, String, HashMap<String, String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, McpError>> + Send + 'static,
        R: Into<Outcome<Vec<ResourceContents>>> + 'static,
    {
        let matcher = UriTemplate::parse(&template.uri_template)
            .unwrap_or_else(|e| panic!("resource template {}: {e}", template.uri_template));
        let handler = Arc::new(handler);
        self.templates.push(TemplateEntry {
            template,
            matcher,
            scopes: Vec::new(),
            handler: Arc::new(move |ctx, uri, vars| {
                let handler = handler.clone();
                Box::pin(async move { handler(ctx, uri, vars).await.map(Into::into) })
            }),
        });
        ResourceScopes(&mut self.templates.last_mut().expect("just pushed").scopes)
    }

    /// Registers a prompt; required arguments are checked before the handler runs.
    pub fn prompt<F, Fut, R>(&mut self, prompt: Prompt, handler: F)
    where
        F: Fn(RequestContext, HashMap<String, String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, McpError>> + Send + 'static,
        R: Into<Outcome<GetPromptResult>> + 'static,
    {
        assert!(!self.prompt_index.contains_key(&prompt.name), "prompt {} is registered twice", prompt.name);
        let handler = Arc::new(handler);
        self.prompt_index.insert(prompt.name.clone(), self.prompts.len());
        self.prompts.push(PromptEntry {
            prompt,
            handler: Arc::new(move |ctx, args| {
                let handler = handler.clone();
                Box::pin(async move { handler(ctx, args).await.map(Into::into) })
            }),
        });
    }

    /// Registers completion of the arguments of a prompt or resource template.
    pub fn completion<F>(&mut self, reference: CompletionRef, handler: F)
    where
        F: Fn(&CompletionRequest) -> Completion + Send + Sync + 'static,
    {
        self.completions.insert(reference, Arc::new(handler));
    }

    /// The capabilities advertised by `server/discover` and `initialize`.
    pub fn capabilities(&self) -> Value {
        let mut caps = Map::new();
        if !self.tools.is_empty() {
            caps.insert("tools".into(), json!({ "listChanged": true }));
        }
        if !self.resources.is_empty() || !self.templates.is_empty() {
            caps.insert("resources".into(), json!({ "subscribe": true, "listChanged": true }));
        }
        if !self.prompts.is_empty() {
            caps.insert("prompts".into(), json!({ "listChanged": true }));
        }
        if !self.completions.is_empty() {
            caps.insert("completions".into(), json!({}));
        }
        caps.insert("logging".into(), json!({}));
        if self.tasks.is_some() {
            caps.insert("extensions".into(), json!({ crate::protocol::TASKS_EXTENSION: {} }));
        }
        Value::Object(caps)
    }

    pub(crate) fn cache_hint(&self, method: CacheableMethod) -> CacheHint {
        self.cache_hints.get(&method).copied().unwrap_or_default()
    }
}

/// Runs a future, catching a panic inside it so one faulty handler cannot take down the
/// connection or task it runs on.
///
/// A plain function returning the wrapper, not an `async fn`: an `async fn` awaiting its future
/// argument stores that future twice (as the argument and as the awaited value), and the request
/// path nests several such wrappers.
pub(crate) fn catch_unwind<F: Future>(future: F) -> CatchUnwind<F> {
    CatchUnwind { inner: future }
}

pin_project_lite::pin_project! {
    /// The future [`catch_unwind`] returns.
    pub(crate) struct CatchUnwind<F> {
        #[pin]
        inner: F,
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;
    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let inner = self.project().inner;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::observe::in_handler(|| inner.poll(cx)))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(value)) => std::task::Poll::Ready(Ok(value)),
            Err(panic) => std::task::Poll::Ready(Err(panic)),
        }
    }
}

fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// RFC 9110 `tchar`.
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Collects and checks the `x-mcp-header` annotations of a tool's root properties. Only
/// root-level `string`/`integer`/`boolean` properties may carry one; names are tokens, unique
/// case-insensitively. Anything else is a registration error.
fn header_params(tool: &str, schema: &Value) -> Vec<HeaderParam> {
    let mut out: Vec<HeaderParam> = Vec::new();
    let Some(Value::Object(properties)) = schema.get("properties") else { return out };
    for (property, sub) in properties {
        let Some(header) = sub.get("x-mcp-header") else { continue };
        let header =
            header.as_str().unwrap_or_else(|| panic!("tool {tool}: x-mcp-header on {property} must be a string"));
        assert!(
            !header.is_empty() && header.bytes().all(is_tchar),
            "tool {tool}: x-mcp-header {header:?} is not an HTTP token"
        );
        let kind = sub.get("type").and_then(Value::as_str).unwrap_or("");
        assert!(
            matches!(kind, "string" | "integer" | "boolean"),
            "tool {tool}: x-mcp-header on {property} needs a string, integer or boolean property"
        );
        assert!(
            !out.iter().any(|p| p.header.eq_ignore_ascii_case(header)),
            "tool {tool}: x-mcp-header {header:?} is used twice"
        );
        out.push(HeaderParam { header: header.to_owned(), property: property.clone() });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_entry_carries_every_part_of_the_definition_and_nothing_else() {
        let annotations = ToolAnnotations { read_only_hint: Some(true), ..ToolAnnotations::default() };
        let full = ToolDef::new("t")
            .title("T")
            .description("d")
            .output_schema(json!({"type": "object"}))
            .annotations(annotations)
            .meta(json!({"k": 1}));
        let input = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let listing: Value = serde_json::from_str(&full.listing_json(&input)).unwrap();
        assert_eq!(
            listing,
            json!({
                "name": "t", "title": "T", "description": "d", "inputSchema": input,
                "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}, "_meta": {"k": 1},
            })
        );
        let bare = ToolDef::new("b").listing_json(&json!({"type": "object"}));
        assert_eq!(bare, r#"{"inputSchema":{"type":"object"},"name":"b"}"#, "absent parts are left out, not null");
    }
}
