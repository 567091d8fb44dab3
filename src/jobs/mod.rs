//! Async jobs that survive any instance: the record model, signed handles, the stores (memory
//! and Redis), the queue (Vercel Queues or the in-process local queue), the consumer that runs
//! the steps, and the cron sweep.
//!
//! On Vercel every request may land on a different instance and each `api/*.rs` is its own
//! process, so nothing here keeps job state in memory except the embedded local-run store.

pub mod consumer;
pub mod handle;
pub mod model;
pub mod queue;
pub mod redis_store;
pub mod service;
pub mod store;
pub mod sweep;

pub use consumer::Consumer;
pub use model::{JobRecord, JobResult, JobState};
pub use queue::{JobMessage, LocalQueue, Publisher, QueueApi, VercelQueue};
pub use service::Jobs;
pub use store::{JobStore, MemoryJobStore, UnconfiguredJobStore};
pub use sweep::Sweep;

use std::sync::Arc;

use crate::store::Shared;

/// The job infrastructure of one process.
#[derive(Clone)]
pub struct JobsBackend {
    /// Where job records live.
    pub store: Arc<dyn JobStore>,
    /// Where submits go.
    pub publisher: Arc<dyn Publisher>,
    /// Where leases are acknowledged.
    pub queue_api: Arc<dyn QueueApi>,
    /// The in-process queue, in the local run (the local router connects it to the consumer).
    pub local_queue: Option<LocalQueue>,
}

impl std::fmt::Debug for JobsBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queue = if self.local_queue.is_some() { "in-process" } else { "Vercel Queues" };
        f.debug_struct("JobsBackend").field("queue", &queue).finish_non_exhaustive()
    }
}

impl JobsBackend {
    /// Job records where shared records live, submitted to `queue` (Vercel Queues) or, without
    /// one, to an in-process queue (the local run).
    pub fn new(shared: &Shared, queue: Option<Arc<VercelQueue>>) -> Self {
        let store: Arc<dyn JobStore> = match shared {
            Shared::Memory => Arc::new(MemoryJobStore::new()),
            Shared::Redis(redis) => Arc::new(redis_store::RedisJobStore::new(redis.clone())),
            Shared::Unconfigured => Arc::new(UnconfiguredJobStore(
                "REDIS_URL is not set: async jobs need a shared store (Redis) when deployed",
            )),
        };
        match queue {
            Some(queue) => Self { store, publisher: queue.clone(), queue_api: queue, local_queue: None },
            None => {
                let local = LocalQueue::new();
                Self {
                    store,
                    publisher: Arc::new(local.clone()),
                    queue_api: Arc::new(local.clone()),
                    local_queue: Some(local),
                }
            }
        }
    }

    /// The embedded defaults: memory store and in-process queue.
    pub fn local() -> Self {
        Self::new(&Shared::Memory, None)
    }
}
