//! Time as a dependency, so expiry is testable without sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The real clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
    }
}

/// A clock tests set by hand.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self(AtomicU64::new(now_ms))
    }

    /// Moves the clock forward.
    pub fn advance_ms(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl std::fmt::Debug for dyn Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for milliseconds since the Unix epoch.
pub fn iso8601(ms: u64) -> String {
    let mut out = Vec::with_capacity(24);
    write_iso8601(&mut out, ms);
    String::from_utf8(out).expect("the timestamp is ASCII")
}

/// Appends [`iso8601`]'s text to `out`: it starts every log line.
pub fn write_iso8601(out: &mut Vec<u8>, ms: u64) {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // From 1970 on, every field is non-negative. The year may pass four digits; the rest is a
    // fixed-width tail, filled in place and appended at once.
    push_zero_padded(out, year as u64, 4);
    let mut tail = *b"-00-00T00:00:00.000Z";
    let (hour, minute, second) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let fields = [
        (1..3, month as u64),
        (4..6, day as u64),
        (7..9, hour),
        (10..12, minute),
        (13..15, second),
        (16..19, ms % 1000),
    ];
    for (range, value) in fields {
        fill_digits(&mut tail[range], value);
    }
    out.extend_from_slice(&tail);
}

/// Writes the low digits of `value` into `slot`, right-aligned and zero-padded.
fn fill_digits(slot: &mut [u8], mut value: u64) {
    for digit in slot.iter_mut().rev() {
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// Appends `value` in decimal, zero-padded to at least `width` digits.
fn push_zero_padded(out: &mut Vec<u8>, mut value: u64, width: usize) {
    let mut digits = [b'0'; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[start.min(digits.len() - width)..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_timestamps() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601(1_785_578_400_123), "2026-08-01T10:00:00.123Z");
        assert_eq!(iso8601(253_402_300_800_000), "10000-01-01T00:00:00.000Z", "years past 9999 keep every digit");
        assert_eq!(iso8601(86_399_999), "1970-01-01T23:59:59.999Z");
    }
}
