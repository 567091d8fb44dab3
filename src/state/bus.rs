//! Change signals for `subscriptions/listen`.
//!
//! The instance holding a listen stream is rarely the one that made the change, so the bus is
//! an abstraction: in the local run it is an in-process broadcast; a deployment plugs in a
//! shared implementation (Redis pub/sub) behind the same trait.

use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::broadcast;

/// Something a listener may want to hear about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "camelCase")]
pub enum ChangeEvent {
    /// The tool list changed.
    ToolsListChanged,
    /// The prompt list changed.
    PromptsListChanged,
    /// The resource list changed.
    ResourcesListChanged,
    /// The resource at this URI changed.
    ResourceUpdated(String),
    /// A task of the tasks extension changed status (or its outstanding inputs changed).
    TaskChanged {
        /// The owning principal's id: only its own listeners hear about the task.
        owner: String,
        /// The task.
        task_id: String,
    },
}

/// Publishes and fans out change events.
pub trait ChangeBus: Send + Sync + 'static {
    /// Announces a change to every current subscriber (best effort, never blocks).
    fn publish(&self, event: ChangeEvent);
    /// A new subscription; events published before this call are not delivered.
    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent>;
    /// Resolves once events published from now on reach subscribers (a shared bus may need to
    /// establish its own subscription first).
    fn ready(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }
    /// Counts the times this bus may have lost changes meant for its subscribers: a shared bus
    /// whose link to the other instances broke, counted when it is made again, or one that could
    /// not send a change out (its own listeners would never hear it). A listener that
    /// sees the count move catches up as if it had fallen behind. `None` for a bus that loses
    /// nothing it was given (the in-process one).
    fn losses(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
    /// Why a listener may not be served from this bus: set on a deployment whose bus cannot reach
    /// the other instances (no shared store configured), where a listen stream would hear only the
    /// changes made by the instance holding it. `None` for a bus that can serve listeners.
    fn unavailable(&self) -> Option<&str> {
        None
    }
}

/// The in-process bus of the local run and of tests.
#[derive(Debug)]
pub struct LocalBus(broadcast::Sender<ChangeEvent>);

impl Default for LocalBus {
    fn default() -> Self {
        Self(broadcast::channel(256).0)
    }
}

impl ChangeBus for LocalBus {
    fn publish(&self, event: ChangeEvent) {
        // No subscribers is not an error.
        let _ = self.0.send(event);
    }

    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        self.0.subscribe()
    }
}

/// The bus of a deployment with no shared store: changes reach only the instance that made them
/// (a tool's handler that publishes one still works), and listeners are refused with the reason.
#[derive(Debug)]
pub struct InstanceOnlyBus {
    local: LocalBus,
    reason: String,
}

impl InstanceOnlyBus {
    /// A bus that refuses listeners with `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        Self { local: LocalBus::default(), reason: reason.into() }
    }
}

impl ChangeBus for InstanceOnlyBus {
    fn publish(&self, event: ChangeEvent) {
        self.local.publish(event);
    }

    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        self.local.subscribe()
    }

    fn unavailable(&self) -> Option<&str> {
        Some(&self.reason)
    }
}

/// A bus shared by every instance through Redis pub/sub.
///
/// Publishing sends the event to one channel; each instance that has listeners holds one
/// subscription (started on first use, re-established after a failure) and fans the events
/// out locally. Delivery is best effort, like the notifications it carries: what is published
/// while an instance's subscription is down never reaches it, and its listeners catch up once
/// it is back ([`ChangeBus::losses`]).
pub struct RedisBus {
    local: broadcast::Sender<ChangeEvent>,
    client: redis::Client,
    publisher: redis::aio::ConnectionManager,
    channel: String,
    subscribed: OnceLock<()>,
    live: tokio::sync::watch::Sender<bool>,
    /// Subscriptions made (the first included), and publishes given up: events published while
    /// there was no subscription, or that could not be published, are lost.
    losses: tokio::sync::watch::Sender<u64>,
    /// How often the subscription's link is checked, and how long a check may take.
    link_check: (Duration, Duration),
}

/// How often the subscription's link is checked with a `PING`, and how long its answer may
/// take. A subscribed connection is idle between changes, and a link that died without a word
/// (a NAT that forgot an idle connection, a host that vanished) would otherwise never be
/// noticed: the instance's listeners would hear nothing for as long as it lives.
const LINK_CHECK_EVERY: Duration = Duration::from_secs(15);
const LINK_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Tries a change's `PUBLISH` gets, the pause before the second doubling each time (about 0.7 s
/// in all): a connection reset between the write and its publish costs no notification.
const PUBLISH_ATTEMPTS: u32 = 4;
const PUBLISH_FIRST_PAUSE: Duration = Duration::from_millis(100);

impl std::fmt::Debug for RedisBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBus").field("channel", &self.channel).finish_non_exhaustive()
    }
}

/// The pub/sub channel of the deployment `redis` serves: `{prefix}:changes`, with the database
/// number in it when it is not 0. Keys live in their database, but Redis pub/sub ignores the
/// database: two deployments told apart by database alone (preview and production, say) would
/// otherwise hear each other's list and resource changes.
fn changes_channel(redis: &crate::store::Redis) -> String {
    match redis.client().get_connection_info().redis_settings().db() {
        0 => format!("{}:changes", redis.prefix()),
        db => format!("{}:db{db}:changes", redis.prefix()),
    }
}

impl RedisBus {
    /// A bus on `{prefix}:changes`: publishes on the shared connection and subscribes on one of
    /// its own (a subscribed connection can send nothing else).
    pub fn new(redis: &crate::store::Redis) -> Arc<Self> {
        Self::checking_link(redis, LINK_CHECK_EVERY, LINK_CHECK_TIMEOUT)
    }

    /// [`RedisBus::new`] whose subscription's link is checked every `every`, and given up (then
    /// made again) when a check takes longer than `timeout`.
    pub fn checking_link(redis: &crate::store::Redis, every: Duration, timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            local: broadcast::channel(256).0,
            client: redis.client().clone(),
            publisher: redis.connection(),
            channel: changes_channel(redis),
            subscribed: OnceLock::new(),
            live: tokio::sync::watch::channel(false).0,
            losses: tokio::sync::watch::channel(0).0,
            link_check: (every, timeout),
        })
    }

    fn ensure_subscribed(&self) {
        if self.subscribed.set(()).is_err() {
            return;
        }
        let (client, channel, local, live, losses) =
            (self.client.clone(), self.channel.clone(), self.local.clone(), self.live.clone(), self.losses.clone());
        let (check_every, check_timeout) = self.link_check;
        tokio::spawn(async move {
            loop {
                if let Ok(mut pubsub) = client.get_async_pubsub().await {
                    if pubsub.subscribe(&channel).await.is_ok() {
                        use futures_util::StreamExt;
                        // Counted before it is live: a listener that waited for `ready` has seen
                        // this subscription, and catches up only after one it did not see.
                        losses.send_modify(|lost| *lost += 1);
                        live.send_replace(true);
                        let (mut sink, mut messages) = pubsub.split();
                        let mut check =
                            tokio::time::interval_at(tokio::time::Instant::now() + check_every, check_every);
                        loop {
                            tokio::select! {
                                message = messages.next() => {
                                    let Some(message) = message else { break };
                                    let payload: Vec<u8> = message.get_payload_bytes().to_vec();
                                    if let Ok(event) = serde_json::from_slice::<ChangeEvent>(&payload) {
                                        let _ = local.send(event);
                                    }
                                }
                                _ = check.tick() => {
                                    let answered = tokio::time::timeout(check_timeout, sink.ping::<redis::Value>()).await;
                                    if !matches!(answered, Ok(Ok(_))) {
                                        break; // a dead link: made again below
                                    }
                                }
                            }
                        }
                    }
                }
                live.send_replace(false);
                // The subscription dropped: try again shortly. Listeners meanwhile hear nothing,
                // and catch up once it is back (`losses`).
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
    }
}

impl ChangeBus for RedisBus {
    fn publish(&self, event: ChangeEvent) {
        let mut connection = self.publisher.clone();
        let channel = self.channel.clone();
        let payload = serde_json::to_string(&event).expect("events serialise");
        let losses = self.losses.clone();
        // The publish runs on after the caller returns, still under the caller's span (and, on
        // Vercel, inside the invocation: a frozen instance would never send it).
        let publish = crate::telemetry::carry_current(async move {
            let mut pause = PUBLISH_FIRST_PAUSE;
            for attempt in 1..=PUBLISH_ATTEMPTS {
                let sent = crate::telemetry::redis_span("changes.publish", async {
                    redis::cmd("PUBLISH").arg(&channel).arg(&payload).query_async::<i64>(&mut connection).await
                })
                .await;
                if sent.is_ok() {
                    return;
                }
                if attempt < PUBLISH_ATTEMPTS {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
            // Given up: this instance's listeners catch up (another instance's cannot be told;
            // theirs do when their own link to Redis comes back, if it was Redis that failed).
            losses.send_modify(|lost| *lost += 1);
        });
        super::background::spawn(publish);
    }

    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        let receiver = self.local.subscribe();
        self.ensure_subscribed();
        receiver
    }

    fn ready(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        let mut live = self.live.subscribe();
        Box::pin(async move {
            // Bounded: a listener on an instance whose Redis is down still gets its stream.
            let _ = tokio::time::timeout(Duration::from_secs(2), live.wait_for(|up| *up)).await;
        })
    }

    fn losses(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.losses.subscribe())
    }
}
