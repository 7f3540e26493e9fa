//! shardjob: distributed, sharded cron jobs for Rust services, in the model of Apache
//! ElasticJob-Lite.
//!
//! A job is cut into items `0..n-1`; the live instances of a service share the items through a
//! registry (ZooKeeper, etcd, or the in-process store); when instances come, go, crash or are
//! disabled, items move. This crate is what applications embed; the `shardjob` command line is
//! the `shardjob-cli` crate, built on this one. The sans-IO core lives in [`shardjob_core`]
//! (re-exported as [`core`]).
//!
//! # Quick start
//!
//! Add the crate with the registries you use (`mem`, the in-process store, is on by
//! default; `zk` and `etcd` bring the ZooKeeper and etcd backends; the etcd client needs
//! `protoc` to build), and tokio and async-trait for your job:
//!
//! ```toml
//! [dependencies]
//! shardjob = { version = "0.1", features = ["zk", "etcd"] }   # "mem" is a default feature
//! tokio = { version = "1", features = ["rt-multi-thread", "macros"] }
//! async-trait = "0.1"
//! ```
//!
//! A Simple job is an `execute` called once per item the instance owns at each fire. Build a
//! [`runtime::Scheduler`] over a registry chosen by URL ([`registry_url::RegistryUrl`]), and
//! shut it down gracefully at the end (running items finish, the other instances take over):
//!
//! ```
//! use std::time::Duration;
//! use shardjob::core::{CronExpr, JobConfig};
//! use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
//! use shardjob::registry_url::RegistryUrl;
//! use shardjob::runtime::Scheduler;
//!
//! struct SettleRegion;
//!
//! #[async_trait::async_trait]
//! impl SimpleJob for SettleRegion {
//!     async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
//!         let (item, of) = (ctx.sharding_item, ctx.sharding_total_count);
//!         println!("item {item} of {of}, fire {}", ctx.fire_time);
//!         Ok(())
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // mem:// is this process only: two processes over mem:// do not share items.
//!     let registry = RegistryUrl::parse("mem://")?.connect(Duration::from_secs(10)).await?;
//!     // Four items, every 5 s; ElasticJob's Quartz syntax.
//!     let config = JobConfig::new("settle", 4).with_cron(CronExpr::parse("0/5 * * * * ?")?);
//!     let scheduler = Scheduler::builder()
//!         .registry(registry)
//!         .job(config, SettleRegion)
//!         .build()
//!         .await?;
//!     scheduler.trigger("settle", None).await?; // run this instance's items once now
//!     scheduler.shutdown().await?;
//!     Ok(())
//! }
//! ```
//!
//! Over ZooKeeper (the `zk` feature; `etcd://host:port,host:port/namespace` with `etcd`),
//! every instance of the service that uses the same URL shares the job's items; the URL may
//! carry `?session_timeout_ms=N`:
//!
//! ```no_run
//! # use std::time::Duration;
//! # use shardjob::core::{CronExpr, JobConfig};
//! # use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
//! # use shardjob::registry_url::RegistryUrl;
//! # use shardjob::runtime::Scheduler;
//! # struct SettleRegion;
//! # #[async_trait::async_trait]
//! # impl SimpleJob for SettleRegion {
//! #     async fn execute(&self, _: &ShardingContext) -> Result<(), JobError> { Ok(()) }
//! # }
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let url = RegistryUrl::parse("zk://10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181/my-service")?;
//! let registry = url.connect(Duration::from_secs(10)).await?;
//! let config = JobConfig::new("settle", 4).with_cron(CronExpr::parse("0/5 * * * * ?")?);
//! let scheduler = Scheduler::builder()
//!     .registry(registry)
//!     .job(config, SettleRegion)
//!     .build()
//!     .await?;
//! // ... serve requests; on SIGTERM:
//! scheduler.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! `examples/axum_service.rs` embeds a scheduler in an axum service with a status and a
//! trigger endpoint; `shardjob demo` (the `shardjob-cli` crate) shows a crash and its failover.
//!
//! # Modules
//!
//! - [`runtime`]: the tokio driver around the core state machine and the embedding API
//!   ([`runtime::Scheduler`]);
//! - [`jobs`]: the job kinds (Simple, Dataflow, Script, HTTP) and the [`jobs::ShardingContext`] a job
//!   sees;
//! - [`listeners`]: hooks before and after each run, and once per fire across the cluster
//!   ([`listeners::DistributeOnce`]);
//! - [`metrics`]: Prometheus metrics of a scheduler (`/metrics`, or the application's registry);
//! - [`registry_url`]: registries by URL (`mem://`; `zk://` with the `zk` feature; `etcd://`
//!   with the `etcd` feature);
//! - [`notify`]: the notifier error handlers (`EMAIL`, `WECHAT`, `DINGTALK`);
//! - `history`: the job history (with the `history` feature).
#![warn(missing_docs)]

pub use shardjob_core as core;

#[cfg(feature = "mem")]
pub use shardjob_backend_mem as mem;

#[cfg(feature = "history")]
pub mod history;
pub mod jobs;
pub mod listeners;
pub mod metrics;
pub mod notify;
pub mod registry_url;
pub mod runtime;
