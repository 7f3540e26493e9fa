//! A job's Quartz worker and what it runs at a fire (`ElasticJobExecutor.execute`,
//! `LiteJobFacade.getShardingContexts`, `ExecutionService.registerJobBegin` and
//! `registerJobCompleted`).
//!
//! One worker thread per job: one fire at a time. The worker takes the cron trigger's next
//! fire when it is free and the scheduler runs; a fire that passed while it was busy, or while
//! the scheduler was paused, is a misfire ([`super::misfire`]). One-off triggers
//! (`triggerJob`: a failover claim, an operator's trigger) queue and run when it is free.

use std::future::poll_fn;
use std::task::Poll;

use super::Source;
use super::jvm::{Jvm, Out, RunWhy};
use super::misfire::{Acquire, acquire, fire_after};
use super::sharding::Thrown;

/// The items a fire runs, and whether they are failover items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Context {
    pub(crate) items: Vec<u32>,
    pub(crate) failover: bool,
    pub(crate) parameter: String,
}

/// What wakes the idle worker.
enum Wake {
    /// The cron trigger's fire time came.
    Cron(i64),
    /// A one-off trigger is waiting.
    Trigger,
    /// Something about the trigger changed (paused, rescheduled, shut down): look again.
    Look,
}

impl Jvm {
    /// Starts the job's scheduler (`JobScheduleController.scheduleJob`): the cron trigger's
    /// first fire after now.
    pub(crate) fn schedule(&self, job: &str) {
        // Quartz takes only `GMT…` zones from ElasticJob (`parseTimeZoneString`): another
        // one throws, and the job never fires.
        let zone = self
            .job(job, |j| {
                j.cache.get("config").and_then(|text| {
                    text.lines()
                        .find_map(|l| l.strip_prefix("timeZone:"))
                        .map(|z| z.trim().trim_matches(|c| c == '\'' || c == '"').to_owned())
                })
            })
            .flatten();
        if let Some(zone) = zone.filter(|z| !z.is_empty() && !z.starts_with("GMT")) {
            self.note(format!(
                "{job}: cannot schedule: time zone {zone:?} does not start with GMT"
            ));
            return;
        }
        let cron = self
            .job(job, |j| {
                j.cache
                    .config()
                    .map(|c| (c.cron.clone(), c.time_zone.clone()))
            })
            .flatten();
        let now = self.get(|s| s.wall);
        self.job_mut(job, |j| {
            j.quartz.started = true;
            if let Some((Some(cron), tz)) = cron {
                j.quartz.cron = Some(cron.to_string());
                j.quartz.next = fire_after(&cron, &tz, now);
            }
        });
        let (me, name) = (self.clone(), job.to_owned());
        self.spawn(async move { me.worker(&name).await });
    }

    /// The cron expression and time zone the trigger was made of.
    fn trigger_cron(
        &self,
        job: &str,
    ) -> Option<(shardjob_core::CronExpr, shardjob_core::JobTimeZone)> {
        self.job(job, |j| {
            let text = j.quartz.cron.clone()?;
            let cron = shardjob_core::CronExpr::parse(&text).ok()?;
            let tz = j
                .cache
                .config()
                .map(|c| c.time_zone.clone())
                .unwrap_or_else(|| j.spec.config.time_zone.clone());
            Some((cron, tz))
        })
        .flatten()
    }

    /// The Quartz worker of `job`, until the scheduler shuts down.
    async fn worker(&self, job: &str) {
        loop {
            // Not while paused.
            self.until(|s| {
                s.jobs
                    .get(job)
                    .is_none_or(|j| !j.quartz.paused || j.quartz.down)
                    .then_some(())
            })
            .await;
            if self.job(job, |j| j.quartz.down).unwrap_or(true) {
                return;
            }
            // The cron trigger as the free worker finds it: missed fires collapse.
            let now = self.get(|s| s.wall);
            let next = self.job(job, |j| j.quartz.next).flatten();
            if let (Some(next), Some((cron, tz))) = (next, self.trigger_cron(job)) {
                if let Acquire::Missed { latest, next } = acquire(&cron, &tz, next, now) {
                    self.job_mut(job, |j| j.quartz.next = next);
                    self.trigger_misfired(job, latest).await;
                    continue;
                }
            }
            // A one-off trigger waiting goes first.
            if let Some(at) = self
                .job_mut(job, |j| j.quartz.triggers.pop_front())
                .flatten()
            {
                self.execute(job, Source::Trigger(at)).await;
                continue;
            }
            match self.idle(job).await {
                Wake::Cron(fire) => {
                    let after = self
                        .trigger_cron(job)
                        .and_then(|(c, tz)| fire_after(&c, &tz, fire));
                    self.job_mut(job, |j| {
                        j.quartz.fired = true;
                        j.quartz.next = after;
                    });
                    self.execute(job, Source::Cron(fire)).await;
                }
                Wake::Trigger | Wake::Look => {}
            }
        }
    }

    /// The free worker waits for the next fire time, a one-off trigger, or a change.
    async fn idle(&self, job: &str) -> Wake {
        let version = self.job(job, |j| j.quartz.version).unwrap_or(0);
        poll_fn(|_| {
            let mut s = self.state();
            let (now, wall) = (s.now, s.wall);
            let Some(j) = s.jobs.get(job) else {
                return Poll::Ready(Wake::Look);
            };
            let q = &j.quartz;
            if q.down || q.paused || q.version != version {
                return Poll::Ready(Wake::Look);
            }
            if !q.triggers.is_empty() {
                return Poll::Ready(Wake::Trigger);
            }
            match q.next {
                Some(next) if wall >= next => Poll::Ready(Wake::Cron(next)),
                Some(next) => {
                    let at = now + u64::try_from(next - wall).unwrap_or(0);
                    s.wake = Some(s.wake.map_or(at, |w| w.min(at)));
                    Poll::Pending
                }
                None => Poll::Pending,
            }
        })
        .await
    }

    /// `JobScheduleController.triggerJob`: a one-off trigger, unless the scheduler is down.
    pub(crate) fn trigger_job(&self, job: &str) {
        let now = self.get(|s| s.wall);
        self.job_mut(job, |j| {
            if !j.quartz.down && j.quartz.started {
                j.quartz.triggers.push_back(now);
            }
        });
    }

    /// `ElasticJobExecutor.execute`: one fire.
    pub(crate) async fn execute(&self, job: &str, source: Source) {
        self.job_mut(job, |j| j.quartz.busy = true);
        self.execute_fire(job, source).await;
        self.job_mut(job, |j| j.quartz.busy = false);
    }

    async fn execute_fire(&self, job: &str, source: Source) {
        let context = match self.sharding_contexts(job, source).await {
            Ok(c) => c,
            Err(Thrown(why)) => {
                self.note(format!("{job}: the fire throws: {why}"));
                return;
            }
        };
        // `misfireIfRunning`: an item running now (a race) flags them all and ends the fire.
        let monitor = self
            .job(job, |j| j.cache.config().map(|c| c.monitor_execution))
            .flatten()
            .unwrap_or(false);
        if monitor && !context.items.is_empty() {
            let snap = self.read_under(job, "sharding").await;
            if context
                .items
                .iter()
                .any(|i| snap.exists(&format!("sharding/{i}/running")))
            {
                self.note(format!(
                    "{job}: items [{}] still running at the fire: misfire",
                    crate::timeline::items(&context.items)
                ));
                self.set_misfire(job, &context.items, source.at()).await;
                return;
            }
        }
        let why = if context.failover {
            RunWhy::Failover(source)
        } else {
            RunWhy::Normal(source)
        };
        self.run_items(job, &context, why).await;
        // The misfire loop: the same context again while its items are flagged.
        while self.is_execute_misfired(job, &context.items).await {
            self.clear_misfire(job, &context.items).await;
            self.run_items(job, &context, RunWhy::Misfire(source)).await;
        }
        // The "enquiry": claim a failed-over item.
        let failover = self
            .job(job, |j| j.cache.config().map(|c| c.failover))
            .flatten()
            .unwrap_or(false);
        if failover {
            self.failover_if_necessary(job).await;
        }
    }

    /// `LiteJobFacade.getShardingContexts`: this instance's failover items if it has any;
    /// else its items after sharding if needed, less those failed over elsewhere, disabled,
    /// or running.
    async fn sharding_contexts(&self, job: &str, source: Source) -> Result<Context, Thrown> {
        let (failover, parameter) = self
            .job(job, |j| {
                j.cache
                    .config()
                    .map(|c| (c.failover, c.job_parameter.clone()))
            })
            .flatten()
            .unwrap_or_default();
        let me = self.id();
        if failover {
            let snap = self.read_under(job, "sharding").await;
            let mut mine: Vec<u32> = snap
                .children("sharding")
                .into_iter()
                .filter_map(shardjob_core::layout::parse_item)
                .filter(|i| snap.data(&format!("sharding/{i}/failover")) == Some(me.as_str()))
                .collect();
            mine.sort_unstable();
            if !mine.is_empty() {
                let items = self.drop_running(job, mine, source).await;
                return Ok(Context {
                    items,
                    failover: true,
                    parameter,
                });
            }
        }
        self.sharding_if_necessary(job).await?;
        let mut items = self.local_items(job).await?;
        let snap = self.read_under(job, "sharding").await;
        if failover {
            items.retain(|i| !snap.exists(&format!("sharding/{i}/failover")));
        }
        items.retain(|i| !snap.exists(&format!("sharding/{i}/disabled")));
        let items = self.drop_running(job, items, source).await;
        Ok(Context {
            items,
            failover: false,
            parameter,
        })
    }

    /// `ExecutionContextService.getJobShardingContext`: with `monitorExecution` (read
    /// directly), items with a `running` node are dropped (their fire is not run, and not
    /// flagged).
    async fn drop_running(&self, job: &str, mut items: Vec<u32>, source: Source) -> Vec<u32> {
        let snap = self.read(job).await;
        if snap.config().is_some_and(|c| c.monitor_execution) {
            let (running, rest): (Vec<u32>, Vec<u32>) = items
                .into_iter()
                .partition(|i| snap.exists(&format!("sharding/{i}/running")));
            if !running.is_empty() {
                self.note(format!(
                    "{job}: {}: items [{}] have a running node: not run",
                    self.source_words(source),
                    crate::timeline::items(&running)
                ));
            }
            items = rest;
        }
        items
    }

    /// A fire's source in the timeline's words.
    fn source_words(&self, source: Source) -> String {
        match source {
            Source::Cron(f) => format!("fire {}", self.fire_words(f)),
            Source::Trigger(at) => format!("trigger of {}", self.fire_words(at)),
        }
    }

    /// `execute(context, source)`: writes the `running` nodes, runs the items (together; the
    /// worker waits for all), then removes the nodes.
    async fn run_items(&self, job: &str, context: &Context, why: RunWhy) {
        if context.items.is_empty() {
            return;
        }
        let me = self.id();
        // `registerJobBegin`.
        self.job_mut(job, |j| j.running = true);
        let (monitor, failover) = self
            .job(job, |j| {
                j.cache.config().map(|c| (c.monitor_execution, c.failover))
            })
            .flatten()
            .unwrap_or((false, false));
        let mut items = Vec::with_capacity(context.items.len());
        for &i in &context.items {
            let rel = format!("sharding/{i}/running");
            let token = if !monitor {
                None
            } else if failover {
                self.persist(job, &rel, me.as_str()).await
            } else {
                self.persist_ephemeral(job, &rel, me.as_str()).await
            };
            items.push((i, token));
        }
        let run = self.with(|s| {
            let run = s.new_run();
            s.out.push(Out::Start {
                run,
                job: job.to_owned(),
                items,
                why,
                marked: monitor,
                parameter: context.parameter.clone(),
            });
            run
        });
        self.until(|s| s.ended.contains(&run).then_some(())).await;
        // `registerJobCompleted`.
        self.job_mut(job, |j| j.running = false);
        let (monitor, failover) = self
            .job(job, |j| {
                j.cache.config().map(|c| (c.monitor_execution, c.failover))
            })
            .flatten()
            .unwrap_or((false, false));
        if monitor {
            for &i in &context.items {
                self.remove_if_exists_ending(job, &format!("sharding/{i}/running"), vec![(run, i)])
                    .await;
            }
        }
        if failover {
            for &i in &context.items {
                self.remove_if_exists(job, &format!("sharding/{i}/failover"))
                    .await;
                self.remove_if_exists(job, &format!("sharding/{i}/failovering"))
                    .await;
            }
        }
    }
}
