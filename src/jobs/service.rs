//! The job operations behind the four tools, with their rules: validation before creation,
//! caps per principal, signed handles, a foreign handle indistinguishable from a missing one,
//! and no owner information in anything returned.

use serde::Serialize;
use std::sync::Arc;

use super::handle::{self, UNKNOWN_JOB_HANDLE};
use super::model::{
    JobRecord, JobResult, MAX_ACTIVE_JOBS_ANONYMOUS, MAX_ACTIVE_JOBS_PER_PRINCIPAL, MAX_JOBS_TOTAL, MAX_STEPS,
};
use super::queue::{JobMessage, PublishError, Publisher, queue_full_refusal};
use super::store::{CreateRefused, JobStore, Quota};
use crate::security::Principal;
use crate::state::{Clock, Random, Sealer};

/// The job service: one per process, shared by the tools (and by the tasks extension).
#[derive(Clone)]
pub struct Jobs {
    pub(crate) store: Arc<dyn JobStore>,
    pub(crate) publisher: Arc<dyn Publisher>,
    pub(crate) sealer: Sealer,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) random: Arc<dyn Random>,
    pub(crate) logger: Option<crate::observe::Logger>,
    pub(crate) limits: JobLimits,
    /// The endpoint its handles are for: `None` for `/api/mcp` ([`Jobs::for_endpoint`]).
    pub(crate) endpoint: Option<String>,
}

/// A record created for a submit that has not handed out its handle. Dropped armed (the submit
/// returned an error, or its future was dropped while a command was in flight), it deletes the
/// record in the background: nobody holds a handle to it, and, pending with no message, it would
/// hold one of its owner's slots until its deadline. A message that did go out finds no record,
/// and its delivery is skipped.
struct Unissued {
    store: Arc<dyn JobStore>,
    record: Option<JobRecord>,
}

impl Unissued {
    /// The record, while the guard holds it (the submit works on it through the guard, so it is
    /// never copied).
    fn record(&self) -> &JobRecord {
        self.record.as_ref().expect("an armed guard holds its record")
    }

    /// The record was never stored by this submit, or is rolled back where the caller is told:
    /// nothing left to do.
    fn disarm(&mut self) {
        self.record = None;
    }

    /// The handle is being issued: the record is the submit's to answer with.
    fn issue(mut self) -> JobRecord {
        self.record.take().expect("an armed guard holds its record")
    }
}

impl Drop for Unissued {
    fn drop(&mut self) {
        let Some(record) = self.record.take() else { return };
        // Without a runtime (one shutting down) there is nothing to run the delete on; the record
        // then expires at its deadline.
        if tokio::runtime::Handle::try_current().is_ok() {
            let store = Arc::clone(&self.store);
            crate::state::background::spawn(async move {
                let _ = store.delete(&record).await;
            });
        }
    }
}

/// What a submission returns: the handle to poll with, never the raw id. A tool may return it
/// as structured output (`Json(submitted)`): its schema comes with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Submitted {
    /// The job's handle: pass it to get_job_status, get_job_result or cancel_job.
    pub job_id: String,
    /// The job's state: pending until a worker starts it.
    pub state: &'static str,
    /// How many steps the job runs.
    pub total_steps: u32,
}

/// A job's progress, as a status poll or a cancellation reports it; `job_id` is the handle the
/// caller presented. (Members in name order, as these payloads have always been written.)
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobProgress<'a> {
    /// How many steps have run.
    pub completed_steps: u32,
    /// The job's handle.
    pub job_id: &'a str,
    /// The job's state: pending, running, done, cancelled or failed.
    pub state: &'static str,
    /// How many steps the job runs in all.
    pub total_steps: u32,
}

/// A job's result: `None` (`null`) until the job is done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobOutcome<'a> {
    /// The job's handle.
    pub job_id: &'a str,
    /// The job's result once it is done; null before.
    pub result: Option<JobResult>,
    /// The job's state: pending, running, done, cancelled or failed.
    pub state: &'static str,
}

/// What a lifecycle line says besides who and which job.
enum Detail {
    /// A submission: how many steps.
    Steps(u32),
    /// A read: the job's state, or `unknown_handle`.
    Outcome(&'static str),
    /// A cancellation: the job's state after it.
    State(&'static str),
}

/// A lifecycle line's fields, as written (in name order, as they always were).
#[derive(Serialize)]
struct LifecycleFields {
    job: Option<crate::observe::Digest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<&'static str>,
    principal: crate::observe::Digest,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    steps: Option<u32>,
}

/// Caps on concurrent work (configurable; the active caps and the total are the reference
/// server's, the share and the rate keep one caller from taking the total from everyone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobLimits {
    /// Active jobs of the anonymous principal.
    pub anonymous: u32,
    /// Active jobs of a verified principal.
    pub verified: u32,
    /// Jobs (active or retained) of the whole deployment.
    pub total: u32,
    /// Jobs (active, or cancelled and finished until they expire) one principal may hold.
    pub share: u32,
    /// Jobs one principal may create per minute, across every instance.
    pub per_minute: u32,
}

/// The default share: an eighth of the default total, so at least eight callers always fit.
pub const DEFAULT_JOB_SHARE: u32 = MAX_JOBS_TOTAL / 8;
/// The default submission rate per principal.
pub const DEFAULT_JOBS_PER_MINUTE: u32 = 60;

impl Default for JobLimits {
    fn default() -> Self {
        Self {
            anonymous: MAX_ACTIVE_JOBS_ANONYMOUS,
            verified: MAX_ACTIVE_JOBS_PER_PRINCIPAL,
            total: MAX_JOBS_TOTAL,
            share: DEFAULT_JOB_SHARE,
            per_minute: DEFAULT_JOBS_PER_MINUTE,
        }
    }
}

impl JobLimits {
    /// The active-job cap of a principal: anonymous callers get fewer slots.
    pub fn cap_for(&self, principal: &Principal) -> u32 {
        if principal.is_verified() { self.verified } else { self.anonymous }
    }

    /// Everything `principal` may create under.
    pub fn quota_for(&self, principal: &Principal) -> Quota {
        Quota { active: self.cap_for(principal), share: self.share, per_minute: self.per_minute, total: self.total }
    }
}

impl Jobs {
    /// Wires the service.
    pub fn new(
        store: Arc<dyn JobStore>,
        publisher: Arc<dyn Publisher>,
        sealer: Sealer,
        clock: Arc<dyn Clock>,
        random: Arc<dyn Random>,
    ) -> Self {
        Self { store, publisher, sealer, clock, random, logger: None, limits: JobLimits::default(), endpoint: None }
    }

    /// Serves the endpoint at `path` (`/api/examples/<name>`) rather than `/api/mcp`: its handles
    /// are bound to it as well as to their owner, so a handle made on one endpoint is unknown on
    /// another (each is its own protected resource, with its own audience and scopes).
    pub fn for_endpoint(mut self, path: &str) -> Self {
        self.endpoint = Some(path.to_owned());
        self
    }

    /// What `principal`'s handles here are bound to ([`handle::holder`]).
    fn holder<'a>(&self, principal: &'a Principal) -> std::borrow::Cow<'a, str> {
        handle::holder(principal.id(), self.endpoint.as_deref())
    }

    /// Sets the caps.
    pub fn with_limits(mut self, limits: JobLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Logs lifecycle events (submit, retrieve, cancel) to `logger`.
    pub fn with_logger(mut self, logger: crate::observe::Logger) -> Self {
        self.logger = Some(logger);
        self
    }

    /// A lifecycle event: the job appears as a keyed digest of its id, the caller as a digest of
    /// the principal; never the handle, never the owner.
    fn log(&self, event: &str, principal: &Principal, job_id: Option<&str>, detail: Detail) {
        let Some(logger) = &self.logger else { return };
        let mut fields = LifecycleFields {
            job: job_id.map(|id| logger.digest("job", id.as_bytes())),
            outcome: None,
            principal: logger.principal_digest(principal.id()),
            state: None,
            steps: None,
        };
        match detail {
            Detail::Steps(steps) => fields.steps = Some(steps),
            Detail::Outcome(outcome) => fields.outcome = Some(outcome),
            Detail::State(state) => fields.state = Some(state),
        }
        logger.event_of("info", event, &fields);
    }

    /// A store or queue fault as the caller sees it: the short description (already free of
    /// URLs and keys) plus a correlation id that the `job.fault` log line carries too, so an
    /// operator can find the one behind a user's report.
    fn fault(&self, operation: &str, description: &str) -> String {
        match &self.logger {
            Some(logger) => logger.fault("job.fault", operation, description),
            None => description.to_owned(),
        }
    }

    /// Replaces the publisher (fault tests).
    pub fn set_publisher(&mut self, publisher: Arc<dyn Publisher>) {
        self.publisher = publisher;
    }

    /// Creates a pending job and enqueues it; returns its handle. Nothing is
    /// left behind when it fails: the record is created only after validation, with its message
    /// in the same step where the queue is a Redis stream the store reaches, and otherwise
    /// removed again if the message cannot be enqueued. A create that reports an error but
    /// landed is taken as done.
    pub async fn submit(
        &self,
        principal: &Principal,
        steps: i64,
        oidc_token: Option<&str>,
    ) -> Result<Submitted, String> {
        self.submit_traced(principal, steps, oidc_token, None).await
    }

    /// [`Jobs::submit`], carrying the submitting span's `traceparent` in the message so the
    /// delivery's span links to it.
    pub async fn submit_traced(
        &self,
        principal: &Principal,
        steps: i64,
        oidc_token: Option<&str>,
        traceparent: Option<String>,
    ) -> Result<Submitted, String> {
        if !(1..=i64::from(MAX_STEPS)).contains(&steps) {
            return Err(format!("steps must be an integer from 1 to {MAX_STEPS}"));
        }
        let steps = steps as u32;
        let owner = principal.id();
        let now = self.clock.now_ms();
        let quota = self.limits.quota_for(principal);
        let stream = self.publisher.redis_stream();
        let mut attempts = 0;
        let (message, enqueued, mut unissued) = loop {
            // Armed before the create is sent: from then on, a submit that ends without a handle
            // (its caller gone, or an error that leaves unknown whether the record landed) has
            // the record deleted, never left pending with nothing to run it.
            let record = JobRecord::new(handle::new_job_id(self.random.as_ref()), owner.to_owned(), steps, now);
            let mut unissued = Unissued { store: Arc::clone(&self.store), record: Some(record) };
            let record = unissued.record();
            let message = JobMessage {
                job_id: record.job_id.clone(),
                owner_id: record.owner_id.clone(),
                steps,
                traceparent: traceparent.clone(),
            };
            // Where the queue is a stream the store can reach, the message goes in with the record.
            let (created, enqueued) =
                match stream.and_then(|stream| self.store.create_enqueued(record, &quota, now, stream, &message)) {
                    Some(create) => (create.await, true),
                    None => (self.store.create(record, &quota, now).await, false),
                };
            // A create that reports an error may have landed (the reply lost, not the command):
            // a record under this fresh id is this call's. Taken as created, it is enqueued and
            // runs; left, it would hold one of the caller's slots, pending, until its deadline.
            let created = match created {
                Err(error) => match self.store.get(owner, &record.job_id, now).await {
                    Ok(Some(_)) => Ok(Ok(())),
                    _ => Err(error),
                },
                created => created,
            };
            let created = created.map_err(|e| self.fault("create", e.message()))?;
            if created.is_err() {
                // Refused: nothing was stored under this id by this call (under `Exists`, a
                // record that is another job's).
                unissued.disarm();
            }
            match created {
                Ok(()) => break (message, enqueued, unissued),
                Err(CreateRefused::AtCap(cap)) => {
                    return Err(format!(
                        "job limit reached: at most {cap} active jobs per caller; wait for one to finish or cancel one"
                    ));
                }
                Err(CreateRefused::OverShare(share)) => {
                    return Err(format!(
                        "job limit reached: at most {share} jobs per caller, counting finished and cancelled ones \
                         for five minutes after they end; try again later"
                    ));
                }
                Err(CreateRefused::TooFast(limit)) => {
                    return Err(format!(
                        "too many jobs submitted: at most {limit} a minute per caller; try again shortly"
                    ));
                }
                Err(CreateRefused::Full) => return Err("the server is at job capacity; try again later".into()),
                Err(CreateRefused::QueueFull(max_len)) => {
                    return Err(format!("could not enqueue the job: {}", queue_full_refusal(max_len)));
                }
                Err(CreateRefused::Exists) if attempts < 3 => attempts += 1,
                Err(CreateRefused::Exists) => return Err("could not allocate a job id".into()),
            }
        };
        if !enqueued {
            if let Err(problem) = self.publisher.publish(&message, oidc_token).await {
                let rolled_back = self.store.delete(unissued.record()).await.is_ok();
                // After the rollback: a submit dropped during it still has its record deleted.
                unissued.disarm();
                let note = if rolled_back { "" } else { " (the pending record expires on its own)" };
                let (full, problem) = match problem {
                    PublishError::Full(refusal) => (true, refusal),
                    PublishError::Failed(problem) => (false, problem),
                };
                let text = format!("could not enqueue the job: {problem}{note}");
                // A full queue is the caller's answer, as a full store is: no fault line.
                return Err(if full { text } else { self.fault("enqueue", &text) });
            }
        }
        let record = unissued.issue();
        let handle = handle::mint(&self.sealer, &self.holder(principal), &record.job_id);
        self.log("job.submit", principal, Some(&record.job_id), Detail::Steps(steps));
        Ok(Submitted { job_id: handle, state: record.state.as_str(), total_steps: record.total_steps })
    }

    async fn lookup(&self, principal: &Principal, handle: &str) -> Result<JobRecord, String> {
        let Some(id) = handle::open(&self.sealer, &self.holder(principal), handle) else {
            self.log("job.retrieve", principal, None, Detail::Outcome("unknown_handle"));
            return Err(UNKNOWN_JOB_HANDLE.to_owned());
        };
        let job = self
            .store
            .get(principal.id(), &id, self.clock.now_ms())
            .await
            .map_err(|e| self.fault("get", e.message()))?;
        let outcome = job.as_ref().map_or("unknown_handle", |j| j.state.as_str());
        self.log("job.retrieve", principal, Some(&id), Detail::Outcome(outcome));
        job.ok_or_else(|| UNKNOWN_JOB_HANDLE.to_owned())
    }

    /// The job's progress.
    pub async fn status<'a>(&self, principal: &Principal, handle: &'a str) -> Result<JobProgress<'a>, String> {
        let job = self.lookup(principal, handle).await?;
        Ok(progress(handle, &job))
    }

    /// The job's result, `None` until the job is done. Every read after done returns the same
    /// payload (the stored record is never handed out).
    pub async fn result<'a>(&self, principal: &Principal, handle: &'a str) -> Result<JobOutcome<'a>, String> {
        let job = self.lookup(principal, handle).await?;
        Ok(JobOutcome { job_id: handle, result: job.result, state: job.state.as_str() })
    }

    /// Requests cancellation; an active job is cancelled at once (freeing its slot), a finished
    /// one is left as it is. Repeats are safe and do not extend retention.
    pub async fn cancel<'a>(&self, principal: &Principal, handle: &'a str) -> Result<JobProgress<'a>, String> {
        let id = handle::open(&self.sealer, &self.holder(principal), handle).ok_or(UNKNOWN_JOB_HANDLE)?;
        let job = self
            .store
            .cancel(principal.id(), &id, self.clock.now_ms())
            .await
            .map_err(|e| self.fault("cancel", e.message()))?
            .ok_or(UNKNOWN_JOB_HANDLE)?;
        self.log("job.cancel", principal, Some(&id), Detail::State(job.state.as_str()));
        Ok(progress(handle, &job))
    }
}

fn progress<'a>(handle: &'a str, job: &JobRecord) -> JobProgress<'a> {
    JobProgress {
        completed_steps: job.completed_steps,
        job_id: handle,
        state: job.state.as_str(),
        total_steps: job.total_steps,
    }
}
