//! The MCP data types: tools, content blocks, resources, prompts and the MRTR input requests.
//! The server serialises them (optional fields are omitted, never `null`) and the client reads
//! its results back into the same types.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::borrow::Cow;

fn is_false(b: &bool) -> bool {
    !*b
}

/// Optional hints on a content block.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContentAnnotations {
    /// Who the content is for: `"user"`, `"assistant"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audience: Option<Vec<String>>,
    /// 0 (least) to 1 (most important).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<f64>,
    /// ISO 8601 timestamp.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
}

/// The body of an embedded resource or a `resources/read` entry.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum ResourceContents {
    /// UTF-8 text.
    Text {
        /// The resource URI.
        uri: String,
        /// Its media type.
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// The text.
        text: String,
    },
    /// Binary data, standard base64.
    Blob {
        /// The resource URI.
        uri: String,
        /// Its media type.
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Base64 of the bytes.
        blob: String,
    },
}

impl ResourceContents {
    /// Text contents.
    pub fn text(uri: impl Into<String>, mime_type: impl Into<String>, text: impl Into<String>) -> Self {
        Self::Text { uri: uri.into(), mime_type: Some(mime_type.into()), text: text.into() }
    }

    /// Binary contents, already base64-encoded.
    pub fn blob(uri: impl Into<String>, mime_type: impl Into<String>, blob: impl Into<String>) -> Self {
        Self::Blob { uri: uri.into(), mime_type: Some(mime_type.into()), blob: blob.into() }
    }

    /// The URI with each control character percent-encoded (its UTF-8 bytes as `%XX`). A URI
    /// cannot hold one (RFC 3986), and a handler often echoes the URI it was asked for, which is
    /// the client's text: a raw newline or escape sequence must not reach the model or a terminal.
    pub fn with_escaped_uri(mut self) -> Self {
        let (Self::Text { uri, .. } | Self::Blob { uri, .. }) = &mut self;
        if let Cow::Owned(escaped) = percent_encode_controls(uri) {
            *uri = escaped;
        }
        self
    }
}

/// `text` with each control character percent-encoded (its UTF-8 bytes, `%0A`), as a URL parser
/// writes them; unchanged (borrowed) when it has none. For text taken from a URI and shown again.
pub fn percent_encode_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            let mut buffer = [0u8; 4];
            for byte in c.encode_utf8(&mut buffer).bytes() {
                escaped.push_str(&format!("%{byte:02X}"));
            }
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

/// One content block of a tool result or prompt message.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    /// Plain text.
    Text {
        /// The text.
        text: String,
        /// Optional hints.
        #[serde(skip_serializing_if = "Option::is_none")]
        annotations: Option<ContentAnnotations>,
    },
    /// An image, base64.
    Image {
        /// Base64 data.
        data: String,
        /// Media type, e.g. `image/png`.
        #[serde(rename = "mimeType")]
        mime_type: String,
        /// Optional hints.
        #[serde(skip_serializing_if = "Option::is_none")]
        annotations: Option<ContentAnnotations>,
    },
    /// Audio, base64.
    Audio {
        /// Base64 data.
        data: String,
        /// Media type, e.g. `audio/wav`.
        #[serde(rename = "mimeType")]
        mime_type: String,
        /// Optional hints.
        #[serde(skip_serializing_if = "Option::is_none")]
        annotations: Option<ContentAnnotations>,
    },
    /// A link to a resource the client may read.
    ResourceLink {
        /// The resource URI.
        uri: String,
        /// Its name.
        name: String,
        /// Optional description.
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// Optional media type.
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Optional hints.
        #[serde(skip_serializing_if = "Option::is_none")]
        annotations: Option<ContentAnnotations>,
    },
    /// An embedded resource.
    Resource {
        /// The contents.
        resource: ResourceContents,
        /// Optional hints.
        #[serde(skip_serializing_if = "Option::is_none")]
        annotations: Option<ContentAnnotations>,
    },
}

impl Content {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into(), annotations: None }
    }

    /// An image block.
    pub fn image(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::Image { data: data.into(), mime_type: mime_type.into(), annotations: None }
    }

    /// An audio block.
    pub fn audio(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::Audio { data: data.into(), mime_type: mime_type.into(), annotations: None }
    }

    /// An embedded resource block.
    pub fn resource(resource: ResourceContents) -> Self {
        Self::Resource { resource, annotations: None }
    }

    /// A resource link block.
    pub fn resource_link(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Self::ResourceLink { uri: uri.into(), name: name.into(), description: None, mime_type: None, annotations: None }
    }
}

/// The result of `tools/call` when the tool finished.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CallToolResult {
    /// Content blocks.
    pub content: Vec<Content>,
    /// Structured output; conforms to the tool's `outputSchema` when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    /// True for tool execution errors (reported in-band, not as JSON-RPC errors).
    #[serde(default, skip_serializing_if = "is_false")]
    pub is_error: bool,
}

impl CallToolResult {
    /// A result with the given blocks.
    pub fn new(content: Vec<Content>) -> Self {
        Self { content, ..Self::default() }
    }

    /// A single text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new(vec![Content::text(text)])
    }

    /// An execution error whose text is exactly `message`.
    pub fn error(message: impl Into<String>) -> Self {
        Self { is_error: true, ..Self::text(message) }
    }

    /// The result as a JSON object, for paths that add members to it.
    pub fn into_object(self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(object)) => object,
            _ => unreachable!("a struct with named fields serialises to an object"),
        }
    }

    /// The text of every text block, joined with newlines (what a test usually compares).
    pub fn joined_text(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|block| match block {
                Content::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n")
    }

    /// Structured output, mirrored as a text block holding its JSON (as the spec recommends).
    /// Only an object may be `structuredContent`: any other value (a list, a number, `null`) goes
    /// out as its JSON text alone.
    pub fn structured(value: Value) -> Self {
        // `serde_json::to_string`, not `Display`: the same bytes, without the formatting
        // machinery's per-piece cost.
        let text = serde_json::to_string(&value).expect("values serialise");
        let structured_content = value.is_object().then_some(value);
        Self { content: vec![Content::text(text)], structured_content, is_error: false }
    }
}

/// A tool as `tools/list` describes it (what a client reads back).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    /// Name, unique within the server.
    pub name: String,
    /// Display title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the tool does, for the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON Schema of its arguments.
    pub input_schema: Value,
    /// The JSON Schema its `structuredContent` conforms to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Behaviour hints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// Extension metadata.
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// Behavioural hints on a tool. Absent hints take the spec's defaults.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// Display title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Repeating a call with the same arguments has no further effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool talks to an open world of external entities.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// A resource listed by `resources/list`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    /// The URI.
    pub uri: String,
    /// Programmatic name.
    pub name: String,
    /// Display title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Media type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

impl Resource {
    /// A resource at `uri` called `name`; add what else it has with the setters.
    pub fn new(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Self { uri: uri.into(), name: name.into(), title: None, description: None, mime_type: None }
    }

    /// A display title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// What it holds, for the model.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Its media type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }
}

/// A resource template listed by `resources/templates/list`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceTemplate {
    /// RFC 6570 template.
    pub uri_template: String,
    /// Programmatic name.
    pub name: String,
    /// Display title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Media type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

impl ResourceTemplate {
    /// A template (RFC 6570 level 1, e.g. `weather://{city}`) called `name`.
    pub fn new(uri_template: impl Into<String>, name: impl Into<String>) -> Self {
        Self { uri_template: uri_template.into(), name: name.into(), title: None, description: None, mime_type: None }
    }

    /// A display title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// What its resources hold, for the model.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// The media type of its resources.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }
}

/// A prompt argument.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PromptArgument {
    /// Name.
    pub name: String,
    /// Description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether `prompts/get` fails without it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub required: bool,
}

/// A prompt listed by `prompts/list`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Prompt {
    /// Name.
    pub name: String,
    /// Display title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<PromptArgument>,
}

impl Prompt {
    /// A prompt called `name`. Its arguments come from the handler's argument type when it is
    /// registered, or from [`Prompt::argument`].
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), title: None, description: None, arguments: Vec::new() }
    }

    /// A display title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// What the prompt is for.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Declares an argument by hand.
    pub fn argument(mut self, name: impl Into<String>, description: impl Into<String>, required: bool) -> Self {
        self.arguments.push(PromptArgument { name: name.into(), description: Some(description.into()), required });
        self
    }
}

/// A message of a `prompts/get` result.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PromptMessage {
    /// `"user"` or `"assistant"`.
    pub role: String,
    /// One content block.
    pub content: Content,
}

impl PromptMessage {
    /// A user message.
    pub fn user(content: Content) -> Self {
        Self { role: "user".into(), content }
    }

    /// An assistant message.
    pub fn assistant(content: Content) -> Self {
        Self { role: "assistant".into(), content }
    }
}

/// The result of `prompts/get`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GetPromptResult {
    /// Description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Messages.
    pub messages: Vec<PromptMessage>,
}

/// The result of `completion/complete`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Completion {
    /// At most 100 values.
    pub values: Vec<String>,
    /// Total number of matches, if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// More values exist than were returned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub has_more: Option<bool>,
}

/// One request a server embeds in an `input_required` result (MRTR).
#[derive(Clone, Debug, PartialEq)]
pub enum InputRequest {
    /// `elicitation/create` in form mode: `requestedSchema` is a flat object schema.
    ElicitForm {
        /// What the user is asked.
        message: String,
        /// The schema of the answer.
        requested_schema: Value,
    },
    /// `elicitation/create` in URL mode.
    ElicitUrl {
        /// What the user is asked.
        message: String,
        /// Where the user goes.
        url: String,
    },
    /// `sampling/createMessage` (deprecated in 2026-07-28 but still allowed).
    Sampling(Value),
    /// `roots/list` (deprecated in 2026-07-28 but still allowed).
    ListRoots,
}

impl InputRequest {
    /// The JSON-RPC method the client runs to answer.
    pub fn method(&self) -> &'static str {
        match self {
            Self::ElicitForm { .. } | Self::ElicitUrl { .. } => "elicitation/create",
            Self::Sampling(_) => "sampling/createMessage",
            Self::ListRoots => "roots/list",
        }
    }

    /// The params of that method.
    pub fn params(&self) -> Value {
        match self {
            Self::ElicitForm { message, requested_schema } => {
                json!({ "mode": "form", "message": message, "requestedSchema": requested_schema })
            }
            Self::ElicitUrl { message, url } => json!({ "mode": "url", "message": message, "url": url }),
            Self::Sampling(params) => params.clone(),
            Self::ListRoots => json!({}),
        }
    }

    /// The `{method, params}` object placed in `inputRequests`.
    pub fn to_json(&self) -> Value {
        match self {
            Self::ListRoots => json!({ "method": self.method() }),
            _ => json!({ "method": self.method(), "params": self.params() }),
        }
    }

    /// The client capability this request needs, as a `ClientCapabilities` fragment, and
    /// whether `caps` (the request's declared capabilities) grants it.
    pub fn capability(&self, caps: &Map<String, Value>) -> (Value, bool) {
        match self {
            Self::ElicitForm { .. } => {
                let granted = match caps.get("elicitation") {
                    // `{}` is form mode (the revision before modes); `form` must be an object,
                    // as `url` must.
                    Some(Value::Object(e)) => e.is_empty() || e.get("form").is_some_and(Value::is_object),
                    _ => false,
                };
                (json!({ "elicitation": { "form": {} } }), granted)
            }
            Self::ElicitUrl { .. } => {
                let granted = caps.get("elicitation").and_then(|e| e.get("url")).is_some_and(Value::is_object);
                (json!({ "elicitation": { "url": {} } }), granted)
            }
            // A request that offers the model tools needs `sampling.tools` too (the spec: a
            // server MUST NOT send them otherwise).
            Self::Sampling(params) if params.get("tools").is_some() || params.get("toolChoice").is_some() => {
                let granted = caps.get("sampling").and_then(|s| s.get("tools")).is_some_and(Value::is_object);
                (json!({ "sampling": { "tools": {} } }), granted)
            }
            Self::Sampling(_) => (json!({ "sampling": {} }), caps.get("sampling").is_some_and(Value::is_object)),
            Self::ListRoots => (json!({ "roots": {} }), caps.get("roots").is_some_and(Value::is_object)),
        }
    }
}
