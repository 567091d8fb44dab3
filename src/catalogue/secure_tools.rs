//! secure-tools-server: the house template for a write tool. `add_item` validates strictly,
//! authorizes by default-deny on the verified token's subject, and returns only a count.
//!
//! Identity comes from the access token alone: the tool has no principal argument, and one sent
//! anyway is stripped before the handler runs. Without authentication every caller is anonymous
//! and is refused, so removing auth degrades to denials, never to an open server. The seed's
//! static token table is not carried over: tokens are verified JWTs (see `security::auth`).
//! Names live in a [`NameList`]: Redis with `REDIS_URL`, memory in the local run, and a list that
//! refuses every call when deployed without Redis.

use redis::Script;
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::{Arc, LazyLock, Mutex};

use crate::observe::Logger;
use crate::protocol::types::ToolAnnotations;
use crate::security::Principal;
use crate::server::{McpServer, RequestContext, ToolDef, ToolError};
use crate::store::{Redis, Shared, StoreError, StoreFuture, capped_fault_from, redis_url_unset};

/// The longest name, in characters.
pub const MAX_NAME_LENGTH: usize = 64;
/// The only principal allowed to add items: the token subject `user:demo`.
pub const AUTHORIZED_SUBJECT: &str = "user:demo";
/// The scope `add_item` requires when authentication is on.
pub const REQUIRED_SCOPE: &str = "items:write";
/// How many names the list holds at most.
pub const MAX_NAMES: usize = 10_000;

/// Where added names go.
pub trait NameList: Send + Sync + 'static {
    /// Appends `name`; returns the new length.
    fn append<'a>(&'a self, name: &'a str) -> StoreFuture<'a, usize>;
}

fn full() -> StoreError {
    StoreError::full(format!("the item list is full ({MAX_NAMES} items)"))
}

/// Names in one process's memory: the local run and tests.
#[derive(Debug, Default)]
pub struct MemoryNameList {
    names: Mutex<Vec<String>>,
}

impl MemoryNameList {
    /// A copy of the names, in order.
    pub fn names(&self) -> Vec<String> {
        self.names.lock().expect("name list").clone()
    }
}

impl NameList for MemoryNameList {
    fn append<'a>(&'a self, name: &'a str) -> StoreFuture<'a, usize> {
        let mut names = self.names.lock().expect("name list");
        let result = if names.len() >= MAX_NAMES {
            Err(full())
        } else {
            names.push(name.to_owned());
            Ok(names.len())
        };
        Box::pin(std::future::ready(result))
    }
}

/// Appends under the cap; the list lives a day past its last append, like every key the server
/// writes (nothing in Redis outlives its use).
const APPEND: &str = r#"
if redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[2]) then return redis.error_reply('STORE_FULL names') end
local length = redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return length
"#;

static APPEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(APPEND));

/// Names in a Redis list at `{prefix}:secure-items`, appended atomically under the cap.
#[derive(Clone, Debug)]
pub struct RedisNameList {
    redis: Redis,
}

impl RedisNameList {
    /// On the shared connection, under its prefix.
    pub fn new(redis: Redis) -> Self {
        Self { redis }
    }
}

impl NameList for RedisNameList {
    fn append<'a>(&'a self, name: &'a str) -> StoreFuture<'a, usize> {
        Box::pin(async move {
            APPEND_SCRIPT
                .key(format!("{}:secure-items", self.redis.prefix()))
                .arg(name)
                .arg(MAX_NAMES)
                .arg(super::query_command::ITEM_TTL_MS)
                .invoke_async(&mut self.redis.connection())
                .await
                .map_err(|e| capped_fault_from(&e, "item list", |_| full()))
        })
    }
}

/// The deployed list when `REDIS_URL` is unset: every call fails naming the variable.
#[derive(Debug, Default)]
pub struct UnconfiguredNameList;

impl NameList for UnconfiguredNameList {
    fn append<'a>(&'a self, _: &'a str) -> StoreFuture<'a, usize> {
        Box::pin(async { Err(redis_url_unset("items")) })
    }
}

/// The example's store for where shared records live: each process builds one and every route
/// of the process shares it.
pub fn name_list(shared: &Shared) -> Arc<dyn NameList> {
    match shared {
        Shared::Memory => Arc::new(MemoryNameList::default()),
        Shared::Redis(redis) => Arc::new(RedisNameList::new(redis.clone())),
        Shared::Unconfigured => Arc::new(UnconfiguredNameList),
    }
}

/// Arguments of `add_item`. There is deliberately no principal field.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddItemArgs {
    /// The name to add: 1 to 64 characters, no control characters (refused, never truncated).
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[^\u0000-\u001F\u007F]*$"))]
    pub name: String,
}

/// Default deny: only a verified caller whose subject is exactly [`AUTHORIZED_SUBJECT`].
pub fn authorize(principal: &Principal) -> Result<(), ToolError> {
    let allowed = principal.is_verified() && principal.id().strip_prefix("sub:") == Some(AUTHORIZED_SUBJECT);
    if allowed { Ok(()) } else { Err(ToolError::Execution("principal is not authorized to add items".into())) }
}

/// Whether `name` is 1 to 64 characters without ASCII control characters (the schema's rule,
/// re-checked in the handler as defence in depth).
pub fn name_is_valid(name: &str) -> bool {
    super::is_plain_text_within(name, MAX_NAME_LENGTH)
}

/// Registers `add_item`, appending to `list`.
pub fn register(server: &mut McpServer, list: Arc<dyn NameList>, logger: Logger) {
    server.with_state(Names { list, logger }).tool(
        ToolDef::new("add_item")
            .description(
                "Append a named item and return the new item count. This is a write tool: the host should get the \
                 user's consent first. The caller's identity comes from the access token; any principal-like \
                 argument is ignored.",
            )
            .annotations(ToolAnnotations {
                read_only_hint: Some(false),
                destructive_hint: Some(false),
                idempotent_hint: Some(false),
                ..Default::default()
            })
            .scopes(&[REQUIRED_SCOPE]),
        add_item,
    );
}

/// What `add_item` shares: the list, and the log that outages are reported to.
#[derive(Clone)]
struct Names {
    list: Arc<dyn NameList>,
    logger: Logger,
}

async fn add_item(ctx: RequestContext, names: Names, args: AddItemArgs) -> Result<String, ToolError> {
    authorize(ctx.principal())?;
    if !name_is_valid(&args.name) {
        return Err(ToolError::Execution("name must be 1 to 64 characters without control characters".into()));
    }
    let count = names.list.append(&args.name).await.map_err(super::store_tool_error(&names.logger, "names.append"))?;
    Ok(format!("ok: {count} items"))
}
