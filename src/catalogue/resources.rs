//! resources-server: one fixed resource and one template, no tools and no prompts.
//!
//! It shows the read path on its own: an exact URI is looked up before any template, so
//! `notes://welcome` is the welcome note even though `notes://{topic}` also matches it. Reads
//! keep no state; reading a templated URI never adds it to `resources/list`.

use std::collections::HashMap;

use crate::protocol::types::{Resource, ResourceContents, ResourceTemplate};
use crate::server::McpServer;

/// The fixed resource's URI.
pub const WELCOME_URI: &str = "notes://welcome";
/// The fixed resource's text.
pub const WELCOME_TEXT: &str = "Welcome to the resources-server example.";
/// The template whose `{topic}` is bound per read.
pub const TOPIC_TEMPLATE: &str = "notes://{topic}";

const TEXT: &str = "text/plain";

/// Registers `welcome-note` and `topic-note`.
pub fn register(server: &mut McpServer) {
    server.resource(
        Resource::new(WELCOME_URI, "welcome-note")
            .description("Static direct resource: same content for every read.")
            .mime_type(TEXT),
        |_, uri| async move { Ok(vec![ResourceContents::text(uri, TEXT, WELCOME_TEXT)]) },
    );
    server.resource_template(
        ResourceTemplate::new(TOPIC_TEMPLATE, "topic-note")
            .description("Resource template: the {topic} segment is bound per read request.")
            .mime_type(TEXT),
        |_, uri, vars: HashMap<String, String>| async move {
            // The topic as the (escaped) URI shows it: a raw newline or escape sequence would
            // reach the model or a terminal.
            let topic = crate::protocol::types::percent_encode_controls(vars.get("topic").map_or("", String::as_str));
            let text = format!("You asked about: {topic}");
            Ok(vec![ResourceContents::text(uri, TEXT, text)])
        },
    );
}
