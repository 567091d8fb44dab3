//! Equality of secrets without an early exit, so the time taken does not tell how much matched.

/// Whether `a` and `b` are the same bytes, in time that depends on their length only (the length
/// is not secret).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    // An OR of XORs has no branch on the data; LLVM keeps it one (and vectorises it).
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn compares_exactly() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"Secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
