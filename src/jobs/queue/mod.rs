//! The job queue: the message format, publishing, and acknowledging leases.
//!
//! Three transports, one consumer contract ([`crate::jobs::Consumer::run`]):
//! - deployed, Vercel Queues: [`VercelQueue`] publishes with the REST API and acknowledges
//!   leases after the consumer succeeds;
//! - off Vercel with Redis, a Redis stream ([`RedisStreamQueue`]): every instance is a consumer
//!   of one group, and a delivery whose consumer died is reclaimed by another;
//! - without Redis, the in-process [`LocalQueue`]: it delivers each message to the consumer
//!   handler over the same HTTP contract as Vercel (a v2beta binary-mode CloudEvent) and
//!   redelivers until it is acknowledged.
//!
//! This file holds the message and the two sides' traits; `vercel.rs`, `redis_stream.rs` and
//! `local.rs` the transports.

mod local;
mod redis_stream;
mod vercel;

pub use local::{CONCURRENT_DELIVERIES, DeliverFn, LOCAL_CONSUMER_GROUP, LocalQueue, MAX_PENDING};
pub use redis_stream::{RedisStreamQueue, STREAM_CONSUMER_GROUP, StreamSettings};
pub use vercel::{ACK_ATTEMPTS, QUEUE_CALL_TIMEOUT, VERCEL_CONSUMER_GROUP, VercelQueue};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::handle::is_job_id;
use super::model::MAX_STEPS;
use crate::store::Redis;

/// A boxed, sendable future.
pub type QueueFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// A boxed publish future.
pub type PublishFuture<'a> = Pin<Box<dyn Future<Output = Result<(), PublishError>> + Send + 'a>>;

/// Why a message was not published. The text is for the caller: no URLs, tokens or keys.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PublishError {
    /// The queue is at capacity: an answer for the caller (try again later), not a fault.
    Full(String),
    /// The queue could not be reached or refused the message: a fault for an operator.
    Failed(String),
}

/// What the queue carries: which job to run, for whom, and how many steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobMessage {
    /// The raw job id.
    pub job_id: String,
    /// The owning principal. Trusted only after the consumer has confirmed the delivery's lease
    /// with the queue, and checked against the store: a job must exist under this owner to be
    /// worked on.
    pub owner_id: String,
    /// Steps to run.
    pub steps: u32,
    /// The W3C `traceparent` of the span that submitted the job, when tracing is on: the
    /// delivery's span links to it. A malformed one is dropped, never trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

impl JobMessage {
    /// The body every transport carries: the message as JSON.
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("messages serialise")
    }

    /// Parses and validates a message body; `None` for anything that is not exactly a job.
    pub fn parse(body: &[u8]) -> Option<Self> {
        let value: Value = serde_json::from_slice(body).ok()?;
        let object = value.as_object()?;
        let job_id = object.get("jobId")?.as_str()?;
        let owner_id = object.get("ownerId")?.as_str()?;
        let steps = object.get("steps")?.as_u64()?;
        let valid = is_job_id(job_id)
            && !owner_id.is_empty()
            && owner_id.len() <= crate::security::principal::MAX_ID_BYTES
            && (1..=u64::from(MAX_STEPS)).contains(&steps);
        let traceparent = object
            .get("traceparent")
            .and_then(|t| t.as_str())
            .filter(|t| crate::telemetry::trace_id_from(t).is_some())
            .map(str::to_owned);
        valid.then(|| Self {
            job_id: job_id.to_owned(),
            owner_id: owner_id.to_owned(),
            steps: steps as u32,
            traceparent,
        })
    }
}

/// The lease a consumer acknowledges once it has processed a delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Region the message was delivered from (`ce-vqsregion`).
    pub region: Option<String>,
    /// Topic.
    pub topic: String,
    /// Consumer group.
    pub group: String,
    /// Receipt handle of this delivery.
    pub receipt: String,
    /// The message the delivery says it carries (`ce-vqsmessageid`).
    pub message_id: String,
    /// The delivery's platform token, when it names this project (else the deployment's own
    /// authenticates the confirmation and the acknowledgement).
    pub oidc_token: Option<String>,
}

/// Publishing side.
pub trait Publisher: Send + Sync + 'static {
    /// Enqueues `message` on the jobs topic. `oidc_token` authenticates against the platform.
    fn publish<'a>(&'a self, message: &'a JobMessage, oidc_token: Option<&'a str>) -> PublishFuture<'a>;

    /// The Redis stream this queue is, if it is one. A job store on the same connection then
    /// adds the message in the step that creates the job ([`crate::jobs::JobStore::create_enqueued`]):
    /// one round trip instead of two, and never a job without its message.
    fn redis_stream(&self) -> Option<StreamTarget<'_>> {
        None
    }
}

/// A queue that is a Redis stream, as a job store needs it to add a message in its own script.
#[derive(Clone, Copy, Debug)]
pub struct StreamTarget<'a> {
    /// The connection the stream is reached through.
    pub redis: &'a Redis,
    /// The stream's key.
    pub stream: &'a str,
    /// Messages the stream holds before it refuses more.
    pub max_len: u32,
}

/// A delivered stream entry, as a job store needs it to acknowledge the entry in the step that
/// ends its job ([`crate::jobs::JobStore::advance_settling`]).
#[derive(Clone, Copy, Debug)]
pub struct StreamEntry<'a> {
    /// The stream the entry was read from.
    pub target: StreamTarget<'a>,
    /// The consumer group that read it.
    pub group: &'a str,
    /// The entry's id.
    pub id: &'a str,
}

/// What the caller reads when the queue is at its bound.
pub fn queue_full_refusal(max_len: u32) -> String {
    format!("the job queue is full ({max_len} waiting); try again later")
}

/// What the queue says of a delivery's lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Confirmation {
    /// A live lease of this deployment: the delivery is acted on.
    Live,
    /// A redundant delivery: its message was already processed (`already_processed`, the
    /// queue's 410) or is another delivery's now (`not_available`, its 409). Answered 200
    /// `skipped` with that reason, as Vercel's own consumer answers it, and not acted on.
    Redundant(&'static str),
    /// A lease the queue does not know (a forged delivery, or one it has forgotten): refused.
    Unknown,
}

/// Consuming side: confirming a delivery's lease before acting on it, and acknowledging it
/// after (so the message is not redelivered).
pub trait QueueApi: Send + Sync + 'static {
    /// The consumer group this deployment's deliveries come from; any other is refused before
    /// the queue is asked anything.
    fn consumer_group(&self) -> &str;
    /// Asks the queue whether `lease` is a live lease of this deployment, extending its
    /// visibility to `visibility` (so it is not redelivered while the work runs). `Err`: the queue
    /// could not be asked, or refused this deployment's own credentials.
    fn confirm<'a>(&'a self, lease: &'a Lease, visibility: Duration) -> QueueFuture<'a, Confirmation>;
    /// Deletes the lease.
    fn ack<'a>(&'a self, lease: &'a Lease) -> QueueFuture<'a, ()>;
    /// Offers `lease`'s message again after `after`, for a delivery that left work for the next
    /// one: without it, the next delivery waits for the visibility confirmed at the start to run
    /// out. By default the queue redelivers on its own schedule.
    fn resume_after<'a>(&'a self, lease: &'a Lease, after: Duration) -> QueueFuture<'a, ()> {
        let _ = (lease, after);
        Box::pin(async { Ok(()) })
    }
}

/// A publisher that always fails (fault tests, and deployments missing configuration).
#[derive(Debug)]
pub struct FailingPublisher(pub String);

impl Publisher for FailingPublisher {
    fn publish<'a>(&'a self, _: &'a JobMessage, _: Option<&'a str>) -> PublishFuture<'a> {
        let message = self.0.clone();
        Box::pin(async move { Err(PublishError::Failed(message)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_well_formed_messages() {
        let id = "AAAAAAAAAAAAAAAAAAAAAA";
        assert_eq!(
            JobMessage::parse(format!(r#"{{"jobId":"{id}","ownerId":"sub:a","steps":3,"extra":1}}"#).as_bytes()),
            Some(JobMessage { job_id: id.into(), owner_id: "sub:a".into(), steps: 3, traceparent: None })
        );
        let longest = "s".repeat(crate::security::principal::MAX_ID_BYTES);
        let body = format!(r#"{{"jobId":"{id}","ownerId":"{longest}","steps":3}}"#);
        assert_eq!(JobMessage::parse(body.as_bytes()).map(|m| m.owner_id.len()), Some(longest.len()));
        for bad in [
            "null".to_owned(),
            "{}".to_owned(),
            "not json".to_owned(),
            r#"{"jobId":"","ownerId":"sub:a","steps":3}"#.to_owned(),
            format!(r#"{{"jobId":"{id}","ownerId":"","steps":3}}"#),
            format!(r#"{{"jobId":"{id}","ownerId":"sub:a","steps":0}}"#),
            format!(r#"{{"jobId":"{id}","ownerId":"sub:a","steps":1.5}}"#),
            format!(r#"{{"jobId":"{id}","ownerId":"sub:a","steps":101}}"#),
            format!(r#"{{"jobId":"{id}","ownerId":"sub:a","steps":"3"}}"#),
            r#"{"jobId":"../../etc","ownerId":"sub:a","steps":3}"#.to_owned(),
            format!(r#"[{{"jobId":"{id}","ownerId":"sub:a","steps":3}}]"#),
            format!(
                r#"{{"jobId":"{id}","ownerId":"{}","steps":3}}"#,
                "s".repeat(crate::security::principal::MAX_ID_BYTES + 1)
            ),
        ] {
            assert_eq!(JobMessage::parse(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn keeps_only_a_well_formed_traceparent() {
        let id = "AAAAAAAAAAAAAAAAAAAAAA";
        let with = |traceparent: &str| {
            let body = format!(r#"{{"jobId":"{id}","ownerId":"sub:a","steps":3,"traceparent":{traceparent}}}"#);
            JobMessage::parse(body.as_bytes()).expect("the job itself is well formed").traceparent
        };
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(with(&format!("\"{good}\"")).as_deref(), Some(good));
        // A sender's garbage must not reach a span link or a log line: dropped, the job kept.
        for bad in [
            r#""00-00000000000000000000000000000000-00f067aa0ba902b7-01""#,
            r#""00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01""#,
            r#""00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra""#,
            r#""00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7\n01""#,
            r#""<script>""#,
            "12",
            "null",
        ] {
            assert_eq!(with(bad), None, "{bad}");
        }
    }
}
