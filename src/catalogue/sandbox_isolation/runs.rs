//! Counting a caller's sandbox runs: in this instance always (its share of the instance's
//! [`SANDBOX_RUNS`]), and across every instance when shared records live in Redis, so that a
//! caller whose calls land on several instances still runs at most its share of microVMs.
//!
//! In Redis a caller's runs are a sorted set, one member per run, scored by when the run must be
//! over (the sandbox's own timeout and a margin) on Redis's own clock, so instances whose clocks
//! differ agree: a run whose instance died without removing it stops counting then, as its
//! microVM stops. Counting and adding are one script, so two instances cannot both take the last
//! place. Deployed without Redis there is nowhere to count across instances, and no run is taken
//! (as the job and task tools answer there).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use redis::Script;

use super::{SANDBOX_RUNS, SANDBOX_TIMEOUT_MS};
use crate::security::{Slot, Slots, SlotsFull};
use crate::state::Random;
use crate::store::{Redis, Shared, fault_from, redis_url_unset};

/// How long past the sandbox's own timeout a run still counts when nothing removed it (its
/// instance died): the create and the stop take time of their own.
const LAPSE_MARGIN: Duration = Duration::from_secs(30);

/// Drops the caller's lapsed runs, then adds this one if fewer than the share are left.
/// KEYS[1] the caller's runs; ARGV share, run id, how long a run counts at most (ms).
/// Returns 1 when added, 0 when the caller holds its share.
const TAKE: &str = r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
";

static TAKE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(TAKE));

/// Where runs are counted; built once per process from where shared records live.
#[derive(Clone)]
pub struct RunCounter {
    instance: Arc<Slots>,
    across: Across,
}

/// How runs are counted beyond this instance.
#[derive(Clone)]
enum Across {
    /// Not at all: there is one instance (the local run, tests).
    Nothing,
    /// In Redis, every instance's runs.
    Redis(Redis, Arc<dyn Random>),
    /// Deployed without Redis: nowhere, so no run is taken.
    Unconfigured,
}

/// Why a run was not counted.
#[derive(Debug)]
pub enum RunRefused {
    /// A cap is reached: the caller's share, or the instance's total.
    Full(SlotsFull),
    /// The shared count could not be read (a store error, already worded).
    Unavailable(String),
    /// Deployed without Redis: there is nowhere to count (worded, naming `REDIS_URL`).
    Unconfigured(String),
}

impl RunCounter {
    /// Counts in this instance only: the local run (one instance) and tests.
    pub fn in_this_instance() -> Self {
        Self { instance: Arc::default(), across: Across::Nothing }
    }

    /// Counts where `shared` says records live: across instances in Redis, in this one in
    /// memory; deployed without Redis, every run is refused, naming `REDIS_URL`.
    pub fn new(shared: &Shared, random: Arc<dyn Random>) -> Self {
        let across = match shared {
            Shared::Redis(redis) => Across::Redis(redis.clone(), random),
            Shared::Memory => Across::Nothing,
            Shared::Unconfigured => Across::Unconfigured,
        };
        Self { instance: Arc::default(), across }
    }

    /// Runs counted in this instance now.
    pub fn held_here(&self) -> usize {
        self.instance.held()
    }

    /// Counts a run for `principal`, or says which cap it met. The run counts until the
    /// returned slot is dropped (in Redis, until its removal lands or the run lapses).
    pub async fn take(&self, principal: &str) -> Result<RunSlot, RunRefused> {
        if let Across::Unconfigured = self.across {
            return Err(RunRefused::Unconfigured(redis_url_unset("sandbox runs").message().to_owned()));
        }
        let instance = self.instance.acquire(principal, SANDBOX_RUNS).map_err(RunRefused::Full)?;
        let Across::Redis(redis, random) = &self.across else {
            return Ok(RunSlot { _instance: instance, shared: None });
        };
        let mut id = [0u8; 16];
        random.fill(&mut id);
        // Armed before the script runs: a take dropped while the script is on its way (its
        // caller left) removes what it may have added, rather than leave it counted until it
        // lapses. Disarmed only by a reply that says nothing was added.
        let mut run = SharedRun {
            redis: redis.clone(),
            key: runs_key(redis, principal),
            member: URL_SAFE_NO_PAD.encode(id),
            armed: true,
        };
        let lifetime = u64::try_from((Duration::from_millis(SANDBOX_TIMEOUT_MS) + LAPSE_MARGIN).as_millis())
            .expect("a short duration");
        let added: i64 = TAKE_SCRIPT
            .key(&run.key)
            .arg(SANDBOX_RUNS.per_principal)
            .arg(&run.member)
            .arg(lifetime)
            .invoke_async(&mut redis.connection())
            .await
            .map_err(|error| {
                RunRefused::Unavailable(fault_from(&error, "the sandbox run count").message().to_owned())
            })?;
        if added == 0 {
            run.armed = false;
            return Err(RunRefused::Full(SlotsFull::Principal));
        }
        Ok(RunSlot { _instance: instance, shared: Some(run) })
    }
}

fn runs_key(redis: &Redis, principal: &str) -> String {
    format!("{}:sandbox-runs:{}", redis.prefix(), URL_SAFE_NO_PAD.encode(principal))
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
    /// Whether the member may be in the set (and is removed on drop).
    armed: bool,
}

/// Removed past the request (`background::spawn`): a drop cannot wait. If the removal fails,
/// the run stops counting when it lapses.
impl Drop for SharedRun {
    fn drop(&mut self) {
        if !self.armed || tokio::runtime::Handle::try_current().is_err() {
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
