//! The sans-IO core of shardjob.
//!
//! Everything here is plain data and pure functions: job configuration (ElasticJob's YAML,
//! validation, one set of defaults), the three ElasticJob sharding strategies (bit-exact),
//! Quartz cron with per-job time zones, the registry model (the [`registry::Registry`] trait, its
//! types and the sans-IO [`registry::RegistryOp`] form) and the ElasticJob node layout
//! ([`layout`]). The core reads no clock, draws no random numbers, starts no thread and performs
//! no IO: the driver (the tokio runtime in the `shardjob` crate) and the simulator pass time and
//! registry replies in.
#![warn(missing_docs)]

pub mod backoff;
pub mod config;
pub mod cron;
pub mod instance;
pub mod layout;
pub mod machine;
pub mod registry;
pub mod sharding;
pub mod time_zone;

pub use backoff::Backoff;
pub use config::{JobConfig, JobConfigError};
pub use cron::{CronError, CronExpr};
pub use instance::{InstanceId, InstanceIdError};
pub use sharding::{Assignment, BuiltinStrategy, ShardingStrategy};
pub use time_zone::{JobTimeZone, TimeZoneError};
