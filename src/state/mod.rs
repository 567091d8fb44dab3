//! Cross-call state that does not live in instance memory: sealed envelopes the client
//! carries for us, the used nonces that make `requestState` single-use, the clock and
//! randomness they depend on, the change bus behind `subscriptions/listen`, and the work a
//! request leaves running after its response (`background`), and the signal that the process
//! is stopping (`stopping`).

pub mod background;
pub mod bus;
pub mod clock;
pub mod nonce;
pub mod random;
pub mod seal;
pub mod stopping;

pub use bus::{ChangeBus, ChangeEvent, InstanceOnlyBus, LocalBus, RedisBus};
pub use clock::{Clock, ManualClock, SystemClock};
pub use nonce::{MemoryNonces, NonceStore, RedisNonces, UnconfiguredNonces, nonce_store};
pub use random::{Random, SeededRandom, SystemRandom};
pub use seal::{Purpose, SealError, SealFormat, Sealer};
pub use stopping::Stopping;
