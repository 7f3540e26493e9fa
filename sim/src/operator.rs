//! What operators do to a world: the nemesis's random acts (disable and enable servers and
//! items, trigger jobs, shut a job down on an instance, change a job's item count, cron,
//! failover and misfire flags), and the edits timed inside runs of [`Shape::Edits`]
//! (shrink-then-grow of a job's total while a run of a removed item goes on, a cron changed
//! and changed back, an item or a server disabled just before a fire and enabled again).
//!
//! [`Shape::Edits`]: crate::swarm::Shape::Edits

use std::collections::{BTreeMap, BTreeSet};

use shardjob_core::{CronExpr, InstanceId, JobConfig};

use crate::checkers::Violation;
use crate::cluster::{Cluster, ClusterError};
use crate::swarm::{CRONS, Rng};

/// An operator's delete. A path the cluster refuses is a `config` violation: the world checks
/// the user's choices before it runs, so this would be one it missed.
pub(crate) fn delete(c: &mut Cluster, path: &str, refused: &mut Vec<Violation>) {
    let result = c.operator_delete(path);
    refusal(c.now, result, refused);
}

/// An operator's write. A path the cluster refuses is a `config` violation, as in [`delete`].
pub(crate) fn write(c: &mut Cluster, path: &str, data: &[u8], refused: &mut Vec<Violation>) {
    let result = c.operator_write(path, data);
    refusal(c.now, result, refused);
}

/// An operator's edit of a job's configuration. No configuration to edit now (a registry
/// that lost it) is fine: the operator waits. Another refusal is a `config` violation.
fn edit(
    c: &mut Cluster,
    job: &str,
    change: impl FnOnce(&mut JobConfig),
    refused: &mut Vec<Violation>,
) {
    match c.operator_edit_config(job, change) {
        Err(ClusterError::NoConfig { .. }) => {}
        result => {
            refusal(c.now, result, refused);
        }
    }
}

/// What the cluster did, or its refusal as a `config` violation at `now`.
pub(crate) fn refusal<T>(
    now: u64,
    result: Result<T, ClusterError>,
    refused: &mut Vec<Violation>,
) -> Option<T> {
    result
        .map_err(|e| {
            refused.push(Violation {
                subject: Default::default(),
                checker: "config",
                time: now,
                message: e.to_string(),
            })
        })
        .ok()
}

/// What an operator acts on.
pub(crate) struct Stage<'a> {
    pub jobs: &'a [JobConfig],
    /// The servers of the instances, by index.
    pub ips: &'a [String],
    pub hosts: &'a BTreeMap<String, BTreeSet<usize>>,
    pub max_items: u32,
    /// Jobs whose runs ignore cancellation: not shut down (the leave could outlast the world).
    pub ignore_cancel: &'a BTreeSet<String>,
}

impl Stage<'_> {
    /// The servers of `job`: those of the instances that host it.
    fn servers_of(&self, job: &str) -> Vec<&String> {
        self.ips
            .iter()
            .enumerate()
            .filter(|(k, _)| self.hosts.get(job).is_none_or(|some| some.contains(k)))
            .map(|(_, ip)| ip)
            .collect()
    }

    /// One random act of an operator on a random job, drawn from `rng`. `up`: the nodes that
    /// run and hear the registry.
    pub(crate) fn act(
        &self,
        c: &mut Cluster,
        rng: &mut Rng,
        up: &[usize],
        refused: &mut Vec<Violation>,
    ) {
        let max_items = u64::from(self.max_items.max(1));
        let Some(job) = rng.pick(self.jobs).map(|j| j.job_name.clone()) else {
            return;
        };
        let ips = self.servers_of(&job);
        let hosting: Vec<usize> = up
            .iter()
            .copied()
            .filter(|n| c.nodes[*n].jobs.contains(&job))
            .collect();
        match rng.below(10) {
            0 => {
                if let Some(ip) = rng.pick(&ips) {
                    write(c, &format!("/{job}/servers/{ip}"), b"DISABLED", refused);
                }
            }
            1 => {
                if let Some(ip) = rng.pick(&ips) {
                    write(c, &format!("/{job}/servers/{ip}"), b"ENABLED", refused);
                }
            }
            2 => {
                let item = rng.below(max_items);
                if c.exists(&format!("/{job}/sharding/{item}")) {
                    write(c, &format!("/{job}/sharding/{item}/disabled"), b"", refused);
                }
            }
            3 => {
                let item = rng.below(max_items);
                delete(c, &format!("/{job}/sharding/{item}/disabled"), refused);
            }
            4 => {
                if let Some(&n) = rng.pick(&hosting) {
                    c.trigger(n, &job);
                }
            }
            9 => {
                // ElasticJob's shutdown API: the instance node deleted.
                if let Some(&n) = rng
                    .pick(&hosting)
                    .filter(|_| !self.ignore_cancel.contains(&job))
                {
                    let result = c.operator_shutdown(n, &job);
                    refusal(c.now, result, refused);
                }
            }
            5 => {
                // ElasticJob's trigger API: a node per live instance of the job.
                let ids: Vec<InstanceId> = hosting.iter().map(|n| c.nodes[*n].id.clone()).collect();
                for id in ids {
                    write(c, &format!("/{job}/trigger/{id}"), b"", refused);
                }
            }
            k => {
                let change = |config: &mut JobConfig| match k {
                    6 => config.sharding_total_count = rng.between(1, max_items) as u32,
                    7 => {
                        let (cron, _) = *rng.pick(&CRONS[..5]).unwrap_or(&CRONS[0]);
                        config.cron = CronExpr::parse(cron).ok();
                    }
                    _ => {
                        if rng.chance(50) {
                            config.failover = !config.failover;
                        } else {
                            config.misfire = !config.misfire;
                        }
                    }
                };
                edit(c, &job, change, refused);
            }
        }
    }

    /// The first step of an edit timed inside runs ([`Shape::Edits`]), drawn from `rng`.
    /// Returns the steps it leads to, each with its time.
    ///
    /// [`Shape::Edits`]: crate::swarm::Shape::Edits
    pub(crate) fn edit_inside_runs(
        &self,
        c: &mut Cluster,
        rng: &mut Rng,
        refused: &mut Vec<Violation>,
    ) -> Vec<(u64, Edit)> {
        // The runs going on now, of items beyond the first of jobs of two items or more.
        let going: Vec<(String, u32)> = c
            .runs
            .iter()
            .filter(|r| r.end.is_none() && r.item >= 1)
            .map(|r| (r.job.clone(), r.item))
            .collect();
        match rng.below(3) {
            0 => {
                // Shrink the total below an item that runs, grow it back a moment later.
                let (job, item) = match rng.pick(&going).cloned() {
                    Some(going) => going,
                    None => {
                        let Some(j) = rng.pick(self.jobs) else {
                            return Vec::new();
                        };
                        let total = c
                            .config_of(&j.job_name)
                            .map_or(1, |j| j.sharding_total_count);
                        if total < 2 {
                            return Vec::new();
                        }
                        (
                            j.job_name.clone(),
                            rng.between(1, u64::from(total) - 1) as u32,
                        )
                    }
                };
                let Some(before) = c.config_of(&job).map(|j| j.sharding_total_count) else {
                    return Vec::new();
                };
                let total = rng.between(1, u64::from(item)) as u32;
                if before <= total {
                    return Vec::new();
                }
                let running = going.contains(&(job.clone(), item));
                c.note(("edit-shrink", &job, total, before), || {
                    let why = if running {
                        format!("while a run of item {item} goes on")
                    } else {
                        "(no run of a removed item goes on)".to_owned()
                    };
                    format!("an operator shrinks {job} from {before} to {total} items {why}, to grow it back soon")
                });
                edit(c, &job, |j| j.sharding_total_count = total, refused);
                let mut next = Vec::new();
                // Half the time, the job's leader's clock falls behind meanwhile.
                if rng.chance(50) {
                    let by = rng.between(200, 5_000);
                    next.push((
                        c.now + rng.between(0, 200),
                        Edit::LagLeader {
                            job: job.clone(),
                            by,
                        },
                    ));
                }
                next.push((
                    c.now + rng.between(20, 5_000),
                    Edit::Grow { job, total: before },
                ));
                next
            }
            1 => {
                // Change the cron of a job that runs, and change it back later.
                let job = match rng.pick(&going) {
                    Some((job, _)) => job.clone(),
                    None => match rng.pick(self.jobs) {
                        Some(j) => j.job_name.clone(),
                        None => return Vec::new(),
                    },
                };
                let Some(before) = c.config_of(&job).map(|j| j.cron) else {
                    return Vec::new();
                };
                let (cron, _) = *rng.pick(&CRONS[..5]).unwrap_or(&CRONS[0]);
                c.note(("edit-cron", &job, cron), || {
                    format!(
                        "an operator changes the cron of {job} to '{cron}', to change it back later"
                    )
                });
                edit(c, &job, |j| j.cron = CronExpr::parse(cron).ok(), refused);
                vec![(
                    c.now + rng.between(500, 30_000),
                    Edit::Recron { job, cron: before },
                )]
            }
            _ => {
                // Disable an item or a server of a job just before its next fire, racing the
                // claim made ahead of it (250 ms ahead by default), and enable it again.
                let Some(job) = rng.pick(self.jobs).map(|j| j.job_name.clone()) else {
                    return Vec::new();
                };
                let Some(config) = c.config_of(&job) else {
                    return Vec::new();
                };
                let Some(fire) = config
                    .cron
                    .as_ref()
                    .and_then(|cron| cron.next_after(c.time().wall, &config.time_zone))
                else {
                    return Vec::new();
                };
                let fire_ms = (fire - c.wall_origin).num_milliseconds().max(0) as u64;
                let path = if rng.chance(50) {
                    let item = rng.below(u64::from(config.sharding_total_count.max(1)));
                    format!("/{job}/sharding/{item}/disabled")
                } else {
                    match rng.pick(&self.servers_of(&job)) {
                        Some(ip) => format!("/{job}/servers/{ip}"),
                        None => return Vec::new(),
                    }
                };
                let at = fire_ms.saturating_sub(rng.between(0, 600)).max(c.now);
                let back = rng.between(0, 2_000);
                c.note(("edit-before-fire", &path, at, back), || {
                    format!(
                        "an operator will disable {path} at {}, just before {job}'s fire at {}, for {back} ms",
                        crate::timeline::clock(at),
                        crate::timeline::clock(fire_ms)
                    )
                });
                vec![(at, Edit::Disable { path, back })]
            }
        }
    }

    /// Carries out a step of an edit timed inside runs; returns the steps it leads to.
    pub(crate) fn carry_out(
        &self,
        c: &mut Cluster,
        step: Edit,
        refused: &mut Vec<Violation>,
    ) -> Vec<(u64, Edit)> {
        match step {
            Edit::Grow { job, total } => {
                edit(
                    c,
                    &job,
                    |j| j.sharding_total_count = j.sharding_total_count.max(total),
                    refused,
                );
            }
            Edit::Recron { job, cron } => edit(c, &job, |j| j.cron = cron, refused),
            Edit::Disable { path, back } => {
                if path.ends_with("/disabled") {
                    let item = path.trim_end_matches("/disabled");
                    if c.exists(item) {
                        write(c, &path, b"", refused);
                    }
                } else {
                    write(c, &path, b"DISABLED", refused);
                }
                return vec![(c.now + back, Edit::Enable { path })];
            }
            Edit::Enable { path } => {
                if path.ends_with("/disabled") {
                    delete(c, &path, refused);
                } else {
                    write(c, &path, b"ENABLED", refused);
                }
            }
            Edit::LagLeader { .. } => {}
        }
        Vec::new()
    }
}

/// A later step of an edit timed inside runs.
#[derive(Debug, Clone)]
pub(crate) enum Edit {
    /// The job's total grows back (to at least `total`).
    Grow { job: String, total: u32 },
    /// The job's cron goes back to what it was.
    Recron { job: String, cron: Option<CronExpr> },
    /// A server or an item is disabled (its path), and enabled `back` ms later.
    Disable { path: String, back: u64 },
    /// The server or item is enabled again.
    Enable { path: String },
    /// The leader of the job being edited falls behind by `by` ms (carried out by the
    /// nemesis, which steps clocks).
    LagLeader { job: String, by: u64 },
}
