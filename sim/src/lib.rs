//! The deterministic shardjob simulator.
//!
//! A seeded world runs several instances of the **real** core state machine
//! ([`shardjob_core::machine::Machine`]) against the in-memory registry's store
//! ([`shardjob_backend_mem::Store`]) on virtual time, with simulated job runs, while a nemesis
//! crashes and restarts processes, cuts them off from the registry (both ways, or only the
//! way back), pauses them longer than their session timeout, restarts the registry, slows
//! requests and watch events, skews and jumps clocks, makes jobs overrun, acts as an
//! operator (disable and enable servers and items, trigger, change the item count, the cron,
//! the failover and misfire flags), and redeploys: a live process stops hosting a job and
//! takes it back, at once or later, as `SchedulerHandle::remove_job` and `add_job` do, and
//! takes the whole cluster down (every process crashes and comes back later). Each seed
//! draws its own mix of faults (swarm testing).
//! Then everything heals, the cluster must converge, and the checkers in [`checkers`] look at
//! what happened, judged by what the executors and the registry saw, never by the machines'
//! own events: no overlapping runs of an item, no fire started twice (never with the same
//! fencing token; again only after an attempt that crashed, was cancelled, or lost its
//! session before the registry committed its end, and with a larger token), no fire lost
//! during the chaos (a later scheduled run does not cover it), no item running a fire from
//! before its creation, the machines' own invariants and cache self-check after every input
//! (core feature `self-check`), every fire completed after the heal, no fire missed while a job had
//! no registered instance run after its cluster's start beyond the job's catch-up bound
//! (and, after the heal, the fires within it that no run had finished run), a plan that
//! covers every item with live owners and one leader, and the same trace for the same seed.
//! Throughout the run, every job's wake must come no later than its own decision wants it
//! (audited once a simulated second on every node, safety sweep or not), and no machine may
//! wake far more often than it has reason to (more than 100 timeouts in a simulated second with
//! no other input between them; see [`checkers::wake_rate`]).
//!
//! Seeds also draw richer shapes ([`world::Shape`]), each from a stream of its own so that a
//! seed that draws none keeps the world it had: operators' edits timed inside runs (a total
//! shrunk while a run of a removed item goes on and grown back, with the leader's clock set
//! back; a cron changed and changed back; an item or a server disabled just before a fire,
//! racing its claim ahead), leaders whose clocks lag and step, a job of 20 to 200 items (with
//! and without a transaction limit), runs over many fires, and session timeouts from 100 ms
//! to 60 s.
//!
//! The code follows the world's parts: [`swarm`] draws what a seed's world is, the nemesis
//! (one method per [`world::Fault`]) and the operators act on it during the chaos, the heal
//! undoes every fault, and [`checkers`] judge what happened; [`world::run`] ties them.
//!
//! In one world of drawn jobs in four, some jobs are hosted by some instances only, as during a
//! rolling deploy that adds a job. Seeds vary the machines too: odd seeds announce runs claimed
//! ahead (`MachineOptions::prepare_ahead`, as the runtime does), half of the seeds run without
//! the safety sweep (`MachineOptions::safety_sweep`, which evaluates every job now and then
//! and so would hide a wake the machine forgot from the liveness checker), and about two in
//! five draw a registry limit on the operations of a transaction, known to the instances or
//! not. In a world given its own `options`, the first two are left as they are.
//!
//! Worlds can also hold ElasticJob 3.0.4 instances ([`elasticjob`]): a model of what a Java
//! instance does, on the same store, wire and faults ([`cluster::Cluster::add_elasticjob_node`],
//! [`world::WorldConfig::elasticjob`]), so that jobs shared by both kinds during a migration are
//! judged by the same checkers. What ElasticJob's own semantics make (a fire it loses or runs
//! twice, a plan it leaves until its next fire) is counted apart, by the behaviour it stands
//! for, and fails no seed ([`checkers::attribution`]); a world of ElasticJob instances only
//! (`instances: 0`) validates that. In half of the seeds of a world with both kinds, a rolling
//! replacement turns one kind into the other during the chaos, one instance at a time, as a
//! deploy tool would (the migration, or a rollback; [`world::WorldConfig::rolling`]), and the
//! world must then run as a cluster of the new kind alone.
//!
//! # In your own tests
//!
//! Give the world your own job configurations, how long their runs take (`run_ms`), which of
//! them go on when cancelled (`ignore_cancel`; by default the seed draws one job in ten), your
//! own sharding strategies (`strategies`; an assignment that breaks the contract is reported
//! by the `strategy` checker), your session timeout (`session_timeout`; by default 2 to
//! 6 s) and which instances host which jobs (`hosts`; by default every instance hosts every
//! job), and run seeds. The report holds every item run the world made (`records`, with the
//! instance ids in `instances`), for your own rules beyond the checkers':
//!
//! ```
//! use shardjob_core::{CronExpr, JobConfig};
//! use shardjob_sim::world::{self, Fault, WorldConfig};
//!
//! let mut job = JobConfig::new("settle-payments", 4);
//! job.cron = Some(CronExpr::parse("0/5 * * * * ?").unwrap());
//! job.failover = true;
//! for seed in 0..3 {
//!     let cfg = WorldConfig {
//!         jobs: vec![job.clone()],
//!         instances: 3,
//!         duration_ms: 120_000,
//!         // A run takes 3 to 8 s: some outlast the 5 s between fires.
//!         run_ms: [("settle-payments".to_owned(), (3_000, 8_000))].into(),
//!         ignore_cancel: Some(Default::default()),
//!         // Every fault but operators' actions: nobody resizes or disables this job.
//!         faults: Fault::ALL.into_iter().filter(|f| *f != Fault::Operator).collect(),
//!         ..WorldConfig::standard(seed)
//!     };
//!     let report = world::run(&cfg);
//!     assert!(report.violations.is_empty(), "seed {seed}: {:#?}", report.violations);
//!     // Yours: every item made progress, whatever the faults of this seed.
//!     for item in 0..4 {
//!         let done = report.records.iter().filter(|r| r.item == item && !r.cancelled);
//!         assert!(done.count() >= 5, "seed {seed}: item {item} ran too seldom");
//!     }
//! }
//! ```
//!
//! # Speed
//!
//! Virtual time skips what is idle, so a world costs what happens in it: every run of an item is
//! two registry transactions, whose watch events reach every instance, and every instance's
//! machine takes its own decisions on them. On one core of a shared machine, the standard world
//! (5 instances, 20 jobs from every second to hourly, an hour of faults, some 95,000 item runs)
//! runs at about 1,500 times real time; the same world with crons from every minute to hourly
//! (about 2,200 item runs an hour; `examples/minute_world.rs`) at about 20,000 times. A busy
//! world's wall time follows its item runs (the binary's second summary line counts them): the
//! standard world's seeds draw from 14,000 to 185,000 item runs an hour, at 19 to 48 µs of one
//! core each (median 28 µs, seeds 7000 to 7099). Worlds
//! allocate for every event they deliver: a test binary that runs many seeds gains about a
//! fifth from a faster global allocator, as the `shardjob-sim` binary does with `mimalloc`.
//!
//! The `shardjob-sim` binary (built with the `bin` feature, which brings its argument parser
//! and allocator; a crate that uses this one as a library pulls neither) runs many seeds and
//! prints a summary; a failing seed is printed with the checker, the violation and the
//! timeline that led there, and `--seed S` replays it. Built with the `plant` feature, `--plant NAME` switches on one of the core's planted bugs
//! (`--list-plants`), which the checkers must catch.
#![warn(missing_docs)]

pub use shardjob_backend_mem as mem;

pub mod checkers;
pub mod cluster;
pub mod elasticjob;
mod heal;
mod nemesis;
pub mod network;
pub mod node;
mod operator;
mod rolling;
pub mod swarm;
pub mod timeline;
pub mod world;
