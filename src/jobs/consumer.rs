//! The queue consumer: `/api/queues/process-job`, reachable only through the queue trigger.
//!
//! It accepts Vercel Queues' v2beta binary-mode push (CloudEvent attributes in `ce-*` headers,
//! the raw message as the body), validates everything before acting (400 otherwise), refuses a
//! consumer group that is not this deployment's, confirms the lease with the queue (extending
//! its visibility) before running anything, runs the job's remaining steps, and acknowledges the
//! lease only after success. Delivery is
//! at-least-once, so the worker is idempotent: it re-reads the job and applies each step with a
//! compare-and-set on the step count, so a redelivered or concurrent message never applies a
//! step twice; a cancelled or finished job is left alone.

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
// Tokio's clock, which a test can pause and advance: the budget is measured in it.
use tokio::time::Instant;

use super::model::JOBS_TOPIC;
use super::queue::{Confirmation, JobMessage, Lease, QueueApi, StreamEntry};
use super::store::JobStore;
use crate::body::Body;
use crate::state::Clock;
use crate::store::StoreError;

/// The largest delivery the consumer reads (413 past it): a job message is a few hundred bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What the consumer needs.
#[derive(Clone)]
pub struct Consumer {
    /// The job store.
    pub store: Arc<dyn JobStore>,
    /// Lease acknowledgement.
    pub queue: Arc<dyn QueueApi>,
    /// Time source.
    pub clock: Arc<dyn Clock>,
    /// Simulated work per step (the demo job does nothing else).
    pub step_delay: Duration,
    /// Stop (without acknowledging, so the message is redelivered) after this long, well
    /// before the function's `maxDuration`. A push's budget counts from its arrival: confirming
    /// its lease is part of it.
    pub budget: Duration,
    /// Lifecycle events (run, finish).
    pub logger: Option<crate::observe::Logger>,
    /// A span per delivery, linked to the request that submitted the job.
    pub telemetry: crate::telemetry::Telemetry,
    /// This deployment: a delivery's `x-vercel-oidc-token` is used for the queue's calls only
    /// when it names this project (else the deployment's own token is).
    pub platform: crate::security::PlatformIdentity,
    /// Leases the queue would not confirm, reported at most once per [`CONFIRM_FAULT_EVERY_MS`]:
    /// the route is public, and anyone can send a delivery with a token the queue refuses.
    pub confirm_faults: Arc<crate::observe::Throttle>,
}

/// At most one `job.fault` line this often for leases the queue would not confirm.
pub const CONFIRM_FAULT_EVERY_MS: u64 = 60_000;

/// A delivery's log line: which job, whose, how the delivery ended, the job's state.
#[derive(serde::Serialize)]
struct RunFields {
    job: crate::observe::Digest,
    principal: crate::observe::Digest,
    result: &'static str,
    state: &'static str,
}

/// A stored step's log line (`job.progress`, `job.finish`), members in name order. The job and
/// its owner are keyed digests, as on the submitting request's lines, so the two join.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct StepFields {
    completed_steps: u32,
    job: crate::observe::Digest,
    principal: crate::observe::Digest,
    state: &'static str,
    total_steps: u32,
}

/// How long past the work budget a confirmed lease stays invisible to other consumers.
const LEASE_MARGIN: Duration = Duration::from_secs(30);

/// How soon a delivery that left steps for the next one asks for that next delivery: at once,
/// to a fresh invocation with a whole budget.
pub const RESUME_AFTER_DEFERRAL: Duration = Duration::from_secs(1);

/// How a delivery ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Processed {
    /// The job reached a terminal state (or already was: a duplicate delivery).
    Finished(&'static str),
    /// There is no such job for that owner (evicted, deleted, or a forged owner).
    Skipped(&'static str),
    /// The time budget ran out; the message will be redelivered and resume. `progressed`: the
    /// delivery advanced the job first (one that could not is not asked back at once, which
    /// would only repeat it).
    Deferred { progressed: bool },
}

fn reply(status: StatusCode, body: serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Body::full(serde_json::to_vec(&body).expect("json")));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

fn bad_request(reason: &str) -> Response<Body> {
    reply(StatusCode::BAD_REQUEST, json!({ "error": reason }))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty())
}

/// A queue name, message id or receipt handle: unreserved URL characters only, and never a
/// dot-segment (these values become path segments of the acknowledgement URL).
fn is_name(value: &str) -> bool {
    value.len() <= 256
        && !value.bytes().all(|b| b == b'.')
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'~'))
}

fn is_region(value: &str) -> bool {
    let letters = value.bytes().take_while(u8::is_ascii_lowercase).count();
    let digits = value.len() - letters;
    (2..=5).contains(&letters) && (1..=2).contains(&digits) && value[letters..].bytes().all(|b| b.is_ascii_digit())
}

/// Reads the v2beta delivery attributes; `Err` names the first problem.
fn lease_from(headers: &HeaderMap, platform: &crate::security::PlatformIdentity) -> Result<Lease, &'static str> {
    if header(headers, "ce-type") != Some("com.vercel.queue.v2beta") {
        return Err("not a com.vercel.queue.v2beta delivery");
    }
    let topic = header(headers, "ce-vqsqueuename").ok_or("missing ce-vqsqueuename")?;
    if topic != JOBS_TOPIC {
        return Err("unexpected topic");
    }
    let group = header(headers, "ce-vqsconsumergroup")
        .filter(|g| is_name(g))
        .ok_or("missing or invalid ce-vqsconsumergroup")?;
    let message_id =
        header(headers, "ce-vqsmessageid").filter(|m| is_name(m)).ok_or("missing or invalid ce-vqsmessageid")?;
    let region = match header(headers, "ce-vqsregion") {
        Some(region) if is_region(region) => Some(region.to_owned()),
        Some(_) => return Err("invalid ce-vqsregion"),
        None => None,
    };
    let receipt = header(headers, "ce-vqsreceipthandle")
        .filter(|r| is_name(r))
        .ok_or("missing ce-vqsreceipthandle: only inline payloads are accepted")?;
    Ok(Lease {
        region,
        topic: topic.to_owned(),
        group: group.to_owned(),
        receipt: receipt.to_owned(),
        message_id: message_id.to_owned(),
        // The confirmation below is what proves the platform sent this delivery; a token the
        // sender chose (another project's, say) would let a stranger's queue vouch for it.
        oidc_token: platform.token_from(headers),
    })
}

impl Consumer {
    /// Serves one delivery.
    pub async fn handle(&self, request: Request<Bytes>) -> Response<Body> {
        // The budget counts from here: the lease's confirmation is time the function has spent.
        let arrived = Instant::now();
        if request.method() != Method::POST {
            return reply(StatusCode::METHOD_NOT_ALLOWED, json!({ "error": "POST only" }));
        }
        let lease = match lease_from(request.headers(), &self.platform) {
            Ok(lease) => lease,
            Err(reason) => return bad_request(reason),
        };
        if lease.group != self.queue.consumer_group() {
            // Never ask the queue (with this deployment's token) about another group's lease.
            return bad_request("unexpected consumer group");
        }
        let Some(message) = JobMessage::parse(request.body()) else {
            return bad_request("the body is not a valid job message");
        };
        // A delivery is acted on only once the queue confirms its lease: nothing else proves
        // that the platform, and not a stranger, sent it.
        match self.queue.confirm(&lease, self.budget + LEASE_MARGIN).await {
            Ok(Confirmation::Live) => {}
            Ok(Confirmation::Redundant(reason)) => {
                return reply(StatusCode::OK, json!({ "status": "skipped", "reason": reason }));
            }
            Ok(Confirmation::Unknown) => {
                return reply(StatusCode::CONFLICT, json!({ "error": "the lease could not be confirmed" }));
            }
            // Not acknowledged, so the message comes back; an operator has something to fix. The
            // sender may be no platform at all (a made-up delivery carrying a token the queue
            // refuses), so the line is written once a minute at most.
            Err(error) => {
                let error = match &self.logger {
                    Some(logger) if self.confirm_faults.due(self.clock.now_ms(), CONFIRM_FAULT_EVERY_MS) => {
                        logger.fault("job.fault", "confirm", &error)
                    }
                    _ => error,
                };
                return reply(StatusCode::INTERNAL_SERVER_ERROR, json!({ "error": error }));
            }
        }
        match self.run_within(&message, None, arrived + self.budget).await.map(|(processed, _)| processed) {
            Err(error) => reply(StatusCode::INTERNAL_SERVER_ERROR, json!({ "error": error.message() })),
            Ok(Processed::Deferred { progressed }) => {
                // Ask for the next delivery now rather than when the visibility confirmed above
                // (the budget and a margin) runs out, if this one got anywhere. Unacknowledged
                // either way, so a failure here costs only that wait.
                if progressed
                    && let (Err(error), Some(logger)) =
                        (self.queue.resume_after(&lease, RESUME_AFTER_DEFERRAL).await, &self.logger)
                {
                    logger.fault("job.fault", "resume", &error);
                }
                reply(StatusCode::ACCEPTED, json!({ "status": "deferred" }))
            }
            Ok(outcome) => {
                if let Err(error) = self.queue.ack(&lease).await {
                    // Not acknowledged: the message comes back, and the work is idempotent.
                    return reply(StatusCode::INTERNAL_SERVER_ERROR, json!({ "error": error }));
                }
                match outcome {
                    Processed::Finished(state) => reply(StatusCode::OK, json!({ "status": "success", "state": state })),
                    Processed::Skipped(reason) => {
                        reply(StatusCode::OK, json!({ "status": "skipped", "reason": reason }))
                    }
                    Processed::Deferred { .. } => unreachable!(),
                }
            }
        }
    }

    /// Runs a delivered message ([`Consumer::process`]) and logs how the delivery ended. Every
    /// transport (a Vercel Queues push, a Redis Streams read, the in-process queue) comes here.
    pub async fn run(&self, message: &JobMessage) -> Result<Processed, StoreError> {
        self.run_settling(message, None).await.map(|(processed, _)| processed)
    }

    /// [`Consumer::run`] for a message read from a Redis stream: when the store can, the step
    /// that ends the job also acknowledges `entry` ([`JobStore::advance_settling`]). The flag
    /// says whether that happened; if not, the caller acknowledges as usual.
    pub async fn run_settling(
        &self,
        message: &JobMessage,
        entry: Option<StreamEntry<'_>>,
    ) -> Result<(Processed, bool), StoreError> {
        self.run_within(message, entry, Instant::now() + self.budget).await
    }

    /// [`Consumer::run_settling`], deferring what would not end by `deadline`.
    async fn run_within(
        &self,
        message: &JobMessage,
        entry: Option<StreamEntry<'_>>,
        deadline: Instant,
    ) -> Result<(Processed, bool), StoreError> {
        let span = self.telemetry.delivery_span(message.traceparent.as_deref());
        span.set([
            opentelemetry::KeyValue::new("messaging.operation.type", "process"),
            opentelemetry::KeyValue::new("mcp.job.steps", i64::from(message.steps)),
        ]);
        let outcome = span.in_context(self.process_settling(message, entry, deadline)).await;
        let settled = matches!(outcome, Ok((_, true)));
        let outcome = outcome.map(|(processed, _)| processed);
        let ended = match &outcome {
            Ok(Processed::Finished(state)) => {
                span.set([opentelemetry::KeyValue::new("mcp.job.state", *state)]);
                *state
            }
            Ok(Processed::Skipped(reason)) => {
                span.set([opentelemetry::KeyValue::new("mcp.job.skipped", *reason)]);
                "skipped"
            }
            Ok(Processed::Deferred { .. }) => {
                span.set([opentelemetry::KeyValue::new("mcp.job.deferred", true)]);
                "deferred"
            }
            Err(_) => {
                span.fail("store_error");
                "store_error"
            }
        };
        span.end();
        self.telemetry.add(crate::telemetry::JOB_DELIVERIES, vec![("mcp.job.outcome", ended.into())], 1);
        if let Some(logger) = &self.logger {
            let (result, state) = match &outcome {
                Ok(Processed::Finished(state)) => ("finished", *state),
                Ok(Processed::Skipped(reason)) => ("skipped", *reason),
                Ok(Processed::Deferred { .. }) => ("deferred", ""),
                Err(_) => ("store_error", ""),
            };
            let fields = RunFields {
                job: logger.digest("job", message.job_id.as_bytes()),
                principal: logger.principal_digest(&message.owner_id),
                result,
                state,
            };
            logger.event_of(if outcome.is_err() { "warn" } else { "info" }, "job.run", &fields);
        }
        outcome.map(|processed| (processed, settled))
    }

    /// Gives up `message` for good (its delivery failed too often, and it went to the dead
    /// letters): its job is failed, freeing its owner's slot, and a `job.fault` line says so. A
    /// store that fails now leaves the job to its deadline, as before.
    pub async fn give_up(&self, message: &JobMessage) {
        let abandoned = self.store.abandon(&message.owner_id, &message.job_id, self.clock.now_ms()).await;
        if let Some(logger) = &self.logger {
            let detail = match abandoned {
                Ok(Some(job)) if job.state == super::JobState::Failed => {
                    "its message was delivered too often and goes to the dead letters; the job is failed"
                }
                Ok(Some(_)) => "its message was delivered too often and goes to the dead letters; the job had ended",
                Ok(None) => "its message was delivered too often and goes to the dead letters; the job is gone",
                Err(_) => {
                    "its message goes to the dead letters; the job could not be failed and stays until its deadline"
                }
            };
            logger.fault("job.fault", "dead_letter", detail);
        }
    }

    /// Runs the job's remaining steps, honouring cancellation between steps.
    pub async fn process(&self, message: &JobMessage) -> Result<Processed, StoreError> {
        self.process_settling(message, None, Instant::now() + self.budget).await.map(|(processed, _)| processed)
    }

    /// [`Consumer::process`] by `deadline`, settling `entry` with the job's last write when the
    /// store can; the flag says whether it did.
    async fn process_settling(
        &self,
        message: &JobMessage,
        entry: Option<StreamEntry<'_>>,
        deadline: Instant,
    ) -> Result<(Processed, bool), StoreError> {
        let (owner, id) = (message.owner_id.as_str(), message.job_id.as_str());
        let Some(mut job) = self.store.get(owner, id, self.clock.now_ms()).await? else {
            return Ok((Processed::Skipped("not_found"), false));
        };
        if job.total_steps != message.steps {
            return Ok((Processed::Skipped("mismatched_message"), false));
        }
        if !job.state.is_active() {
            return Ok((Processed::Finished(job.state.as_str()), false));
        }
        // How long the job waited in the queue, recorded by the delivery that applies its first
        // step only: a copy delivered at the same time, or a delivery that deferred before its
        // first step, also found none done, and would count the job again.
        let arrived_ms = self.clock.now_ms();
        let mut progressed = false;
        loop {
            // A step begins only if it ends within the budget, its pause included: one that
            // would not is left for the next delivery rather than cut off by the platform.
            if Instant::now() + self.step_delay >= deadline {
                return Ok((Processed::Deferred { progressed }, false));
            }
            if !self.step_delay.is_zero() {
                tokio::time::sleep(self.step_delay).await;
            }
            let (expected, now) = (job.completed_steps, self.clock.now_ms());
            let settling = entry.and_then(|entry| self.store.advance_settling(owner, id, expected, now, entry));
            // When settling, the script has acknowledged the entry if the job is over now.
            let settles = settling.is_some();
            let advanced = match settling {
                Some(advance) => advance.await?,
                None => self.store.advance(owner, id, expected, now).await?,
            };
            let applied;
            (job, applied) = match advanced {
                Some(advanced) => (advanced.record, advanced.applied),
                None => return Ok((Processed::Skipped("not_found"), settles)),
            };
            progressed = true;
            if applied && expected == 0 {
                let waited = arrived_ms.saturating_sub(job.created_at);
                self.telemetry.record(crate::telemetry::QUEUE_LAG, Vec::new(), Duration::from_millis(waited));
            }
            // A step another delivery of the same message applied is its to report.
            if let (Some(logger), true) = (&self.logger, applied) {
                let event = if job.state.is_active() { "job.progress" } else { "job.finish" };
                let fields = StepFields {
                    completed_steps: job.completed_steps,
                    job: logger.digest("job", id.as_bytes()),
                    principal: logger.principal_digest(owner),
                    state: job.state.as_str(),
                    total_steps: job.total_steps,
                };
                logger.event_of("info", event, &fields);
            }
            if !job.state.is_active() {
                return Ok((Processed::Finished(job.state.as_str()), settles));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_and_names() {
        assert!(is_region("iad1") && is_region("dev1") && is_region("fra12"));
        for bad in ["IAD1", "i1", "iad", "iad123", "toolong1", "ia-1"] {
            assert!(!is_region(bad), "{bad}");
        }
        assert!(is_name("abc-1_2.x") && !is_name("a/b") && !is_name(&"a".repeat(257)));
        assert!(!is_name("..") && !is_name(".") && !is_name(""), "dot-segments never reach a URL path");
    }
}
