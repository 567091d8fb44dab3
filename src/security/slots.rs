//! Per-principal shares of what one instance holds open at once (listen streams, running
//! tasks): a caller gets at most its share, and all callers together at most the total, so one
//! caller cannot take what every caller shares. The anonymous caller is one caller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::protocol::McpError;

/// The two caps on one kind of slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotCaps {
    /// Slots one principal may hold.
    pub per_principal: usize,
    /// Slots held in all.
    pub total: usize,
}

/// Which cap refused a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotsFull {
    /// The caller holds its share.
    Principal,
    /// Every slot is taken.
    Total,
}

impl SlotsFull {
    /// The 429 a refused caller gets: what is full, the cap, and what to do, from the pair of
    /// sentences for the cap that refused (`over_total` when every slot is taken, `over_share`
    /// when the caller holds its own share).
    pub fn too_many_requests(self, caps: SlotCaps, over_total: [&str; 2], over_share: [&str; 2]) -> McpError {
        let ([what, then], limit) = match self {
            SlotsFull::Total => (over_total, caps.total),
            SlotsFull::Principal => (over_share, caps.per_principal),
        };
        McpError::too_many_requests(format!("{what} (limit {limit}); {then}"))
    }
}

/// The slots of one kind held in this instance, counted per principal.
#[derive(Debug, Default)]
pub struct Slots {
    held: Mutex<(usize, HashMap<String, usize>)>,
}

/// One held slot; dropping it gives the slot back, however its holder ends.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    principal: String,
}

impl Slots {
    /// How many slots are held, by every principal together.
    pub fn held(&self) -> usize {
        self.held.lock().expect("slots").0
    }

    /// Takes a slot for `principal`, or says which cap is reached. A caller at its own share
    /// hears that first, even when every slot is taken: its own work ending is what it can wait
    /// for, and a slot freed by someone else would not be its.
    pub fn acquire(self: &Arc<Self>, principal: &str, caps: SlotCaps) -> Result<Slot, SlotsFull> {
        let mut held = self.held.lock().expect("slots");
        let mine = held.1.get(principal).copied().unwrap_or(0);
        if mine >= caps.per_principal {
            return Err(SlotsFull::Principal);
        }
        if held.0 >= caps.total {
            return Err(SlotsFull::Total);
        }
        held.0 += 1;
        held.1.insert(principal.to_owned(), mine + 1);
        Ok(Slot { slots: self.clone(), principal: principal.to_owned() })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().expect("slots");
        held.0 -= 1;
        if let Some(count) = held.1.get_mut(&self.principal) {
            *count -= 1;
            if *count == 0 {
                held.1.remove(&self.principal);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_capped_per_principal_and_in_all_and_freed_on_drop() {
        let slots = Arc::new(Slots::default());
        let caps = SlotCaps { per_principal: 2, total: 3 };
        let a1 = slots.acquire("a", caps).unwrap();
        let _a2 = slots.acquire("a", caps).unwrap();
        assert_eq!(slots.acquire("a", caps).unwrap_err(), SlotsFull::Principal);
        let _b1 = slots.acquire("b", caps).unwrap();
        assert_eq!(slots.acquire("c", caps).unwrap_err(), SlotsFull::Total);
        assert_eq!(slots.acquire("a", caps).unwrap_err(), SlotsFull::Principal, "its own share first");
        drop(a1);
        assert!(slots.acquire("c", caps).is_ok(), "a dropped slot is free again");
        assert_eq!(slots.held.lock().unwrap().1.get("a"), Some(&1), "counted per principal");
    }

    #[test]
    fn a_refusal_names_the_cap_that_refused_and_its_limit() {
        let caps = SlotCaps { per_principal: 2, total: 7 };
        let say = |full: SlotsFull| {
            let error = full.too_many_requests(caps, ["All full", "wait"], ["Yours full", "close one"]);
            (error.status, error.message.into_owned())
        };
        let over_share = say(SlotsFull::Principal);
        assert_eq!(over_share.1, "Yours full (limit 2); close one");
        assert_eq!(say(SlotsFull::Total).1, "All full (limit 7); wait");
        assert_eq!(over_share.0, http::StatusCode::TOO_MANY_REQUESTS);
    }
}
