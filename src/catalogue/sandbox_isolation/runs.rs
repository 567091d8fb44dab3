//! Counting a caller's sandbox runs: in this instance always (its share of the instance's
//! [`SANDBOX_RUNS`]), and across every instance when shared records live in Redis, so that a
//! caller whose calls land on several instances still runs at most its share of microVMs.
//!
//! In Redis a caller's runs are a sorted set, one member per run, scored by when the run must be
//! over (the sandbox's own timeout and a margin): a run whose instance died without removing it
//! stops counting then, as its microVM stops. Counting and adding are one script, so two
//! instances cannot both take the last place.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use redis::Script;

use super::{SANDBOX_RUNS, SANDBOX_TIMEOUT_MS};
use crate::security::{Slot, Slots, SlotsFull};
use crate::state::Random;
use crate::store::{Redis, Shared, fault_from};

/// How long past the sandbox's own timeout a run still counts when nothing removed it (its
/// instance died): the create and the stop take time of their own.
const LAPSE_MARGIN: Duration = Duration::from_secs(30);

/// Drops the caller's lapsed runs, then adds this one if fewer than the share are left.
/// KEYS[1] the caller's runs; ARGV now (ms), share, lapses at (ms), run id, key lifetime (ms).
/// Returns 1 when added, 0 when the caller holds its share.
const TAKE: &str = r"
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
";

static TAKE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(TAKE));

/// Where runs are counted; built once per process from where shared records live.
#[derive(Clone)]
pub struct RunCounter {
    instance: Arc<Slots>,
    shared: Option<(Redis, Arc<dyn Random>)>,
}

/// Why a run was not counted.
#[derive(Debug)]
pub enum RunRefused {
    /// A cap is reached: the caller's share, or the instance's total.
    Full(SlotsFull),
    /// The shared count could not be read (a store error, already worded).
    Unavailable(String),
}

impl RunCounter {
    /// Counts in this instance only: the local run (one instance), tests, and a deployment
    /// without `REDIS_URL` (where the caller's share then holds per instance).
    pub fn in_this_instance() -> Self {
        Self { instance: Arc::default(), shared: None }
    }

    /// Counts where `shared` says records live: across instances in Redis, else in this one.
    pub fn new(shared: &Shared, random: Arc<dyn Random>) -> Self {
        match shared {
            Shared::Redis(redis) => Self { instance: Arc::default(), shared: Some((redis.clone(), random)) },
            Shared::Memory | Shared::Unconfigured => Self::in_this_instance(),
        }
    }

    /// Runs counted in this instance now.
    pub fn held_here(&self) -> usize {
        self.instance.held()
    }

    /// Counts a run for `principal`, or says which cap it met. The run counts until the
    /// returned slot is dropped (in Redis, until its removal lands or the run lapses).
    pub async fn take(&self, principal: &str) -> Result<RunSlot, RunRefused> {
        let instance = self.instance.acquire(principal, SANDBOX_RUNS).map_err(RunRefused::Full)?;
        let Some((redis, random)) = &self.shared else { return Ok(RunSlot { _instance: instance, shared: None }) };
        let mut id = [0u8; 16];
        random.fill(&mut id);
        let (key, member) = (runs_key(redis, principal), URL_SAFE_NO_PAD.encode(id));
        let now = now_ms();
        let lifetime = u64::try_from((Duration::from_millis(SANDBOX_TIMEOUT_MS) + LAPSE_MARGIN).as_millis())
            .expect("a short duration");
        let added: i64 = TAKE_SCRIPT
            .key(&key)
            .arg(now)
            .arg(SANDBOX_RUNS.per_principal)
            .arg(now + lifetime)
            .arg(&member)
            .arg(lifetime)
            .invoke_async(&mut redis.connection())
            .await
            .map_err(|error| {
                RunRefused::Unavailable(fault_from(&error, "the sandbox run count").message().to_owned())
            })?;
        if added == 0 {
            return Err(RunRefused::Full(SlotsFull::Principal));
        }
        // Only a run that was added is removed again.
        Ok(RunSlot { _instance: instance, shared: Some(SharedRun { redis: redis.clone(), key, member }) })
    }
}

fn runs_key(redis: &Redis, principal: &str) -> String {
    format!("{}:sandbox-runs:{}", redis.prefix(), URL_SAFE_NO_PAD.encode(principal))
}

fn now_ms() -> u64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}

/// One run's place in the counts; dropping it gives the place back, however the run ended.
pub struct RunSlot {
    _instance: Slot,
    shared: Option<SharedRun>,
}

impl std::fmt::Debug for RunSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunSlot").field("shared", &self.shared.is_some()).finish_non_exhaustive()
    }
}

/// A run's member in the caller's set in Redis.
struct SharedRun {
    redis: Redis,
    key: String,
    member: String,
}

/// Removed past the request (`background::spawn`): a drop cannot wait. If the removal fails,
/// the run stops counting when it lapses.
impl Drop for SharedRun {
    fn drop(&mut self) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let (redis, key, member) =
            (self.redis.clone(), std::mem::take(&mut self.key), std::mem::take(&mut self.member));
        crate::state::background::spawn(async move {
            let _: Result<i64, _> =
                redis::cmd("ZREM").arg(&key).arg(&member).query_async(&mut redis.connection()).await;
        });
    }
}
