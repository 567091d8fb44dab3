//! Turns at a shared bound, taken in order and shared fairly: work that waits for a turn rather
//! than being refused (a listen stream's reads of its tasks) takes one of at most `total` at once,
//! and one principal holds or waits for at most `per_principal` of them. Its further work waits
//! behind its own, so another caller's turn comes after at most `per_principal` of each other
//! caller's, however much one caller asks for. [`super::Slots`] is the refusing counterpart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Turns at one shared bound, counted per principal.
#[derive(Debug)]
pub struct Turns {
    per_principal: usize,
    all: Arc<Semaphore>,
    /// Each principal's own queue, while it holds or waits for a turn (removed after its last).
    principals: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// One turn; dropping it gives the turn back, however its holder ends.
#[derive(Debug)]
pub struct Turn<'a> {
    turns: &'a Turns,
    principal: &'a str,
    permits: Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
}

impl Turns {
    /// At most `total` turns at once, and `per_principal` of them for one principal.
    pub fn new(per_principal: usize, total: usize) -> Self {
        Self { per_principal, all: Arc::new(Semaphore::new(total)), principals: Mutex::default() }
    }

    /// Waits for `principal`'s turn: first behind its own earlier work, then at the shared bound.
    pub async fn take<'a>(&'a self, principal: &'a str) -> Turn<'a> {
        let own = {
            let mut principals = self.principals.lock().expect("turns");
            match principals.get(principal) {
                Some(queue) => queue.clone(),
                // The principal's id is copied only for its first turn in a while.
                None => {
                    let queue = Arc::new(Semaphore::new(self.per_principal));
                    principals.insert(principal.to_owned(), queue.clone());
                    queue
                }
            }
        };
        // The turn is built before the first wait, so that a caller that stops waiting (a stream
        // that ends) still removes the principal's queue when it was the last to use it.
        let mut turn = Turn { turns: self, principal, permits: None };
        let mine = own.acquire_owned().await.expect("a principal's queue is never closed");
        let shared = self.all.clone().acquire_owned().await.expect("the bound is never closed");
        turn.permits = Some((mine, shared));
        turn
    }

    /// How many principals hold or wait for a turn.
    pub fn principals(&self) -> usize {
        self.principals.lock().expect("turns").len()
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        // Both permits go back first: each principal's queue is then referenced by the map and by
        // whoever still holds or waits for one of its permits, so a count of one means no one.
        self.permits = None;
        let mut principals = self.turns.principals.lock().expect("turns");
        if principals.get(self.principal).is_some_and(|queue| Arc::strong_count(queue) == 1) {
            principals.remove(self.principal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_caller_waits_behind_its_own_share_not_behind_everyone_elses_work() {
        let turns = Turns::new(2, 3);
        let alice: Vec<Turn<'_>> = vec![turns.take("alice").await, turns.take("alice").await];
        // Alice's third waits behind her own two, although a shared turn is free...
        let third = tokio::time::timeout(Duration::from_secs(1), turns.take("alice")).await;
        assert!(third.is_err(), "a principal holds at most its share");
        // ...which bob takes at once.
        let bob = tokio::time::timeout(Duration::from_secs(1), turns.take("bob")).await;
        let bob = bob.expect("another principal's turn is not behind alice's queue");
        // Every shared turn is taken: carol waits until one is given back.
        let carol = tokio::time::timeout(Duration::from_secs(1), turns.take("carol")).await;
        assert!(carol.is_err(), "at most `total` turns at once");
        drop(bob);
        let carol = tokio::time::timeout(Duration::from_secs(1), turns.take("carol")).await;
        assert!(carol.is_ok(), "a turn given back is taken");
        drop(carol);
        drop(alice);
    }

    #[tokio::test(start_paused = true)]
    async fn a_principal_is_forgotten_after_its_last_turn_even_one_it_stopped_waiting_for() {
        let turns = Turns::new(1, 2);
        let first = turns.take("alice").await;
        let bob = turns.take("bob").await;
        assert_eq!(turns.principals(), 2);
        // A wait given up (its future dropped) behind alice's own turn...
        assert!(tokio::time::timeout(Duration::from_secs(1), turns.take("alice")).await.is_err());
        assert_eq!(turns.principals(), 2, "alice still holds a turn");
        drop(first);
        assert_eq!(turns.principals(), 1, "alice's queue is removed with her last turn");
        // ...or at the shared bound, holding nothing else, leaves nothing behind.
        let carol = turns.take("carol").await;
        assert!(tokio::time::timeout(Duration::from_secs(1), turns.take("alice")).await.is_err());
        assert_eq!(turns.principals(), 2, "bob and carol");
        drop((bob, carol));
        assert_eq!(turns.principals(), 0);
    }
}
