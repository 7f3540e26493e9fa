//! Three `shardjob run` processes over one registry, their shared run log, and the `shardjob`
//! operating commands run as processes of the same binary.
//!
//! The instances are `127.0.0.{k}@-@{name}`: three server IPs (the servers of a real cluster),
//! so that `shutdown --server IP` names one of them. Nothing binds those addresses; the
//! processes only connect to the registry on 127.0.0.1.
//!
//! They run two jobs: [`JOB`], which the scenarios operate, and [`SIDE`], which they leave
//! alone (an instance shut down in one job runs the other on). Each job's script appends one
//! line to the job's log when an item begins:
//!
//! ```text
//! run <unix ms> <instance> <fire time> <run kind> <context JSON>
//! ```
//!
//! Each instance runs in a process group of its own (its scripts die with it); a [`Fleet`]
//! that is dropped, a failed assertion included, SIGKILLs every group it still has, by id.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The job every scenario runs.
pub const JOB: &str = "opsE2e";
/// Its items at the start.
pub const ITEMS: u32 = 6;
/// The job the scenarios do not operate.
pub const SIDE: &str = "opsE2eSide";
/// Its items: one per instance.
pub const SIDE_ITEMS: u32 = 3;
/// The instances: name and server IP.
pub const INSTANCES: [(&str, &str); 3] =
    [("a", "127.0.0.1"), ("b", "127.0.0.2"), ("c", "127.0.0.3")];

/// How long anything that must come may take (a loaded 2-core machine only makes waits
/// longer; what a step measures is asserted apart, against its own bound).
pub const WAIT: Duration = Duration::from_secs(40);
/// How long a fleet may take to share a fire: past `MachineOptions::reshard_wait` (30 s),
/// after which items move even while they run.
pub const STEADY: Duration = Duration::from_secs(50);
/// How long one operating command may take: its connect timeout is 5 s.
const COMMAND_WAIT: Duration = Duration::from_secs(30);

/// Wall-clock milliseconds since the epoch (the script's `date +%s%3N`).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The first whole second (a fire of `* * * * * ?`) strictly after `t` (unix ms).
pub fn next_fire(t: i64) -> i64 {
    (t.div_euclid(1000) + 1) * 1000
}

/// One run of an item, from its log line.
#[derive(Debug, Clone)]
pub struct Run {
    /// When it started (unix ms).
    pub start: i64,
    /// Which instance ran it (its name).
    pub who: String,
    /// The scheduled fire, or the trigger's time (unix ms).
    pub fire: i64,
    /// SCHEDULED, MISFIRE, FAILOVER or TRIGGER.
    pub kind: String,
    /// The item.
    pub item: u32,
    /// The job's total the instance ran it under.
    pub total: u32,
    /// The job parameter it ran with.
    pub parameter: String,
}

impl Run {
    /// Whether it ran for a fire of the schedule (not a trigger).
    pub fn scheduled(&self) -> bool {
        self.kind != "TRIGGER"
    }
}

/// Parses the complete lines of `job`'s log (a script may be writing the last one as it is
/// read).
pub fn parse(text: &str, job: &str) -> Vec<Run> {
    let mut out = Vec::new();
    for raw in text
        .split_inclusive('\n')
        .filter_map(|l| l.strip_suffix('\n'))
    {
        let mut parts = raw.splitn(6, ' ');
        assert_eq!(parts.next(), Some("run"), "bad log line {raw:?}");
        let start: i64 = parts
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("bad time in {raw:?}"));
        let who = parts.next().unwrap_or_default().to_owned();
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
        assert_eq!(ctx["jobName"], job, "{raw}");
        let number = |key: &str| {
            ctx[key]
                .as_u64()
                .and_then(|i| u32::try_from(i).ok())
                .unwrap_or_else(|| panic!("bad {key} in {raw:?}"))
        };
        out.push(Run {
            start,
            who,
            fire,
            kind,
            item: number("shardingItem"),
            total: number("shardingTotalCount"),
            parameter: ctx["jobParameter"].as_str().unwrap_or_default().to_owned(),
        });
    }
    out
}

/// The scheduled fires at or after `from` (unix ms) whose items all ran, given the items
/// expected: fire → item → who ran it.
pub fn complete_fires(
    runs: &[Run],
    from: i64,
    items: &BTreeSet<u32>,
) -> BTreeMap<i64, BTreeMap<u32, String>> {
    let mut by_fire: BTreeMap<i64, BTreeMap<u32, String>> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.scheduled() && r.fire >= from) {
        by_fire
            .entry(r.fire)
            .or_default()
            .insert(r.item, r.who.clone());
    }
    by_fire.retain(|_, ran| items.iter().all(|i| ran.contains_key(i)));
    by_fire
}

/// The (item, fire) pairs of the schedule that were started more than once — except a run of
/// instance `cancelled` (shut down by an operator while it ran: its runs were cancelled) run
/// again by another instance as a FAILOVER.
pub fn started_twice(runs: &[Run], cancelled: Option<&str>) -> Vec<String> {
    let mut seen: BTreeMap<(u32, i64), Vec<&Run>> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.scheduled()) {
        seen.entry((r.item, r.fire)).or_default().push(r);
    }
    let retry = |list: &[&Run]| {
        list.len() == 2
            && cancelled.is_some_and(|c| list[0].who == c)
            && list[1].kind == "FAILOVER"
            && list[1].who != list[0].who
    };
    seen.into_iter()
        .filter(|(_, list)| list.len() > 1 && !retry(list))
        .map(|((item, fire), list)| {
            let who: Vec<(&str, &str)> = list
                .iter()
                .map(|r| (r.who.as_str(), r.kind.as_str()))
                .collect();
            format!(
                "item {item} of fire {fire} started {} times: {who:?}",
                list.len()
            )
        })
        .collect()
}

/// What an operating command did.
#[derive(Debug)]
pub struct Output {
    /// Its exit status (`None`: killed by a signal).
    pub code: Option<i32>,
    /// What it printed on stdout.
    pub out: String,
    /// What it printed on stderr.
    pub err: String,
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.out, self.err
        )
    }
}

struct Member {
    name: String,
    id: String,
    child: Option<Child>,
    stderr: PathBuf,
}

/// Three `shardjob run` processes over one registry, and their shared log.
pub struct Fleet {
    dir: PathBuf,
    url: String,
    job_file: PathBuf,
    log: PathBuf,
    side_log: PathBuf,
    members: Vec<Member>,
}

fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "shardjob-ops-e2e-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    fs::create_dir_all(&dir).unwrap();
    dir
}

impl Fleet {
    /// A fleet with no instance yet: writes the script and the job file ([`ITEMS`] items, a
    /// fire every second) for registry `url`.
    pub fn new(tag: &str, url: String) -> Fleet {
        let dir = temp_dir(tag);
        let log = dir.join("runs.log");
        fs::write(&log, "").unwrap();
        let side_log = dir.join("side.log");
        fs::write(&side_log, "").unwrap();
        let script = dir.join("item.sh");
        fs::write(
            &script,
            "#!/bin/sh\n\
             # $1: the log; $2: how long to run; the last argument: the context JSON\n\
             printf 'run %s %s %s %s %s\\n' \"$(date +%s%3N)\" \"$E2E_INSTANCE\" \
             \"$SHARDJOB_FIRE_TIME\" \"$SHARDJOB_RUN_KIND\" \"$3\" >> \"$1\"\n\
             sleep \"$2\"\n",
        )
        .unwrap();
        let job = |name: &str, items: u32, log: &Path| {
            format!(
                "- jobName: {name}\n  cron: '* * * * * ?'\n  shardingTotalCount: {items}\n  \
                 failover: true\n  misfire: true\n  props:\n    \
                 script.command.line: \"sh '{}' '{}' 0.2\"\n    \
                 script.timeout.milliseconds: 20000\n",
                script.display(),
                log.display()
            )
        };
        let job_file = dir.join("jobs.yaml");
        fs::write(
            &job_file,
            job(JOB, ITEMS, &log) + &job(SIDE, SIDE_ITEMS, &side_log),
        )
        .unwrap();
        Fleet {
            dir,
            url,
            job_file,
            log,
            side_log,
            members: Vec::new(),
        }
    }

    /// The directory of the fleet's files (kept when a test fails).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts every instance of [`INSTANCES`].
    pub fn spawn_all(&mut self) {
        for (name, ip) in INSTANCES {
            self.spawn(name, ip);
        }
    }

    /// Starts instance `name` as `{ip}@-@{name}` in a process group of its own.
    pub fn spawn(&mut self, name: &str, ip: &str) {
        let stderr = self.dir.join(format!("{name}.stderr"));
        let stdout = self.dir.join(format!("{name}.stdout"));
        let id = format!("{ip}@-@{name}");
        let child = Command::new(env!("CARGO_BIN_EXE_shardjob"))
            .arg("run")
            .arg(&self.job_file)
            .args(["--registry", &self.url])
            .args(["--instance-id", &id])
            .env("E2E_INSTANCE", name)
            .env_remove("SHARDJOB_REGISTRY")
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
            id,
            child: Some(child),
            stderr,
        });
    }

    /// Instance `name`'s id.
    pub fn id(&self, name: &str) -> String {
        self.members
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.id.clone())
            .unwrap_or_else(|| panic!("no instance {name}"))
    }

    /// Runs `shardjob ARGS --registry URL` (the same binary), stdin not a terminal; kills it
    /// if it has not ended within 30 s.
    pub fn cli(&self, args: &[&str]) -> Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_shardjob"))
            .args(args)
            .args(["--registry", &self.url])
            .env_remove("SHARDJOB_REGISTRY")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start shardjob: {e}"));
        // Drained on threads so that a full pipe never blocks it.
        let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_string(&mut text);
                }
                text
            })
        };
        let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
        let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
        let deadline = Instant::now() + COMMAND_WAIT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("shardjob {args:?} did not end within {COMMAND_WAIT:?}");
                }
            }
        };
        Output {
            code: status.code(),
            out: out.join().unwrap_or_default(),
            err: err.join().unwrap_or_default(),
        }
    }

    /// Runs an operating command that must succeed, and returns what it printed on stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.cli(args);
        assert_eq!(
            o.code,
            Some(0),
            "shardjob {args:?}: {o}\n{}",
            self.diagnostics()
        );
        o.out
    }

    /// `shardjob status JOB --json`.
    pub fn status(&self) -> serde_json::Value {
        self.status_of(JOB)
    }

    /// `shardjob status JOB --json` of `job`.
    pub fn status_of(&self, job: &str) -> serde_json::Value {
        let out = self.ok(&["status", job, "--json"]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("status --json: {e}: {out}"))
    }

    /// Polls `shardjob status JOB --json` until `done` says yes (every 200 ms; a command is a
    /// process and a session).
    pub fn wait_status(&mut self, what: &str, done: impl Fn(&serde_json::Value) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            let status = self.status();
            if done(&status) {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {WAIT:?} waiting for {what}; last status {status:#}\n{}",
                    self.diagnostics()
                );
            }
            self.check_alive(what);
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The runs of [`JOB`] so far.
    pub fn runs(&self) -> Vec<Run> {
        parse(&fs::read_to_string(&self.log).unwrap(), JOB)
    }

    /// The runs of [`SIDE`] so far.
    pub fn side_runs(&self) -> Vec<Run> {
        parse(&fs::read_to_string(&self.side_log).unwrap(), SIDE)
    }

    fn check_alive(&mut self, what: &str) {
        let mut dead = None;
        for m in &mut self.members {
            if let Some(child) = &mut m.child
                && let Ok(Some(status)) = child.try_wait()
            {
                dead = Some(format!("instance {} exited: {status}", m.name));
            }
        }
        if let Some(dead) = dead {
            panic!("{dead} while waiting for {what}\n{}", self.diagnostics());
        }
    }

    /// Polls [`JOB`]'s log every 20 ms until `done` says yes; panics with diagnostics after
    /// `timeout`, or if an instance exits meanwhile.
    pub fn wait_for<T>(
        &mut self,
        timeout: Duration,
        what: &str,
        done: impl FnMut(&[Run]) -> Option<T>,
    ) -> T {
        self.wait_log(false, timeout, what, done)
    }

    /// [`Fleet::wait_for`] on [`SIDE`]'s log.
    pub fn wait_side<T>(
        &mut self,
        timeout: Duration,
        what: &str,
        done: impl FnMut(&[Run]) -> Option<T>,
    ) -> T {
        self.wait_log(true, timeout, what, done)
    }

    fn wait_log<T>(
        &mut self,
        side: bool,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut(&[Run]) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            let runs = if side { self.side_runs() } else { self.runs() };
            if let Some(t) = done(&runs) {
                return t;
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {what}\n{}",
                    self.diagnostics()
                );
            }
            self.check_alive(what);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until a fire at or after `from` ran every item of `0..total`, each instance of
    /// `who` running some and no other instance any, all on schedule; returns it with who ran
    /// which item.
    pub fn wait_shared(
        &mut self,
        timeout: Duration,
        from: i64,
        total: u32,
        who: &[&str],
    ) -> (i64, BTreeMap<u32, String>) {
        let items: BTreeSet<u32> = (0..total).collect();
        let want: BTreeSet<&str> = who.iter().copied().collect();
        let what = format!("a fire of {total} items shared by {want:?}");
        self.wait_for(timeout, &what, |runs| {
            complete_fires(runs, from, &items)
                .into_iter()
                .find(|(fire, ran)| {
                    let by: BTreeSet<&str> = ran.values().map(String::as_str).collect();
                    by == want
                        && runs
                            .iter()
                            .filter(|r| r.fire == *fire && r.scheduled())
                            .all(|r| r.kind == "SCHEDULED" && r.total == total)
                })
        })
    }

    /// Stops every instance gracefully (SIGTERM); each must exit with success.
    pub fn stop_all(&mut self) {
        for i in 0..self.members.len() {
            let Some(mut child) = self.members[i].child.take() else {
                continue;
            };
            let name = self.members[i].name.clone();
            let pid = child.id() as i32;
            // SAFETY: kill(2) on a child this fleet started and has not reaped.
            let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
            assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
            let deadline = Instant::now() + WAIT;
            let status = loop {
                match child.try_wait() {
                    Ok(Some(status)) => break status,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    _ => {
                        // SAFETY: as above; the group is ours.
                        unsafe { libc::kill(-pid, libc::SIGKILL) };
                        let _ = child.wait();
                        panic!(
                            "{name} did not leave within {WAIT:?}\n{}",
                            self.diagnostics()
                        );
                    }
                }
            };
            assert!(
                status.success(),
                "{name} exited with {status}\n{}",
                self.diagnostics()
            );
        }
    }

    /// The last lines of every instance's stderr, and of the run log.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for m in &self.members {
            out.push_str(&format!("--- {} stderr (tail)\n", m.name));
            out.push_str(&tail(&m.stderr, 30));
        }
        out.push_str("--- run log (tail)\n");
        out.push_str(&tail(&self.log, 40));
        out.push_str("--- side job's run log (tail)\n");
        out.push_str(&tail(&self.side_log, 10));
        out.push_str(&format!("(files in {})\n", self.dir.display()));
        out
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
                // reaped yet, so the id is still ours.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.wait();
            }
        }
        // Kept when a test fails, or when SHARDJOB_E2E_KEEP is set.
        if !std::thread::panicking() && std::env::var_os("SHARDJOB_E2E_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("ops_e2e: kept {} for inspection", self.dir.display());
        }
    }
}
