//! Change signals for `subscriptions/listen`.
//!
//! The instance holding a listen stream is rarely the one that made the change, so the bus is
//! an abstraction: in the local run it is an in-process broadcast; a deployment plugs in a
//! shared implementation (Redis pub/sub) behind the same trait.

use tokio::sync::broadcast;

/// Something a listener may want to hear about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChangeEvent {
    /// The tool list changed.
    ToolsListChanged,
    /// The prompt list changed.
    PromptsListChanged,
    /// The resource list changed.
    ResourcesListChanged,
    /// The resource at this URI changed.
    ResourceUpdated(String),
}

/// Publishes and fans out change events.
pub trait ChangeBus: Send + Sync + 'static {
    /// Announces a change to every current subscriber (best effort, never blocks).
    fn publish(&self, event: ChangeEvent);
    /// A new subscription; events published before this call are not delivered.
    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent>;
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
