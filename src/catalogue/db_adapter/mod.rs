//! db-adapter-server: a read-only MCP wrapper around a backend it does not change.
//!
//! The adapter pattern in four controls, each enforced here whatever the backend is:
//! bounds live in the schema (and are re-checked before any query, for direct callers); the
//! credential is read-only (the [`ProductBackend`] refuses writes: the fixture by construction,
//! PostgreSQL by the role's grants); filters are values, never query text (the fixture compares,
//! PostgreSQL binds parameters); and every row leaving the adapter goes through
//! [`sanitize_row`], an allowlist projection that drops the secret column and escapes control
//! characters, because product text is reflected into a model's context.
//!
//! The backend is the in-process [`fixture::ReadOnlyStore`] by default and
//! [`postgres::PostgresProducts`] when `DATABASE_URL` is set; `tests/it/db_adapter.rs` runs the
//! same checks against both.

pub mod fixture;
pub mod postgres;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use super::READ_SCOPE;
use crate::observe::Logger;
use crate::protocol::error::McpError;
use crate::protocol::types::{CallToolResult, Content, ResourceContents, ResourceTemplate};
use crate::server::{McpServer, NoArguments, RequestContext, ToolDef, ToolError};

/// `serverInfo.name`.
pub const SERVER_NAME: &str = "db-adapter-server";
/// The smallest `limit`.
pub const MIN_LIMIT: u32 = 1;
/// The largest `limit`.
pub const MAX_LIMIT: u32 = 50;
/// The `limit` used when the caller gives none.
pub const DEFAULT_LIMIT: u32 = 10;
/// The longest category, in characters; longer ones are refused, never truncated.
pub const MAX_CATEGORY_LENGTH: usize = 64;
/// The resource template of one product.
pub const PRODUCT_TEMPLATE: &str = "product://{product_id}";
/// How many categories `list_categories` returns at most.
pub const MAX_CATEGORIES: usize = 1000;
/// How many bytes of category names `list_categories` returns at most (escaped, before JSON).
pub const MAX_CATEGORY_LIST_BYTES: usize = 64 * 1024;

/// A row as the backend holds it, secret column included where the credential can read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProductRow {
    /// Primary key.
    pub id: i64,
    /// Display name (untrusted text).
    pub name: String,
    /// Category (untrusted text).
    pub category: String,
    /// Price in cents.
    pub price_cents: i64,
    /// Internal cost: never leaves the adapter. `None` when the credential cannot read it.
    pub secret_cost_cents: Option<i64>,
}

/// A row as it leaves the adapter: the allowlisted columns, control characters escaped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SanitizedRow {
    /// Primary key.
    pub id: i64,
    /// Display name, escaped.
    pub name: String,
    /// Category, escaped.
    pub category: String,
    /// Price in cents.
    pub price_cents: i64,
}

/// What a product query can fail with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DbError {
    /// The arguments broke a bound; nothing was queried.
    Validation(String),
    /// A write was attempted through the read-only credential; nothing changed.
    ReadOnlyViolation(String),
    /// The backend could not answer (connection, permissions, timeouts).
    Unavailable(String),
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Validation(message) | Self::Unavailable(message) => f.write_str(message),
            Self::ReadOnlyViolation(message) => write!(f, "read-only violation: {message}"),
        }
    }
}

impl std::error::Error for DbError {}

/// A backend operation in flight.
pub type DbFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, DbError>> + Send + 'a>>;

/// A write the read-only credential must refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Add a row.
    Insert,
    /// Change a row.
    Update,
    /// Remove a row.
    Delete,
    /// Drop the table.
    DropTable,
}

/// Where the legacy data lives. Every filter is a value, never query text.
pub trait ProductBackend: Send + Sync + 'static {
    /// Up to `limit` rows whose category equals `category`, ordered by id.
    fn select_by_category<'a>(&'a self, category: &'a str, limit: u32) -> DbFuture<'a, Vec<ProductRow>>;
    /// The row with `id`.
    fn select_by_id(&self, id: i64) -> DbFuture<'_, Option<ProductRow>>;
    /// The first `limit` categories, distinct and sorted.
    fn categories(&self, limit: u32) -> DbFuture<'_, Vec<String>>;
    /// Attempts `write`; a correctly configured backend always answers
    /// [`DbError::ReadOnlyViolation`] and changes nothing.
    fn attempt_write(&self, write: Write) -> DbFuture<'_, ()>;
    /// Which backend this is, for the start-up line.
    fn describe(&self) -> String;
}

/// One read the adapter sends to the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Query<'a> {
    /// `select_by_category` with the (escaped) category and the limit.
    ByCategory(&'a str, u32),
    /// `categories`.
    Categories,
    /// `select_by_id`.
    ById(i64),
}

impl Query<'_> {
    /// The reference's `queryLog` line: `selectByCategory:<category>:<limit>`, `listCategories`,
    /// `selectById:<id>`.
    pub fn line(&self) -> String {
        match self {
            Self::ByCategory(category, limit) => format!("selectByCategory:{category}:{limit}"),
            Self::Categories => "listCategories".to_owned(),
            Self::ById(id) => format!("selectById:{id}"),
        }
    }
}

/// Where the adapter records each read it sends to the backend (one entry per read).
pub trait QueryLog: Send + Sync + 'static {
    /// Records one read.
    fn record(&self, query: Query<'_>);
}

/// Reads as structured log lines (what the deployed server uses): the operation and the limit,
/// with the caller's values (category, id) as keyed digests, as every log line carries arguments.
pub struct LoggedQueries(pub Logger);

impl QueryLog for LoggedQueries {
    fn record(&self, query: Query<'_>) {
        let fields = match query {
            Query::ByCategory(category, limit) => json!({
                "query": "selectByCategory", "category": self.0.digest("category", category.as_bytes()), "limit": limit,
            }),
            Query::Categories => json!({ "query": "listCategories" }),
            Query::ById(id) => {
                json!({ "query": "selectById", "id": self.0.digest("product", id.to_string().as_bytes()) })
            }
        };
        self.0.event("info", "db_query", fields);
    }
}

/// Reads kept in memory, for tests and the reference's `queryLog`.
#[derive(Debug, Default)]
pub struct RecordingQueryLog(Mutex<Vec<String>>);

impl RecordingQueryLog {
    /// The lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().expect("query log").clone()
    }
    /// Forgets every line.
    pub fn reset(&self) {
        self.0.lock().expect("query log").clear();
    }
}

impl QueryLog for RecordingQueryLog {
    fn record(&self, query: Query<'_>) {
        self.0.lock().expect("query log").push(query.line());
    }
}

/// Each character below U+0020, and U+007F, as the literal `\xNN` (lowercase hex); everything
/// else unchanged. Escaping rather than stripping keeps the evidence visible.
pub fn escape_control_chars(text: &str) -> String {
    if !text.chars().any(is_control) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_control(c) {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

fn is_control(c: char) -> bool {
    c < '\u{20}' || c == '\u{7f}'
}

/// The allowlist projection every row leaving the adapter goes through.
pub fn sanitize_row(row: &ProductRow) -> SanitizedRow {
    SanitizedRow {
        id: row.id,
        name: escape_control_chars(&row.name),
        category: escape_control_chars(&row.category),
        price_cents: row.price_cents,
    }
}

/// The adapter: bounds, logging and sanitisation around a [`ProductBackend`].
pub struct DbAdapter {
    backend: Arc<dyn ProductBackend>,
    log: Arc<dyn QueryLog>,
}

impl DbAdapter {
    /// An adapter over `backend`, recording reads in `log`.
    pub fn new(backend: Arc<dyn ProductBackend>, log: Arc<dyn QueryLog>) -> Self {
        Self { backend, log }
    }

    /// The backend, for the read-only checks.
    pub fn backend(&self) -> &dyn ProductBackend {
        self.backend.as_ref()
    }

    /// Sanitised rows of `category`, ordered by id. `limit` is a JSON number: it must be an
    /// integer in `MIN_LIMIT..=MAX_LIMIT` (so `5.0` passes and `2.5` does not), and the
    /// category at most [`MAX_CATEGORY_LENGTH`] characters; otherwise nothing is queried.
    pub async fn query_products_by_category(&self, category: &str, limit: f64) -> Result<Vec<SanitizedRow>, DbError> {
        if category.chars().count() > MAX_CATEGORY_LENGTH {
            return Err(DbError::Validation(format!("category must be at most {MAX_CATEGORY_LENGTH} characters")));
        }
        if limit.fract() != 0.0 || !(f64::from(MIN_LIMIT)..=f64::from(MAX_LIMIT)).contains(&limit) {
            return Err(DbError::Validation(format!("limit must be an integer from {MIN_LIMIT} to {MAX_LIMIT}")));
        }
        let limit = limit as u32;
        // The filter is recorded (the reference's query log keeps it), so a raw newline in it
        // would forge a second line there.
        let category = escape_control_chars(category);
        self.log.record(Query::ByCategory(&category, limit));
        let rows = self.backend.select_by_category(&category, limit).await?;
        Ok(rows.iter().map(sanitize_row).collect())
    }

    /// The categories, distinct, sorted and escaped, up to [`MAX_CATEGORIES`] of them and
    /// [`MAX_CATEGORY_LIST_BYTES`] in all; `true` when there were more. The adapter enforces the
    /// bound whatever the backend returns: a legacy table of many (or long) categories would
    /// otherwise come back whole, to the model and through the one shared connection.
    pub async fn list_categories(&self) -> Result<(Vec<String>, bool), DbError> {
        self.log.record(Query::Categories);
        let found = self.backend.categories(MAX_CATEGORIES as u32 + 1).await?;
        let (mut listed, mut bytes) = (Vec::with_capacity(found.len().min(MAX_CATEGORIES)), 0);
        for category in &found {
            let category = escape_control_chars(category);
            bytes += category.len();
            if listed.len() == MAX_CATEGORIES || bytes > MAX_CATEGORY_LIST_BYTES {
                return Ok((listed, true));
            }
            listed.push(category);
        }
        Ok((listed, false))
    }

    /// `{found:true, product}` for a known id, else `{found:false, product_id}` with the
    /// caller's text escaped (it is reflected into model context). Anything but digits is not
    /// an id and is answered without a query.
    pub async fn resolve_product(&self, product_id: &str) -> Result<Value, DbError> {
        let id = Some(product_id)
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<i64>().ok());
        let row = match id {
            Some(id) => {
                self.log.record(Query::ById(id));
                self.backend.select_by_id(id).await?
            }
            None => None,
        };
        Ok(match row {
            Some(row) => json!({ "found": true, "product": sanitize_row(&row) }),
            None => json!({ "found": false, "product_id": escape_control_chars(product_id) }),
        })
    }
}

/// Arguments of `get_products_by_category`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CategoryArgs {
    /// The category to list, compared as a value.
    #[schemars(length(max = 64))]
    pub category: String,
    /// How many products to return at most, from 1 to 50 (10 when omitted).
    // Read as any JSON number: the advertised schema (an integer from 1 to 50) is enforced before
    // the handler runs, and 5.0 is an integer there.
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 50), default = "advertised_default_limit", with = "u32")]
    pub limit: f64,
}

fn default_limit() -> f64 {
    f64::from(DEFAULT_LIMIT)
}

/// The same default as the schema shows it (an integer, not `10.0`).
fn advertised_default_limit() -> u32 {
    DEFAULT_LIMIT
}

fn tool_result(result: Result<impl Serialize, DbError>) -> Result<CallToolResult, ToolError> {
    match result {
        Ok(value) => Ok(CallToolResult::text(serde_json::to_string(&value).expect("rows serialise"))),
        Err(error) => Err(ToolError::Execution(error.to_string())),
    }
}

/// Registers `list_categories`, `get_products_by_category` and `product://{product_id}`.
pub fn register(server: &mut McpServer, adapter: Arc<DbAdapter>) {
    server
        .with_state(adapter.clone())
        .tool(
            ToolDef::new("list_categories")
                .description(format!(
                    "Distinct product categories, sorted (at most {MAX_CATEGORIES}, or {} KiB of names; a note follows the list when there are more).",
                    MAX_CATEGORY_LIST_BYTES / 1024
                ))
                .scopes(&[READ_SCOPE]),
            |_: RequestContext, adapter: Arc<DbAdapter>, _: NoArguments| async move {
                let listed = adapter.list_categories().await;
                let more = matches!(listed, Ok((_, true)));
                let mut result = tool_result(listed.map(|(categories, _)| categories))?;
                if more {
                    result.content.push(Content::text(format!(
                        "More categories exist than this list shows (the first {MAX_CATEGORIES}, or {} KiB)",
                        MAX_CATEGORY_LIST_BYTES / 1024
                    )));
                }
                Ok::<_, ToolError>(result)
            },
        )
        .tool(
            ToolDef::new("get_products_by_category")
                .description("Products in one category, ordered by id (read-only; secret columns never returned).")
                .scopes(&[READ_SCOPE]),
            |_: RequestContext, adapter: Arc<DbAdapter>, args: CategoryArgs| async move {
                tool_result(adapter.query_products_by_category(&args.category, args.limit).await)
            },
        );
    server
        .resource_template(
            ResourceTemplate::new(PRODUCT_TEMPLATE, "product")
                .description("One product by numeric id; unknown or non-numeric ids answer found:false.")
                .mime_type("application/json"),
            move |_, uri, vars| {
                let adapter = adapter.clone();
                async move {
                    let id = vars.get("product_id").map_or("", String::as_str);
                    let payload = adapter.resolve_product(id).await.map_err(|e| McpError::internal(e.to_string()))?;
                    Ok(vec![ResourceContents::text(uri, "application/json", payload.to_string())])
                }
            },
        )
        .scopes(&[READ_SCOPE]);
}
