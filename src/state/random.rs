//! Randomness as a dependency: the operating system's CSPRNG in production, a seeded generator
//! in tests so identifiers are reproducible.

use std::sync::Mutex;

/// A source of random bytes.
pub trait Random: Send + Sync + 'static {
    /// Fills `buffer` with random bytes.
    fn fill(&self, buffer: &mut [u8]);
}

/// The operating system's CSPRNG (via `ring`).
#[derive(Debug)]
pub struct SystemRandom(ring::rand::SystemRandom);

impl Default for SystemRandom {
    fn default() -> Self {
        Self(ring::rand::SystemRandom::new())
    }
}

impl Random for SystemRandom {
    fn fill(&self, buffer: &mut [u8]) {
        use ring::rand::SecureRandom;
        self.0.fill(buffer).expect("the OS random source works");
    }
}

/// A deterministic generator for tests (xorshift64*); never use it for real identifiers.
#[derive(Debug)]
pub struct SeededRandom(Mutex<u64>);

impl SeededRandom {
    /// A generator starting from `seed` (0 is replaced by a fixed non-zero value).
    pub fn new(seed: u64) -> Self {
        Self(Mutex::new(if seed == 0 { 0x9E37_79B9_7F4A_7C15 } else { seed }))
    }
}

impl Random for SeededRandom {
    fn fill(&self, buffer: &mut [u8]) {
        let mut state = self.0.lock().expect("random lock");
        for byte in buffer {
            *state ^= *state >> 12;
            *state ^= *state << 25;
            *state ^= *state >> 27;
            *byte = (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8;
        }
    }
}
