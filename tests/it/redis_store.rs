//! The Redis job store against a real Redis: atomic caps under concurrency, compare-and-set
//! steps, cancellation, TTLs on every key, the sweep, and outages; the task store's quota.

use crate::common;

use common::redis::{redis, unique_prefix};
use std::sync::Arc;

use vercel_mcp::jobs::model::{JOB_DEADLINE_MS, JOB_RETENTION_MS, JobRecord, JobState};
use vercel_mcp::jobs::redis_store::RedisJobStore;
use vercel_mcp::jobs::store::{CreateRefused, Quota};
use vercel_mcp::jobs::{JobStore, Jobs, LocalQueue};
use vercel_mcp::security::Principal;
use vercel_mcp::state::{ManualClock, Sealer, SeededRandom};
use vercel_mcp::store::Redis;
use vercel_mcp::tasks::{MemoryTaskStore, RedisTaskStore, TaskQuota, TaskRecord, TaskRefused, TaskStore};

const NOW: u64 = 1_700_000_000_000;

/// The key a Lua script's `redis.call`/`redis.pcall` names, or `None` for a command that takes
/// none: the first argument after the command, or after its subcommand for the commands that
/// have one. `call` is the text from just after the opening parenthesis.
fn script_key(call: &str) -> Option<&str> {
    let mut arguments = call.split([',', ')']).map(str::trim);
    let command = arguments.next()?.trim_matches('\'').to_ascii_uppercase();
    match command.as_str() {
        "TIME" => None,
        "XGROUP" | "XINFO" | "OBJECT" => arguments.nth(1),
        _ => arguments.next(),
    }
}

/// Every key a Redis script touches is one it declares (`KEYS[n]`), as Redis requires of scripts
/// (a cluster routes them by those keys, and a key built inside the script may live elsewhere).
/// A script that built its key from an argument or from what it read would fail here.
#[test]
fn every_redis_script_touches_only_the_keys_it_declares() {
    let mut calls = 0;
    let mut undeclared = Vec::new();
    for (path, text) in crate::layers::source_files() {
        for (at, _) in text.match_indices("redis.call(").chain(text.match_indices("redis.pcall(")) {
            let call = &text[at..][text[at..].find('(').unwrap() + 1..];
            let call = &call[..call.find('\n').unwrap_or(call.len())];
            calls += 1;
            if let Some(key) = script_key(call) {
                if !key.starts_with("KEYS[") {
                    undeclared.push(format!("{}: {call}", path.display()));
                }
            }
        }
    }
    assert!(calls > 40, "the scripts were read ({calls} calls)");
    assert!(undeclared.is_empty(), "keys a script builds itself: {undeclared:#?}");
    assert_eq!(script_key("'GET', rate)"), Some("rate"), "the check reads the key");
    assert_eq!(script_key("'XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1])"), Some("KEYS[1]"));
}

fn id(n: u32) -> String {
    format!("{n:0>22}")
}

async fn keys(url: &str, pattern: &str) -> Vec<String> {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("KEYS").arg(pattern).query_async(&mut conn).await.unwrap()
}

/// Every key of this Redis and its serialised value (`DUMP`, which leaves out the expiry): equal
/// snapshots hold the same data.
async fn snapshot(url: &str) -> std::collections::BTreeMap<String, Vec<u8>> {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut data = std::collections::BTreeMap::new();
    for key in keys(url, "*").await {
        let value: Vec<u8> = redis::cmd("DUMP").arg(&key).query_async(&mut conn).await.unwrap();
        data.insert(key, value);
    }
    data
}

async fn pttl(url: &str, key: &str) -> i64 {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("PTTL").arg(key).query_async(&mut conn).await.unwrap()
}

#[tokio::test]
async fn caps_hold_under_concurrent_submits() {
    let Some((url, _guard)) = redis() else { return };
    let store = Arc::new(RedisJobStore::new(Redis::connect(&url, &unique_prefix("caps")).unwrap()));
    let attempts = (0..20).map(|n| {
        let store = store.clone();
        tokio::spawn(async move {
            let record = JobRecord::new(id(n), "sub:alice".into(), 3, NOW);
            store.create(&record, &Quota::new(8, 256), NOW).await.unwrap()
        })
    });
    let outcomes: Vec<_> = futures_join(attempts).await;
    let created = outcomes.iter().filter(|o| o.is_ok()).count();
    assert_eq!(created, 8, "exactly the cap, never more");
    assert!(outcomes.iter().filter(|o| o.is_err()).all(|o| *o == Err(CreateRefused::AtCap(8))));
    let other = JobRecord::new(id(99), "sub:bob".into(), 3, NOW);
    assert_eq!(store.create(&other, &Quota::new(8, 256), NOW).await.unwrap(), Ok(()), "alice's cap does not block bob");
    let over_total = JobRecord::new(id(100), "sub:carol".into(), 3, NOW);
    assert_eq!(store.create(&over_total, &Quota::new(8, 9), NOW).await.unwrap(), Err(CreateRefused::Full));
}

async fn futures_join<T: Send + 'static>(handles: impl Iterator<Item = tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for handle in handles.collect::<Vec<_>>() {
        out.push(handle.await.unwrap());
    }
    out
}

#[tokio::test]
async fn steps_apply_once_cancel_wins_and_every_key_expires() {
    let Some((url, _guard)) = redis() else { return };
    let prefix = unique_prefix("steps");
    let store = RedisJobStore::new(vercel_mcp::store::Redis::connect(&url, &prefix).unwrap());
    let record = JobRecord::new(id(1), "sub:a:b".into(), 3, NOW);
    store.create(&record, &Quota::new(8, 256), NOW).await.unwrap().unwrap();
    let after_one = store.advance("sub:a:b", &id(1), 0, NOW + 1).await.unwrap().unwrap();
    assert_eq!(
        (after_one.record.state, after_one.record.completed_steps, after_one.applied),
        (JobState::Running, 1, true)
    );
    let duplicate = store.advance("sub:a:b", &id(1), 0, NOW + 2).await.unwrap().unwrap();
    assert_eq!(duplicate.record.completed_steps, 1, "a redelivered step is not applied twice");
    assert!(!duplicate.applied, "and the call says so");
    assert_eq!(store.get("sub:a", &id(1), NOW).await.unwrap(), None, "the owner is part of the key");
    for key in keys(&url, &format!("{prefix}:*")).await {
        assert!(pttl(&url, &key).await > 0, "{key} has a TTL");
    }
    let cancelled = store.cancel("sub:a:b", &id(1), NOW + 3).await.unwrap().unwrap();
    assert_eq!((cancelled.state, cancelled.finished_at), (JobState::Cancelled, Some(NOW + 3)));
    let after_cancel = store.advance("sub:a:b", &id(1), 1, NOW + 4).await.unwrap().unwrap();
    let after_cancel = (after_cancel.record.state, after_cancel.record.completed_steps, after_cancel.applied);
    assert_eq!(after_cancel, (JobState::Cancelled, 1, false), "no step after cancel");
    let again = store.cancel("sub:a:b", &id(1), NOW + 5).await.unwrap().unwrap();
    assert_eq!(again.finished_at, Some(NOW + 3), "repeated cancels do not extend retention");
    let ttl = pttl(&url, &format!("{prefix}:job:{}:{}", "c3ViOmE6Yg", id(1))).await;
    assert!(ttl > 0 && ttl <= JOB_RETENTION_MS as i64, "finished jobs keep the retention TTL, got {ttl}");
    // Finishing frees the slot: a cap of 1 admits a new job.
    let next = JobRecord::new(id(2), "sub:a:b".into(), 1, NOW);
    assert_eq!(store.create(&next, &Quota::new(1, 256), NOW).await.unwrap(), Ok(()));
    let done = store.advance("sub:a:b", &id(2), 0, NOW + 6).await.unwrap().unwrap().record;
    assert_eq!((done.state, done.result.map(|r| r.sum)), (JobState::Done, Some(0)));
}

/// A job's last write re-creates its owner's held set and the index if they were trimmed empty or
/// evicted since the create gave them a TTL: they expire with what they hold, never live forever.
#[tokio::test]
async fn a_finishing_write_never_leaves_a_set_without_a_ttl() {
    let Some((url, _guard)) = redis() else { return };
    let prefix = unique_prefix("rearm");
    let store = RedisJobStore::new(vercel_mcp::store::Redis::connect(&url, &prefix).unwrap());
    store.create(&JobRecord::new(id(1), "sub:a".into(), 3, NOW), &Quota::new(8, 256), NOW).await.unwrap().unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (held, index) = (format!("{prefix}:held:c3ViOmE"), format!("{prefix}:index"));
    let removed: u32 = redis::cmd("DEL").arg(&held).arg(&index).query_async(&mut conn).await.unwrap();
    assert_eq!(removed, 2, "both sets existed");
    store.cancel("sub:a", &id(1), NOW + 1).await.unwrap().unwrap();
    for key in [&held, &index] {
        let ttl = pttl(&url, key).await;
        assert!(ttl > 0 && ttl <= JOB_RETENTION_MS as i64, "{key} lasts as long as the job it holds: {ttl}");
    }
}

/// Rolling a job back gives its count in the per-minute rate back once: a second delete of the
/// same job (a retried rollback) finds nothing and gives back nothing more, and a delete in a
/// later window leaves that window's count alone. Memory and Redis alike.
#[tokio::test]
async fn a_rollback_gives_back_its_rate_count_once() {
    let mut stores: Vec<Arc<dyn JobStore>> = vec![Arc::new(vercel_mcp::jobs::MemoryJobStore::new())];
    let redis = redis();
    if let Some((url, _)) = &redis {
        stores.push(Arc::new(RedisJobStore::new(Redis::connect(url, &unique_prefix("rollback")).unwrap())));
    }
    let rate = Quota { active: 8, share: 100, per_minute: 2, total: 256 };
    let minute = (NOW / 60_000 + 1) * 60_000;
    for store in stores {
        let job = |n, at| JobRecord::new(id(n), "sub:r".into(), 1, at);
        let (first, second) = (job(1, minute), job(2, minute + 1));
        store.create(&first, &rate, minute).await.unwrap().unwrap();
        store.create(&second, &rate, minute + 1).await.unwrap().unwrap();
        store.delete(&first).await.unwrap();
        store.delete(&first).await.unwrap();
        store.create(&job(3, minute + 2), &rate, minute + 2).await.unwrap().unwrap();
        let refused = store.create(&job(4, minute + 3), &rate, minute + 3).await.unwrap();
        assert_eq!(refused, Err(CreateRefused::TooFast(2)), "the second delete gave nothing back");

        let next = minute + 60_000;
        store.create(&job(5, next), &rate, next).await.unwrap().unwrap();
        store.delete(&second).await.unwrap();
        store.create(&job(6, next + 1), &rate, next + 1).await.unwrap().unwrap();
        let refused = store.create(&job(7, next + 2), &rate, next + 2).await.unwrap();
        assert_eq!(refused, Err(CreateRefused::TooFast(2)), "an older job's rollback leaves this window's count");
    }
}

#[tokio::test]
async fn the_sweep_fails_stuck_jobs_and_forgets_evicted_ones() {
    let Some((url, _guard)) = redis() else { return };
    let store = RedisJobStore::new(Redis::connect(&url, &unique_prefix("sweep")).unwrap());
    let stuck = JobRecord::new(id(1), "sub:a".into(), 3, NOW);
    store.create(&stuck, &Quota::new(8, 256), NOW).await.unwrap().unwrap();
    store.create(&JobRecord::new(id(2), "sub:a".into(), 1, NOW), &Quota::new(8, 256), NOW).await.unwrap().unwrap();
    store.advance("sub:a", &id(2), 0, NOW).await.unwrap();
    let early = store.sweep(NOW + 1).await.unwrap();
    assert_eq!((early.failed_stuck, early.evicted), (0, 0));
    let late = store.sweep(NOW + JOB_DEADLINE_MS).await.unwrap();
    assert_eq!(late.failed_stuck, 1);
    assert_eq!(store.get("sub:a", &id(1), NOW).await.unwrap().unwrap().state, JobState::Failed);
    store.delete(&stuck).await.unwrap();
    assert_eq!(store.get("sub:a", &id(1), NOW).await.unwrap(), None);
}

/// With no sweep at all (Hobby runs it once a day), Redis alone gets a stuck job right: it reads
/// `failed` from its deadline, frees its slot, refuses further steps and cancels (whichever of the
/// two comes first stores the failure), and its key lives until its retention after the deadline.
#[tokio::test]
async fn a_stuck_job_is_failed_by_every_operation_without_the_sweep() {
    let Some((url, _guard)) = redis() else { return };
    let prefix = unique_prefix("stuck");
    let store = RedisJobStore::new(vercel_mcp::store::Redis::connect(&url, &prefix).unwrap());
    for n in [1, 3] {
        store.create(&JobRecord::new(id(n), "sub:a".into(), 3, NOW), &Quota::new(2, 256), NOW).await.unwrap().unwrap();
    }
    let key = |n| format!("{prefix}:job:{}:{}", "c3ViOmE", id(n));
    let ttl = pttl(&url, &key(1)).await;
    let kept = (JOB_DEADLINE_MS + JOB_RETENTION_MS) as i64;
    assert!(ttl > kept - 60_000 && ttl <= kept, "an active record lives until its failure expires, got {ttl}");
    let deadline = NOW + JOB_DEADLINE_MS;
    assert_eq!(store.get("sub:a", &id(1), deadline - 1).await.unwrap().unwrap().state, JobState::Pending);
    let read = store.get("sub:a", &id(1), deadline + 10).await.unwrap().unwrap();
    assert_eq!((read.state, read.finished_at), (JobState::Failed, Some(deadline)), "a read sees the failure");
    assert_eq!(
        store.create(&JobRecord::new(id(2), "sub:a".into(), 1, deadline), &Quota::new(1, 256), deadline).await.unwrap(),
        Ok(()),
        "both slots are free at the deadline"
    );
    // Job 1 is first touched by a late step, job 3 by a cancel: each stores the failure.
    let advanced = store.advance("sub:a", &id(1), 0, deadline + 20).await.unwrap().unwrap();
    let advanced = (advanced.record.state, advanced.record.completed_steps, advanced.applied);
    assert_eq!(advanced, (JobState::Failed, 0, false), "no step after the deadline");
    let cancelled = store.cancel("sub:a", &id(3), deadline + 20).await.unwrap().unwrap();
    assert_eq!((cancelled.state, cancelled.finished_at), (JobState::Failed, Some(deadline)), "not cancelled");
    assert_eq!(store.cancel("sub:a", &id(1), deadline + 30).await.unwrap().unwrap().state, JobState::Failed);
    assert_eq!(store.advance("sub:a", &id(3), 0, deadline + 30).await.unwrap().unwrap().record.completed_steps, 0);
    // Stored with a TTL that ends retention after the deadline, not after the write.
    let until = JOB_RETENTION_MS as i64 - 20;
    for n in [1, 3] {
        let ttl = pttl(&url, &key(n)).await;
        assert!(ttl > until - 60_000 && ttl <= until, "job {n}: retention runs from the deadline: {ttl} <= {until}");
    }
    assert_eq!(store.sweep(deadline + 40).await.unwrap().failed_stuck, 0, "nothing left for the sweep to fail");
}

/// The share and the rate hold across instances because Redis keeps them: cancelled jobs count
/// against their owner's share until they expire, another owner is not affected, and a minute's
/// submissions are counted in a key that expires with the minute.
#[tokio::test]
async fn the_share_and_the_rate_are_per_owner_and_shared_by_every_instance() {
    let Some((url, _guard)) = redis() else { return };
    let prefix = unique_prefix("share");
    let (a, b) = (
        RedisJobStore::new(vercel_mcp::store::Redis::connect(&url, &prefix).unwrap()),
        RedisJobStore::new(vercel_mcp::store::Redis::connect(&url, &prefix).unwrap()),
    );
    let quota = Quota { active: 8, share: 3, per_minute: 100, total: 256 };
    for n in 0..3 {
        let store = if n % 2 == 0 { &a } else { &b };
        store.create(&JobRecord::new(id(n), "sub:m".into(), 1, NOW), &quota, NOW).await.unwrap().unwrap();
        store.cancel("sub:m", &id(n), NOW).await.unwrap();
    }
    let over = JobRecord::new(id(3), "sub:m".into(), 1, NOW);
    assert_eq!(
        b.create(&over, &quota, NOW).await.unwrap(),
        Err(CreateRefused::OverShare(3)),
        "cancelled jobs still count"
    );
    assert_eq!(a.create(&JobRecord::new(id(4), "sub:o".into(), 1, NOW), &quota, NOW).await.unwrap(), Ok(()));
    let later = NOW + JOB_RETENTION_MS;
    let fifth = JobRecord::new(id(5), "sub:m".into(), 1, later);
    assert_eq!(a.create(&fifth, &quota, later).await.unwrap(), Ok(()), "expired");
    a.delete(&fifth).await.unwrap();

    let rate = Quota { active: 8, share: 100, per_minute: 2, total: 256 };
    let minute = (NOW / 60_000 + 10) * 60_000;
    for n in 10..12 {
        let store = if n % 2 == 0 { &a } else { &b };
        store.create(&JobRecord::new(id(n), "sub:r".into(), 1, minute), &rate, minute).await.unwrap().unwrap();
    }
    let third = JobRecord::new(id(12), "sub:r".into(), 1, minute + 59_999);
    assert_eq!(a.create(&third, &rate, minute + 59_999).await.unwrap(), Err(CreateRefused::TooFast(2)));
    let next = minute + 60_000;
    assert_eq!(b.create(&JobRecord::new(id(13), "sub:r".into(), 1, next), &rate, next).await.unwrap(), Ok(()));
    for key in keys(&url, &format!("{prefix}:*")).await {
        assert!(pttl(&url, &key).await > 0, "{key} expires");
    }
}

/// A task record created by `owner` at `at`, kept for `ttl_ms`.
fn task(owner: &str, n: u32, at: u64, ttl_ms: u64) -> TaskRecord {
    serde_json::from_value(serde_json::json!({
        "version": 1, "taskId": id(n), "owner": owner, "ownerVerified": true, "ownerScopes": [],
        "tool": "t", "arguments": {}, "status": "working", "createdAt": at, "updatedAt": at, "ttlMs": ttl_ms
    }))
    .unwrap()
}

/// The task quota, against `stores` sharing one set of records: a share of held tasks (whatever
/// their status, until they expire) and a rate per minute, each per owner, and a total of held
/// tasks for every owner together.
async fn check_task_quota(stores: &[&dyn TaskStore]) {
    let pick = |n: u32| stores[n as usize % stores.len()];
    let share = TaskQuota { share: 3, per_minute: 100, total: 100 };
    for n in 0..3 {
        pick(n).create(&task("sub:m", n, NOW, 60_000), share).await.unwrap().unwrap();
    }
    let over = pick(3).create(&task("sub:m", 3, NOW, 60_000), share).await.unwrap();
    assert_eq!(over, Err(TaskRefused::OverShare(3)));
    assert!(pick(3).get("sub:m", &id(3)).await.unwrap().is_none(), "a refused task is not stored");
    assert_eq!(pick(4).create(&task("sub:o", 4, NOW, 60_000), share).await.unwrap(), Ok(()), "per owner");
    let expired = NOW + 60_000;
    assert_eq!(pick(5).create(&task("sub:m", 5, expired, 60_000), share).await.unwrap(), Ok(()), "expired ones leave");

    let rate = TaskQuota { share: 100, per_minute: 2, total: 100 };
    let minute = (NOW / 60_000 + 10) * 60_000;
    for n in 10..12 {
        pick(n).create(&task("sub:r", n, minute, 600_000), rate).await.unwrap().unwrap();
    }
    let third = pick(12).create(&task("sub:r", 12, minute + 59_999, 600_000), rate).await.unwrap();
    assert_eq!(third, Err(TaskRefused::TooFast(2)));
    let next = minute + 60_000;
    assert_eq!(pick(13).create(&task("sub:r", 13, next, 600_000), rate).await.unwrap(), Ok(()), "a new minute");

    // Every owner together: the total counts each owner's held tasks, whoever holds them, and a
    // refused task is not stored; expired ones leave it. (Held at `later`: sub:r's three, which
    // outlive the others, then sub:t1's and sub:t2's.)
    let later = next + 1;
    let total = TaskQuota { share: 100, per_minute: 100, total: 5 };
    for (n, owner) in [(20, "sub:t1"), (21, "sub:t2")] {
        pick(n).create(&task(owner, n, later, 60_000), total).await.unwrap().unwrap();
    }
    let over = pick(22).create(&task("sub:t3", 22, later, 60_000), total).await.unwrap();
    assert_eq!(over, Err(TaskRefused::OverTotal(5)), "a new owner, within its own share");
    assert!(pick(22).get("sub:t3", &id(22)).await.unwrap().is_none(), "a refused task is not stored");
    let one_more = TaskQuota { total: 6, ..total };
    assert_eq!(
        pick(24).create(&task("sub:t3", 24, later, 60_000), one_more).await.unwrap(),
        Ok(()),
        "nor counted: with room for one more, the next is stored"
    );
    let after = later + 660_000;
    assert_eq!(pick(23).create(&task("sub:t3", 23, after, 60_000), total).await.unwrap(), Ok(()), "expired ones leave");
}

/// Tasks have a share and a rate per owner, and a total for every owner together, kept across
/// instances in Redis (and the same in the local run's memory), and every key the quota adds
/// expires.
#[tokio::test]
async fn a_task_owner_has_a_share_and_a_rate_and_all_owners_a_total() {
    check_task_quota(&[&MemoryTaskStore::default()]).await;
    let Some((url, _guard)) = redis() else { return };
    let prefix = unique_prefix("task-quota");
    let a = RedisTaskStore::new(Redis::connect(&url, &prefix).unwrap());
    let b = RedisTaskStore::new(Redis::connect(&url, &prefix).unwrap());
    check_task_quota(&[&a, &b]).await;
    let keys = keys(&url, &format!("{prefix}:*")).await;
    assert!(keys.iter().any(|k| k.contains(":task-held:")) && keys.iter().any(|k| k.contains(":task-rate:")));
    assert!(keys.iter().any(|k| k.ends_with(":task-held-all")), "{keys:?}");
    for key in keys {
        assert!(pttl(&url, &key).await > 0, "{key} expires");
    }
}

/// A `requestState` nonce is used once across every instance sharing Redis, and is forgotten
/// with the state's lifetime.
#[tokio::test]
async fn a_request_state_nonce_is_used_once_across_instances() {
    use vercel_mcp::state::{NonceStore, RedisNonces};
    let Some((url, _guard)) = redis() else { return };
    let prefix = unique_prefix("nonce");
    let connect = || vercel_mcp::store::Redis::connect(&url, &prefix).unwrap();
    let (a, b) = (RedisNonces::new(&connect()), RedisNonces::new(&connect()));
    assert_eq!(a.consume("n1", NOW, 600_000).await, Ok(true));
    assert_eq!(b.consume("n1", NOW, 600_000).await, Ok(false), "a replay on another instance");
    assert_eq!(a.consume("n1", NOW, 600_000).await, Ok(false));
    assert_eq!(b.consume("n2", NOW, 600_000).await, Ok(true));
    let ttl = pttl(&url, &format!("{prefix}:nonce:n1")).await;
    assert!(ttl > 0 && ttl <= 600_000, "{ttl}");
}

/// A store that is down is a clear error; one that comes back has lost nothing; and a submit
/// whose record landed but whose message could not be sent is undone whole (record, active
/// slot, held share): Redis holds exactly what it held before.
#[tokio::test]
async fn an_outage_is_a_clear_error_and_leaves_no_partial_record() {
    let Some(mut private) = common::redis::private_redis() else { return };
    let clock = Arc::new(ManualClock::new(NOW));
    let sealer = Sealer::new(vec![("k".into(), vec![1; 32])], clock.clone()).unwrap();
    let store = Arc::new(RedisJobStore::new(Redis::connect(&private.url(), &unique_prefix("outage")).unwrap()));
    let queue = LocalQueue::new();
    let jobs = Jobs::new(store.clone(), Arc::new(queue), sealer.clone(), clock.clone(), Arc::new(SeededRandom::new(3)));
    let alice = Principal::verified(Some("alice"), None, vec![]);
    let handle = jobs.submit(&alice, 2, None).await.unwrap().job_id;
    private.stop();
    let error = jobs.status(&alice, &handle).await.unwrap_err();
    assert!(error.starts_with("job store unavailable"), "{error}");
    assert!(!error.contains("redis://"), "no URL in errors");
    assert!(jobs.submit(&alice, 2, None).await.unwrap_err().starts_with("job store unavailable"));
    assert!(private.restart());
    // This Redis persists: the earlier job is still there after the restart, so an empty store
    // could not pass for "nothing partial"; only the failed submit's writes must be missing.
    let mut reconnected = false;
    for _ in 0..50 {
        match jobs.status(&alice, &handle).await {
            Err(e) if e.starts_with("job store unavailable") => tokio::task::yield_now().await,
            _ => {
                reconnected = true;
                break;
            }
        }
    }
    assert!(reconnected, "the store reconnects after the outage");
    assert_eq!(jobs.status(&alice, &handle).await.unwrap().state, "pending", "the earlier job survived the restart");
    let records = keys(&private.url(), "*:job:*").await;
    assert_eq!(records.len(), 1, "one job record, the earlier one: {records:?}");

    // The record of this submit is written, then its publish fails: it is rolled back.
    let before = snapshot(&private.url()).await;
    let failing = vercel_mcp::jobs::queue::FailingPublisher("queue down".into());
    let failing = Jobs::new(store.clone(), Arc::new(failing), sealer, clock, Arc::new(SeededRandom::new(4)));
    let error = failing.submit(&alice, 2, None).await.unwrap_err();
    assert!(error.starts_with("could not enqueue the job: queue down"), "{error}");
    let after = snapshot(&private.url()).await;
    assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>());
    assert!(after == before, "the failed submit left something behind");
}
