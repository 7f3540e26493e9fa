//! `shardjob demo` and `shardjob run`, in process and as the real binary.

use std::io::Write as _;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use chrono::Utc;
use clap::Parser;
use shardjob_cli::cli::{Cli, run};

fn run_cli(args: &[&str]) -> (ExitCode, String) {
    let cli = Cli::try_parse_from(std::iter::once("shardjob").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let mut out = Vec::new();
    let code = run(cli, Utc::now(), &mut out).unwrap();
    (code, String::from_utf8(out).unwrap())
}

#[test]
fn demo_runs_to_completion() {
    let t0 = Instant::now();
    let (code, out) = run_cli(&["demo", "--seconds", "5"]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    // It ends by itself: 10 s (the minimum), at most 20 s more waiting for the failover on a
    // slow machine, and the leaves.
    assert!(t0.elapsed() < Duration::from_secs(45), "{:?}", t0.elapsed());
    for want in [
        "instances A, B and C",
        "fire (UTC)",
        "C crashes",
        "B leaves gracefully",
        "summary:",
        "no item completed twice",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    // At least one row shows an item run.
    assert!(
        out.lines()
            .any(|l| l.starts_with("    ") && (l.contains(" A") || l.contains(" B"))),
        "{out}"
    );
}

/// A file in a fresh directory of its own, removed when dropped.
struct TempFile {
    dir: std::path::PathBuf,
    path: std::path::PathBuf,
}

impl TempFile {
    fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn temp_dir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "shardjob-runtime-cli-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn job_file(body: &str) -> TempFile {
    let dir = temp_dir();
    let path = dir.join("jobs.yaml");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(body.as_bytes()).unwrap();
    TempFile { dir, path }
}

#[cfg(unix)]
#[test]
fn run_executes_script_jobs_and_leaves() {
    let dir = TempFile {
        dir: temp_dir(),
        path: std::path::PathBuf::new(),
    };
    let marker = dir.dir.join("ran");
    let file = job_file(&format!(
        "- jobName: touch\n  cron: '* * * * * ?'\n  shardingTotalCount: 2\n  props:\n    \
         script.command.line: sh -c 'echo \"$0\" >> {}'\n",
        marker.display()
    ));
    let (code, out) = run_cli(&[
        "run",
        file.path().to_str().unwrap(),
        "--registry",
        "mem://",
        "--exit-after",
        "3",
    ]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.contains("running 1 job(s)"), "{out}");
    assert!(out.contains("left"), "{out}");
    let lines = std::fs::read_to_string(&marker).unwrap();
    let items: Vec<u64> = lines
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["jobName"], "touch");
            v["shardingItem"].as_u64().unwrap()
        })
        .collect();
    assert!(items.contains(&0) && items.contains(&1), "{lines}");
}

#[test]
fn run_reports_bad_input() {
    let file = job_file("- jobName: x\n  shardingTotalCount: 1\n");
    let (code, _) = run_cli(&["run", file.path().to_str().unwrap()]);
    assert_eq!(code, ExitCode::from(1));
    let file = job_file(
        "- jobName: x\n  shardingTotalCount: 1\n  props:\n    script.command.line: 'true'\n",
    );
    // A registry that cannot be used: not built in, or (with the `zk` / `etcd` features) a
    // loopback port nothing listens on.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    for scheme in ["zk", "etcd"] {
        let url = format!("{scheme}://127.0.0.1:{closed}/ns?session_timeout_ms=2000");
        let t0 = Instant::now();
        let (code, _) = run_cli(&[
            "run",
            file.path().to_str().unwrap(),
            "--registry",
            &url,
            "--wait-for-registry",
            "0",
        ]);
        assert_eq!(code, ExitCode::from(1), "{url}");
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "{url}: {:?}",
            t0.elapsed()
        );
    }
}

/// The real binary leaves gracefully on SIGTERM.
#[cfg(unix)]
#[test]
fn binary_leaves_on_sigterm() {
    let file = job_file(
        "- jobName: idle\n  cron: '0 0 0 * * ?'\n  shardingTotalCount: 1\n  props:\n    \
         script.command.line: 'true'\n",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args(["run", file.path().to_str().unwrap(), "--registry", "mem://"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Once it says it runs (its banner), it is about to wait for signals. On a loaded
    // machine that can take long: wait for the line, not for a fixed time.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let banner = {
        let (tx, rx) = std::sync::mpsc::channel();
        // mem:// says first that it is shared by no other process: read up to the banner.
        let reader = std::thread::spawn(move || {
            let mut line = String::new();
            loop {
                line.clear();
                match std::io::BufRead::read_line(&mut stdout, &mut line) {
                    Ok(n) if n > 0 && !line.contains("running") => continue,
                    _ => break,
                }
            }
            let _ = tx.send(line);
            stdout
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                let _ = child.kill();
                panic!("shardjob run did not start within 30 s");
            });
        stdout = reader.join().unwrap();
        line
    };
    assert!(banner.contains("running 1 job(s)"), "{banner}");
    // Signal only the child this test started, by its id.
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("shardjob run did not leave after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = std::io::read_to_string(stdout).unwrap();
    assert!(out.contains("SIGTERM: leaving gracefully"), "{out}");
    assert!(out.contains("left"), "{out}");
}

/// The Spring Boot file of a migrating team, in the kebab-case Spring users write: it runs.
#[cfg(unix)]
#[test]
fn a_kebab_case_spring_file_runs() {
    let dir = TempFile {
        dir: temp_dir(),
        path: std::path::PathBuf::new(),
    };
    let marker = dir.dir.join("ran");
    let file = job_file(&format!(
        "elasticjob:\n  jobs:\n    kebab-job:\n      elastic-job-type: SCRIPT\n      \
         cron: '* * * * * ?'\n      sharding-total-count: 2\n      props:\n        \
         script.command.line: sh -c 'echo \"$0\" >> {}'\n",
        marker.display()
    ));
    let (code, out) = run_cli(&[
        "run",
        file.path().to_str().unwrap(),
        "--registry",
        "mem://",
        "--exit-after",
        "3",
    ]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.contains("running 1 job(s)"), "{out}");
    assert!(
        out.contains("WARNING: mem:// is a registry of this process only"),
        "{out}"
    );
    let lines = std::fs::read_to_string(&marker).unwrap();
    assert!(lines.contains("\"jobName\":\"kebab-job\""), "{lines}");
    assert!(lines.contains("\"shardingTotalCount\":2"), "{lines}");
}

/// No registry in the file and none given: `run` refuses to start (it would otherwise fall
/// back to a registry of this process only and every process would run every item).
#[test]
fn run_without_a_registry_is_refused() {
    let file = job_file(
        "- jobName: x\n  shardingTotalCount: 1\n  props:\n    script.command.line: 'true'\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args(["run", file.path().to_str().unwrap(), "--exit-after", "1"])
        .env_remove("SHARDJOB_REGISTRY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no registry") && err.contains("--registry mem://"),
        "{err}"
    );
    // SHARDJOB_REGISTRY is the default of --registry.
    let out = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args(["run", file.path().to_str().unwrap(), "--exit-after", "1"])
        .env("SHARDJOB_REGISTRY", "mem://")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("on mem://"));
}

/// A Java-class job is skipped with a warning and the others run; `--strict` refuses.
#[test]
fn java_class_jobs_are_skipped_unless_strict() {
    let file = job_file(
        "elasticjob:\n  jobs:\n    javaJob:\n      elasticJobClass: org.example.MyJob\n      \
         shardingTotalCount: 1\n    scriptJob:\n      elasticJobType: SCRIPT\n      \
         shardingTotalCount: 1\n      props:\n        script.command.line: 'true'\n",
    );
    let path = file.path().to_str().unwrap();
    let (code, out) = run_cli(&["run", path, "--registry", "mem://", "--exit-after", "1"]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(
        out.contains("org.example.MyJob") && out.contains("skipped"),
        "{out}"
    );
    assert!(out.contains("running 1 job(s)"), "{out}");
    let out = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args([
            "run",
            path,
            "--registry",
            "mem://",
            "--strict",
            "--exit-after",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--strict") && err.contains("4:7: error: job \"javaJob\""),
        "{err}"
    );
}

/// Credentials in the URL never reach the output.
#[test]
fn the_banner_does_not_show_the_password() {
    let file = job_file(
        "- jobName: x\n  shardingTotalCount: 1\n  props:\n    script.command.line: 'true'\n",
    );
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("zk://ops:hunter2@127.0.0.1:{closed}/ns");
    let out = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args([
            "run",
            file.path().to_str().unwrap(),
            "--registry",
            &url,
            "--wait-for-registry",
            "0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!all.contains("hunter2"), "{all}");
}

/// A registry that is down: `run` tries again with backoff until `--wait-for-registry` is
/// spent, logging each failed attempt with the address and the cause, then says it gave up.
#[cfg(feature = "zk")]
#[test]
fn run_retries_a_registry_that_is_down_and_says_why() {
    let file = job_file(
        "- jobName: x\n  shardingTotalCount: 1\n  props:\n    script.command.line: 'true'\n",
    );
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("zk://127.0.0.1:{closed}/ns");
    let out = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args(["run", file.path().to_str().unwrap(), "--registry", &url])
        .args(["--wait-for-registry", "4s"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let address = format!("127.0.0.1:{closed}");
    let attempts = err
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("cannot connect to the registry"))
        .inspect(|l| {
            assert!(
                l.contains(&address) && l.contains("connection refused"),
                "{l}"
            )
        })
        .count();
    assert!(attempts >= 1, "{err}");
    assert!(
        err.contains(&format!(
            "cannot connect to the registry at {address} after"
        )),
        "{err}"
    );
}
