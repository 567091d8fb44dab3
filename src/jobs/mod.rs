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
pub use store::{JobStore, MemoryJobStore, StoreError, StoreErrorKind, UnconfiguredJobStore};
pub use sweep::Sweep;

use std::sync::Arc;

/// The job infrastructure of one process, chosen from configuration.
#[derive(Clone)]
pub struct JobsBackend {
    /// Where job records live.
    pub store: Arc<dyn JobStore>,
    /// Where task records (the tasks extension) live.
    pub task_store: Arc<dyn crate::tasks::TaskStore>,
    /// Where the query-command example keeps its items (the same shared store).
    pub item_store: Arc<dyn crate::catalogue::query_command::ItemStore>,
    /// Where the secure-tools example appends names (the same shared store).
    pub name_list: Arc<dyn crate::catalogue::secure_tools::NameList>,
    /// Where submits go.
    pub publisher: Arc<dyn Publisher>,
    /// Where leases are acknowledged.
    pub queue_api: Arc<dyn QueueApi>,
    /// The in-process queue, in the local run (the local router connects it to the consumer).
    pub local_queue: Option<LocalQueue>,
    /// A human-readable description for the start-up banner.
    pub description: String,
}

impl std::fmt::Debug for JobsBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.description)
    }
}

impl JobsBackend {
    /// The embedded defaults: memory store and in-process queue.
    pub fn local() -> Self {
        let queue = LocalQueue::new();
        Self {
            store: Arc::new(MemoryJobStore::new()),
            task_store: Arc::new(crate::tasks::MemoryTaskStore::default()),
            item_store: Arc::new(crate::catalogue::query_command::MemoryItemStore::default()),
            name_list: Arc::new(crate::catalogue::secure_tools::MemoryNameList::default()),
            publisher: Arc::new(queue.clone()),
            queue_api: Arc::new(queue.clone()),
            local_queue: Some(queue),
            description: "jobs: in-memory store, in-process queue".into(),
        }
    }
}
