//! [`Stopping`]: the process has been asked to stop (the local run's SIGTERM). Long-lived work
//! ends on it gracefully instead of being cut when the runtime goes: a listen stream sends its
//! result, a task round is given a moment to finish and is otherwise recorded as failed, saying
//! why. On Vercel nothing begins it: the platform ends each invocation itself.

use std::sync::Arc;
use tokio::sync::watch;

/// A signal shared by every clone; once begun, it stays begun.
#[derive(Clone, Debug)]
pub struct Stopping(Arc<watch::Sender<bool>>);

impl Default for Stopping {
    fn default() -> Self {
        Self(Arc::new(watch::channel(false).0))
    }
}

impl Stopping {
    /// Says the process is stopping; everything waiting on [`Stopping::begun`] wakes.
    pub fn begin(&self) {
        self.0.send_replace(true);
    }

    /// Whether [`Stopping::begin`] was called.
    pub fn has_begun(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the process is stopping (at once if it already is).
    pub async fn begun(&self) {
        let mut stopping = self.0.subscribe();
        // The sender lives as long as `self`, so the wait ends only by the signal.
        let _ = stopping.wait_for(|stopping| *stopping).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_hears_it_once_begun_and_later_waits_end_at_once() {
        let stopping = Stopping::default();
        let clone = stopping.clone();
        let waiting = tokio::spawn(async move { clone.begun().await });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished() && !stopping.has_begun());
        stopping.begin();
        waiting.await.unwrap();
        assert!(stopping.has_begun());
        stopping.begun().await;
        assert!(!Stopping::default().has_begun(), "a new signal is its own");
    }
}
