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
pub use queue::{JobMessage, LocalQueue, Publisher, QueueApi, RedisStreamQueue, VercelQueue};
pub use service::{JobOutcome, JobProgress, Jobs, Submitted};
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
    /// The Redis stream, off Vercel with Redis (each process runs a worker on it).
    pub stream_queue: Option<Arc<RedisStreamQueue>>,
}

/// Which queue a process publishes jobs to.
pub enum Transport {
    /// Vercel Queues.
    Vercel(Arc<VercelQueue>),
    /// A Redis stream.
    RedisStreams(Arc<RedisStreamQueue>),
    /// The in-process queue.
    Local,
}

impl std::fmt::Debug for JobsBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queue = match (&self.local_queue, &self.stream_queue) {
            (Some(_), _) => "in-process",
            (None, Some(_)) => "Redis Streams",
            (None, None) => "Vercel Queues",
        };
        f.debug_struct("JobsBackend").field("queue", &queue).finish_non_exhaustive()
    }
}

impl JobsBackend {
    /// Job records where shared records live, submitted through `transport`.
    pub fn new(shared: &Shared, transport: Transport) -> Self {
        let store: Arc<dyn JobStore> = match shared {
            Shared::Memory => Arc::new(MemoryJobStore::new()),
            Shared::Redis(redis) => Arc::new(redis_store::RedisJobStore::new(redis.clone())),
            Shared::Unconfigured => Arc::new(UnconfiguredJobStore(
                "REDIS_URL is not set: async jobs need a shared store (Redis) when deployed",
            )),
        };
        match transport {
            Transport::Vercel(queue) => {
                Self { store, publisher: queue.clone(), queue_api: queue, local_queue: None, stream_queue: None }
            }
            Transport::RedisStreams(queue) => Self {
                store,
                publisher: queue.clone(),
                queue_api: queue.clone(),
                local_queue: None,
                stream_queue: Some(queue),
            },
            Transport::Local => {
                let local = LocalQueue::new();
                Self {
                    store,
                    publisher: Arc::new(local.clone()),
                    queue_api: Arc::new(local.clone()),
                    local_queue: Some(local),
                    stream_queue: None,
                }
            }
        }
    }

    /// The embedded defaults: memory store and in-process queue.
    pub fn local() -> Self {
        Self::new(&Shared::Memory, Transport::Local)
    }
}
