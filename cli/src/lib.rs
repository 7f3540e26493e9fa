//! The `shardjob` command line, built on the library an application embeds ([`shardjob`]).
//!
//! This crate holds what only the binary needs: the argument parser (clap), the log output
//! (tracing-subscriber, set up in `src/bin/shardjob.rs`), the job files of `shardjob run` and
//! `shardjob config check`, the operating commands, the job history's reader and the demo.
//! An application that embeds shardjob depends on the `shardjob` crate and pulls none of it.
//!
//! # Modules
//!
//! - [`cli`]: the commands (`demo`, `run`, `plan`, `cron next`, `config check`, ...) and their
//!   exit statuses;
//! - [`ops_cli`]: the operating commands (`jobs`, `status`, `trigger`, `config set`, ...) on
//!   [`shardjob_ops`];
//! - [`history_cli`]: `shardjob history JOB`;
//! - [`jobfile`]: job files (a list of ElasticJob jobs, or Spring Boot's `application.yml`);
//! - `demo`: `shardjob demo` (with the `mem` feature).
//!
//! # Features
//!
//! `mem`, `history`, `http` and `script` are on by default; `zk` and `etcd` bring the
//! registries. Each turns on the library's feature of the same name.
#![warn(missing_docs)]

pub mod cli;
#[cfg(feature = "mem")]
pub mod demo;
pub mod history_cli;
pub mod jobfile;
pub mod ops_cli;
