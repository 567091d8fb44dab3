//! The verified-token cache: tokens that passed every check recently, so that their next use
//! skips the signature check (an RS256 verification is ≈ 100× the rest of a request).
//!
//! A hit is the exact token: the entry holds the token's bytes, found by its last
//! [`TAIL`] bytes (the end of its signature) and compared whole, in constant time. So an altered
//! token never hits, whatever it shares with a remembered one, and nothing rests on a digest being
//! hard to collide. An entry is trusted until the token's `exp` or for [`VERIFIED_TTL_SECS`],
//! whichever is sooner, re-checked on every use. Expired entries are dropped when the cache is
//! next used [`PRUNE_EVERY_SECS`] or more after its last pruning. The cache is bounded in entries
//! and in bytes: when full it drops its expired entries, then, if that is not enough, the entries
//! that expire soonest until the new one fits (never everything: many callers filling it cost
//! each other the odd re-verification, not all of them at once). One principal holds at most
//! [`VERIFIED_PER_PRINCIPAL`] entries, its oldest making room for its newest, so one caller
//! presenting token after token (each refresh mints one) cannot fill the cache for everyone.
//! Each endpoint's authenticator has its own (a token verified at one endpoint is never taken
//! from another's).

use std::collections::HashMap;
use std::sync::Mutex;

use super::Principal;
use super::constant_time_eq;

/// The longest a cached verification is reused.
pub(super) const VERIFIED_TTL_SECS: u64 = 300;
/// The most tokens remembered.
const VERIFIED_MAX: usize = 4096;
/// The most tokens remembered for one principal (several clients or devices of one subject each
/// hold one).
const VERIFIED_PER_PRINCIPAL: usize = 16;
/// The most token bytes remembered (tokens may be up to 16 KiB; typical ones are 0.7–2 KiB).
const VERIFIED_MAX_BYTES: usize = 2 * 1024 * 1024;
/// How often expired entries are looked for (they are never trusted after they expire; this
/// bounds how long their bytes stay in memory on an instance in use).
const PRUNE_EVERY_SECS: u64 = 60;
/// How many bytes at a token's end pick its entry: the end of its signature, which a token's
/// holder cannot choose.
const TAIL: usize = 32;

/// Remembered verifications, by the end of the token.
#[derive(Default)]
pub(super) struct VerifiedTokens {
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    by_tail: HashMap<[u8; TAIL], Remembered>,
    /// The entries of each principal, by their keys in `by_tail`: kept with it by `insert`,
    /// `remove` and `prune`, the only writers.
    by_principal: HashMap<Box<str>, Vec<[u8; TAIL]>>,
    bytes: usize,
    /// Unix seconds: when expired entries are next looked for.
    next_prune: u64,
    /// Unix seconds: no entry expires before this (it may be earlier than the first that does:
    /// an entry removed since is not looked for). A full cache with nothing expired by then is
    /// not scanned for expired entries.
    first_expiry: u64,
}

impl Entries {
    /// Drops the entries expired at `now`: at most every [`PRUNE_EVERY_SECS`], or at once when
    /// `full` (room is needed).
    fn prune(&mut self, now: u64, full: bool) {
        if !full && now < self.next_prune {
            return;
        }
        self.next_prune = now + PRUNE_EVERY_SECS;
        self.by_tail.retain(|_, entry| now < entry.valid_until);
        self.first_expiry = self.by_tail.values().map(|entry| entry.valid_until).min().unwrap_or(u64::MAX);
        self.bytes = self.by_tail.values().map(|entry| entry.token.len()).sum();
        self.by_principal.clear();
        for (key, entry) in &self.by_tail {
            self.by_principal.entry(entry.principal.id().into()).or_default().push(*key);
        }
    }

    fn insert(&mut self, key: [u8; TAIL], entry: Remembered) {
        self.remove(&key);
        self.bytes += entry.token.len();
        self.first_expiry = self.first_expiry.min(entry.valid_until);
        self.by_principal.entry(entry.principal.id().into()).or_default().push(key);
        self.by_tail.insert(key, entry);
    }

    fn remove(&mut self, key: &[u8; TAIL]) {
        let Some(dropped) = self.by_tail.remove(key) else { return };
        self.bytes -= dropped.token.len();
        if let Some(keys) = self.by_principal.get_mut(dropped.principal.id()) {
            keys.retain(|held| held != key);
            if keys.is_empty() {
                self.by_principal.remove(dropped.principal.id());
            }
        }
    }

    /// Drops the entries that expire soonest until `token` fits. A scan per entry dropped, under
    /// the lock: this runs only when a verification (≈ 100× a request) found the cache full.
    fn make_room_for_token(&mut self, token: &[u8]) {
        while self.full_for(token) {
            match self.soonest(self.by_tail.keys()) {
                Some(key) => self.remove(&key),
                None => return,
            }
        }
    }

    /// Drops `principal`'s entry that expires first if it holds its share.
    fn make_room_for(&mut self, principal: &Principal) {
        let Some(keys) = self.by_principal.get(principal.id()).filter(|keys| keys.len() >= VERIFIED_PER_PRINCIPAL)
        else {
            return;
        };
        if let Some(key) = self.soonest(keys) {
            self.remove(&key);
        }
    }

    /// Of the entries under `keys`, the one that expires first.
    fn soonest<'a>(&self, keys: impl IntoIterator<Item = &'a [u8; TAIL]>) -> Option<[u8; TAIL]> {
        keys.into_iter().min_by_key(|key| self.by_tail.get(*key).map_or(0, |entry| entry.valid_until)).copied()
    }

    fn full_for(&self, token: &[u8]) -> bool {
        self.by_tail.len() >= VERIFIED_MAX || self.bytes + token.len() > VERIFIED_MAX_BYTES
    }
}

struct Remembered {
    token: Box<[u8]>,
    principal: Principal,
    /// Unix seconds: the token's `exp`, or [`VERIFIED_TTL_SECS`] after it was verified if sooner.
    valid_until: u64,
}

/// The last [`TAIL`] bytes of `token`, zero-padded in front when it is shorter.
fn tail(token: &[u8]) -> [u8; TAIL] {
    let mut tail = [0u8; TAIL];
    let end = &token[token.len().saturating_sub(TAIL)..];
    tail[TAIL - end.len()..].copy_from_slice(end);
    tail
}

impl VerifiedTokens {
    /// The principal of `token` if exactly this token verified and is still valid at `now`.
    pub(super) fn lookup(&self, token: &[u8], now: u64) -> Option<Principal> {
        let mut entries = self.entries.lock().expect("verified tokens");
        entries.prune(now, false);
        let entry = entries.by_tail.get(&tail(token))?;
        (constant_time_eq(&entry.token, token) && now < entry.valid_until).then(|| entry.principal.clone())
    }

    /// Remembers that `token` verified as `principal` at `now`, until `valid_until` at most (Unix
    /// seconds). A token sharing its end with a remembered one replaces it.
    pub(super) fn remember(&self, token: &[u8], principal: Principal, valid_until: u64, now: u64) {
        if token.len() > VERIFIED_MAX_BYTES {
            return;
        }
        let mut entries = self.entries.lock().expect("verified tokens");
        entries.prune(now, false);
        let key = tail(token);
        entries.remove(&key);
        entries.make_room_for(&principal);
        // Full: expired entries go first, when any can have expired (a full cache of live tokens
        // is not rescanned for every new one).
        if entries.full_for(token) && now >= entries.first_expiry {
            entries.prune(now, true);
        }
        entries.make_room_for_token(token);
        entries.insert(key, Remembered { token: token.into(), principal, valid_until });
    }

    /// Entries and bytes held; checks on the way that the index by principal names exactly
    /// the entries there are, each under its own principal.
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let entries = self.entries.lock().expect("verified tokens");
        let indexed: usize = entries.by_principal.values().map(Vec::len).sum();
        assert_eq!(indexed, entries.by_tail.len(), "every entry indexed once");
        for (principal, keys) in &entries.by_principal {
            assert!(!keys.is_empty(), "no empty index entry");
            for key in keys {
                assert_eq!(entries.by_tail[key].principal.id(), &**principal, "indexed under its principal");
            }
        }
        let bytes: usize = entries.by_tail.values().map(|entry| entry.token.len()).sum();
        assert_eq!(bytes, entries.bytes, "the byte count is the entries' own");
        (entries.by_tail.len(), entries.bytes)
    }
}

/// Written by hand: a derived `Debug` would print the tokens.
impl std::fmt::Debug for VerifiedTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VerifiedTokens")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(name: &str) -> Principal {
        Principal::verified(Some(name), None, vec!["mcp:read".to_owned()])
    }

    fn token(body: &str, signature: &str) -> Vec<u8> {
        format!("eyJhbGciOiJSUzI1NiJ9.{body}.{signature}").into_bytes()
    }

    const SIGNATURE: &str = "c2lnbmF0dXJlLW9mLXRoZS10b2tlbi10aGF0LWVuZHMtaXQ";

    #[test]
    fn only_the_exact_token_hits_until_it_expires() {
        let cache = VerifiedTokens::default();
        let alice = token("eyJzdWIiOiJhbGljZSJ9", SIGNATURE);
        cache.remember(&alice, principal("alice"), 1_000, 0);
        assert_eq!(cache.lookup(&alice, 999), Some(principal("alice")));
        assert_eq!(cache.lookup(&alice, 1_000), None, "expired at its second");

        // Same end (so the same entry), another payload: compared whole, it misses.
        let forged = token("eyJzdWIiOiJtYWxsb3J5In0", SIGNATURE);
        assert_eq!(tail(&forged), tail(&alice));
        assert_eq!(cache.lookup(&forged, 0), None);
        // One byte shorter or longer at the front, or a byte flipped inside: misses.
        assert_eq!(cache.lookup(&alice[1..], 0), None);
        let mut longer = b"x".to_vec();
        longer.extend_from_slice(&alice);
        assert_eq!(cache.lookup(&longer, 0), None);
        let mut flipped = alice.clone();
        flipped[3] ^= 1;
        assert_eq!(cache.lookup(&flipped, 0), None);
        assert_eq!(cache.lookup(&alice, 0), Some(principal("alice")), "and the genuine token still hits");
    }

    #[test]
    fn a_token_with_the_same_end_replaces_the_entry_and_its_bytes() {
        let cache = VerifiedTokens::default();
        let first = token("eyJzdWIiOiJhIn0", SIGNATURE);
        let second = token("eyJzdWIiOiJiYmJiYmIifQ", SIGNATURE);
        cache.remember(&first, principal("a"), 10, 0);
        cache.remember(&second, principal("b"), 10, 0);
        assert_eq!(cache.held(), (1, second.len()));
        assert_eq!(cache.lookup(&first, 0), None);
        assert_eq!(cache.lookup(&second, 0), Some(principal("b")));
    }

    #[test]
    fn short_tokens_are_padded_not_refused() {
        let cache = VerifiedTokens::default();
        cache.remember(b"abc", principal("short"), 10, 0);
        assert_eq!(cache.lookup(b"abc", 0), Some(principal("short")));
        assert_eq!(cache.lookup(b"\0abc", 0), None, "padding is not part of the token");
        assert_eq!(cache.lookup(b"", 0), None);
    }

    #[test]
    fn the_cache_is_bounded_in_entries_and_in_bytes() {
        // As many callers as entries, the i-th token expiring at second 1_000 + i.
        let cache = VerifiedTokens::default();
        let nth = |i: usize| format!("token-{i:040}").into_bytes();
        for i in 0..VERIFIED_MAX {
            cache.remember(&nth(i), principal(&format!("p{i}")), 1_000 + i as u64, 0);
        }
        assert_eq!(cache.held().0, VERIFIED_MAX);
        cache.remember(b"one more", principal("p"), 9_000, 0);
        assert_eq!(cache.held().0, VERIFIED_MAX, "full of live tokens: one made room");
        assert_eq!(cache.lookup(&nth(0), 0), None, "the one expiring first");
        assert_eq!(cache.lookup(&nth(1), 0), Some(principal("p1")), "and only it: the others still hit");
        assert_eq!(cache.lookup(&nth(VERIFIED_MAX - 1), 0), Some(principal(&format!("p{}", VERIFIED_MAX - 1))));
        assert_eq!(cache.lookup(b"one more", 0), Some(principal("p")));

        // Over the byte budget: the tokens expiring first go until the new one fits.
        let cache = VerifiedTokens::default();
        let big = vec![b'a'; VERIFIED_MAX_BYTES / 2];
        let mut other = big.clone();
        other[0] = b'b';
        other.push(b'c');
        cache.remember(b"kept", principal("k"), 3_000, 0);
        cache.remember(&big, principal("p"), 1_000, 0);
        assert_eq!(cache.held(), (2, 4 + big.len()));
        cache.remember(&other, principal("q"), 2_000, 0);
        assert_eq!(cache.held(), (2, 4 + other.len()), "the big token, expiring first, made room");
        assert_eq!(cache.lookup(&other, 0), Some(principal("q")));
        assert_eq!(cache.lookup(b"kept", 0), Some(principal("k")), "what still fitted stayed");

        cache.remember(&vec![b'z'; VERIFIED_MAX_BYTES + 1], principal("p"), 1_000, 0);
        assert_eq!(cache.held(), (2, 4 + other.len()), "a token bigger than the budget is not held");
    }

    /// Many callers, each within its share, filling the byte budget together: a newcomer's token
    /// costs the entry that expires soonest, not everyone's.
    #[test]
    fn callers_filling_the_bytes_together_cannot_empty_the_cache() {
        let cache = VerifiedTokens::default();
        let per_token = 4096;
        let callers = VERIFIED_MAX_BYTES / per_token / VERIFIED_PER_PRINCIPAL;
        let token_of = |caller: usize, n: usize| {
            // Found by its end: the last bytes name the caller and the token.
            let mut token = vec![b'x'; per_token - TAIL];
            token.extend_from_slice(format!("{caller:016}{n:016}").as_bytes());
            token
        };
        for caller in 0..callers {
            for n in 0..VERIFIED_PER_PRINCIPAL {
                let until = 1_000 + (caller * VERIFIED_PER_PRINCIPAL + n) as u64;
                cache.remember(&token_of(caller, n), principal(&format!("c{caller}")), until, 0);
            }
        }
        let (entries, _) = cache.held();
        assert_eq!(entries, callers * VERIFIED_PER_PRINCIPAL, "every caller's share is held");
        cache.remember(&token_of(callers, 0), principal("newcomer"), 9_000, 0);
        assert_eq!(cache.held().0, entries, "one made room");
        assert_eq!(cache.lookup(&token_of(0, 0), 0), None, "the one expiring first");
        for caller in 0..callers {
            let last = token_of(caller, VERIFIED_PER_PRINCIPAL - 1);
            assert_eq!(cache.lookup(&last, 0), Some(principal(&format!("c{caller}"))), "caller {caller} kept");
        }
        assert_eq!(cache.lookup(&token_of(callers, 0), 0), Some(principal("newcomer")));
    }

    #[test]
    fn expired_entries_leave_memory_and_make_room_before_live_ones() {
        let cache = VerifiedTokens::default();
        // Half the cache expires at second 5, half lives on.
        for i in 0..VERIFIED_MAX {
            let valid_until = if i % 2 == 0 { 5 } else { 1_000 };
            cache.remember(format!("token-{i:040}").as_bytes(), principal(&format!("p{i}")), valid_until, 0);
        }
        // Full before the minute's pruning is due: the expired half goes, the live half stays.
        cache.remember(b"one more", principal("p"), 1_000, 10);
        assert_eq!(cache.held().0, VERIFIED_MAX / 2 + 1);
        assert_eq!(cache.lookup(format!("token-{:040}", 1).as_bytes(), 10), Some(principal("p1")));

        // A minute on, any use drops what has expired since, bytes and all.
        let cache = VerifiedTokens::default();
        cache.remember(b"short-lived", principal("p"), 30, 0);
        cache.remember(b"long-lived", principal("p"), 1_000, 0);
        assert_eq!(cache.lookup(b"short-lived", 31), None, "never trusted after it expires");
        assert_eq!(cache.held().0, 2, "but its bytes wait for the next pruning");
        assert_eq!(cache.lookup(b"unknown", PRUNE_EVERY_SECS), None);
        assert_eq!(cache.held(), (1, 10));
        assert_eq!(cache.lookup(b"long-lived", PRUNE_EVERY_SECS), Some(principal("p")));
    }

    #[test]
    fn one_principal_holds_only_its_share_and_cannot_empty_the_cache() {
        let cache = VerifiedTokens::default();
        // Tokens are found by their end: the others' end in letters, the caller's in digits.
        let others: Vec<Vec<u8>> = (0..100).map(|i| format!("{i:040}-other").into_bytes()).collect();
        for (i, other) in others.iter().enumerate() {
            cache.remember(other, principal(&format!("o{i}")), 1_000, 0);
        }
        // One caller presents far more tokens than the cache holds, each expiring a little later.
        for i in 0..VERIFIED_MAX as u64 + 10 {
            cache.remember(format!("mallory-{i:040}").as_bytes(), principal("mallory"), 500 + i, 0);
        }
        assert_eq!(cache.held().0, 100 + VERIFIED_PER_PRINCIPAL, "its share, and everyone else's entries");
        for (i, other) in others.iter().enumerate() {
            assert_eq!(cache.lookup(other, 0), Some(principal(&format!("o{i}"))), "never cleared");
        }
        // Its newest tokens are the ones kept; the ones expiring first made room.
        let newest = VERIFIED_MAX as u64 + 9;
        assert_eq!(cache.lookup(format!("mallory-{newest:040}").as_bytes(), 0), Some(principal("mallory")));
        assert_eq!(cache.lookup(format!("mallory-{:040}", 0).as_bytes(), 0), None);
        // A token it presents again replaces its own entry and drops nothing else.
        cache.remember(format!("mallory-{newest:040}").as_bytes(), principal("mallory"), 5_000, 0);
        assert_eq!(cache.held().0, 100 + VERIFIED_PER_PRINCIPAL);
        // Its tokens expire and are pruned: the index forgets them with the entries.
        cache.lookup(b"nothing", 6_000);
        assert_eq!(cache.held(), (0, 0), "everything expired by then");
    }
}
