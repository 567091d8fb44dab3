//! Wire vocabulary of MCP: versions, reserved `_meta` keys, JSON-RPC framing and error codes.
//!
//! Nothing here knows about HTTP or about the registry; it is the shared language the
//! transport and the server speak, kept in one place so every layer names things alike.

pub mod error;
pub mod jsonrpc;
pub mod params;
pub mod types;

pub use error::{ErrorCode, McpError};
pub use jsonrpc::{Message, RequestId};

/// The protocol revision this crate speaks natively.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// Revisions answered through the stateless legacy path (newest first).
pub const LEGACY_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// The legacy revisions `initialize` agrees to. 2025-03-26 is not one: it requires servers to
/// take JSON-RPC batches, which were removed in 2025-06-18 and which this server refuses, so a
/// client asking for it is offered 2025-11-25 (and may disconnect). Requests that carry it, or no
/// version header (which 2025-06-18 reads as 2025-03-26), are still served.
pub const NEGOTIATED_LEGACY_VERSIONS: [&str; 2] = ["2025-11-25", "2025-06-18"];

/// Revisions listed in `supportedVersions` and in `-32022` errors.
///
/// Decision: only the modern revision is listed. Legacy clients never see these lists (they
/// negotiate through `initialize`), and listing 2025 revisions would invite modern clients to
/// downgrade on a server whose modern path is complete.
pub const SUPPORTED_VERSIONS: [&str; 1] = [PROTOCOL_VERSION];

/// Reserved `_meta` keys of the 2026-07-28 envelope.
pub mod meta {
    /// The request's protocol revision (required).
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    /// The request's client capabilities (required).
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    /// Unverified client identification.
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    /// Minimum level of `notifications/message` the client wants (deprecated but honoured).
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    /// Server identification attached to every result.
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    /// Tag on every message of a `subscriptions/listen` stream.
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
    /// Opt-in token for `notifications/progress`.
    pub const PROGRESS_TOKEN: &str = "progressToken";
    /// The longest `progressToken` string honoured. The token is repeated in every progress
    /// notification of its call, so a long one would multiply what one request makes the server
    /// send; clients use a counter or an id of a few dozen bytes.
    pub const MAX_PROGRESS_TOKEN_BYTES: usize = 256;
}

/// The tasks extension identifier.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Which generation of the protocol a request is served in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28: `_meta` envelope, `resultType`, no handshake.
    Modern,
    /// 2025-11-25 and older, served statelessly after an `initialize`.
    Legacy,
}

/// Severity of `notifications/message`, ordered from least to most severe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Detailed debugging output.
    Debug,
    /// Informational messages.
    Info,
    /// Normal but significant events.
    Notice,
    /// Warning conditions.
    Warning,
    /// Error conditions.
    Error,
    /// Critical conditions.
    Critical,
    /// Action must be taken immediately.
    Alert,
    /// System is unusable.
    Emergency,
}

impl LogLevel {
    /// Parses the wire spelling of a level.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "debug" => Self::Debug,
            "info" => Self::Info,
            "notice" => Self::Notice,
            "warning" => Self::Warning,
            "error" => Self::Error,
            "critical" => Self::Critical,
            "alert" => Self::Alert,
            "emergency" => Self::Emergency,
            _ => return None,
        })
    }

    /// The wire spelling of this level.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Notice => "notice",
            Self::Warning => "warning",
            Self::Error => "error",
            Self::Critical => "critical",
            Self::Alert => "alert",
            Self::Emergency => "emergency",
        }
    }
}
