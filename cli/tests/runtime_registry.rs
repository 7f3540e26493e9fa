//! `shardjob run` over real registries (servers started by the test kit) under faults: a
//! registry outage is logged when it starts and when it ends, and a job whose subtree this
//! instance may not read does not hold up a SIGTERM. Needs the `zk` and `etcd` features.
//! Only processes these tests started are signalled, by their id.

#![cfg(unix)]

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use shardjob_backend_zk::{ZkAcl, ZkConfig, ZkRegistry};
use shardjob_core::registry::{NodePath, Registry};
use shardjob_testkit::Cluster;

/// A generous bound for anything to happen on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(90);

struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    dir: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Proc {
    fn start(name: &str, job: &str, url: &str) -> Self {
        Self::start_with(
            name,
            &format!(
                "- jobName: {job}\n  cron: '0/2 * * * * ?'\n  shardingTotalCount: 1\n  props:\n    \
                 script.command.line: 'true'\n"
            ),
            url,
        )
    }

    fn start_with(name: &str, jobs: &str, url: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("shardjob-registry-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("jobs.yaml");
        std::fs::write(&file, jobs).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_shardjob"))
            .args(["run", file.to_str().unwrap(), "--registry", url])
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
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
        Proc {
            child,
            lines,
            seen: Vec::new(),
            dir,
        }
    }

    /// Waits for a line with `needle`, returns it.
    fn wait_line(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(l) = self.seen.iter().find(|l| l.contains(needle)) {
                return l.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("no line with {needle:?} in:\n{}", self.seen.join("\n")),
            }
        }
    }

    fn sigterm(&self) {
        let pid = i32::try_from(self.child.id()).unwrap();
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    }

    fn wait_exit(&mut self, bound: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            while let Ok(line) = self.lines.try_recv() {
                self.seen.push(line);
            }
            assert!(
                Instant::now() < deadline,
                "shardjob run did not exit within {bound:?}:\n{}",
                self.seen.join("\n")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn host_ports(cluster: &Cluster) -> String {
    cluster
        .endpoints()
        .iter()
        .map(|e| e.trim_start_matches("http://").to_owned())
        .collect::<Vec<_>>()
        .join(",")
}

/// Kills the registry's only member, then restarts it: the outage is said when it starts and
/// when it ends.
fn outage_is_logged(mut cluster: Cluster, url: &str, name: &str) {
    let mut p = Proc::start(name, "tick", url);
    p.wait_line("this instance owns item 0 of the job");
    cluster.kill(1).unwrap();
    let lost = p.wait_line("registry unreachable");
    assert!(lost.contains("WARN"), "{lost}");
    let address = url.split('?').next().unwrap();
    assert!(lost.contains(address), "{lost}");
    cluster.restart(1).unwrap();
    let back = p.wait_line("registry reachable again after");
    assert!(back.contains("WARN"), "{back}");
    eprintln!("{lost}\n{back}");
    p.sigterm();
    assert!(p.wait_exit(PATIENCE).success());
}

#[test]
fn an_etcd_outage_is_logged_when_it_starts_and_when_it_ends() {
    let cluster = Cluster::etcd(1).unwrap_or_else(|e| panic!("{e}"));
    let url = format!(
        "etcd://{}/outage?session_timeout_ms=10000",
        host_ports(&cluster)
    );
    outage_is_logged(cluster, &url, "etcd");
}

#[test]
fn a_zookeeper_outage_is_logged_when_it_starts_and_when_it_ends() {
    let cluster = Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}"));
    let url = format!(
        "zk://{}/outage?session_timeout_ms=10000",
        cluster.connect_string()
    );
    outage_is_logged(cluster, &url, "zk");
}

/// A job whose node an operator locked (an ACL that lets only its creator read it): this
/// instance cannot load it, and SIGTERM still ends `shardjob run` at once.
#[test]
fn sigterm_ends_a_run_whose_job_cannot_be_read() {
    let cluster = Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}"));
    let connect = cluster.connect_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // The namespace, open to all; then the job's node, readable by its creator only.
        let open = ZkRegistry::connect(ZkConfig::new(connect.clone()).namespace("locked"))
            .await
            .unwrap();
        open.close().await.unwrap();
        let owner = ZkRegistry::connect(
            ZkConfig::new(connect.clone())
                .namespace("locked")
                .digest("operator", "secret")
                .acl(ZkAcl::CreatorAll),
        )
        .await
        .unwrap();
        owner
            .ensure_path(&NodePath::new("/private").unwrap())
            .await
            .unwrap();
        owner.close().await.unwrap();
    });
    let url = format!("zk://{connect}/locked?session_timeout_ms=10000");
    let mut p = Proc::start("acl", "private", &url);
    // The load is refused (and retried).
    p.wait_line("not authorized");
    p.sigterm();
    let status = p.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status:?}\n{}", p.seen.join("\n"));
    let why = p.wait_line("leaving the job without it");
    assert!(
        why.contains("private") && why.contains("not authorized"),
        "{why}"
    );
    eprintln!("{}", p.seen.join("\n"));
}

/// The registry's copy of a job's configuration wins over an edited file (ElasticJob's
/// `overwrite: false`), and the log says so, naming the keys that differ.
#[test]
fn a_file_edited_since_the_registry_copy_was_written_is_warned_about() {
    let cluster = Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}"));
    let url = format!(
        "zk://{}/drift?session_timeout_ms=10000",
        cluster.connect_string()
    );
    let job = |total: u32, description: &str| {
        format!(
            "- jobName: report\n  cron: '0 0 3 * * ?'\n  shardingTotalCount: {total}\n  \
             description: {description}\n  props:\n    script.command.line: 'true'\n"
        )
    };
    let mut first = Proc::start_with("drift-1", &job(2, "nightly"), &url);
    first.wait_line("this instance owns items 0,1 of the job");
    assert!(!first.seen.iter().any(|l| l.contains("differs")));
    first.sigterm();
    assert!(first.wait_exit(PATIENCE).success());
    drop(first);
    let mut second = Proc::start_with("drift-2", &job(3, "edited"), &url);
    let warned = second.wait_line("differs from this instance's");
    assert!(warned.contains("WARN"), "{warned}");
    assert!(
        warned.contains("description, shardingTotalCount"),
        "{warned}"
    );
    assert!(
        warned.contains("the registry's copy is in force"),
        "{warned}"
    );
    // The registry's copy runs: its two items, not the file's three.
    second.wait_line("this instance owns items 0,1 of the job");
    eprintln!("{warned}");
    second.sigterm();
    assert!(second.wait_exit(PATIENCE).success());
}

/// SIGTERM while the registry is down: the leave cannot delete anything, and still ends
/// within a bound (the session is closed locally; the registry ends it at its timeout).
#[test]
fn sigterm_during_a_registry_outage_ends_within_a_bound() {
    let mut cluster = Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}"));
    let url = format!(
        "zk://{}/down?session_timeout_ms=10000",
        cluster.connect_string()
    );
    let mut p = Proc::start("down", "tick", &url);
    p.wait_line("this instance owns item 0 of the job");
    cluster.kill(1).unwrap();
    p.wait_line("registry unreachable");
    let t0 = Instant::now();
    p.sigterm();
    // The leave's requests time out (10 s each by default) and the session is closed
    // locally: well within the bound, which only a hang would pass.
    let status = p.wait_exit(PATIENCE);
    assert!(status.success(), "{status:?}\n{}", p.seen.join("\n"));
    eprintln!(
        "left {:?} after SIGTERM with the registry down",
        t0.elapsed()
    );
}
