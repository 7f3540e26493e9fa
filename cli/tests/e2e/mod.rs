//! End-to-end scenarios over a real registry, shared by `e2e_zk.rs` and `e2e_etcd.rs`.
//!
//! Three instances are three `shardjob run` processes (the real binary, each with its own
//! registry session) sharing one sharded SCRIPT job. The script appends a `start` line when
//! an item begins and an `end` line when it is done to one log file:
//!
//! ```text
//! start <unix ms> <instance> <fire time> <run kind> <context JSON>
//! end   <unix ms> <instance> <fire time> <run kind> <context JSON>
//! ```
//!
//! (the fire time and the run kind come from the `SHARDJOB_FIRE_TIME` / `SHARDJOB_RUN_KIND`
//! environment variables a Script job gets; the instance from `E2E_INSTANCE`, set per
//! process). The test appends `kill <unix ms> <instance>` when it SIGKILLs an instance.
//!
//! Each instance runs in a process group of its own, and a "kill without goodbye" SIGKILLs the
//! group: the `shardjob` process, as a crashed host would lose it. Its scripts run in process
//! groups of their own and die with it (`PR_SET_PDEATHSIG`; a script left running would
//! write its `end` line while another instance runs the item again). Only groups this module started are signalled, by their id; a [`Fleet`] that
//! is dropped (a failed assertion included) SIGKILLs every group it still has.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The scenarios of one test binary run one at a time: the machine is small and the bounds
/// are about timing.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// Takes the [`SERIAL`] lock, also after another scenario panicked while holding it.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The job every scenario runs.
pub const JOB: &str = "e2e";
/// Its items.
pub const ITEMS: u32 = 6;
/// How long one item's script runs, in seconds (fires come every second).
pub const NAP: &str = "0.6";
/// The instances.
pub const NAMES: [&str; 3] = ["a", "b", "c"];

/// How long a fleet may take to share a fire. An instance that starts first takes every
/// item; the leader moves them to the others once the runs in progress end (no new run of the
/// job starts while it waits), which takes 1–3 s here. The bound is past
/// `MachineOptions::reshard_wait` (30 s), after which items move even while they run.
pub const STEADY: Duration = Duration::from_secs(45);

/// How long a scenario waits for what must come (items running, a failover, whole fires, an
/// instance's exit): generous, so that a loaded machine only makes the waits longer. What a
/// scenario measures (failover and takeover times) is asserted apart, against its own bound.
pub const WAIT: Duration = Duration::from_secs(30);

/// Wall-clock milliseconds since the epoch (the scripts' `date +%s%3N`).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// What a log line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum What {
    /// An item's script began.
    Start,
    /// It ended.
    End,
    /// The test SIGKILLed the instance.
    Kill,
}

/// One log line.
#[derive(Debug, Clone)]
pub struct Line {
    /// Its position in the file (appends are ordered).
    pub seq: usize,
    /// What happened.
    pub what: What,
    /// When (unix ms).
    pub at: i64,
    /// Which instance.
    pub who: String,
    /// The item (0 for a kill).
    pub item: u32,
    /// The scheduled fire time (unix ms; 0 for a kill).
    pub fire: i64,
    /// SCHEDULED, MISFIRE, FAILOVER or TRIGGER.
    pub kind: String,
}

/// One run of an item, from its start line to its end line.
#[derive(Debug, Clone)]
pub struct Run {
    /// Who ran it.
    pub who: String,
    /// The item.
    pub item: u32,
    /// The fire it ran (unix ms).
    pub fire: i64,
    /// Its kind.
    pub kind: String,
    /// When it started (unix ms) and its line's position.
    pub start: i64,
    /// The start line's position in the log.
    pub start_seq: usize,
    /// When it ended, if it did: (unix ms, position). A run of a killed instance ends at the
    /// kill.
    pub end: Option<(i64, usize)>,
    /// Whether its instance was killed while it ran.
    pub killed: bool,
}

/// Parses the log's complete lines: a script may be writing the last one as it is read.
pub fn parse(text: &str) -> Vec<Line> {
    let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
    let mut out = Vec::new();
    for (seq, raw) in complete.lines().enumerate() {
        let mut parts = raw.splitn(6, ' ');
        let what = match parts.next() {
            Some("start") => What::Start,
            Some("end") => What::End,
            Some("kill") => What::Kill,
            _ => panic!("bad log line {raw:?}"),
        };
        let at: i64 = parts
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| {
                panic!("bad time in {raw:?}");
            });
        let who = parts.next().unwrap_or_default().to_owned();
        if what == What::Kill {
            out.push(Line {
                seq,
                what,
                at,
                who,
                item: 0,
                fire: 0,
                kind: String::new(),
            });
            continue;
        }
        let fire = parts
            .next()
            .and_then(|f| chrono::DateTime::parse_from_rfc3339(f).ok())
            .map(|f| f.timestamp_millis())
            .unwrap_or_else(|| panic!("bad fire time in {raw:?}"));
        let kind = parts.next().unwrap_or_default().to_owned();
        let ctx: serde_json::Value = parts
            .next()
            .and_then(|j| serde_json::from_str(j).ok())
            .unwrap_or_else(|| panic!("bad context in {raw:?}"));
        assert_eq!(ctx["jobName"], JOB, "{raw}");
        let task = ctx["taskId"].as_str().unwrap_or_default();
        assert!(
            task.ends_with(&format!("@-@READY@-@127.0.0.1@-@{who}")),
            "the taskId names the instance: {raw}"
        );
        let item = ctx["shardingItem"]
            .as_u64()
            .and_then(|i| u32::try_from(i).ok())
            .unwrap_or_else(|| panic!("bad item in {raw:?}"));
        out.push(Line {
            seq,
            what,
            at,
            who,
            item,
            fire,
            kind,
        });
    }
    out
}

/// Pairs start and end lines into runs (an instance runs an item once at a time, so its
/// next end line of that item and fire closes the run).
pub fn runs(lines: &[Line]) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    let mut open: BTreeMap<(String, u32, i64), usize> = BTreeMap::new();
    for l in lines {
        match l.what {
            What::Start => {
                let key = (l.who.clone(), l.item, l.fire);
                assert!(
                    !open.contains_key(&key),
                    "{} started item {} of fire {} twice at once",
                    l.who,
                    l.item,
                    l.fire
                );
                open.insert(key, out.len());
                out.push(Run {
                    who: l.who.clone(),
                    item: l.item,
                    fire: l.fire,
                    kind: l.kind.clone(),
                    start: l.at,
                    start_seq: l.seq,
                    end: None,
                    killed: false,
                });
            }
            What::End => {
                let key = (l.who.clone(), l.item, l.fire);
                let i = open
                    .remove(&key)
                    .unwrap_or_else(|| panic!("an end without a start: {l:?}"));
                out[i].end = Some((l.at, l.seq));
            }
            What::Kill => {
                let keys: Vec<_> = open.keys().filter(|k| k.0 == l.who).cloned().collect();
                for k in keys {
                    if let Some(i) = open.remove(&k) {
                        out[i].end = Some((l.at, l.seq));
                        out[i].killed = true;
                    }
                }
            }
        }
    }
    out
}

/// Checks that no two instances ran one item at overlapping times (by the order of the log's
/// lines, which is the order of the appends), and that no (item, fire) was started twice
/// except a FAILOVER re-run of a run whose instance was killed. Returns the problems.
pub fn check_runs(runs: &[Run]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut by_item: BTreeMap<u32, Vec<&Run>> = BTreeMap::new();
    for r in runs {
        by_item.entry(r.item).or_default().push(r);
    }
    for (item, list) in &by_item {
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                // b starts after a (log order); they overlap if b starts before a ends.
                let a_end = a.end.map_or(usize::MAX, |e| e.1);
                if b.start_seq < a_end {
                    problems.push(format!(
                        "item {item} ran at once on {} (fire {}, {}) and {} (fire {}, {})",
                        a.who, a.fire, a.kind, b.who, b.fire, b.kind
                    ));
                }
            }
        }
    }
    let mut by_fire: BTreeMap<(u32, i64), Vec<&Run>> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.kind != "TRIGGER") {
        by_fire.entry((r.item, r.fire)).or_default().push(r);
    }
    for ((item, fire), list) in &by_fire {
        for pair in list.windows(2) {
            let retry = pair[0].killed && pair[1].kind == "FAILOVER";
            if !retry {
                problems.push(format!(
                    "item {item} of fire {fire} started twice: {:?}",
                    list.iter()
                        .map(|r| (&r.who, &r.kind, r.killed))
                        .collect::<Vec<_>>()
                ));
            }
        }
    }
    problems
}

/// The fires (unix ms) at which all items were started, by whom.
pub fn complete_fires(runs: &[Run]) -> BTreeMap<i64, BTreeMap<u32, String>> {
    let mut by_fire: BTreeMap<i64, BTreeMap<u32, String>> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.kind != "TRIGGER") {
        by_fire
            .entry(r.fire)
            .or_default()
            .insert(r.item, r.who.clone());
    }
    by_fire.retain(|_, items| items.len() == ITEMS as usize);
    by_fire
}

/// The scheduled fires (whole seconds) in `[from, to]` (unix ms).
pub fn fires_between(from: i64, to: i64) -> Vec<i64> {
    let first = (from + 999) / 1000 * 1000;
    (0..)
        .map(|k| first + 1000 * k)
        .take_while(|f| *f <= to)
        .collect()
}

struct Member {
    name: String,
    child: Option<Child>,
    stderr: PathBuf,
}

/// Three (or more) `shardjob run` processes over one registry, and their shared log.
pub struct Fleet {
    dir: PathBuf,
    url: String,
    job_file: PathBuf,
    log: PathBuf,
    members: Vec<Member>,
}

fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "shardjob-e2e-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    fs::create_dir_all(&dir).unwrap();
    dir
}

impl Fleet {
    /// A fleet with no instance yet: writes the script and the job file (6 items, a fire every
    /// second, failover on) for registry `url`.
    pub fn new(tag: &str, url: String) -> Fleet {
        let dir = temp_dir(tag);
        let log = dir.join("runs.log");
        fs::write(&log, "").unwrap();
        let script = dir.join("item.sh");
        fs::write(
            &script,
            "#!/bin/sh\n\
             # $1: the log; $2: how long to run; the last argument: the context JSON\n\
             line=\"$E2E_INSTANCE $SHARDJOB_FIRE_TIME $SHARDJOB_RUN_KIND $3\"\n\
             printf 'start %s %s\\n' \"$(date +%s%3N)\" \"$line\" >> \"$1\"\n\
             sleep \"$2\"\n\
             printf 'end %s %s\\n' \"$(date +%s%3N)\" \"$line\" >> \"$1\"\n",
        )
        .unwrap();
        let job_file = dir.join("jobs.yaml");
        fs::write(
            &job_file,
            format!(
                "- jobName: {JOB}\n  cron: '* * * * * ?'\n  shardingTotalCount: {ITEMS}\n  \
                 failover: true\n  misfire: true\n  props:\n    \
                 script.command.line: \"sh '{}' '{}' {NAP}\"\n    \
                 script.timeout.milliseconds: 20000\n",
                script.display(),
                log.display()
            ),
        )
        .unwrap();
        Fleet {
            dir,
            url,
            job_file,
            log,
            members: Vec::new(),
        }
    }

    /// The registry URL the instances use.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Starts instance `name` (`127.0.0.1@-@{name}`) in a process group of its own.
    pub fn spawn(&mut self, name: &str) {
        let stderr = self.dir.join(format!("{name}.stderr"));
        let stdout = self.dir.join(format!("{name}.stdout"));
        let child = Command::new(env!("CARGO_BIN_EXE_shardjob"))
            .arg("run")
            .arg(&self.job_file)
            .args(["--registry", &self.url])
            .args(["--instance-id", &format!("127.0.0.1@-@{name}")])
            .env("E2E_INSTANCE", name)
            .env(
                "RUST_LOG",
                std::env::var("SHARDJOB_E2E_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .stdin(Stdio::null())
            .stdout(fs::File::create(&stdout).unwrap())
            .stderr(fs::File::create(&stderr).unwrap())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start shardjob: {e}"));
        self.members.push(Member {
            name: name.to_owned(),
            child: Some(child),
            stderr,
        });
    }

    fn member(&mut self, name: &str) -> &mut Member {
        self.members
            .iter_mut()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no instance {name}"))
    }

    /// SIGKILLs instance `name`'s process group (the `shardjob` process and its scripts), reaps
    /// it, appends the `kill` line and returns the kill time (unix ms, taken before the
    /// signal).
    pub fn kill(&mut self, name: &str) -> i64 {
        let log = self.log.clone();
        let m = self.member(name);
        let mut child = m.child.take().expect("a running instance");
        let at = now_ms();
        let pgid = child.id() as i32;
        // SAFETY: kill(2) on the process group this fleet created (its leader is not reaped
        // yet, so the id is still ours).
        let rc = unsafe { libc::kill(-pgid, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
        let _ = child.wait();
        let mut f = fs::OpenOptions::new().append(true).open(&log).unwrap();
        writeln!(f, "kill {at} {name}").unwrap();
        at
    }

    /// Sends SIGTERM to instance `name` (it leaves gracefully) and waits until it exits;
    /// returns the exit time (unix ms, polled every 5 ms) and whether it exited with success.
    pub fn terminate(&mut self, name: &str, within: Duration) -> (i64, bool) {
        let m = self.member(name);
        let mut child = m.child.take().expect("a running instance");
        let pid = child.id() as i32;
        // SAFETY: kill(2) on a child this fleet started and has not reaped.
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
        let deadline = Instant::now() + within;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return (now_ms(), status.success()),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                _ => {
                    // SAFETY: as above; the group is ours.
                    unsafe { libc::kill(-pid, libc::SIGKILL) };
                    let _ = child.wait();
                    panic!("{name} did not leave within {within:?}");
                }
            }
        }
    }

    /// Whether every instance that was not killed or stopped still runs.
    pub fn all_alive(&mut self) -> Result<(), String> {
        for m in &mut self.members {
            if let Some(child) = &mut m.child {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("instance {} exited: {status}", m.name));
                }
            }
        }
        Ok(())
    }

    /// Stops every remaining instance gracefully; each must exit with success.
    pub fn stop_all(&mut self) {
        let names: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.child.is_some())
            .map(|m| m.name.clone())
            .collect();
        for name in names {
            let (_, ok) = self.terminate(&name, WAIT);
            assert!(
                ok,
                "{name} did not exit with success\n{}",
                self.diagnostics()
            );
        }
    }

    /// The log's lines so far.
    pub fn lines(&self) -> Vec<Line> {
        parse(&fs::read_to_string(&self.log).unwrap())
    }

    /// Polls the log every 20 ms until `done` says yes; `Err` with diagnostics after `timeout`.
    pub fn wait_for<T>(
        &mut self,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut(&[Line]) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            let lines = self.lines();
            if let Some(t) = done(&lines) {
                return t;
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {what}\n{}",
                    self.diagnostics()
                );
            }
            if let Err(e) = self.all_alive() {
                panic!("{e} while waiting for {what}\n{}", self.diagnostics());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until a fire ran all its items over all of `names`, each on time, and returns it.
    /// See [`STEADY`] for a bound that holds whatever order the instances start in.
    pub fn wait_steady(&mut self, names: &[&str], timeout: Duration) -> i64 {
        let want: BTreeSet<&str> = names.iter().copied().collect();
        self.wait_for(timeout, "a fire shared by all instances", |lines| {
            let runs = runs(lines);
            complete_fires(&runs)
                .iter()
                .rev()
                .find(|(fire, items)| {
                    let who: BTreeSet<&str> = items.values().map(String::as_str).collect();
                    who == want
                        && runs
                            .iter()
                            .filter(|r| r.fire == **fire)
                            .all(|r| r.kind == "SCHEDULED")
                })
                .map(|(fire, _)| *fire)
        })
    }

    /// Waits until instance `name` has items of a fire running (started, not ended), and
    /// returns them with that fire.
    pub fn wait_running(&mut self, name: &str, timeout: Duration) -> (i64, BTreeSet<u32>) {
        self.wait_for(timeout, "items running on the victim", |lines| {
            let runs = runs(lines);
            let open: Vec<&Run> = runs
                .iter()
                .filter(|r| r.who == name && r.end.is_none() && r.kind == "SCHEDULED")
                .collect();
            let fire = open.iter().map(|r| r.fire).max()?;
            // Once the run began; its items start within a few ms of each other.
            let started = open.iter().map(|r| r.start).min()?;
            (now_ms() - started >= 100).then(|| {
                (
                    fire,
                    open.iter()
                        .filter(|r| r.fire == fire)
                        .map(|r| r.item)
                        .collect(),
                )
            })
        })
    }

    /// The last lines of every instance's stderr, and the last lines of the run log.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for m in &self.members {
            out.push_str(&format!("--- {} stderr (tail)\n", m.name));
            out.push_str(&tail(&m.stderr, 40));
        }
        out.push_str("--- run log (tail)\n");
        out.push_str(&tail(&self.log, 60));
        out
    }

    /// The directory holding the job file, the script, the log and the instances' output.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let mut out = all[all.len().saturating_sub(lines)..].join("\n");
    out.push('\n');
    out
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut child) = m.child.take() {
                // SAFETY: kill(2) on the process group this fleet created; its leader is not
                // reaped yet.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.wait();
            }
        }
        // Kept when a test fails, or when SHARDJOB_E2E_KEEP is set.
        if !std::thread::panicking() && std::env::var_os("SHARDJOB_E2E_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("e2e: kept {} for inspection", self.dir.display());
        }
    }
}

/// Scenario a: SIGKILL one instance while its items run; every one of them runs again on
/// another instance (FAILOVER, same fire) once the registry ends the dead session. Returns the
/// failover time (ms from the kill to the last of those starts).
pub fn kill_without_goodbye(fleet: &mut Fleet, session: Duration) -> i64 {
    for n in NAMES {
        fleet.spawn(n);
    }
    fleet.wait_steady(&NAMES, STEADY);
    let victim = "b";
    fleet.wait_running(victim, WAIT);
    let killed_at = fleet.kill(victim);
    // What it had running when it died (read back from the log: the kill line closes them).
    let killed: Vec<Run> = runs(&fleet.lines())
        .into_iter()
        .filter(|r| r.killed)
        .collect();
    assert!(!killed.is_empty(), "{}", fleet.diagnostics());
    let fire = killed[0].fire;
    assert!(killed.iter().all(|r| r.fire == fire), "{killed:?}");
    let items: BTreeSet<u32> = killed.iter().map(|r| r.item).collect();
    let bound = session + Duration::from_secs(3);
    let starts = fleet.wait_for(
        bound + WAIT,
        "the killed instance's items to fail over",
        |lines| {
            let runs = runs(lines);
            let starts: Vec<i64> = items
                .iter()
                .filter_map(|i| {
                    runs.iter()
                        .find(|r| r.item == *i && r.fire == fire && r.who != victim)
                        .map(|r| r.start)
                })
                .collect();
            (starts.len() == items.len()).then_some(starts)
        },
    );
    let failover_ms = starts.iter().max().copied().unwrap_or(0) - killed_at;
    // Let the survivors run a few whole fires on their own.
    let recovered = killed_at + failover_ms;
    fleet.wait_for(WAIT, "three whole fires after failover", |lines| {
        let runs = runs(lines);
        let done = complete_fires(&runs);
        (done.range(recovered + 1000..).count() >= 3).then_some(())
    });
    fleet.stop_all();
    let lines = fleet.lines();
    let runs = runs(&lines);
    let problems = check_runs(&runs);
    assert!(
        problems.is_empty(),
        "{problems:#?}\n{}",
        fleet.diagnostics()
    );
    for r in runs
        .iter()
        .filter(|r| r.fire == fire && items.contains(&r.item) && r.who != victim)
    {
        assert_eq!(r.kind, "FAILOVER", "{r:?}");
    }
    // After recovery every fire ran all its items, on the survivors only.
    let last = runs.iter().map(|r| r.start).max().unwrap_or(0);
    let complete = complete_fires(&runs);
    for f in fires_between(recovered + 2000, last - 1500) {
        let Some(who) = complete.get(&f) else {
            panic!("fire {f} did not run every item\n{}", fleet.diagnostics());
        };
        assert!(who.values().all(|w| w != victim), "{f}: {who:?}");
    }
    assert!(
        failover_ms <= bound.as_millis() as i64,
        "failover took {failover_ms} ms (bound {bound:?})\n{}",
        fleet.diagnostics()
    );
    eprintln!(
        "e2e: {} items of fire {fire} failed over {failover_ms} ms after the kill (session {session:?})",
        items.len()
    );
    failover_ms
}

/// Scenario b: SIGTERM one instance while its items run; it finishes them and leaves, and
/// the others run its items from the next fire it did not run. Returns the takeover time: the
/// largest delay, over its items, from the later of its exit and the item's first fire it did
/// not run, to that item's start on another instance.
pub fn graceful_leave(fleet: &mut Fleet) -> i64 {
    for n in NAMES {
        fleet.spawn(n);
    }
    fleet.wait_steady(&NAMES, STEADY);
    let leaver = "c";
    let (_, items) = fleet.wait_running(leaver, WAIT);
    let (exited_at, ok) = fleet.terminate(leaver, WAIT);
    assert!(ok, "{leaver} left with an error\n{}", fleet.diagnostics());
    let lines = fleet.lines();
    let runs_now = runs(&lines);
    // It finished what it had started.
    for r in runs_now.iter().filter(|r| r.who == leaver) {
        assert!(
            r.end.is_some(),
            "{r:?} did not end\n{}",
            fleet.diagnostics()
        );
    }
    // The first fire of each of its items that it did not run.
    let last_fire: BTreeMap<u32, i64> = items
        .iter()
        .map(|i| {
            let f = runs_now
                .iter()
                .filter(|r| r.who == leaver && r.item == *i)
                .map(|r| r.fire)
                .max()
                .unwrap_or(0);
            (*i, f)
        })
        .collect();
    let starts = fleet.wait_for(WAIT, "the leaver's items on the others", |lines| {
        let runs = runs(lines);
        let starts: Vec<(u32, i64, i64)> = last_fire
            .iter()
            .filter_map(|(i, f)| {
                runs.iter()
                    .find(|r| r.item == *i && r.fire > *f && r.who != leaver)
                    .map(|r| (*i, r.fire, r.start))
            })
            .collect();
        (starts.len() == last_fire.len()).then_some(starts)
    });
    let takeover_ms = starts
        .iter()
        .map(|(_, fire, start)| start - (*fire).max(exited_at))
        .max()
        .unwrap_or(0);
    let resumed = starts.iter().map(|s| s.2).max().unwrap_or(exited_at);
    fleet.wait_for(WAIT, "three whole fires after the leave", |lines| {
        let runs = runs(lines);
        (complete_fires(&runs).range(resumed + 1000..).count() >= 3).then_some(())
    });
    fleet.stop_all();
    let runs = runs(&fleet.lines());
    let problems = check_runs(&runs);
    assert!(
        problems.is_empty(),
        "{problems:#?}\n{}",
        fleet.diagnostics()
    );
    // No fire of the leaver's items was lost: every fire after its last one ran on the others
    // (several missed fires may collapse into one misfire run, so check from the takeover on).
    let last = runs.iter().map(|r| r.start).max().unwrap_or(0);
    let complete = complete_fires(&runs);
    for f in fires_between(resumed + 1000, last - 1500) {
        assert!(
            complete.contains_key(&f),
            "fire {f} did not run every item\n{}",
            fleet.diagnostics()
        );
    }
    eprintln!(
        "e2e: graceful leave: the others took over {} items {takeover_ms} ms after they were due",
        items.len()
    );
    assert!(
        takeover_ms <= 2000,
        "takeover took {takeover_ms} ms (target 1 s)\n{}",
        fleet.diagnostics()
    );
    takeover_ms
}

/// Scenario c: kill the registry's leader member under the running fleet; jobs go on (every
/// item runs again, several times), with no item started twice for a fire and no item running
/// twice at once. `kill_leader` kills it and returns the kill time. Then measures how long
/// after the kill the fleet runs five consecutive complete fires again (fires can be late or
/// collapse into one misfire run while the registry elects a leader and clients move off the
/// dead member), asserting it against `recovery_bound` if given, and returns it (`None`: not
/// within 20 s) with the number of fires in between that did not run every item.
pub fn registry_leader_loss(
    fleet: &mut Fleet,
    recovery_bound: Option<Duration>,
    kill_leader: impl FnOnce() -> i64,
) -> (Option<i64>, usize) {
    for n in NAMES {
        fleet.spawn(n);
    }
    fleet.wait_steady(&NAMES, STEADY);
    // Two more fires, then the kill.
    let t0 = now_ms();
    fleet.wait_for(WAIT, "two more fires", |lines| {
        (complete_fires(&runs(lines)).range(t0..).count() >= 2).then_some(())
    });
    let killed_at = kill_leader();
    // Jobs go on: every item runs at least three more times.
    fleet.wait_for(
        WAIT * 2,
        "every item to run three times after the kill",
        |lines| {
            let runs = runs(lines);
            (0..ITEMS)
                .all(|i| {
                    runs.iter()
                        .filter(|r| r.item == i && r.start > killed_at)
                        .count()
                        >= 3
                })
                .then_some(())
        },
    );
    // Back to normal: five consecutive complete fires.
    let deadline = Instant::now() + recovery_bound.unwrap_or(Duration::from_secs(20));
    let back = loop {
        let runs = runs(&fleet.lines());
        let complete = complete_fires(&runs);
        let after: Vec<i64> = complete.range(killed_at..).map(|(f, _)| *f).collect();
        if let Some(w) = after.windows(5).find(|w| w[4] - w[0] == 4000) {
            break Some(w[0]);
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    fleet
        .all_alive()
        .unwrap_or_else(|e| panic!("{e}\n{}", fleet.diagnostics()));
    fleet.stop_all();
    let runs = runs(&fleet.lines());
    let problems = check_runs(&runs);
    assert!(
        problems.is_empty(),
        "{problems:#?}\n{}",
        fleet.diagnostics()
    );
    let complete = complete_fires(&runs);
    let last = runs.iter().map(|r| r.start).max().unwrap_or(killed_at);
    let gaps = fires_between(killed_at, back.unwrap_or(last))
        .iter()
        .filter(|f| !complete.contains_key(f))
        .count();
    let recovery_ms = back.map(|b| (b - killed_at).max(0));
    match recovery_ms {
        Some(ms) => eprintln!(
            "e2e: registry leader killed: complete fires again from {ms} ms after the kill; \
             {gaps} fires in between did not run every item"
        ),
        None => eprintln!(
            "e2e: registry leader killed: no five consecutive complete fires within 20 s; \
             {gaps} fires after the kill did not run every item"
        ),
    }
    if let Some(bound) = recovery_bound {
        let ms = recovery_ms.unwrap_or(i64::MAX);
        assert!(
            ms <= bound.as_millis() as i64,
            "complete fires again only {ms} ms after the kill (bound {bound:?})\n{}",
            fleet.diagnostics()
        );
    }
    (recovery_ms, gaps)
}
