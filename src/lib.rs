//! shardjob: distributed, sharded cron jobs for Rust services, in the model of Apache
//! ElasticJob-Lite.
//!
//! A job is cut into items `0..n-1`; the live instances of a service share the items through a
//! registry (ZooKeeper, etcd, or the in-process store); when instances come, go, crash or are
//! disabled, items move. This crate is what applications embed and the `shardjob` command line.
//! The sans-IO core lives in [`shardjob_core`] (re-exported as [`core`]).
//!
//! What is here today: the [`cli`] preview commands (`plan`, `cron next`, `config check`) over
//! the core's sharding strategies, Quartz cron and job configuration. The runtime that runs
//! jobs comes with the core state machine.
#![warn(missing_docs)]

pub use shardjob_core as core;

#[cfg(feature = "mem")]
pub use shardjob_backend_mem as mem;

pub mod cli;
pub mod jobs;
pub mod runtime;
