//! query-command-server: two read-only queries and one idempotency-keyed command.
//!
//! The annotations let a host give reads light consent and the write strong consent. A replay
//! of `create_item` with the same key returns the original item and changes nothing; keys are
//! scoped to the caller, so two principals never share a replay slot. Arguments are validated
//! before the store is touched, so a refused call never consumes its key. Items live in an
//! [`ItemStore`]: Redis when `REDIS_URL` is set, memory in the local run, and a store that
//! refuses every call when deployed without Redis.
//!
//! Items belong to the principal that created them: each caller lists, reads and counts only
//! its own (ids are numbered per caller), holds at most [`MAX_ITEMS_PER_PRINCIPAL`], and in Redis
//! its items expire [`ITEM_TTL_MS`] after its last create. The store as a whole keeps items for a
//! bounded number of callers at once ([`MAX_MEMORY_PRINCIPALS`], [`MAX_REDIS_PRINCIPALS`]), so
//! many identities cannot grow it without end. (The seed's reference keeps one list
//! for everyone; a shared list let one caller fill it and every caller read the others' items.)

use redis::Script;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use super::{READ_SCOPE, WRITE_SCOPE};
use crate::observe::Logger;
use crate::protocol::types::{CallToolResult, ToolAnnotations};
use crate::security::Principal;
use crate::server::{McpServer, NoArguments, RequestContext, ToolDef, ToolError};
use crate::store::{Redis, Shared, StoreError, StoreFuture, capped_fault_from, redis_url_unset};

/// The longest item name, in characters.
pub const MAX_NAME_LENGTH: usize = 64;
/// The longest idempotency key, in characters.
pub const MAX_IDEMPOTENCY_KEY_LENGTH: usize = 128;
/// How many items one principal holds at most, so `list_items` stays bounded.
pub const MAX_ITEMS_PER_PRINCIPAL: usize = 100;
/// How many principals the in-memory store (the local run) keeps items for.
pub const MAX_MEMORY_PRINCIPALS: usize = 1000;
/// How many principals the Redis store keeps items for at once (a principal stops counting when
/// its items expire).
pub const MAX_REDIS_PRINCIPALS: usize = 10_000;
/// How long a principal's items live in Redis after its last create: a day.
pub const ITEM_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// One item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// `item-<n>`, from a counter that never reuses a number.
    pub id: String,
    /// The name it was created with.
    pub name: String,
}

/// The replay key of `idempotency_key` for `principal`: a JSON pair, so no choice of
/// characters in either part can collide with another pair.
pub fn scoped_key(principal: &Principal, idempotency_key: &str) -> String {
    serde_json::to_string(&[principal.id(), idempotency_key]).expect("strings serialise")
}

/// Where items and replay keys live, one namespace per principal (`owner` is its id).
pub trait ItemStore: Send + Sync + 'static {
    /// Creates `name` for `owner` under `scoped_key`, or returns the item that key already created.
    fn create_if_absent<'a>(&'a self, owner: &'a str, scoped_key: &'a str, name: &'a str) -> StoreFuture<'a, Item>;
    /// `owner`'s item with `id`.
    fn get<'a>(&'a self, owner: &'a str, id: &'a str) -> StoreFuture<'a, Option<Item>>;
    /// Every item of `owner`, in creation order.
    fn list<'a>(&'a self, owner: &'a str) -> StoreFuture<'a, Vec<Item>>;
}

fn full() -> StoreError {
    StoreError::full(format!("you hold the most items allowed ({MAX_ITEMS_PER_PRINCIPAL})"))
}

/// The refusal of a new caller when the store already keeps items for `callers`.
fn full_of_callers(callers: usize) -> StoreError {
    StoreError::full(format!("the item store is full ({callers} callers)"))
}

/// Items in one process's memory: the local run and tests.
#[derive(Debug, Default)]
pub struct MemoryItemStore {
    inner: Mutex<HashMap<String, MemoryItems>>,
}

#[derive(Debug, Default)]
struct MemoryItems {
    items: Vec<Item>,
    by_id: HashMap<String, usize>,
    applied: HashMap<String, usize>,
    next_id: u64,
}

impl ItemStore for MemoryItemStore {
    fn create_if_absent<'a>(&'a self, owner: &'a str, scoped_key: &'a str, name: &'a str) -> StoreFuture<'a, Item> {
        let mut owners = self.inner.lock().expect("item store");
        if !owners.contains_key(owner) && owners.len() >= MAX_MEMORY_PRINCIPALS {
            return Box::pin(std::future::ready(Err(full_of_callers(MAX_MEMORY_PRINCIPALS))));
        }
        let inner = owners.entry(owner.to_owned()).or_default();
        let result = if let Some(&index) = inner.applied.get(scoped_key) {
            Ok(inner.items[index].clone())
        } else if inner.items.len() >= MAX_ITEMS_PER_PRINCIPAL {
            Err(full())
        } else {
            inner.next_id += 1;
            let item = Item { id: format!("item-{}", inner.next_id), name: name.to_owned() };
            let index = inner.items.len();
            inner.by_id.insert(item.id.clone(), index);
            inner.applied.insert(scoped_key.to_owned(), index);
            inner.items.push(item.clone());
            Ok(item)
        };
        Box::pin(std::future::ready(result))
    }

    fn get<'a>(&'a self, owner: &'a str, id: &'a str) -> StoreFuture<'a, Option<Item>> {
        let owners = self.inner.lock().expect("item store");
        let item = owners.get(owner).and_then(|inner| inner.by_id.get(id).map(|&index| inner.items[index].clone()));
        Box::pin(std::future::ready(Ok(item)))
    }

    fn list<'a>(&'a self, owner: &'a str) -> StoreFuture<'a, Vec<Item>> {
        let items =
            self.inner.lock().expect("item store").get(owner).map(|inner| inner.items.clone()).unwrap_or_default();
        Box::pin(std::future::ready(Ok(items)))
    }
}

/// First write wins, atomically: the replay check, the caps, the counter, the item and the key
/// change together or not at all; every key of the caller's namespace then lives `ARGV[4]` ms more.
/// `KEYS[5]` holds every caller with items, scored by when they expire (Redis's own clock, the
/// one `PEXPIRE` uses): a caller not in it is refused once it holds `ARGV[6]`.
const CREATE: &str = r#"
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then return {existing, redis.call('HGET', KEYS[2], existing)} end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
if not redis.call('ZSCORE', KEYS[5], ARGV[5]) and redis.call('ZCARD', KEYS[5]) >= tonumber(ARGV[6]) then
  return redis.error_reply('STORE_FULL callers')
end
if redis.call('LLEN', KEYS[3]) >= tonumber(ARGV[3]) then return redis.error_reply('STORE_FULL items') end
local id = 'item-' .. redis.call('INCR', KEYS[4])
redis.call('HSET', KEYS[2], id, ARGV[2])
redis.call('RPUSH', KEYS[3], id)
redis.call('HSET', KEYS[1], ARGV[1], id)
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[4])) end
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[4]), ARGV[5])
redis.call('PEXPIRE', KEYS[5], tonumber(ARGV[4]))
return {id, ARGV[2]}
"#;

static CREATE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(CREATE));

/// Items in Redis under `{prefix}:items:{b64(owner)}:*`: per owner, a hash of names by id, a list
/// for creation order, a hash of replay keys and a counter, all expiring together; and
/// `{prefix}:items-owners`, the owners holding items, each until its items expire.
#[derive(Clone, Debug)]
pub struct RedisItemStore {
    redis: Redis,
    max_principals: usize,
}

impl RedisItemStore {
    /// On the shared connection, under its prefix, for at most [`MAX_REDIS_PRINCIPALS`] callers.
    pub fn new(redis: Redis) -> Self {
        Self { redis, max_principals: MAX_REDIS_PRINCIPALS }
    }

    /// For at most `max_principals` callers at once instead.
    pub fn with_max_principals(mut self, max_principals: usize) -> Self {
        self.max_principals = max_principals;
        self
    }

    fn owner(owner: &str) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(owner)
    }

    /// A key of the owner encoded by [`RedisItemStore::owner`].
    fn key(&self, owner: &str, part: &str) -> String {
        format!("{}:items:{owner}:{part}", self.redis.prefix())
    }

    /// Where the owners holding items are kept.
    pub fn owners_key(&self) -> String {
        format!("{}:items-owners", self.redis.prefix())
    }

    fn error(&self, error: redis::RedisError) -> StoreError {
        capped_fault_from(&error, "item store", |cap| match cap {
            "callers" => full_of_callers(self.max_principals),
            _ => full(),
        })
    }
}

impl ItemStore for RedisItemStore {
    fn create_if_absent<'a>(&'a self, owner: &'a str, scoped_key: &'a str, name: &'a str) -> StoreFuture<'a, Item> {
        Box::pin(async move {
            let owner = Self::owner(owner);
            let (id, name): (String, String) = CREATE_SCRIPT
                .key(self.key(&owner, "applied"))
                .key(self.key(&owner, "names"))
                .key(self.key(&owner, "order"))
                .key(self.key(&owner, "counter"))
                .key(self.owners_key())
                .arg(scoped_key)
                .arg(name)
                .arg(MAX_ITEMS_PER_PRINCIPAL)
                .arg(ITEM_TTL_MS)
                .arg(&owner)
                .arg(self.max_principals)
                .invoke_async(&mut self.redis.connection())
                .await
                .map_err(|error| self.error(error))?;
            Ok(Item { id, name })
        })
    }

    fn get<'a>(&'a self, owner: &'a str, id: &'a str) -> StoreFuture<'a, Option<Item>> {
        Box::pin(async move {
            let name: Option<String> = redis::cmd("HGET")
                .arg(self.key(&Self::owner(owner), "names"))
                .arg(id)
                .query_async(&mut self.redis.connection())
                .await
                .map_err(|error| self.error(error))?;
            Ok(name.map(|name| Item { id: id.to_owned(), name }))
        })
    }

    fn list<'a>(&'a self, owner: &'a str) -> StoreFuture<'a, Vec<Item>> {
        Box::pin(async move {
            let (owner, mut connection) = (Self::owner(owner), self.redis.connection());
            let ids: Vec<String> = redis::cmd("LRANGE")
                .arg(self.key(&owner, "order"))
                .arg(0)
                .arg(-1)
                .query_async(&mut connection)
                .await
                .map_err(|error| self.error(error))?;
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let names: Vec<Option<String>> = redis::cmd("HMGET")
                .arg(self.key(&owner, "names"))
                .arg(&ids)
                .query_async(&mut connection)
                .await
                .map_err(|error| self.error(error))?;
            Ok(ids.into_iter().zip(names).filter_map(|(id, name)| name.map(|name| Item { id, name })).collect())
        })
    }
}

/// The deployed store when `REDIS_URL` is unset: every call fails naming the variable, so
/// items never land in one instance's memory.
#[derive(Debug, Default)]
pub struct UnconfiguredItemStore;

impl UnconfiguredItemStore {
    fn fail<T: Send + 'static>(&self) -> StoreFuture<'_, T> {
        Box::pin(async { Err(redis_url_unset("items")) })
    }
}

impl ItemStore for UnconfiguredItemStore {
    fn create_if_absent<'a>(&'a self, _: &'a str, _: &'a str, _: &'a str) -> StoreFuture<'a, Item> {
        self.fail()
    }
    fn get<'a>(&'a self, _: &'a str, _: &'a str) -> StoreFuture<'a, Option<Item>> {
        self.fail()
    }
    fn list<'a>(&'a self, _: &'a str) -> StoreFuture<'a, Vec<Item>> {
        self.fail()
    }
}

/// The example's store for where shared records live: each process builds one and every route
/// of the process shares it.
pub fn item_store(shared: &Shared) -> Arc<dyn ItemStore> {
    match shared {
        Shared::Memory => Arc::new(MemoryItemStore::default()),
        Shared::Redis(redis) => Arc::new(RedisItemStore::new(redis.clone())),
        Shared::Unconfigured => Arc::new(UnconfiguredItemStore),
    }
}

/// Arguments of `get_item`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GetItemArgs {
    /// The item's id (item-<n>), as list_items or create_item returned it.
    #[schemars(length(max = 64))]
    pub item_id: String,
}

/// Arguments of `create_item`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateItemArgs {
    /// The new item's name: 1 to 64 characters, no control characters.
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[^\u0000-\u001F\u007F]*$"))]
    pub name: String,
    /// A key of the caller's choosing; the same key replays the first result.
    #[schemars(length(min = 1, max = 128))]
    pub idempotency_key: String,
}

const QUERY: ToolAnnotations = ToolAnnotations {
    title: None,
    read_only_hint: Some(true),
    destructive_hint: Some(false),
    idempotent_hint: Some(true),
    open_world_hint: None,
};

/// A store error as a tool error: the full store as it is, an outage with a correlation id.
fn store_fault<'a>(logger: &'a Logger, operation: &'a str) -> impl FnOnce(StoreError) -> ToolError + 'a {
    super::store_tool_error(logger, operation)
}

fn json_text<T: Serialize>(value: &T) -> CallToolResult {
    CallToolResult::text(serde_json::to_string(value).expect("items serialise"))
}

/// What the item tools share: the store, and the log that outages are reported to.
#[derive(Clone)]
struct Items {
    store: Arc<dyn ItemStore>,
    logger: Logger,
}

/// Registers `list_items`, `get_item` and `create_item` over `store`.
pub fn register(server: &mut McpServer, store: Arc<dyn ItemStore>, logger: Logger) {
    server
        .with_state(Items { store, logger })
        .tool(
            ToolDef::new("list_items")
                .description("List your items (a query).")
                .annotations(QUERY)
                .scopes(&[READ_SCOPE]),
            list_items,
        )
        .tool(
            ToolDef::new("get_item")
                .description("Read one of your items by id (a query).")
                .annotations(QUERY)
                .scopes(&[READ_SCOPE]),
            get_item,
        )
        .tool(
            ToolDef::new("create_item")
                .description(
                    "Create an item (a command: get the user's consent first). idempotentHint reflects the key-replay \
                     guarantee, not an absence of side effects: the same idempotency_key returns the original item and \
                     changes nothing. Keys and items belong to the calling principal.",
                )
                .annotations(ToolAnnotations {
                    read_only_hint: Some(false),
                    destructive_hint: Some(true),
                    idempotent_hint: Some(true),
                    ..Default::default()
                })
                .scopes(&[WRITE_SCOPE]),
            create_item,
        );
}

async fn list_items(ctx: RequestContext, items: Items, _: NoArguments) -> Result<CallToolResult, ToolError> {
    let list = items.store.list(ctx.principal().id()).await.map_err(store_fault(&items.logger, "items.list"))?;
    Ok(json_text(&list))
}

async fn get_item(ctx: RequestContext, items: Items, args: GetItemArgs) -> Result<CallToolResult, ToolError> {
    let item = items.store.get(ctx.principal().id(), &args.item_id).await;
    match item.map_err(store_fault(&items.logger, "items.get"))? {
        Some(item) => Ok(json_text(&item)),
        None => Err(ToolError::Execution(format!(
            "no item with id {}",
            crate::protocol::error::truncate_for_message(&args.item_id)
        ))),
    }
}

async fn create_item(ctx: RequestContext, items: Items, args: CreateItemArgs) -> Result<CallToolResult, ToolError> {
    // The schema's bounds, checked again (defence in depth): rejected, never truncated.
    if !super::is_plain_text_within(&args.name, 64) {
        return Err(ToolError::Execution("name must be 1 to 64 characters without control characters".into()));
    }
    if args.idempotency_key.is_empty() || args.idempotency_key.chars().count() > 128 {
        return Err(ToolError::Execution("idempotency_key must be 1 to 128 characters".into()));
    }
    let key = scoped_key(ctx.principal(), &args.idempotency_key);
    let created = items
        .store
        .create_if_absent(ctx.principal().id(), &key, &args.name)
        .await
        .map_err(store_fault(&items.logger, "items.create"))?;
    Ok(json_text(&created))
}
