//! Where job records live, behind one trait with two implementations.
//!
//! Every operation is atomic with respect to the others: a cap check and the creation it
//! guards, a step and the cancel flag it honours, happen as one unit. [`MemoryJobStore`] is the
//! embedded default of the local run and of tests; `RedisJobStore` is what deployments use.

use std::collections::HashMap;
use std::sync::Mutex;

use super::model::JobRecord;
use super::queue::{JobMessage, StreamEntry, StreamTarget};
use crate::store::{StoreError, StoreFuture};

/// What [`JobStore::advance`] did: the record as it now is, and whether this call changed it.
#[derive(Clone, Debug, PartialEq)]
pub struct Advanced {
    /// The record after the call.
    pub record: JobRecord,
    /// This call applied the step (or the cancel it found requested).
    pub applied: bool,
}

/// Why a job was not created. Nothing is written in any of these cases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateRefused {
    /// The principal holds `cap` active jobs.
    AtCap(u32),
    /// The principal holds its share of the deployment: `share` jobs, active or retained
    /// (cancelled and finished ones count until they expire).
    OverShare(u32),
    /// The principal created `limit` jobs in the current minute.
    TooFast(u32),
    /// The deployment holds its maximum number of jobs.
    Full,
    /// The id is taken (astronomically unlikely; the caller retries with a new id).
    Exists,
    /// The queue's stream holds this many messages ([`JobStore::create_enqueued`] only).
    QueueFull(u32),
}

/// What one principal may create: its active jobs, its share of the deployment's jobs (active
/// or retained until they expire), its submissions per minute, and the deployment's total. The
/// share and the rate are what keep one caller from filling the total for everyone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// Active (pending or running) jobs.
    pub active: u32,
    /// Jobs held, active or retained.
    pub share: u32,
    /// Jobs created per minute (a fixed window, shared by every instance).
    pub per_minute: u32,
    /// Jobs held by the whole deployment.
    pub total: u32,
}

impl Quota {
    /// `active` and `total` only: no share or rate limit (tests of the other caps).
    pub fn new(active: u32, total: u32) -> Self {
        Self { active, share: u32::MAX, per_minute: u32::MAX, total }
    }
}

/// The window the per-minute submission rate counts in.
pub const RATE_WINDOW_MS: u64 = 60_000;

/// What the sweep did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Finished jobs evicted after their retention.
    pub evicted: u32,
    /// Active jobs past their deadline, now failed.
    pub failed_stuck: u32,
}

/// Job persistence. `now` is passed in so expiry is a function of the injected clock.
pub trait JobStore: Send + Sync + 'static {
    /// Creates `record` if its owner is within every limit of `quota` (checked in this order:
    /// active jobs, share, rate, the deployment's total), all in one atomic step.
    fn create<'a>(
        &'a self,
        record: &'a JobRecord,
        quota: &'a Quota,
        now: u64,
    ) -> StoreFuture<'a, Result<(), CreateRefused>>;
    /// [`JobStore::create`] with `message` added to `stream` in the same atomic step; when the
    /// stream is at its bound ([`CreateRefused::QueueFull`]) nothing is written. `None` when this
    /// store cannot reach `stream` in one step (another kind of store, or another connection):
    /// the caller then creates and publishes separately.
    fn create_enqueued<'a>(
        &'a self,
        _record: &'a JobRecord,
        _quota: &'a Quota,
        _now: u64,
        _stream: StreamTarget<'a>,
        _message: &'a JobMessage,
    ) -> Option<StoreFuture<'a, Result<(), CreateRefused>>> {
        None
    }
    /// The owner's job as of `now`, if it exists and has not been evicted (an active job past
    /// its deadline reads as failed).
    fn get<'a>(&'a self, owner: &'a str, job_id: &'a str, now: u64) -> StoreFuture<'a, Option<JobRecord>>;
    /// Cancels the owner's job if active; returns the record as it now is.
    fn cancel<'a>(&'a self, owner: &'a str, job_id: &'a str, now: u64) -> StoreFuture<'a, Option<JobRecord>>;
    /// Fails the owner's job if active ([`JobRecord::abandon`]: its message was given up), freeing
    /// its place in the owner's active jobs; returns the record as it now is.
    fn abandon<'a>(&'a self, owner: &'a str, job_id: &'a str, now: u64) -> StoreFuture<'a, Option<JobRecord>>;
    /// Applies step `expected + 1` if exactly `expected` steps have run (see [`JobRecord::advance`]),
    /// and says whether this call applied it (a concurrent duplicate delivery finds it applied).
    fn advance<'a>(
        &'a self,
        owner: &'a str,
        job_id: &'a str,
        expected: u32,
        now: u64,
    ) -> StoreFuture<'a, Option<Advanced>>;
    /// [`JobStore::advance`] that also acknowledges and deletes `entry` in the same atomic step
    /// when the job is over afterwards (finished, cancelled, failed, or gone): the delivery is
    /// settled with its last write, and a job is never left done with its entry pending. An
    /// entry whose job goes on stays pending. `None` when this store cannot reach the stream in
    /// one step: the caller then advances and acknowledges separately.
    fn advance_settling<'a>(
        &'a self,
        _owner: &'a str,
        _job_id: &'a str,
        _expected: u32,
        _now: u64,
        _entry: StreamEntry<'a>,
    ) -> Option<StoreFuture<'a, Option<Advanced>>> {
        None
    }
    /// Removes the job `record` was created as, rolling back a submit whose publish failed: the
    /// record, its places in the owner's sets, and its count in the owner's per-minute rate (a
    /// submission that never happened does not count against the caller). The count is given
    /// back only for the window the stored record was created in (and, in Redis, only if that
    /// is `record`'s own); a job already gone changes nothing.
    fn delete<'a>(&'a self, record: &'a JobRecord) -> StoreFuture<'a, ()>;
    /// Fails active jobs past their deadline and evicts finished jobs past retention. Every
    /// other operation already sees the jobs as of its `now`, so this is housekeeping: nothing a
    /// client can observe depends on when (or whether) it runs.
    fn sweep(&self, now: u64) -> StoreFuture<'_, SweepReport>;
}

/// The in-memory store: one map behind one lock. For the local run and tests only; a
/// deployment refuses to use it (see `store::Shared::Unconfigured`).
#[derive(Debug, Default)]
pub struct MemoryJobStore {
    jobs: Mutex<HashMap<(String, String), JobRecord>>,
    /// Per owner: the rate window's index and the jobs created in it.
    created: Mutex<HashMap<String, (u64, u32)>>,
}

impl MemoryJobStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many jobs are held (tests assert that refused submits leave nothing behind).
    pub fn len(&self) -> usize {
        self.jobs.lock().expect("jobs lock").len()
    }

    /// Whether no job is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs `f` on the jobs as of `now`: expired ones evicted, stuck ones failed. Every
    /// operation starts here, so the store is a function of the clock with no timers.
    fn with<T>(&self, now: u64, f: impl FnOnce(&mut HashMap<(String, String), JobRecord>) -> T) -> T {
        let mut jobs = self.jobs.lock().expect("jobs lock");
        settle(&mut jobs, now);
        f(&mut jobs)
    }
}

fn key(owner: &str, job_id: &str) -> (String, String) {
    (owner.to_owned(), job_id.to_owned())
}

impl JobStore for MemoryJobStore {
    fn create<'a>(
        &'a self,
        record: &'a JobRecord,
        quota: &'a Quota,
        now: u64,
    ) -> StoreFuture<'a, Result<(), CreateRefused>> {
        let outcome = self.with(now, |jobs| {
            let mine = || jobs.values().filter(|j| j.owner_id == record.owner_id);
            if mine().filter(|j| j.state.is_active()).count() >= quota.active as usize {
                return Err(CreateRefused::AtCap(quota.active));
            }
            if mine().count() >= quota.share as usize {
                return Err(CreateRefused::OverShare(quota.share));
            }
            let mut created = self.created.lock().expect("rate lock");
            let window = now / RATE_WINDOW_MS;
            let count = created.get(&record.owner_id).filter(|(w, _)| *w == window).map_or(0, |(_, n)| *n);
            if count >= quota.per_minute {
                return Err(CreateRefused::TooFast(quota.per_minute));
            }
            if jobs.len() >= quota.total as usize {
                return Err(CreateRefused::Full);
            }
            let key = key(&record.owner_id, &record.job_id);
            if jobs.contains_key(&key) {
                return Err(CreateRefused::Exists);
            }
            created.retain(|_, (w, _)| *w == window);
            created.insert(record.owner_id.clone(), (window, count + 1));
            jobs.insert(key, record.clone());
            Ok(())
        });
        Box::pin(async move { Ok(outcome) })
    }

    fn get<'a>(&'a self, owner: &'a str, job_id: &'a str, now: u64) -> StoreFuture<'a, Option<JobRecord>> {
        let job = self.with(now, |jobs| jobs.get(&key(owner, job_id)).cloned());
        Box::pin(async move { Ok(job) })
    }

    fn cancel<'a>(&'a self, owner: &'a str, job_id: &'a str, now: u64) -> StoreFuture<'a, Option<JobRecord>> {
        let job = self.with(now, |jobs| {
            let job = jobs.get_mut(&key(owner, job_id))?;
            job.cancel(now);
            Some(job.clone())
        });
        Box::pin(async move { Ok(job) })
    }

    fn abandon<'a>(&'a self, owner: &'a str, job_id: &'a str, now: u64) -> StoreFuture<'a, Option<JobRecord>> {
        let job = self.with(now, |jobs| {
            let job = jobs.get_mut(&key(owner, job_id))?;
            job.abandon(now);
            Some(job.clone())
        });
        Box::pin(async move { Ok(job) })
    }

    fn advance<'a>(
        &'a self,
        owner: &'a str,
        job_id: &'a str,
        expected: u32,
        now: u64,
    ) -> StoreFuture<'a, Option<Advanced>> {
        let job = self.with(now, |jobs| {
            let job = jobs.get_mut(&key(owner, job_id))?;
            let applied = job.advance(expected, now);
            Some(Advanced { record: job.clone(), applied })
        });
        Box::pin(async move { Ok(job) })
    }

    fn delete<'a>(&'a self, record: &'a JobRecord) -> StoreFuture<'a, ()> {
        let removed = self.jobs.lock().expect("jobs lock").remove(&key(&record.owner_id, &record.job_id));
        if let Some(stored) = removed {
            let mut created = self.created.lock().expect("rate lock");
            if let Some((window, count)) = created.get_mut(&record.owner_id) {
                if *window == stored.created_at / RATE_WINDOW_MS {
                    *count = count.saturating_sub(1);
                }
            }
        }
        Box::pin(async { Ok(()) })
    }

    fn sweep(&self, now: u64) -> StoreFuture<'_, SweepReport> {
        let report = settle(&mut self.jobs.lock().expect("jobs lock"), now);
        Box::pin(async move { Ok(report) })
    }
}

/// Fails the stuck jobs, then evicts what is past its retention (a job stuck long enough is
/// failed and evicted in one go).
fn settle(jobs: &mut HashMap<(String, String), JobRecord>, now: u64) -> SweepReport {
    let failed_stuck = jobs.values_mut().map(|job| job.fail_if_stuck(now)).filter(|failed| *failed).count() as u32;
    let before = jobs.len();
    jobs.retain(|_, job| job.evict_at().is_none_or(|at| now < at));
    SweepReport { evicted: (before - jobs.len()) as u32, failed_stuck }
}

/// A store that is not configured: every operation fails with a message naming what is missing.
/// Deployments without `REDIS_URL` get this instead of silently keeping jobs in one instance.
#[derive(Debug)]
pub struct UnconfiguredJobStore(pub &'static str);

impl UnconfiguredJobStore {
    fn fail<T: Send + 'static>(&self) -> StoreFuture<'_, T> {
        let message = self.0;
        Box::pin(async move { Err(StoreError::fault(message)) })
    }
}

impl JobStore for UnconfiguredJobStore {
    fn create<'a>(&'a self, _: &'a JobRecord, _: &'a Quota, _: u64) -> StoreFuture<'a, Result<(), CreateRefused>> {
        self.fail()
    }
    fn get<'a>(&'a self, _: &'a str, _: &'a str, _: u64) -> StoreFuture<'a, Option<JobRecord>> {
        self.fail()
    }
    fn cancel<'a>(&'a self, _: &'a str, _: &'a str, _: u64) -> StoreFuture<'a, Option<JobRecord>> {
        self.fail()
    }
    fn abandon<'a>(&'a self, _: &'a str, _: &'a str, _: u64) -> StoreFuture<'a, Option<JobRecord>> {
        self.fail()
    }
    fn advance<'a>(&'a self, _: &'a str, _: &'a str, _: u32, _: u64) -> StoreFuture<'a, Option<Advanced>> {
        self.fail()
    }
    fn delete<'a>(&'a self, _: &'a JobRecord) -> StoreFuture<'a, ()> {
        self.fail()
    }
    fn sweep(&self, _: u64) -> StoreFuture<'_, SweepReport> {
        self.fail()
    }
}
