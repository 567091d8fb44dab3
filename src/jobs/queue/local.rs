//! [`LocalQueue`]: the platform's part played in-process for the local run. It delivers each
//! message to the consumer handler over the same HTTP contract as Vercel (a v2beta binary-mode
//! CloudEvent) and redelivers until the delivery is acknowledged or its attempts run out; a
//! message given up that way fails its job, as the Redis stream's dead letters do.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::Notify;

use super::{Confirmation, JobMessage, Lease, PublishError, PublishFuture, Publisher, QueueApi, QueueFuture};
use crate::body::Body;
use crate::jobs::model::JOBS_TOPIC;

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
    /// Deliveries so far (the consumer sees it as `ce-vqsdeliverycount`).
    attempts: u32,
    /// Deliveries that failed: the ones the queue's limit counts (a deferral is not one).
    failures: u32,
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
    /// The consumer whose jobs a message given up fails (set by [`LocalQueue::connect_consumer`]).
    gives_up_to: Arc<OnceLock<Arc<crate::jobs::Consumer>>>,
    wake: Arc<Notify>,
    /// Makes receipts unguessable: the consumer route is reachable by anything that can reach
    /// the local run, and a receipt is what a push must show to be taken as the queue's.
    random: Arc<dyn crate::state::Random>,
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
            gives_up_to: Arc::new(OnceLock::new()),
            wake: Arc::new(Notify::new()),
            random: Arc::new(crate::state::SystemRandom::default()),
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
    /// `api/queues/process-job.rs`. A message whose deliveries all fail is given up to it
    /// ([`crate::jobs::Consumer::give_up`]): its job is failed at once, freeing its owner's
    /// slot, rather than read as working until its deadline.
    pub fn connect_consumer(&self, consumer: Arc<crate::jobs::Consumer>) {
        let _ = self.gives_up_to.set(consumer.clone());
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
            state.pending.push_back(Delivery { attempts: 0, failures: 0, ..last });
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
        let mut secret = [0u8; 16];
        self.random.fill(&mut secret);
        let receipt = format!(
            "{}-{}-{}-{}",
            delivery.message_id,
            delivery.attempts,
            state.delivered,
            crate::state::seal::hex(&secret)
        );
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
            Err(_) => {
                // Logged where it happened, as a request's panic is (under the message's id).
                match self.gives_up_to.get().and_then(|consumer| consumer.logger.as_ref()) {
                    Some(logger) => logger.contained_panic("messageId", &delivery.message_id),
                    None => drop(crate::observe::take_panic_location()),
                }
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        let acked = {
            let mut state = self.state.lock().expect("queue lock");
            state.in_flight.remove(&receipt);
            state.acked.remove(&receipt)
        };
        // Deferred work (202: the consumer's time budget ran out mid-job) is not a failed attempt:
        // it comes back until the job ends, which the job's deadline bounds. Failures count.
        let mut delivery = delivery;
        if status != StatusCode::ACCEPTED {
            delivery.failures += 1;
        }
        if acked {
            return (status, None);
        }
        if delivery.failures < self.max_attempts {
            return (status, Some(delivery));
        }
        self.give_up(&delivery).await;
        (status, None)
    }

    /// Drops a message whose attempts ran out, failing its job through the connected consumer.
    async fn give_up(&self, delivery: &Delivery) {
        let Some(consumer) = self.gives_up_to.get() else { return };
        if let Some(message) = JobMessage::parse(&delivery.payload) {
            consumer.give_up(&message).await;
        }
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
        let payload = Bytes::from(message.body());
        {
            let mut state = self.state.lock().expect("queue lock");
            if state.pending.len() + state.retrying >= self.max_pending {
                let refusal = format!("the local queue is full (limit {}); try again later", self.max_pending);
                return Box::pin(async move { Err(PublishError::Full(refusal)) });
            }
            state.published += 1;
            let message_id = format!("local-{}", state.published);
            state.pending.push_back(Delivery { message_id, payload, attempts: 0, failures: 0 });
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

    fn confirm<'a>(&'a self, lease: &'a Lease, _: Duration) -> QueueFuture<'a, Confirmation> {
        // Only a delivery this queue handed out, of that very message, and not settled is live.
        let live = self.state.lock().expect("queue lock").in_flight.get(&lease.receipt) == Some(&lease.message_id);
        Box::pin(async move { Ok(if live { Confirmation::Live } else { Confirmation::Unknown }) })
    }

    fn ack<'a>(&'a self, lease: &'a Lease) -> QueueFuture<'a, ()> {
        let mut state = self.state.lock().expect("queue lock");
        if state.in_flight.contains_key(&lease.receipt) {
            state.acked.insert(lease.receipt.clone());
        }
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A one-step job's message.
    fn one_step_job() -> JobMessage {
        JobMessage { job_id: "AAAAAAAAAAAAAAAAAAAAAA".into(), owner_id: "sub:a".into(), steps: 1, traceparent: None }
    }

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
        let seen: Arc<Mutex<Vec<Confirmation>>> = Arc::default();
        let (confirming, record) = (queue.clone(), seen.clone());
        queue.connect(Arc::new(move |request: Request<Bytes>| {
            let (queue, record) = (confirming.clone(), record.clone());
            Box::pin(async move {
                let header = |name: &str| request.headers()[name].to_str().unwrap().to_owned();
                let real = Lease { message_id: header("ce-vqsmessageid"), ..lease(&header("ce-vqsreceipthandle")) };
                let other_message = Lease { message_id: "local-99".into(), ..real.clone() };
                let forged = Lease { receipt: "made-up".into(), ..real.clone() };
                // The receipt this delivery would have had were receipts only numbered.
                let guessed = Lease { receipt: "local-1-1-1".into(), ..real.clone() };
                for candidate in [&real, &other_message, &forged, &guessed] {
                    let confirmed = queue.confirm(candidate, Duration::from_secs(1)).await.unwrap();
                    record.lock().unwrap().push(confirmed);
                }
                queue.ack(&real).await.unwrap();
                Response::new(Body::empty())
            })
        }));
        queue
            .publish(
                &JobMessage {
                    job_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
                    owner_id: "o".into(),
                    steps: 1,
                    traceparent: None,
                },
                None,
            )
            .await
            .unwrap();
        assert_eq!(queue.deliver_next().await, Some(StatusCode::OK));
        assert_eq!(
            *seen.lock().unwrap(),
            [Confirmation::Live, Confirmation::Unknown, Confirmation::Unknown, Confirmation::Unknown],
            "the real lease only; not another message's, not a made-up or guessed one"
        );
        assert_eq!(
            queue.confirm(&lease("local-1-1-1"), Duration::from_secs(1)).await.unwrap(),
            Confirmation::Unknown,
            "a settled one is not live"
        );
    }

    #[tokio::test]
    async fn a_full_queue_refuses_and_keeps_what_it_holds() {
        let queue = LocalQueue::new().with_max_pending(2);
        let message =
            |n: u32| JobMessage { job_id: format!("job-{n}"), owner_id: "o".into(), steps: 1, traceparent: None };
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
            let message = JobMessage { job_id: id.into(), owner_id: "sub:a".into(), steps, traceparent: None };
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
            let message = JobMessage {
                job_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
                owner_id: "sub:a".into(),
                steps,
                traceparent: None,
            };
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
        let message = one_step_job();
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

    /// A job longer than one delivery's budget comes back as often as it defers, beyond the
    /// attempts a failing delivery gets; failures are still dropped after those attempts.
    #[tokio::test]
    async fn deferred_work_is_not_a_failed_attempt() {
        let queue = LocalQueue::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let (acking, counter) = (queue.clone(), calls.clone());
        queue.connect(Arc::new(move |request: Request<Bytes>| {
            let (queue, counter) = (acking.clone(), counter.clone());
            Box::pin(async move {
                let mut response = Response::new(Body::empty());
                let call = counter.fetch_add(1, Ordering::SeqCst);
                if call < 12 {
                    *response.status_mut() = StatusCode::ACCEPTED;
                } else if call == 12 {
                    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                } else {
                    let receipt = request.headers()["ce-vqsreceipthandle"].to_str().unwrap().to_owned();
                    queue.ack(&lease(&receipt)).await.unwrap();
                }
                response
            })
        }));
        queue.publish(&one_step_job(), None).await.unwrap();
        for _ in 0..12 {
            assert_eq!(queue.deliver_next().await, Some(StatusCode::ACCEPTED));
            assert_eq!(queue.pending_len(), 1, "deferred, so back on the queue");
        }
        // Its first failure, after more deliveries than the failure limit: still retried.
        assert_eq!(queue.deliver_next().await, Some(StatusCode::INTERNAL_SERVER_ERROR));
        assert_eq!(queue.pending_len(), 1, "one failure after many deferrals is retried");
        assert_eq!(queue.deliver_next().await, Some(StatusCode::OK));
        assert_eq!(queue.pending_len(), 0, "acknowledged at last");

        let failing = LocalQueue::new();
        failing.connect(Arc::new(|_: Request<Bytes>| {
            Box::pin(async {
                let mut response = Response::new(Body::empty());
                *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                response
            })
        }));
        failing.publish(&one_step_job(), None).await.unwrap();
        let mut deliveries = 0;
        while failing.deliver_next().await.is_some() {
            deliveries += 1;
            assert!(deliveries <= 8, "a failing delivery is retried a bounded number of times");
        }
        assert_eq!((deliveries, failing.pending_len()), (8, 0));
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
        let message = one_step_job();
        queue.publish(&message, None).await.unwrap();
        assert_eq!(queue.deliver_next().await, Some(StatusCode::INTERNAL_SERVER_ERROR));
        assert_eq!(queue.pending_len(), 1, "the message is still there");
        assert!(queue.state.lock().unwrap().in_flight.is_empty(), "and its receipt is not left in flight");
        assert_eq!(queue.deliver_next().await, Some(StatusCode::OK));
        assert_eq!(queue.pending_len(), 0);
        let state = queue.state.lock().unwrap();
        assert!(state.in_flight.is_empty() && state.acked.is_empty());
    }
}
