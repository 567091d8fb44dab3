//! The job queue: the message format, publishing, and acknowledging leases.
//!
//! Deployed, jobs go through Vercel Queues: [`VercelQueue`] publishes with the REST API and
//! acknowledges leases after the consumer succeeds. In the local run, [`LocalQueue`] plays the
//! platform's part in-process: it delivers each message to the same consumer handler over the
//! same HTTP contract (a v2beta binary-mode CloudEvent) and redelivers until it is acknowledged.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::Notify;

use super::handle::is_job_id;
use super::model::{JOBS_TOPIC, MAX_STEPS};
use crate::transport::Body;

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
    /// The owning principal (trusted only because the consumer is reachable by the queue alone,
    /// and checked against the store: a job must exist under this owner to be worked on).
    pub owner_id: String,
    /// Steps to run.
    pub steps: u32,
}

impl JobMessage {
    /// Parses and validates a message body; `None` for anything that is not exactly a job.
    pub fn parse(body: &[u8]) -> Option<Self> {
        let value: Value = serde_json::from_slice(body).ok()?;
        let object = value.as_object()?;
        let job_id = object.get("jobId")?.as_str()?;
        let owner_id = object.get("ownerId")?.as_str()?;
        let steps = object.get("steps")?.as_u64()?;
        let valid = is_job_id(job_id)
            && !owner_id.is_empty()
            && owner_id.len() <= 512
            && (1..=u64::from(MAX_STEPS)).contains(&steps);
        valid.then(|| Self { job_id: job_id.to_owned(), owner_id: owner_id.to_owned(), steps: steps as u32 })
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
    /// OIDC token to authenticate the acknowledgement.
    pub oidc_token: Option<String>,
}

/// Publishing side.
pub trait Publisher: Send + Sync + 'static {
    /// Enqueues `message` on the jobs topic. `oidc_token` authenticates against the platform.
    fn publish<'a>(&'a self, message: &'a JobMessage, oidc_token: Option<&'a str>) -> PublishFuture<'a>;
}

/// The consumer group Vercel derives from `api/queues/process-job.rs`, the one function whose
/// trigger consumes the jobs topic (`/` is `_S`, `.` is `_D`; see `vercel build`'s output).
pub const VERCEL_CONSUMER_GROUP: &str = "api_Squeues_Sprocess-job_Drs";

/// Consuming side: confirming a delivery's lease before acting on it, and acknowledging it
/// after (so the message is not redelivered).
pub trait QueueApi: Send + Sync + 'static {
    /// The consumer group this deployment's deliveries come from; any other is refused before
    /// the queue is asked anything.
    fn consumer_group(&self) -> &str;
    /// Asks the queue whether `lease` is a live lease of this deployment, extending its
    /// visibility to `visibility` (so it is not redelivered while the work runs). `Ok(false)`:
    /// the queue does not know it (a forged or stale delivery); `Err`: the queue could not be asked.
    fn confirm<'a>(&'a self, lease: &'a Lease, visibility: Duration) -> QueueFuture<'a, bool>;
    /// Deletes the lease.
    fn ack<'a>(&'a self, lease: &'a Lease) -> QueueFuture<'a, ()>;
}

/// Vercel Queues over its REST API.
#[derive(Clone, Debug)]
pub struct VercelQueue {
    /// `https://{region}.vercel-queue.com` unless overridden (loopback test doubles).
    base_url: Option<String>,
    region: String,
    deployment_id: Option<String>,
    env_token: Option<String>,
}

impl VercelQueue {
    /// `region` defaults to `iad1`; `base_url` overrides the regional host.
    pub fn new(
        base_url: Option<String>,
        region: Option<String>,
        deployment_id: Option<String>,
        env_token: Option<String>,
    ) -> Self {
        Self { base_url, region: region.unwrap_or_else(|| "iad1".into()), deployment_id, env_token }
    }

    fn base(&self, region: Option<&str>) -> String {
        match &self.base_url {
            Some(base) => base.trim_end_matches('/').to_owned(),
            None => format!("https://{}.vercel-queue.com", region.unwrap_or(&self.region)),
        }
    }

    fn token<'a>(&'a self, request_token: Option<&'a str>) -> Result<&'a str, String> {
        request_token
            .or(self.env_token.as_deref())
            .ok_or_else(|| "no Vercel OIDC token (x-vercel-oidc-token header or VERCEL_OIDC_TOKEN)".to_owned())
    }
}

impl Publisher for VercelQueue {
    fn publish<'a>(&'a self, message: &'a JobMessage, oidc_token: Option<&'a str>) -> PublishFuture<'a> {
        Box::pin(async move { self.send_message(message, oidc_token).await.map_err(PublishError::Failed) })
    }
}

impl VercelQueue {
    async fn send_message(&self, message: &JobMessage, oidc_token: Option<&str>) -> Result<(), String> {
        let token = self.token(oidc_token)?;
        let mut request = Request::post(format!("{}/api/v3/topic/{JOBS_TOPIC}", self.base(None)))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .header("vqs-idempotency-key", &message.job_id);
        if let Some(deployment) = &self.deployment_id {
            request = request.header("vqs-deployment-id", deployment);
        }
        let body = serde_json::to_vec(message).expect("messages serialise");
        let request = request.body(Full::new(Bytes::from(body))).map_err(|_| "invalid queue request".to_owned())?;
        let response = crate::outbound::send(request, Duration::from_secs(5)).await?;
        if response.status.is_success() {
            Ok(())
        } else {
            Err(format!("the queue refused the message (HTTP {})", response.status.as_u16()))
        }
    }
}

impl VercelQueue {
    fn lease_url(&self, lease: &Lease) -> String {
        format!(
            "{}/api/v3/topic/{}/consumer/{}/lease/{}",
            self.base(lease.region.as_deref()),
            lease.topic,
            lease.group,
            lease.receipt
        )
    }
}

impl QueueApi for VercelQueue {
    fn consumer_group(&self) -> &str {
        VERCEL_CONSUMER_GROUP
    }

    fn confirm<'a>(&'a self, lease: &'a Lease, visibility: Duration) -> QueueFuture<'a, bool> {
        Box::pin(async move {
            let token = self.token(lease.oidc_token.as_deref())?;
            let body = serde_json::to_vec(&serde_json::json!({ "visibilityTimeoutSeconds": visibility.as_secs() }))
                .expect("json");
            let request = Request::patch(self.lease_url(lease))
                .header("authorization", format!("Bearer {token}"))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))
                .map_err(|_| "invalid lease".to_owned())?;
            let response = crate::outbound::send(request, Duration::from_secs(5)).await?;
            match response.status {
                s if s.is_success() => Ok(true),
                // Unknown, stale or not ours: nothing to act on.
                StatusCode::NOT_FOUND | StatusCode::CONFLICT | StatusCode::GONE => Ok(false),
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Ok(false),
                s => Err(format!("the queue could not confirm the lease (HTTP {})", s.as_u16())),
            }
        })
    }

    fn ack<'a>(&'a self, lease: &'a Lease) -> QueueFuture<'a, ()> {
        Box::pin(async move {
            let token = self.token(lease.oidc_token.as_deref())?;
            let request = Request::delete(self.lease_url(lease))
                .header("authorization", format!("Bearer {token}"))
                .body(Full::new(Bytes::new()))
                .map_err(|_| "invalid lease".to_owned())?;
            let response = crate::outbound::send(request, Duration::from_secs(5)).await?;
            // 404/409: the lease is already gone or was re-leased; the work is idempotent either way.
            match response.status {
                s if s.is_success() || s == StatusCode::NOT_FOUND || s == StatusCode::CONFLICT => Ok(()),
                s => Err(format!("the queue refused the acknowledgement (HTTP {})", s.as_u16())),
            }
        })
    }
}

/// How many deliveries the local run's worker makes at once.
pub const CONCURRENT_DELIVERIES: usize = 4;

/// How many messages the local run's queue holds before it refuses more. Vercel Queues keeps a
/// backlog outside the function; this queue keeps it in the process, so past this point a burst
/// of submissions gets a clear refusal (and its job record is rolled back) instead of memory that
/// grows for as long as submissions outpace the consumer.
pub const MAX_PENDING: usize = 10_000;

/// The pause before a delivery that was not acknowledged is offered again.
const RETRY_PAUSE: Duration = Duration::from_millis(250);

/// The consumer handler a [`LocalQueue`] delivers to.
pub type DeliverFn = Arc<dyn Fn(Request<Bytes>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> + Send + Sync>;

#[derive(Debug, Clone)]
struct Delivery {
    message_id: String,
    payload: Bytes,
    attempts: u32,
}

#[derive(Default)]
struct LocalState {
    pending: VecDeque<Delivery>,
    /// Receipts of deliveries handed to the consumer and not yet settled.
    in_flight: HashMap<String, String>,
    /// Receipts acknowledged while in flight. Only those count, so an acknowledgement for a
    /// delivery this queue never made (a hand-made request to the consumer route) leaves nothing.
    acked: HashSet<String>,
    published: u64,
    /// Deliveries handed out so far; numbers every receipt, so even two copies of one message
    /// in flight at once (a duplicate delivery) settle separately.
    delivered: u64,
    /// Unacknowledged deliveries waiting out the pause before they are offered again.
    retrying: usize,
}

/// The in-process queue of the local run (and of tests, in manual mode).
#[derive(Clone)]
pub struct LocalQueue {
    state: Arc<Mutex<LocalState>>,
    consumer: Arc<OnceLock<DeliverFn>>,
    wake: Arc<Notify>,
    max_attempts: u32,
    max_pending: usize,
}

impl std::fmt::Debug for LocalQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalQueue").field("pending", &self.pending_len()).finish_non_exhaustive()
    }
}

impl Default for LocalQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalQueue {
    /// A queue with nothing connected; deliveries wait until [`LocalQueue::connect`].
    pub fn new() -> Self {
        Self {
            state: Arc::default(),
            consumer: Arc::new(OnceLock::new()),
            wake: Arc::new(Notify::new()),
            max_attempts: 8,
            max_pending: MAX_PENDING,
        }
    }

    /// The same queue holding at most `max_pending` waiting messages (tests of the bound).
    pub fn with_max_pending(mut self, max_pending: usize) -> Self {
        self.max_pending = max_pending;
        self
    }

    /// Connects the consumer handler (the local run's `/api/queues/process-job`).
    pub fn connect(&self, consumer: DeliverFn) {
        let _ = self.consumer.set(consumer);
    }

    /// Connects `consumer` as the delivery target, exactly as Vercel Queues delivers to
    /// `api/queues/process-job.rs`.
    pub fn connect_consumer(&self, consumer: Arc<crate::jobs::Consumer>) {
        self.connect(Arc::new(move |request| {
            let consumer = consumer.clone();
            Box::pin(async move { consumer.handle(request).await })
        }));
    }

    /// Messages waiting for delivery, including those pausing before a retry.
    pub fn pending_len(&self) -> usize {
        let state = self.state.lock().expect("queue lock");
        state.pending.len() + state.retrying
    }

    /// The payloads waiting for delivery, oldest first (tests: a push forged from a real message).
    pub fn pending_messages(&self) -> Vec<Bytes> {
        self.state.lock().expect("queue lock").pending.iter().map(|d| d.payload.clone()).collect()
    }

    /// Re-enqueues a copy of the most recently published message (tests: duplicate delivery).
    pub fn duplicate_last(&self) {
        let mut state = self.state.lock().expect("queue lock");
        if let Some(last) = state.pending.back().cloned() {
            state.pending.push_back(Delivery { attempts: 0, ..last });
        }
    }

    /// Delivers the next message once. Returns the consumer's status, or `None` when nothing
    /// is pending. A delivery that is not acknowledged goes back on the queue (until its
    /// attempts run out), which is at-least-once delivery.
    pub async fn deliver_next(&self) -> Option<StatusCode> {
        let (consumer, delivery, receipt) = self.take_next()?;
        let (status, retry) = self.deliver(&consumer, delivery, receipt).await;
        if let Some(delivery) = retry {
            self.requeue(delivery);
        }
        Some(status)
    }

    /// Takes the next pending message and marks it in flight.
    fn take_next(&self) -> Option<(DeliverFn, Delivery, String)> {
        let consumer = self.consumer.get()?.clone();
        let mut state = self.state.lock().expect("queue lock");
        let mut delivery = state.pending.pop_front()?;
        delivery.attempts += 1;
        state.delivered += 1;
        let receipt = format!("{}-{}-{}", delivery.message_id, delivery.attempts, state.delivered);
        state.in_flight.insert(receipt.clone(), delivery.message_id.clone());
        Some((consumer, delivery, receipt))
    }

    fn requeue(&self, delivery: Delivery) {
        self.state.lock().expect("queue lock").pending.push_back(delivery);
        self.wake.notify_one();
    }

    /// Offers an unacknowledged delivery again after [`RETRY_PAUSE`], counting it as pending
    /// meanwhile.
    async fn requeue_after_pause(&self, delivery: Delivery) {
        self.state.lock().expect("queue lock").retrying += 1;
        tokio::time::sleep(RETRY_PAUSE).await;
        let mut state = self.state.lock().expect("queue lock");
        state.retrying -= 1;
        state.pending.push_back(delivery);
        drop(state);
        self.wake.notify_one();
    }

    /// Hands one delivery to the consumer and settles it: the status, and the delivery again if
    /// it was not acknowledged and has attempts left.
    async fn deliver(
        &self,
        consumer: &DeliverFn,
        delivery: Delivery,
        receipt: String,
    ) -> (StatusCode, Option<Delivery>) {
        let request = Request::post("/api/queues/process-job")
            .header("content-type", "application/json")
            .header("ce-type", "com.vercel.queue.v2beta")
            .header("ce-vqsqueuename", JOBS_TOPIC)
            .header("ce-vqsconsumergroup", LOCAL_CONSUMER_GROUP)
            .header("ce-vqsmessageid", &delivery.message_id)
            .header("ce-vqsregion", "dev1")
            .header("ce-vqsreceipthandle", &receipt)
            .header("ce-vqsdeliverycount", delivery.attempts.to_string())
            .body(delivery.payload.clone())
            .expect("a valid delivery request");
        // A panicking consumer is a failed delivery: it settles and is retried like any other,
        // rather than leaving its receipt in flight and the message nowhere.
        let status = match crate::server::catch_unwind(consumer(request)).await {
            Ok(response) => response.status(),
            Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut state = self.state.lock().expect("queue lock");
        state.in_flight.remove(&receipt);
        let retry = (!state.acked.remove(&receipt) && delivery.attempts < self.max_attempts).then_some(delivery);
        (status, retry)
    }

    /// Delivers until nothing is pending or every pending message has failed `rounds` times.
    pub async fn drain(&self) {
        while self.deliver_next().await.is_some() {}
    }

    /// Runs deliveries in the background for the life of the process (the local run). Up to
    /// [`CONCURRENT_DELIVERIES`] run at once, as Vercel Queues invokes its consumer concurrently:
    /// one long job does not hold up everyone else's, and under load the backlog stays short. A
    /// message that failed goes back on the queue after a short pause, so a failing consumer (a
    /// store outage) is retried without spinning; one that succeeded without an acknowledgement
    /// (deferred work) goes back at once.
    pub fn spawn_worker(&self) {
        let queue = self.clone();
        tokio::spawn(async move {
            let slots = Arc::new(tokio::sync::Semaphore::new(CONCURRENT_DELIVERIES));
            loop {
                queue.wake.notified().await;
                loop {
                    let Ok(slot) = slots.clone().acquire_owned().await else { return };
                    let Some((consumer, delivery, receipt)) = queue.take_next() else { break };
                    let queue = queue.clone();
                    tokio::spawn(async move {
                        let (status, retry) = queue.deliver(&consumer, delivery, receipt).await;
                        drop(slot);
                        match retry {
                            // A failure pauses; a success without an acknowledgement (a job
                            // deferring the rest of its work) is offered again at once.
                            Some(delivery) if !status.is_success() => queue.requeue_after_pause(delivery).await,
                            Some(delivery) => queue.requeue(delivery),
                            None => {}
                        }
                    });
                }
            }
        });
    }
}

impl Publisher for LocalQueue {
    fn publish<'a>(&'a self, message: &'a JobMessage, _oidc_token: Option<&'a str>) -> PublishFuture<'a> {
        let payload = Bytes::from(serde_json::to_vec(message).expect("messages serialise"));
        {
            let mut state = self.state.lock().expect("queue lock");
            if state.pending.len() + state.retrying >= self.max_pending {
                let refusal = format!("the local queue is full (limit {}); try again later", self.max_pending);
                return Box::pin(async move { Err(PublishError::Full(refusal)) });
            }
            state.published += 1;
            let message_id = format!("local-{}", state.published);
            state.pending.push_back(Delivery { message_id, payload, attempts: 0 });
        }
        self.wake.notify_one();
        Box::pin(async { Ok(()) })
    }
}

/// The consumer group of the in-process queue's deliveries.
pub const LOCAL_CONSUMER_GROUP: &str = "local";

impl QueueApi for LocalQueue {
    fn consumer_group(&self) -> &str {
        LOCAL_CONSUMER_GROUP
    }

    fn confirm<'a>(&'a self, lease: &'a Lease, _: Duration) -> QueueFuture<'a, bool> {
        // Only a delivery this queue handed out, of that very message, and not settled is live.
        let live = self.state.lock().expect("queue lock").in_flight.get(&lease.receipt) == Some(&lease.message_id);
        Box::pin(async move { Ok(live) })
    }

    fn ack<'a>(&'a self, lease: &'a Lease) -> QueueFuture<'a, ()> {
        let mut state = self.state.lock().expect("queue lock");
        if state.in_flight.contains_key(&lease.receipt) {
            state.acked.insert(lease.receipt.clone());
        }
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
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn lease(receipt: &str) -> Lease {
        Lease {
            region: None,
            topic: JOBS_TOPIC.into(),
            group: "local".into(),
            receipt: receipt.into(),
            message_id: String::new(),
            oidc_token: None,
        }
    }

    #[tokio::test]
    async fn only_a_live_delivery_of_that_message_is_confirmed() {
        let queue = LocalQueue::new();
        let seen: Arc<Mutex<Vec<bool>>> = Arc::default();
        let (confirming, record) = (queue.clone(), seen.clone());
        queue.connect(Arc::new(move |request: Request<Bytes>| {
            let (queue, record) = (confirming.clone(), record.clone());
            Box::pin(async move {
                let header = |name: &str| request.headers()[name].to_str().unwrap().to_owned();
                let real = Lease { message_id: header("ce-vqsmessageid"), ..lease(&header("ce-vqsreceipthandle")) };
                let other_message = Lease { message_id: "local-99".into(), ..real.clone() };
                let forged = Lease { receipt: "made-up".into(), ..real.clone() };
                for candidate in [&real, &other_message, &forged] {
                    let confirmed = queue.confirm(candidate, Duration::from_secs(1)).await.unwrap();
                    record.lock().unwrap().push(confirmed);
                }
                queue.ack(&real).await.unwrap();
                Response::new(Body::empty())
            })
        }));
        queue
            .publish(&JobMessage { job_id: "AAAAAAAAAAAAAAAAAAAAAA".into(), owner_id: "o".into(), steps: 1 }, None)
            .await
            .unwrap();
        assert_eq!(queue.deliver_next().await, Some(StatusCode::OK));
        assert_eq!(
            *seen.lock().unwrap(),
            [true, false, false],
            "the real lease only; not another message's, not a made-up one"
        );
        assert!(
            !queue.confirm(&lease("local-1-1-1"), Duration::from_secs(1)).await.unwrap(),
            "a settled one is not live"
        );
    }

    #[tokio::test]
    async fn a_full_queue_refuses_and_keeps_what_it_holds() {
        let queue = LocalQueue::new().with_max_pending(2);
        let message = |n: u32| JobMessage { job_id: format!("job-{n}"), owner_id: "o".into(), steps: 1 };
        queue.publish(&message(1), None).await.unwrap();
        queue.publish(&message(2), None).await.unwrap();
        let refusal = queue.publish(&message(3), None).await.unwrap_err();
        assert_eq!(refusal, PublishError::Full("the local queue is full (limit 2); try again later".into()));
        assert_eq!(queue.pending_len(), 2);
        let state = queue.state.lock().unwrap();
        assert_eq!(state.published, 2, "a refused message is not numbered");
        let held: Vec<_> = state.pending.iter().map(|d| d.message_id.as_str()).collect();
        assert_eq!(held, ["local-1", "local-2"]);
    }

    #[tokio::test]
    async fn only_acknowledged_deliveries_leave_the_queue_and_foreign_receipts_leave_nothing() {
        let queue = LocalQueue::new();
        queue.ack(&lease("foreign-1")).await.unwrap();
        assert!(queue.state.lock().unwrap().acked.is_empty(), "a receipt this queue never issued is ignored");

        // The consumer acknowledges one-step jobs only.
        let acking = queue.clone();
        queue.connect(Arc::new(move |request: Request<Bytes>| {
            let queue = acking.clone();
            Box::pin(async move {
                let receipt = request.headers()["ce-vqsreceipthandle"].to_str().unwrap().to_owned();
                if JobMessage::parse(request.body()).unwrap().steps == 1 {
                    queue.ack(&lease(&receipt)).await.unwrap();
                }
                Response::new(Body::empty())
            })
        }));
        let id = "AAAAAAAAAAAAAAAAAAAAAA";
        for steps in [1, 2] {
            let message = JobMessage { job_id: id.into(), owner_id: "sub:a".into(), steps };
            queue.publish(&message, None).await.unwrap();
        }
        assert_eq!(queue.deliver_next().await, Some(StatusCode::OK));
        assert_eq!(queue.deliver_next().await, Some(StatusCode::OK));
        assert_eq!(queue.pending_len(), 1, "the unacknowledged delivery goes back on the queue");
        let state = queue.state.lock().unwrap();
        assert!(state.acked.is_empty() && state.in_flight.is_empty(), "settled deliveries leave no receipts");
    }

    #[tokio::test]
    async fn the_worker_starts_a_job_while_an_earlier_one_is_still_running() {
        let queue = LocalQueue::new();
        let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<u32>();
        let release = Arc::new(Notify::new());
        let calls = Arc::new(AtomicUsize::new(0));
        let (acking, gate, counter) = (queue.clone(), release.clone(), calls.clone());
        queue.connect(Arc::new(move |request: Request<Bytes>| {
            let (queue, started, gate) = (acking.clone(), started_tx.clone(), gate.clone());
            counter.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let receipt = request.headers()["ce-vqsreceipthandle"].to_str().unwrap().to_owned();
                let steps = JobMessage::parse(request.body()).unwrap().steps;
                started.send(steps).unwrap();
                if steps == 1 {
                    gate.notified().await; // the first job runs until the test lets it finish
                }
                queue.ack(&lease(&receipt)).await.unwrap();
                Response::new(Body::empty())
            })
        }));
        queue.spawn_worker();
        for steps in [1, 2] {
            let message = JobMessage { job_id: "AAAAAAAAAAAAAAAAAAAAAA".into(), owner_id: "sub:a".into(), steps };
            queue.publish(&message, None).await.unwrap();
        }
        assert_eq!(started.recv().await, Some(1));
        // A deadlock guard, not a timing assertion: a one-at-a-time worker would wait forever here.
        let second = tokio::time::timeout(Duration::from_secs(30), started.recv()).await;
        assert_eq!(second.ok().flatten(), Some(2), "the second job starts while the first still runs");
        release.notify_one();
        while !queue.state.lock().unwrap().in_flight.is_empty() {
            tokio::task::yield_now().await;
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2, "each message was delivered once");
        assert_eq!(queue.pending_len(), 0);
        assert!(queue.state.lock().unwrap().acked.is_empty(), "both deliveries were settled");
    }

    /// A consumer answering with `statuses` in turn (acknowledging only 200s), reporting the
    /// virtual time of each call.
    fn scripted_consumer(
        queue: &LocalQueue,
        statuses: Vec<StatusCode>,
    ) -> tokio::sync::mpsc::UnboundedReceiver<tokio::time::Instant> {
        let (calls_tx, calls) = tokio::sync::mpsc::unbounded_channel();
        let (acking, statuses) = (queue.clone(), Arc::new(Mutex::new(VecDeque::from(statuses))));
        queue.connect(Arc::new(move |request: Request<Bytes>| {
            let (queue, statuses, calls) = (acking.clone(), statuses.clone(), calls_tx.clone());
            Box::pin(async move {
                calls.send(tokio::time::Instant::now()).unwrap();
                let status = statuses.lock().unwrap().pop_front().expect("no more deliveries expected");
                if status == StatusCode::OK {
                    let receipt = request.headers()["ce-vqsreceipthandle"].to_str().unwrap().to_owned();
                    queue.ack(&lease(&receipt)).await.unwrap();
                }
                let mut response = Response::new(Body::empty());
                *response.status_mut() = status;
                response
            })
        }));
        calls
    }

    #[tokio::test(start_paused = true)]
    async fn the_worker_retries_a_failure_after_the_pause_and_deferred_work_at_once() {
        let message = JobMessage { job_id: "AAAAAAAAAAAAAAAAAAAAAA".into(), owner_id: "sub:a".into(), steps: 1 };
        // A store outage (500) waits out the pause before the message is offered again.
        let queue = LocalQueue::new();
        let mut calls = scripted_consumer(&queue, vec![StatusCode::INTERNAL_SERVER_ERROR, StatusCode::OK]);
        queue.spawn_worker();
        queue.publish(&message, None).await.unwrap();
        let (first, second) = (calls.recv().await.unwrap(), calls.recv().await.unwrap());
        assert_eq!(second - first, RETRY_PAUSE);

        // A job deferring the rest of its work (202, no acknowledgement) is offered again at once.
        let queue = LocalQueue::new();
        let mut calls = scripted_consumer(&queue, vec![StatusCode::ACCEPTED, StatusCode::OK]);
        queue.spawn_worker();
        queue.publish(&message, None).await.unwrap();
        let (first, second) = (calls.recv().await.unwrap(), calls.recv().await.unwrap());
        assert_eq!(second - first, Duration::ZERO);
        while !queue.state.lock().unwrap().in_flight.is_empty() {
            tokio::task::yield_now().await;
        }
        assert_eq!(queue.pending_len(), 0, "acknowledged once, gone");
    }

    #[tokio::test]
    async fn a_panicking_consumer_is_a_failed_delivery_and_the_message_is_retried() {
        let queue = LocalQueue::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let (acking, counter) = (queue.clone(), calls.clone());
        queue.connect(Arc::new(move |request: Request<Bytes>| {
            let (queue, counter) = (acking.clone(), counter.clone());
            Box::pin(async move {
                assert!(counter.fetch_add(1, Ordering::SeqCst) > 0, "the first delivery meets a consumer bug");
                let receipt = request.headers()["ce-vqsreceipthandle"].to_str().unwrap().to_owned();
                queue.ack(&lease(&receipt)).await.unwrap();
                Response::new(Body::empty())
            })
        }));
        let message = JobMessage { job_id: "AAAAAAAAAAAAAAAAAAAAAA".into(), owner_id: "sub:a".into(), steps: 1 };
        queue.publish(&message, None).await.unwrap();
        assert_eq!(queue.deliver_next().await, Some(StatusCode::INTERNAL_SERVER_ERROR));
        assert_eq!(queue.pending_len(), 1, "the message is still there");
        assert!(queue.state.lock().unwrap().in_flight.is_empty(), "and its receipt is not left in flight");
        assert_eq!(queue.deliver_next().await, Some(StatusCode::OK));
        assert_eq!(queue.pending_len(), 0);
        let state = queue.state.lock().unwrap();
        assert!(state.in_flight.is_empty() && state.acked.is_empty());
    }

    #[test]
    fn parses_only_well_formed_messages() {
        let id = "AAAAAAAAAAAAAAAAAAAAAA";
        assert_eq!(
            JobMessage::parse(format!(r#"{{"jobId":"{id}","ownerId":"sub:a","steps":3,"extra":1}}"#).as_bytes()),
            Some(JobMessage { job_id: id.into(), owner_id: "sub:a".into(), steps: 3 })
        );
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
        ] {
            assert_eq!(JobMessage::parse(bad.as_bytes()), None, "{bad}");
        }
    }
}
