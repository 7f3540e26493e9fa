//! `shardjob run` as a process: a second SIGTERM leaves at once, and a `kill -9` of the
//! `shardjob` process alone takes its scripts with it. Only processes these tests started are
//! signalled, by their id.

#![cfg(unix)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A generous bound for anything to happen on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("shardjob-signals-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Kills the child (by its id) if a test ends before it did.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A job whose single item's script writes its pid to `pid` and then sleeps for ten minutes
/// (`exec`: the sleeping process is the script itself).
fn long_job(dir: &Path) -> PathBuf {
    let pid = dir.join("pid");
    let file = dir.join("jobs.yaml");
    std::fs::write(
        &file,
        format!(
            "- jobName: long\n  cron: '* * * * * ?'\n  shardingTotalCount: 1\n  props:\n    \
             script.command.line: sh -c 'echo $$ > {}.tmp && mv {0}.tmp {0} && exec sleep 600'\n",
            pid.display()
        ),
    )
    .unwrap();
    file
}

fn start(file: &Path) -> (Guard, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args(["run", file.to_str().unwrap(), "--registry", "mem://"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Both streams, line by line, to one channel.
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx2.send(line);
        }
    });
    (Guard(child), rx)
}

/// Waits for the script's pid file.
fn script_pid(dir: &Path) -> i32 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("pid")) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        assert!(Instant::now() < deadline, "the script never started");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether a process runs (a zombie counts as gone).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        // Without /proc, ask the kernel.
        Err(_) if !Path::new("/proc/self").exists() => unsafe { libc::kill(pid, 0) == 0 },
        Err(_) => false,
    }
}

fn wait_gone(pid: i32, what: &str) {
    let deadline = Instant::now() + PATIENCE;
    while alive(pid) {
        if Instant::now() > deadline {
            // Not ours to leave running: the script this test made.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{what}: the script {pid} still runs");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads lines until one contains `needle`; returns every line read.
fn wait_line(rx: &mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if seen.iter().any(|l| l.contains(needle)) {
            return;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("no line with {needle:?} in:\n{}", seen.join("\n")),
        }
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    let pid = i32::try_from(child.id()).unwrap();
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

#[test]
fn a_second_sigterm_cancels_running_items_and_leaves_at_once() {
    let dir = Dir::new("second");
    let file = long_job(&dir.0);
    let (mut child, rx) = start(&file);
    let script = script_pid(&dir.0);
    let mut seen = Vec::new();
    signal(&child.0, libc::SIGTERM);
    // The first says what it waits for, and for how long.
    wait_line(&rx, "leaving gracefully", &mut seen);
    wait_line(&rx, "waiting for running items to finish", &mut seen);
    let waiting = seen
        .iter()
        .find(|l| l.contains("waiting for running items to finish"))
        .unwrap();
    assert!(
        waiting.contains("job=long") && waiting.contains("items=0"),
        "{waiting}"
    );
    assert!(waiting.contains("after 30s"), "{waiting}");
    // The script runs for ten minutes and the grace is 30 s: only the second signal can end
    // it within the bound below.
    let t0 = Instant::now();
    signal(&child.0, libc::SIGTERM);
    let deadline = t0 + Duration::from_secs(25);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "shardjob run did not leave at once after a second SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        status.code(),
        Some(1),
        "a leave at once is not a clean exit"
    );
    wait_line(&rx, "SIGTERM again", &mut seen);
    wait_gone(script, "after a second SIGTERM");
}

#[cfg(target_os = "linux")]
#[test]
fn a_kill_9_of_shardjob_alone_takes_its_scripts_with_it() {
    let dir = Dir::new("kill9");
    let file = long_job(&dir.0);
    let (mut child, _rx) = start(&file);
    let script = script_pid(&dir.0);
    assert!(alive(script));
    // SIGKILL the shardjob process alone, not its group: as the OOM killer or a supervisor
    // that signals one pid does.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    wait_gone(script, "after a kill -9 of shardjob");
}
