//! Registration with shared state, the way axum's `State` works: the state is given once, and
//! each handler receives its own clone per call, so a tool over a store is a plain `async fn`.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use std::future::Future;

use super::{McpServer, ToolDef};
use crate::handler::{IntoToolResult, RequestContext};

/// What [`McpServer::with_state`] returns: register tools whose handlers take the state.
pub struct WithState<'a, S> {
    server: &'a mut McpServer,
    state: S,
}

impl<'a, S: Clone + Send + Sync + 'static> WithState<'a, S> {
    pub(super) fn new(server: &'a mut McpServer, state: S) -> Self {
        Self { server, state }
    }

    /// Registers a tool, as [`McpServer::tool`] does, whose handler also receives the state.
    pub fn tool<A, F, Fut>(&mut self, def: ToolDef, handler: F) -> &mut Self
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(RequestContext, S, A) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: IntoToolResult,
    {
        let state = self.state.clone();
        self.server.tool(def, move |ctx, args| handler(ctx, state.clone(), args));
        self
    }

    /// The server, for registrations that take no state.
    pub fn server(&mut self) -> &mut McpServer {
        self.server
    }
}
