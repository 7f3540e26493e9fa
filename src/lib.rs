//! shardjob: distributed, sharded cron jobs for Rust services, in the model of Apache
//! ElasticJob-Lite.
//!
//! A job is cut into items `0..n-1`; the live instances of a service share the items through a
//! registry (ZooKeeper, etcd, or the in-process store); when instances come, go, crash or are
//! disabled, items move. This crate is what applications embed and the `shardjob` command line.
//! The sans-IO core lives in [`shardjob_core`] (re-exported as [`core`]).
//!
//! - [`runtime`]: the tokio driver around the core state machine and the embedding API
//!   ([`runtime::Scheduler`]);
//! - [`jobs`]: the job kinds (Simple, Dataflow, Script, HTTP) and the [`jobs::ShardingContext`] a job
//!   sees;
//! - [`listeners`]: hooks before and after each run, and once per fire across the cluster
//!   ([`listeners::DistributeOnce`]);
//! - [`registry_url`]: registries by URL (`mem://`; `zk://` with the `zk` feature; `etcd://`
//!   with the `etcd` feature);
//! - [`cli`]: the `shardjob` command line (`demo`, `run`, `plan`, `cron next`, `config check`).
//! - [`ops_cli`]: its operating commands (`jobs`, `status`, `trigger`, `config set`, ...) on
//!   [`shardjob_ops`].
#![warn(missing_docs)]

pub use shardjob_core as core;

#[cfg(feature = "mem")]
pub use shardjob_backend_mem as mem;

pub mod cli;
#[cfg(feature = "mem")]
pub mod demo;
pub mod jobfile;
pub mod jobs;
pub mod listeners;
pub mod ops_cli;
pub mod registry_url;
pub mod runtime;
