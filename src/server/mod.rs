//! The server registry: what a deployment offers (tools, resources, templates, prompts,
//! completions) and how one request is executed against it.
//!
//! Registration happens once, in `configure_server`, before the first request. Everything a
//! list method returns is derived from the registry and the caller's scopes alone, so lists
//! never vary per connection or as a side effect of other requests (a scope-filtered
//! `tools/list` is marked `cacheScope: private`; the resource lists are private unless a
//! public cache hint is configured for them). Handlers are plain async functions that receive a
//! [`RequestContext`] and typed arguments.
//!
//! This file is the registry ([`McpServer`]); the handler contract it registers is
//! [`crate::handler`]. Beside it: `tool.rs`, tool definitions and their listing; `cache.rs`,
//! cache hints; `dispatch.rs`, one method against the registry; `schema.rs`, argument
//! validation; `mrtr.rs`, `listen.rs` and `template.rs`, their protocol features.

mod cache;
mod dispatch;
pub mod listen;
pub mod mrtr;
pub mod schema;
mod template;
mod tool;
mod with_state;

pub use crate::handler::{
    BoxFuture, InputRequired, IntoToolResult, Json, NoArguments, Outcome, RequestContext, ToolError, ToolResult,
};
pub(crate) use crate::handler::{ToolFn, catch_unwind};
pub use cache::{CacheHint, CacheScope, CacheableMethod};
pub use dispatch::Reply;
pub use template::UriTemplate;
pub use tool::ToolDef;
pub(crate) use tool::ToolEntry;
use tool::valid_tool_name;
pub use tool::{HeaderParam, input_schema_header_params};
pub use with_state::WithState;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use crate::protocol::McpError;
use crate::protocol::types::{Completion, GetPromptResult, Prompt, Resource, ResourceContents, ResourceTemplate};
use crate::security::Principal;
use crate::tasks::TaskService;

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

pub(crate) struct ResourceEntry {
    pub resource: Resource,
    pub cache: Option<CacheHint>,
    pub scopes: Vec<String>,
    pub handler: ResourceFn,
}

/// What serves a resource URI.
enum ResourceTarget<'a> {
    Resource(&'a ResourceEntry),
    Template(&'a TemplateEntry),
}

pub(crate) struct TemplateEntry {
    pub template: ResourceTemplate,
    pub matcher: UriTemplate,
    pub scopes: Vec<String>,
    pub handler: TemplateFn,
}

/// What registering a resource template hands back: `.scopes(&[…])` makes listing and
/// reading it need them, as a tool's scopes do. Ignore it for a template anyone may read.
pub struct ResourceScopes<'a>(&'a mut Vec<String>);

impl ResourceScopes<'_> {
    /// The scopes a caller needs to see and read this resource.
    pub fn scopes(self, scopes: &[&str]) {
        *self.0 = scopes.iter().map(|s| s.to_string()).collect();
    }
}

/// What registering a static resource hands back: `.scopes(&[…])` as for templates, and
/// `.cache(…)` for the cache hint its reads carry. Ignore it for a public, uncached resource.
pub struct ResourceOptions<'a>(&'a mut ResourceEntry);

impl ResourceOptions<'_> {
    /// The scopes a caller needs to see and read this resource.
    pub fn scopes(self, scopes: &[&str]) -> Self {
        self.0.scopes = scopes.iter().map(|s| s.to_string()).collect();
        self
    }

    /// The cache hint (`ttlMs`, `cacheScope`) its reads carry.
    pub fn cache(self, hint: CacheHint) -> Self {
        self.0.cache = Some(hint);
        self
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
    /// What a task's resumed round may need of this server (`dispatch::TaskTools`), built on the
    /// first `tasks/update`, when registration is over, and shared by every update after it.
    pub(crate) task_tools: std::sync::OnceLock<Arc<dispatch::TaskTools>>,
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
            task_tools: std::sync::OnceLock::new(),
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
        if !self.scopes_enforced {
            return None; // before the lookup, which every call would pay for nothing
        }
        let tool = &self.tools[*self.tool_index.get(name)?];
        (!principal.has_scopes(&tool.scopes)).then(|| tool.scopes.clone())
    }

    /// Whether `principal` may see and call `tool`.
    pub(crate) fn may_use(&self, principal: &Principal, tool: &ToolEntry) -> bool {
        (!self.scopes_enforced && !tool.scopes_always) || principal.has_scopes(&tool.scopes)
    }

    /// Whether `principal` holds `scopes` where scopes are enforced (resources and templates).
    pub(crate) fn may_read(&self, principal: &Principal, scopes: &[String]) -> bool {
        !self.scopes_enforced || principal.has_scopes(scopes)
    }

    /// What serves `uri`, as `resources/read` resolves it: the resource registered at it, else the
    /// first template that matches it.
    fn resource_target(&self, uri: &str) -> Option<ResourceTarget<'_>> {
        match self.resource_index.get(uri) {
            Some(&i) => Some(ResourceTarget::Resource(&self.resources[i])),
            None => self.templates.iter().find(|t| t.matcher.matches(uri).is_some()).map(ResourceTarget::Template),
        }
    }

    /// The scopes `principal` lacks to read `uri` (see [`McpServer::resource_target`]), when
    /// scopes are enforced and some are missing.
    pub fn missing_resource_scopes(&self, principal: &Principal, uri: &str) -> Option<Vec<String>> {
        if !self.scopes_enforced {
            return None; // before matching the URI against every template
        }
        let scopes = match self.resource_target(uri)? {
            ResourceTarget::Resource(entry) => &entry.scopes,
            ResourceTarget::Template(entry) => &entry.scopes,
        };
        (!self.may_read(principal, scopes)).then(|| scopes.clone())
    }

    /// What `uri` is to this server, safe to log: a registered resource's URI, else the template
    /// that matches it (as `resources/read` resolves it; the URI itself may carry an argument,
    /// such as a product id), else nothing.
    pub(crate) fn resource_label(&self, uri: &str) -> Option<&str> {
        Some(match self.resource_target(uri)? {
            ResourceTarget::Resource(entry) => &entry.resource.uri,
            ResourceTarget::Template(entry) => &entry.template.uri_template,
        })
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

    /// Every registered tool as `tools/list` describes it, in listing order, whoever may see it.
    pub fn tools(&self) -> Vec<crate::protocol::types::Tool> {
        self.tools
            .iter()
            .map(|t| serde_json::from_str(&t.listing_json).expect("a listing entry reads back as a tool"))
            .collect()
    }

    /// Names of the tools `tools/list` shows `principal`, in listing order.
    pub fn listed_tools<'a>(&'a self, principal: &'a Principal) -> impl Iterator<Item = &'a str> {
        self.tools.iter().filter(|t| self.may_use(principal, t)).map(|t| t.name.as_str())
    }

    /// Registers a tool whose arguments are the typed `A`. The advertised `inputSchema` is
    /// generated from `A`, and every call is validated against that same schema before `A` is
    /// deserialised and the handler runs. The handler returns anything [`IntoToolResult`]; a
    /// [`Json`] return type also advertises its `outputSchema` (unless `def` sets one).
    ///
    /// # Panics
    /// On a duplicate or ill-formed name, or a schema using keywords the validator cannot
    /// enforce: both are programming errors that must fail at start-up, not at call time.
    pub fn tool<A, F, Fut>(&mut self, mut def: ToolDef, handler: F) -> &mut Self
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(RequestContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: IntoToolResult,
    {
        let mut schema = schemars::SchemaGenerator::new(schemars::generate::SchemaSettings::draft2020_12())
            .into_root_schema_for::<A>()
            .to_value();
        if let Value::Object(map) = &mut schema {
            // The type's name and its doc comment are for Rust readers; the tool's description
            // is what the model reads.
            map.remove("$schema");
            map.remove("title");
            map.remove("description");
        }
        schema::bound_integer_formats(&mut schema);
        let unsupported = schema::unsupported_keywords(&schema);
        assert!(
            unsupported.is_empty(),
            "tool {}: its argument type uses JSON Schema keywords the validator cannot enforce: {unsupported:?}",
            def.name
        );
        // The handler's future is made when the tool is called (under the panic guard, so a
        // panic there is contained too) and owns what it needs: no count of the handler is
        // taken per call, since one shared by every caller would move between the cores.
        let erased: ToolFn = Arc::new(move |ctx, arguments| -> BoxFuture<ToolResult> {
            // Arguments the schema passed with a whole number as a float (`5.0`), which an
            // integer field does not read, are read again with such numbers as integers.
            let read = A::deserialize(arguments).or_else(|first| {
                schema::whole_numbers_as_integers(arguments).map_or(Err(first), |whole| A::deserialize(&whole))
            });
            match read {
                Ok(args) => {
                    let running = handler(ctx, args);
                    Box::pin(async move { running.await.into_tool_result() })
                }
                Err(e) => Box::pin(std::future::ready(Err(ToolError::Execution(format!("Invalid arguments: {e}"))))),
            }
        });
        if def.output_schema.is_none() {
            def.output_schema = <Fut::Output as IntoToolResult>::output_schema();
        }
        self.insert_tool(def.input_schema(schema), erased);
        self
    }

    /// Registrations whose handlers also receive `state`, cloned for each call (share an `Arc`,
    /// or a struct of them): `server.with_state(store).tool(def, handler)`, where `handler` is an
    /// `async fn(RequestContext, S, A)`.
    pub fn with_state<S: Clone + Send + Sync + 'static>(&mut self, state: S) -> WithState<'_, S> {
        WithState::new(self, state)
    }

    /// Registers a tool with a hand-written `inputSchema` (set on `def`); the handler receives
    /// the validated argument object. Keywords the validator does not know are advertised but
    /// not enforced, so the handler must check what they express.
    pub fn tool_raw<F, Fut>(&mut self, mut def: ToolDef, handler: F) -> &mut Self
    where
        F: Fn(RequestContext, Map<String, Value>) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: IntoToolResult,
    {
        let erased: ToolFn = Arc::new(move |ctx, arguments| {
            let running = handler(ctx, arguments.as_object().cloned().unwrap_or_default());
            Box::pin(async move { running.await.into_tool_result() })
        });
        if def.output_schema.is_none() {
            def.output_schema = <Fut::Output as IntoToolResult>::output_schema();
        }
        self.insert_tool(def, erased);
        self
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
        let header_params =
            input_schema_header_params(&input_schema).unwrap_or_else(|broken| panic!("tool {name:?}: {broken}"));
        let listing_json = def.listing_json(&input_schema);
        let output_schema = def.output_schema.take();
        if let Some(output) = &output_schema {
            // Output it could not check would fail every call at run time: refused here instead.
            let unsupported = schema::unsupported_keywords(output);
            assert!(
                unsupported.is_empty(),
                "tool {name:?}: its outputSchema uses JSON Schema keywords the validator cannot enforce: {unsupported:?}"
            );
        }
        self.tool_index.insert(name.clone(), self.tools.len());
        let (task_support, input_before_task, scopes, scopes_always) =
            (def.task_support, def.input_before_task, std::mem::take(&mut def.scopes), def.scopes_always);
        self.tools.push(ToolEntry {
            name,
            listing_json,
            input_schema: schema::LazySchema::new(input_schema),
            output_schema: output_schema.map(|json| Arc::new(schema::LazySchema::new(json))),
            header_params,
            task_support,
            input_before_task,
            scopes,
            scopes_always,
            handler,
        });
        // A tool added after an update has run (in a test; a served registry no longer changes)
        // is in the next update's map.
        self.task_tools = std::sync::OnceLock::new();
    }

    /// Registers a static resource: `server.resource(Resource::new(uri, name), handler)`; the
    /// returned options set its scopes and cache hint.
    pub fn resource<F, Fut, R>(&mut self, resource: Resource, handler: F) -> ResourceOptions<'_>
    where
        F: Fn(RequestContext, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, McpError>> + Send + 'static,
        R: Into<Outcome<Vec<ResourceContents>>> + 'static,
    {
        assert!(!self.resource_index.contains_key(&resource.uri), "resource {} is registered twice", resource.uri);
        self.resource_index.insert(resource.uri.clone(), self.resources.len());
        self.resources.push(ResourceEntry {
            resource,
            cache: None,
            scopes: Vec::new(),
            handler: Arc::new(move |ctx, uri| {
                let running = handler(ctx, uri);
                Box::pin(async move { running.await.map(Into::into) })
            }),
        });
        ResourceOptions(self.resources.last_mut().expect("just pushed"))
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
        assert!(
            self.template_at(&template.uri_template).is_none(),
            "resource template {:?} is registered twice",
            template.uri_template
        );
        self.templates.push(TemplateEntry {
            template,
            matcher,
            scopes: Vec::new(),
            handler: Arc::new(move |ctx, uri, vars| {
                let running = handler(ctx, uri, vars);
                Box::pin(async move { running.await.map(Into::into) })
            }),
        });
        ResourceScopes(&mut self.templates.last_mut().expect("just pushed").scopes)
    }

    /// Registers a prompt whose arguments are the typed `A` (string fields; `Option` ones are
    /// optional). Unless `prompt` declares its arguments by hand, they are listed from `A`'s
    /// fields, descriptions included; required ones are checked before the handler runs.
    ///
    /// # Panics
    /// On a duplicate name.
    pub fn prompt<A, F, Fut, R>(&mut self, mut prompt: Prompt, handler: F) -> &mut Self
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(RequestContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, McpError>> + Send + 'static,
        R: Into<Outcome<GetPromptResult>> + 'static,
    {
        assert!(!self.prompt_index.contains_key(&prompt.name), "prompt {} is registered twice", prompt.name);
        if prompt.arguments.is_empty() {
            prompt.arguments = prompt_arguments::<A>();
        }
        self.prompt_index.insert(prompt.name.clone(), self.prompts.len());
        self.prompts.push(PromptEntry {
            prompt,
            handler: Arc::new(move |ctx, args| -> BoxFuture<Result<Outcome<GetPromptResult>, McpError>> {
                let object = args.into_iter().map(|(k, v)| (k, Value::String(v))).collect();
                match serde_json::from_value::<A>(Value::Object(object)) {
                    Ok(args) => {
                        let running = handler(ctx, args);
                        Box::pin(async move { running.await.map(Into::into) })
                    }
                    Err(e) => {
                        Box::pin(std::future::ready(Err(McpError::invalid_params(format!("Invalid arguments: {e}")))))
                    }
                }
            }),
        });
        self
    }

    /// Registers completion of the arguments of a prompt or resource template (registered
    /// before or after; [`McpServer::check_registrations`] finds a reference to neither).
    pub fn completion<F>(&mut self, reference: CompletionRef, handler: F)
    where
        F: Fn(&CompletionRequest) -> Completion + Send + Sync + 'static,
    {
        let described = format!("{reference:?}");
        let replaced = self.completions.insert(reference, Arc::new(handler));
        assert!(replaced.is_none(), "completion for {described} is registered twice");
    }

    /// The template registered as `uri_template` (its template text, not a URI it matches).
    pub(crate) fn template_at(&self, uri_template: &str) -> Option<&TemplateEntry> {
        self.templates.iter().find(|t| t.template.uri_template == uri_template)
    }

    /// Refuses, at start-up, a registry that could never serve what it lists: a tool that
    /// requires the tasks extension on a server without it (listed, and then refused on every
    /// call), or a completion for a prompt or template that is not registered (a typo, never
    /// reached). Called when an application is built from the server.
    pub fn check_registrations(&self) {
        if self.tasks.is_none()
            && let Some(tool) = self.tools.iter().find(|t| t.task_support == crate::tasks::TaskSupport::Required)
        {
            panic!(
                "tool {:?} requires the tasks extension, which this server does not enable (McpServer::enable_tasks)",
                tool.name
            );
        }
        for reference in self.completions.keys() {
            let known = match reference {
                CompletionRef::Prompt(name) => self.prompt_index.contains_key(name),
                CompletionRef::ResourceTemplate(uri) => self.template_at(uri).is_some(),
            };
            assert!(known, "completion for {reference:?}, which is not registered");
        }
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

/// The prompt arguments `A` declares: one per property of its schema, with its description,
/// required when the schema requires it.
fn prompt_arguments<A: JsonSchema>() -> Vec<crate::protocol::types::PromptArgument> {
    let schema = schemars::SchemaGenerator::new(schemars::generate::SchemaSettings::draft2020_12())
        .into_root_schema_for::<A>()
        .to_value();
    let required: Vec<&str> =
        schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let Some(properties) = schema["properties"].as_object() else { return Vec::new() };
    properties
        .iter()
        .map(|(name, property)| crate::protocol::types::PromptArgument {
            name: name.clone(),
            description: property["description"].as_str().map(str::to_owned),
            required: required.contains(&name.as_str()),
        })
        .collect()
}
