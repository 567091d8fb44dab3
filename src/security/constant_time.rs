//! Equality of secrets without an early exit, so the time taken does not tell how much matched.

/// Whether `a` and `b` are the same bytes, in time that depends on their length only (the length
/// is not secret).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    // Eight bytes at a time, and the difference so far made opaque to the optimiser after each
    // word, so that it cannot turn the loop into one that stops at the first mismatch.
    let mut difference = 0u64;
    let (a_words, b_words) = (a.chunks_exact(8), b.chunks_exact(8));
    let (a_rest, b_rest) = (a_words.remainder(), b_words.remainder());
    for (x, y) in a_words.zip(b_words) {
        let word = |bytes: &[u8]| u64::from_ne_bytes(bytes.try_into().expect("8 bytes"));
        difference = std::hint::black_box(difference | (word(x) ^ word(y)));
    }
    for (x, y) in a_rest.iter().zip(b_rest) {
        difference = std::hint::black_box(difference | u64::from(x ^ y));
    }
    difference == 0
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
        // Every position of a word and of the tail, for lengths around the word size.
        for len in [1, 7, 8, 9, 16, 23, 100] {
            let a: Vec<u8> = (0..len).map(|i| i as u8).collect();
            assert!(constant_time_eq(&a, &a.clone()));
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x80;
                assert!(!constant_time_eq(&a, &b), "length {len}, byte {at}");
            }
        }
    }
}
