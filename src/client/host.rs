//! The orchestrator host: several MCP servers behind one namespace and one consent gate.
//!
//! Tools are aggregated as `server.tool` (bare names never appear); a call is routed to its
//! owner after a fail-closed consent check for anything not positively read-only (as said by a
//! server whose annotations the host was told to believe); a server's
//! `isError` result surfaces as a typed error, never as success.

use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::{Client, ClientError, ClientOptions};
use crate::protocol::types::{CallToolResult, Content, Tool};

/// A tool as the host presents it.
#[derive(Clone, Debug, PartialEq)]
pub struct AggregatedTool {
    /// `server.tool`.
    pub name: String,
    /// The tool's own name.
    pub tool_name: String,
    /// The server it belongs to.
    pub server_id: String,
    /// Whether a trusted server ([`ServerSpec::trusted`]) marks it read-only, so that it needs
    /// no consent.
    pub read_only: bool,
    /// Its definition as the server listed it.
    pub definition: Tool,
}

/// Why a host call failed.
#[derive(Debug)]
pub enum HostError {
    /// No server with that id.
    UnknownServer {
        /// The id.
        server_id: String,
        /// The name asked for.
        name: String,
    },
    /// The consent callback did not say yes.
    ConsentDenied(String),
    /// The server reported a failure (an `isError` result or a JSON-RPC error).
    ToolCall {
        /// The server.
        server_id: String,
        /// The tool.
        tool_name: String,
        /// What went wrong.
        message: String,
        /// The underlying protocol error, if it was one.
        cause: Option<ClientError>,
    },
    /// The server could not be reached when the host connected ([`Host::unavailable`]).
    Unavailable {
        /// The server.
        server_id: String,
        /// Why.
        message: String,
    },
    /// Connecting or talking to a server failed.
    Client(ClientError),
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownServer { server_id, name } => write!(f, "unknown server {server_id:?} in {name:?}"),
            Self::ConsentDenied(name) => write!(f, "consent denied for {name}"),
            Self::ToolCall { server_id, tool_name, message, .. } => {
                write!(f, "{server_id}.{tool_name} failed: {message}")
            }
            Self::Unavailable { server_id, message } => write!(f, "server {server_id:?} is unavailable: {message}"),
            Self::Client(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for HostError {}

/// Asks whether a call may proceed. Only `Ok(true)` approves; `false`, an error or a panic deny.
pub type ConsentFn =
    Arc<dyn Fn(&str, &Value) -> Pin<Box<dyn Future<Output = Result<bool, String>> + Send>> + Send + Sync>;

/// One client session per server.
pub struct Host {
    sessions: BTreeMap<String, Client>,
    /// The servers whose annotations are believed ([`ServerSpec::trusted`]).
    trusted: std::collections::BTreeSet<String>,
    tools: Vec<AggregatedTool>,
    /// Servers that could not be reached or listed, with why: the others are served without them.
    unavailable: BTreeMap<String, ClientError>,
}

/// One server the host talks to, with the options (headers, credentials) meant for it alone.
#[derive(Clone)]
pub struct ServerSpec {
    /// The namespace of its tools (`id.tool`): non-empty, no dot, unique within a host.
    pub id: String,
    /// Its MCP endpoint.
    pub url: String,
    /// Its client options. A token here is sent to this server only, never to the others.
    pub options: ClientOptions,
    /// Whether its tool annotations are believed: only then does a tool it marks read-only
    /// (`readOnlyHint: true`) run without consent. Off by default: the spec has clients treat
    /// annotations as untrusted unless they come from a trusted server, and a server that lies
    /// about a destructive tool would otherwise skip the consent gate.
    pub trusted: bool,
}

impl ServerSpec {
    /// `id` at `url` with `options`, its annotations not believed.
    pub fn new(id: impl Into<String>, url: impl Into<String>, options: ClientOptions) -> Self {
        Self { id: id.into(), url: url.into(), options, trusted: false }
    }

    /// This server's annotations believed: its read-only tools run without consent.
    pub fn trusted(mut self) -> Self {
        self.trusted = true;
        self
    }
}

impl Host {
    /// Connects to every server, each with its own options, all at once. Refuses an id that is
    /// empty, has a dot or appears twice (a second entry would silently replace the first, and
    /// could take its credentials' tool names). A server that cannot be reached or listed is left
    /// out and named by [`Host::unavailable`]: one server down, slow or broken does not cost the
    /// host every other server's tools.
    pub async fn connect(servers: &[ServerSpec]) -> Result<Self, HostError> {
        let mut ids = std::collections::BTreeSet::new();
        for ServerSpec { id, .. } in servers {
            if id.is_empty() || id.contains('.') {
                return Err(HostError::Client(ClientError::Protocol(format!(
                    "server id {id:?} must be non-empty without dots"
                ))));
            }
            if !ids.insert(id) {
                return Err(HostError::Client(ClientError::Protocol(format!("server id {id:?} is given twice"))));
            }
        }
        let trusted = servers.iter().filter(|spec| spec.trusted).map(|spec| spec.id.clone()).collect();
        let connecting = servers.iter().map(|ServerSpec { id, url, options, .. }| async move {
            (id.clone(), Client::connect(url, options.clone()).await)
        });
        let (mut sessions, mut unavailable) = (BTreeMap::new(), BTreeMap::new());
        for (id, connected) in futures_util::future::join_all(connecting).await {
            match connected {
                Ok(client) => {
                    sessions.insert(id, client);
                }
                Err(error) => {
                    unavailable.insert(id, error);
                }
            }
        }
        let mut host = Self { sessions, trusted, tools: Vec::new(), unavailable };
        host.refresh_tools().await;
        Ok(host)
    }

    /// The connected server ids (those [`Host::unavailable`] names included, if their session
    /// opened and only their listing failed).
    pub fn server_ids(&self) -> Vec<&str> {
        self.sessions.keys().map(String::as_str).collect()
    }

    /// The servers whose tools are not offered, and why: not reached, or their listing failed at
    /// the last refresh.
    pub fn unavailable(&self) -> &BTreeMap<String, ClientError> {
        &self.unavailable
    }

    /// Re-reads every connected server's tool list, all at once. A server whose listing fails
    /// is named by [`Host::unavailable`] and offers no tools until a refresh lists them; a server
    /// that declares no `tools` capability offers none, unasked.
    pub async fn refresh_tools(&mut self) {
        let listing = self.sessions.iter().map(|(id, client)| async move {
            let declares_tools = client.server().pointer("/capabilities/tools").is_some();
            let listed = if declares_tools { client.list_tools().await } else { Ok(Vec::new()) };
            (id, listed)
        });
        let mut tools = Vec::new();
        let mut failed = Vec::new();
        for (id, listed) in futures_util::future::join_all(listing).await {
            let definitions = match listed {
                Ok(definitions) => definitions,
                Err(error) => {
                    failed.push((id.clone(), error));
                    continue;
                }
            };
            let mut listed = std::collections::HashSet::new();
            for definition in definitions {
                // A name listed twice by one server is one tool: the first listing is kept, so a
                // later copy cannot change how the tool is gated.
                if !listed.insert(definition.name.clone()) {
                    continue;
                }
                let tool_name = definition.name.clone();
                let read_only = self.trusted.contains(id)
                    && definition.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(true);
                tools.push(AggregatedTool {
                    name: format!("{id}.{tool_name}"),
                    tool_name,
                    server_id: id.clone(),
                    read_only,
                    definition,
                });
            }
        }
        self.unavailable.retain(|id, _| !self.sessions.contains_key(id));
        self.unavailable.extend(failed);
        self.tools = tools;
    }

    /// The aggregated tools, ordered by server then listing order.
    pub fn tools(&self) -> &[AggregatedTool] {
        &self.tools
    }

    /// Calls `server.tool`. Unknown servers fail before consent; anything not positively
    /// read-only (unknown tools included) needs an explicit yes from `consent`.
    pub async fn call(&self, name: &str, arguments: Value, consent: &ConsentFn) -> Result<CallToolResult, HostError> {
        // A name without a tool part names no tool of any server: unknown, before consent.
        let (server_id, tool_name) = name.split_once('.').filter(|(_, tool)| !tool.is_empty()).unwrap_or((name, ""));
        if let (Some(error), false) = (self.unavailable.get(server_id), self.sessions.contains_key(server_id)) {
            return Err(HostError::Unavailable { server_id: server_id.to_owned(), message: error.to_string() });
        }
        let client = self
            .sessions
            .get(server_id)
            .filter(|_| !tool_name.is_empty())
            .ok_or_else(|| HostError::UnknownServer { server_id: server_id.to_owned(), name: name.to_owned() })?;
        let read_only = self.tools.iter().find(|t| t.name == name).is_some_and(|t| t.read_only);
        if !read_only {
            // A consent callback that panics, before its future or inside it, is a no.
            let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| consent(name, &arguments)));
            let Ok(asked) = asked else { return Err(HostError::ConsentDenied(name.to_owned())) };
            let approved = crate::server::catch_unwind(std::panic::AssertUnwindSafe(asked)).await;
            if !matches!(approved, Ok(Ok(true))) {
                return Err(HostError::ConsentDenied(name.to_owned()));
            }
        }
        let failure = |message: String, cause: Option<ClientError>| HostError::ToolCall {
            server_id: server_id.to_owned(),
            tool_name: tool_name.to_owned(),
            message,
            cause,
        };
        let result = match client.call_tool(tool_name, arguments).await {
            Ok(result) => result,
            Err(error @ ClientError::Rpc { .. }) => return Err(failure(error.to_string(), Some(error))),
            Err(other) => return Err(HostError::Client(other)),
        };
        if result.is_error {
            // The first text block that says something is the tool's reason.
            let reason = result.content.iter().find_map(|block| match block {
                Content::Text { text, .. } if !text.trim().is_empty() => Some(text.clone()),
                _ => None,
            });
            let text = reason.unwrap_or_else(|| "tool call failed (no error text returned)".to_owned());
            return Err(failure(text, None));
        }
        Ok(result)
    }
}

/// Text a server chose (an error's message, a tool's name or result), made safe to print on a
/// terminal: every control character but newline and tab (C0, DEL and C1, whose U+009B starts an
/// escape sequence too) and every bidirectional override is written as an escape (`\u{1b}`), so
/// an escape sequence cannot retitle the window or recolour what follows, a carriage return
/// cannot print over what the host wrote, and an override cannot reorder how a line reads.
/// Unchanged (borrowed) when it has none.
pub fn for_terminal(text: &str) -> std::borrow::Cow<'_, str> {
    crate::protocol::error::escape_where(text, unsafe_on_terminal)
}

/// `value` as pretty JSON, safe to print on a terminal: what [`for_terminal`] escapes and JSON
/// leaves as it is (DEL, C1, the overrides) is written as a JSON escape (`\u009b`), so the text
/// stays JSON and parses to the same value.
pub fn json_for_terminal(value: &impl serde::Serialize) -> String {
    let text = serde_json::to_string_pretty(value).expect("values serialise");
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if unsafe_on_terminal(c) {
            shown.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            shown.push(c);
        }
    }
    shown
}

/// A character a terminal may act on rather than show, newline and tab aside.
fn unsafe_on_terminal(c: char) -> bool {
    c != '\n' && c != '\t' && crate::protocol::error::misleading_when_shown(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_sees_no_control_character_a_server_sent_but_newlines_and_tabs() {
        assert!(matches!(for_terminal("plain\ttext\nline two"), std::borrow::Cow::Borrowed(_)));
        let shown = for_terminal("a\u{1b}]0;pwned\u{7}b\rc\u{9b}31md\u{0}e\u{7f}\u{202e}f");
        assert_eq!(shown, "a\\u{1b}]0;pwned\\u{7}b\\rc\\u{9b}31md\\u{0}e\\u{7f}\\u{202e}f");
        assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
        let value = serde_json::json!({"text": "a\u{7f}\u{9b}31m\u{202e}b\u{1b}c", "n": 1});
        let json = json_for_terminal(&value);
        assert!(!json.chars().any(unsafe_on_terminal), "{json:?}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&json).unwrap(), value, "still JSON, the same value");
    }
}
