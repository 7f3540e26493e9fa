//! The deterministic shardjob simulator.
//!
//! Not written yet: this crate exists so the workspace shows its final shape. It will run many
//! instances of the real core state machine against the in-memory registry's store with a
//! virtual clock, a seeded random number generator, a nemesis and invariant checkers.
#![warn(missing_docs)]

pub use shardjob_backend_mem as mem;

pub mod cluster;
