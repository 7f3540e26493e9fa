//! Real ZooKeeper and etcd servers for shardjob's tests.
//!
//! [`Cluster::zookeeper`] and [`Cluster::etcd`] start one server or an ensemble of several
//! members on free loopback ports (`127.0.0.1` only) in a temporary directory, and return once
//! every member serves (ZooKeeper: the `srvr` command reports a `Mode:`; etcd: `/health` says
//! `true`). A member can then be killed ([`Cluster::kill`], SIGKILL), paused and resumed
//! ([`Cluster::pause`] / [`Cluster::resume`], SIGSTOP / SIGCONT), stopped
//! ([`Cluster::stop`], SIGTERM) and started again from its data ([`Cluster::restart`]).
//!
//! # Process hygiene
//!
//! Every server runs under a tiny `sh` watchdog that holds the read end of a pipe whose write
//! end only this process has: when the [`Cluster`] is dropped, or this process ends in any way
//! (a panic, an abort, SIGKILL of the test binary, a `static` that is never dropped), the pipe
//! closes and the watchdog SIGKILLs the server it started and deletes the member's directory
//! (a killed or stopped member keeps it for [`Cluster::restart`]). Signals go only to the PIDs
//! this crate started; nothing is looked up by name.
//!
//! # Binaries
//!
//! ZooKeeper runs as `java … QuorumPeerMain zoo.cfg` from Debian's `zookeeper.jar` (found at
//! `$SHARDJOB_ZOOKEEPER_JAR`, `/usr/share/java/zookeeper.jar`, or through `dpkg -L`), with
//! `-Xmx256m -XX:+UseSerialGC` (`$SHARDJOB_ZK_HEAP` sets another heap size, such as `1g`); etcd is `$SHARDJOB_ETCD`, `etcd` on `PATH` or `/usr/bin/etcd`.
//! When they are missing, the error ([`TestkitError::NotInstalled`]) says what to install:
//! `apt-get install zookeeper etcd-server etcd-client protobuf-compiler libprotobuf-dev` (the
//! project's `.ci/run` does it).
//!
//! # Databases
//!
//! [`DbServer`] starts a throw-away PostgreSQL or MariaDB server the same way, for the job
//! history's tests (see its module).
//!
//! # Mail
//!
//! [`SmtpServer`] starts a throw-away SMTP server (Debian's `python3-aiosmtpd`) that keeps the
//! mails it accepts, for the mail notifier's tests (see its module).
//!
//! # Cutting one client off
//!
//! [`Proxy`] is a TCP proxy on loopback between one client and a server; [`Proxy::cut`] takes
//! that client off the network (its connections end, new ones get no answer) without touching
//! the server or other clients, and [`Proxy::restore`] lets it back. A ZooKeeper session cut off
//! longer than its timeout expires on the server: [`Cluster::zk_session_alive`] says when.
#![warn(missing_docs)]

mod db;
mod prometheus;
mod proxy;
mod smtp;

pub use db::{DB_INSTALL_HINT, DbKind, DbServer};
pub use prometheus::prometheus_sample;
pub use proxy::{Link, Proxy};
pub use smtp::{ReceivedMail, SMTP_INSTALL_HINT, SmtpServer, SmtpTls};

use std::fmt;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// What to install when a server binary is missing.
pub const INSTALL_HINT: &str = "apt-get install -y --no-install-recommends zookeeper etcd-server \
    etcd-client protobuf-compiler libprotobuf-dev (or run .ci/run, which installs them)";

/// How long [`Cluster::zookeeper`], [`Cluster::etcd`] and [`Cluster::restart`] wait for
/// members to serve.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// An error of the test kit.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    /// A server binary is not installed.
    #[error("{what} is not installed: {hint}", hint = INSTALL_HINT)]
    NotInstalled {
        /// What is missing.
        what: String,
    },
    /// Creating files or starting a process failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A member did not serve in time.
    #[error("{kind} member {member} did not serve within {timeout:?}; log tail:\n{log}")]
    NotReady {
        /// The registry kind.
        kind: Kind,
        /// The member (1-based).
        member: usize,
        /// How long we waited.
        timeout: Duration,
        /// The end of its log.
        log: String,
    },
    /// A member number out of range or a member in the wrong state for the request.
    #[error("bad member request: {0}")]
    BadMember(String),
}

/// Starts a watchdog shell (`cmd`) that prints the PID of the server it starts on its first
/// line; `what` names it in errors.
fn spawn_watchdog(cmd: &mut Command, what: &str) -> Result<Process, TestkitError> {
    let mut watchdog = cmd
        .spawn()
        .map_err(io(format!("start the {what} (/bin/sh)")))?;
    let pipe = watchdog.stdin.take();
    let pid = watchdog
        .stdout
        .take()
        .and_then(|out| {
            let mut line = String::new();
            BufReader::new(out).read_line(&mut line).ok()?;
            line.trim().parse::<i32>().ok()
        })
        .filter(|pid| *pid > 0);
    let Some(pid) = pid else {
        drop(pipe);
        let _ = watchdog.kill();
        let _ = watchdog.wait();
        return Err(TestkitError::BadMember(format!(
            "the {what} reported no PID"
        )));
    };
    Ok(Process {
        watchdog,
        pipe,
        pid,
    })
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> TestkitError {
    let context = context.into();
    move |source| TestkitError::Io { context, source }
}

/// Which registry a [`Cluster`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Apache ZooKeeper (Debian's 3.8).
    ZooKeeper,
    /// etcd (Debian's 3.4).
    Etcd,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::ZooKeeper => "ZooKeeper",
            Kind::Etcd => "etcd",
        })
    }
}

/// The state of one member's process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberState {
    /// Running.
    Running,
    /// Stopped with SIGSTOP; [`Cluster::resume`] continues it.
    Paused,
    /// Not running (killed or stopped); [`Cluster::restart`] starts it again.
    Down,
}

struct Process {
    /// The `sh` watchdog; closing `pipe` makes it SIGKILL the server.
    watchdog: Child,
    pipe: Option<ChildStdin>,
    /// The server's own PID, as the watchdog reported it.
    pid: i32,
}

struct Member {
    dir: PathBuf,
    client_port: u16,
    /// etcd peer port or ZooKeeper quorum port.
    peer_port: u16,
    /// ZooKeeper leader-election port (unused for etcd).
    election_port: u16,
    process: Option<Process>,
    paused: bool,
}

/// A running ZooKeeper ensemble or etcd cluster on loopback, stopped (SIGKILL) when dropped.
pub struct Cluster {
    kind: Kind,
    dir: tempfile::TempDir,
    members: Vec<Member>,
    binary: Binary,
    /// Extra command-line flags of every member (etcd only).
    extra_args: Vec<String>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("kind", &self.kind)
            .field("dir", &self.dir.path())
            .field("connect", &self.connect_string())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
enum Binary {
    Zk { java: PathBuf, classpath: String },
    Etcd { etcd: PathBuf },
}

impl Cluster {
    /// Starts a ZooKeeper ensemble of `members` servers (1 = standalone) and waits until each
    /// serves. `tickTime` is 500 ms, so sessions of 1 s to 60 s can be negotiated.
    pub fn zookeeper(members: usize) -> Result<Self, TestkitError> {
        let binary = find_zookeeper()?;
        Self::start(Kind::ZooKeeper, members, binary, Vec::new())
    }

    /// Starts an etcd cluster of `members` servers and waits until each serves.
    pub fn etcd(members: usize) -> Result<Self, TestkitError> {
        Self::etcd_with_args(members, &[])
    }

    /// Starts an etcd cluster whose members get extra command-line flags (for instance
    /// `["--max-txn-ops", "1024"]`), and waits until each serves.
    pub fn etcd_with_args(members: usize, args: &[&str]) -> Result<Self, TestkitError> {
        let binary = find_etcd()?;
        let args = args.iter().map(|a| (*a).to_owned()).collect();
        Self::start(Kind::Etcd, members, binary, args)
    }

    fn start(
        kind: Kind,
        n: usize,
        binary: Binary,
        extra_args: Vec<String>,
    ) -> Result<Self, TestkitError> {
        if n == 0 {
            return Err(TestkitError::BadMember("a cluster needs a member".into()));
        }
        // Free ports are taken by binding port 0; another process may grab one before the
        // server binds it, so a failed start is retried on new ports.
        let mut last = None;
        for _ in 0..3 {
            match Self::try_start(kind, n, binary.clone(), extra_args.clone()) {
                Ok(c) => return Ok(c),
                Err(e @ TestkitError::NotReady { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| TestkitError::BadMember("no start attempt".into())))
    }

    fn try_start(
        kind: Kind,
        n: usize,
        binary: Binary,
        extra_args: Vec<String>,
    ) -> Result<Self, TestkitError> {
        let prefix = match kind {
            Kind::ZooKeeper => "shardjob-zk-",
            Kind::Etcd => "shardjob-etcd-",
        };
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .map_err(io("create a temporary directory"))?;
        let ports = free_ports(3 * n)?;
        let mut members = Vec::with_capacity(n);
        for i in 0..n {
            let mdir = dir.path().join(format!("m{}", i + 1));
            fs::create_dir_all(mdir.join("data")).map_err(io("create a member directory"))?;
            members.push(Member {
                dir: mdir,
                client_port: ports[3 * i],
                peer_port: ports[3 * i + 1],
                election_port: ports[3 * i + 2],
                process: None,
                paused: false,
            });
        }
        let mut cluster = Cluster {
            kind,
            dir,
            members,
            binary,
            extra_args,
        };
        cluster.write_configs()?;
        for i in 1..=n {
            cluster.spawn(i)?;
        }
        cluster.wait_all_ready(READY_TIMEOUT)?;
        Ok(cluster)
    }

    /// The registry kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// How many members the cluster has.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no member (never true).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The temporary directory holding every member's configuration, data and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The client address of member `member` (1-based): `127.0.0.1:port`.
    pub fn client_addr(&self, member: usize) -> Result<SocketAddr, TestkitError> {
        let m = self.member(member)?;
        Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, m.client_port)))
    }

    /// Every member's client endpoint: `127.0.0.1:port` for ZooKeeper,
    /// `http://127.0.0.1:port` for etcd.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| match self.kind {
                Kind::ZooKeeper => format!("127.0.0.1:{}", m.client_port),
                Kind::Etcd => format!("http://127.0.0.1:{}", m.client_port),
            })
            .collect()
    }

    /// The endpoints joined with commas: a ZooKeeper connect string, or an etcd endpoint list.
    pub fn connect_string(&self) -> String {
        self.endpoints().join(",")
    }

    /// The state of member `member`'s process.
    pub fn state(&self, member: usize) -> Result<MemberState, TestkitError> {
        let m = self.member(member)?;
        Ok(match (&m.process, m.paused) {
            (None, _) => MemberState::Down,
            (Some(_), true) => MemberState::Paused,
            (Some(_), false) => MemberState::Running,
        })
    }

    /// The PID of member `member`'s server process, if it runs.
    pub fn pid(&self, member: usize) -> Result<Option<i32>, TestkitError> {
        Ok(self.member(member)?.process.as_ref().map(|p| p.pid))
    }

    /// Crashes member `member` (SIGKILL), keeping its data.
    pub fn kill(&mut self, member: usize) -> Result<(), TestkitError> {
        self.end(member, libc::SIGKILL, Duration::from_secs(10))
    }

    /// Stops member `member` gracefully (SIGTERM; SIGKILL after 15 s), keeping its data.
    pub fn stop(&mut self, member: usize) -> Result<(), TestkitError> {
        self.end(member, libc::SIGTERM, Duration::from_secs(15))
    }

    /// Freezes member `member` (SIGSTOP): it keeps its sockets but answers nothing.
    pub fn pause(&mut self, member: usize) -> Result<(), TestkitError> {
        let m = self.member_mut(member)?;
        let pid =
            m.process.as_ref().map(|p| p.pid).ok_or_else(|| {
                TestkitError::BadMember(format!("member {member} is not running"))
            })?;
        signal(pid, libc::SIGSTOP)?;
        m.paused = true;
        // kill(2) returns before every thread has stopped: on a busy machine a thread of the
        // server could still answer a request sent right after this returns.
        let deadline = Instant::now() + Duration::from_secs(2);
        while !all_threads_stopped(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Continues a paused member (SIGCONT).
    pub fn resume(&mut self, member: usize) -> Result<(), TestkitError> {
        let m = self.member_mut(member)?;
        let pid =
            m.process.as_ref().map(|p| p.pid).ok_or_else(|| {
                TestkitError::BadMember(format!("member {member} is not running"))
            })?;
        signal(pid, libc::SIGCONT)?;
        m.paused = false;
        Ok(())
    }

    /// Starts member `member` again from its data (killing it first if it still runs) and
    /// waits until it serves. In an ensemble that lost its quorum, "serves" needs the others
    /// too; use [`Cluster::restart_no_wait`] and [`Cluster::wait_ready`] then.
    pub fn restart(&mut self, member: usize) -> Result<(), TestkitError> {
        self.restart_no_wait(member)?;
        self.wait_ready(member, READY_TIMEOUT)
    }

    /// Starts member `member` again from its data without waiting for it to serve.
    pub fn restart_no_wait(&mut self, member: usize) -> Result<(), TestkitError> {
        if self.member(member)?.process.is_some() {
            self.kill(member)?;
        }
        self.spawn(member)
    }

    /// Waits until member `member` serves.
    pub fn wait_ready(&self, member: usize, timeout: Duration) -> Result<(), TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.is_serving(member)? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(TestkitError::NotReady {
                    kind: self.kind,
                    member,
                    timeout,
                    log: self.log_tail(member, 30),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until every running member serves.
    pub fn wait_all_ready(&self, timeout: Duration) -> Result<(), TestkitError> {
        for i in 1..=self.members.len() {
            if self.state(i)? == MemberState::Running {
                self.wait_ready(i, timeout)?;
            }
        }
        Ok(())
    }

    /// Whether member `member` serves clients right now (a quick probe, at most ~1 s).
    pub fn is_serving(&self, member: usize) -> Result<bool, TestkitError> {
        let addr = self.client_addr(member)?;
        Ok(match self.kind {
            Kind::ZooKeeper => zk_mode(addr).is_some(),
            Kind::Etcd => http(addr, "GET", "/health", "")
                .is_some_and(|body| body.replace(' ', "").contains("\"health\":\"true\"")),
        })
    }

    /// The member (1-based) that currently leads, if one answers that it does.
    pub fn leader(&self) -> Option<usize> {
        (1..=self.members.len()).find(|&i| {
            let Ok(addr) = self.client_addr(i) else {
                return false;
            };
            if self.state(i).ok() != Some(MemberState::Running) {
                return false;
            }
            match self.kind {
                Kind::ZooKeeper => {
                    zk_mode(addr).is_some_and(|m| m == "leader" || m == "standalone")
                }
                Kind::Etcd => etcd_is_leader(addr),
            }
        })
    }

    /// The ZooKeeper four-letter-word command `cmd` (`srvr`, `mntr`, `stat`, `cons`…) sent to
    /// member `member`, and its answer.
    pub fn four_letter(&self, member: usize, cmd: &str) -> Result<String, TestkitError> {
        let addr = self.client_addr(member)?;
        four_letter(addr, cmd).ok_or_else(|| {
            TestkitError::BadMember(format!("member {member} did not answer {cmd:?}"))
        })
    }

    /// Whether ZooKeeper member `member` (standalone or the leader, which track sessions) still
    /// holds the session `id`, by its answer to the `dump` four-letter word. Once this says
    /// `false` the server has expired or closed the session and deleted its ephemeral nodes.
    pub fn zk_session_alive(&self, member: usize, id: u64) -> Result<bool, TestkitError> {
        let dump = self.four_letter(member, "dump")?;
        dump_lists_session(&dump, id).ok_or_else(|| {
            TestkitError::BadMember(format!(
                "member {member} answered `dump` without its session list (is it a follower, \
                 or is `dump` not whitelisted?): {dump:?}"
            ))
        })
    }

    /// The last `lines` lines of member `member`'s log.
    pub fn log_tail(&self, member: usize, lines: usize) -> String {
        let Ok(m) = self.member(member) else {
            return String::new();
        };
        let text = fs::read(m.dir.join("server.log")).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn member(&self, member: usize) -> Result<&Member, TestkitError> {
        member
            .checked_sub(1)
            .and_then(|i| self.members.get(i))
            .ok_or_else(|| TestkitError::BadMember(format!("no member {member}")))
    }

    fn member_mut(&mut self, member: usize) -> Result<&mut Member, TestkitError> {
        member
            .checked_sub(1)
            .and_then(|i| self.members.get_mut(i))
            .ok_or_else(|| TestkitError::BadMember(format!("no member {member}")))
    }

    fn write_configs(&self) -> Result<(), TestkitError> {
        if self.kind != Kind::ZooKeeper {
            return Ok(());
        }
        let n = self.members.len();
        for (i, m) in self.members.iter().enumerate() {
            let mut cfg = format!(
                "tickTime=500\ninitLimit=20\nsyncLimit=10\nminSessionTimeout=1000\n\
                 maxSessionTimeout=60000\ndataDir={data}\nclientPort={port}\n\
                 clientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
                 4lw.commands.whitelist=*\nmaxClientCnxns=0\nforceSync=no\npreAllocSize=4096\n\
                 snapCount=100000\nautopurge.purgeInterval=0\n",
                data = m.dir.join("data").display(),
                port = m.client_port,
            );
            if n > 1 {
                for (j, o) in self.members.iter().enumerate() {
                    cfg.push_str(&format!(
                        "server.{}=127.0.0.1:{}:{}\n",
                        j + 1,
                        o.peer_port,
                        o.election_port
                    ));
                }
                fs::write(m.dir.join("data").join("myid"), format!("{}\n", i + 1))
                    .map_err(io("write myid"))?;
            }
            fs::write(m.dir.join("zoo.cfg"), cfg).map_err(io("write zoo.cfg"))?;
        }
        Ok(())
    }

    fn server_command(&self, member: usize) -> Result<Vec<String>, TestkitError> {
        /// ZooKeeper's heap: `$SHARDJOB_ZK_HEAP` if it is a size such as `512m` or `2g`, else
        /// 256 MiB.
        fn zk_heap() -> String {
            std::env::var("SHARDJOB_ZK_HEAP")
                .ok()
                .filter(|h| {
                    let digits = h.trim_end_matches(['k', 'm', 'g', 'K', 'M', 'G']);
                    !digits.is_empty()
                        && digits.len() + 1 >= h.len()
                        && digits.bytes().all(|b| b.is_ascii_digit())
                })
                .unwrap_or_else(|| "256m".to_owned())
        }
        let m = self.member(member)?;
        Ok(match &self.binary {
            Binary::Zk { java, classpath } => vec![
                java.display().to_string(),
                "-Xms32m".into(),
                // Enough for the tests; a benchmark of huge jobs (400,000 nodes) sets more.
                format!("-Xmx{}", zk_heap()),
                "-XX:+UseSerialGC".into(),
                "-XX:-UsePerfData".into(),
                "-XX:TieredStopAtLevel=1".into(),
                "-Dzookeeper.jmx.log4j.disable=true".into(),
                "-cp".into(),
                classpath.clone(),
                "org.apache.zookeeper.server.quorum.QuorumPeerMain".into(),
                m.dir.join("zoo.cfg").display().to_string(),
            ],
            Binary::Etcd { etcd } => {
                let cluster = self
                    .members
                    .iter()
                    .enumerate()
                    .map(|(j, o)| format!("m{}=http://127.0.0.1:{}", j + 1, o.peer_port))
                    .collect::<Vec<_>>()
                    .join(",");
                let client = format!("http://127.0.0.1:{}", m.client_port);
                let peer = format!("http://127.0.0.1:{}", m.peer_port);
                let mut argv = vec![
                    etcd.display().to_string(),
                    "--name".into(),
                    format!("m{member}"),
                    "--data-dir".into(),
                    m.dir.join("data").display().to_string(),
                    "--listen-client-urls".into(),
                    client.clone(),
                    "--advertise-client-urls".into(),
                    client,
                    "--listen-peer-urls".into(),
                    peer.clone(),
                    "--initial-advertise-peer-urls".into(),
                    peer,
                    "--initial-cluster".into(),
                    cluster,
                    "--initial-cluster-state".into(),
                    "new".into(),
                    "--initial-cluster-token".into(),
                    format!("shardjob-{}", std::process::id()),
                    "--logger".into(),
                    "zap".into(),
                    "--log-outputs".into(),
                    "stderr".into(),
                ];
                argv.extend(self.extra_args.iter().cloned());
                argv
            }
        })
    }

    fn spawn(&mut self, member: usize) -> Result<(), TestkitError> {
        let argv = self.server_command(member)?;
        let m = self.member_mut(member)?;
        let log = m.dir.join("server.log");
        // The watchdog starts the server, reports its PID, and SIGKILLs it as soon as its
        // stdin (our pipe) closes: on drop, or when this process ends for any reason.
        // A line "keep" on the pipe (a kill or stop of the member) keeps its directory for a
        // restart; end of file (the cluster dropped, or this process gone) removes it.
        let script = "\"$@\" >>\"$SHARDJOB_LOG\" 2>&1 </dev/null &\n\
                      echo $!\n\
                      read -r line || line=\n\
                      kill -9 $! 2>/dev/null\n\
                      wait $! 2>/dev/null\n\
                      if [ \"$line\" != keep ]; then\n\
                        rm -rf \"$SHARDJOB_DIR\"\n\
                        rmdir \"${SHARDJOB_DIR%/*}\" 2>/dev/null\n\
                      fi\n\
                      exit 0\n";
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(script)
            .arg("shardjob-testkit")
            .args(&argv)
            .current_dir(&m.dir)
            .env("SHARDJOB_LOG", &log)
            .env("SHARDJOB_DIR", &m.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(key);
            }
        }
        {
            use std::os::unix::process::CommandExt;
            // Its own process group: a terminal's Ctrl-C goes to the test, not the server.
            cmd.process_group(0);
        }
        m.process = Some(spawn_watchdog(
            &mut cmd,
            &format!("server watchdog of member {member}"),
        )?);
        m.paused = false;
        Ok(())
    }

    fn end(&mut self, member: usize, sig: i32, grace: Duration) -> Result<(), TestkitError> {
        let m = self.member_mut(member)?;
        let Some(mut p) = m.process.take() else {
            return Err(TestkitError::BadMember(format!(
                "member {member} is not running"
            )));
        };
        let paused = std::mem::replace(&mut m.paused, false);
        signal(p.pid, sig)?;
        if paused && sig != libc::SIGKILL {
            signal(p.pid, libc::SIGCONT)?;
        }
        let deadline = Instant::now() + grace;
        while alive(p.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if alive(p.pid) {
            signal(p.pid, libc::SIGKILL)?;
        }
        finish(&mut p, true);
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut p) = m.process.take() {
                let _ = signal(p.pid, libc::SIGKILL);
                finish(&mut p, false);
            }
        }
    }
}

/// Closes the watchdog's pipe and reaps it (it SIGKILLs the server, which is gone by now, and
/// removes the member's directory unless `keep`).
fn finish(p: &mut Process, keep: bool) {
    if let Some(mut pipe) = p.pipe.take() {
        if keep {
            let _ = pipe.write_all(b"keep\n");
        }
        drop(pipe);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match p.watchdog.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) if Instant::now() >= deadline => {
                let _ = p.watchdog.kill();
                let _ = p.watchdog.wait();
                return;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Whether `pid` still runs (a zombie awaiting its watchdog counts as gone).
fn alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Whether every thread of `pid` is stopped (state `T` or `t` in `/proc/{pid}/task/*/stat`),
/// or the process is gone.
fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        let Ok(stat) = fs::read_to_string(task.path().join("stat")) else {
            return true; // the thread is gone
        };
        // The state follows the command name, which is in parentheses and may hold spaces.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "T" || state == "t")
    })
}

fn signal(pid: i32, sig: i32) -> Result<(), TestkitError> {
    // SAFETY: plain kill(2) on a PID this crate started (its watchdog has not reaped it, so the
    // PID cannot have been reused).
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ESRCH) {
            Ok(())
        } else {
            Err(TestkitError::Io {
                context: format!("signal {sig} to {pid}"),
                source: err,
            })
        }
    }
}

fn free_ports(n: usize) -> Result<Vec<u16>, TestkitError> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io("find a free loopback port"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io("read a port"))
}

fn four_letter(addr: SocketAddr, cmd: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(cmd.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// Whether a ZooKeeper `dump` answer lists session `id` (`0x…` in hex, as a whole word);
/// `None` when the answer has no session list.
fn dump_lists_session(dump: &str, id: u64) -> Option<bool> {
    if !dump.contains("Session Sets") {
        return None;
    }
    let want = format!("0x{id:x}");
    Some(
        dump.split(|c: char| c.is_whitespace() || c == ':' || c == ',')
            .any(|w| w.eq_ignore_ascii_case(&want)),
    )
}

/// `standalone`, `leader` or `follower` when the server serves.
fn zk_mode(addr: SocketAddr) -> Option<String> {
    let out = four_letter(addr, "srvr")?;
    out.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_owned())
        .filter(|m| matches!(m.as_str(), "standalone" | "leader" | "follower"))
}

/// A minimal HTTP/1.0 request on loopback; the response body on status 200.
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.")
        .then_some(())
        .filter(|()| head.split_whitespace().nth(1) == Some("200"))?;
    Some(body.to_owned())
}

fn etcd_is_leader(addr: SocketAddr) -> bool {
    let Some(body) = http(addr, "POST", "/v3/maintenance/status", "{}") else {
        return false;
    };
    let field = |name: &str| -> Option<String> {
        let at = body.find(&format!("\"{name}\""))?;
        let rest = &body[at + name.len() + 2..];
        let rest = rest.trim_start().strip_prefix(':')?.trim_start();
        let rest = rest.strip_prefix('"')?;
        Some(rest[..rest.find('"')?].to_owned())
    };
    match (field("member_id"), field("leader")) {
        (Some(me), Some(leader)) => me == leader,
        _ => false,
    }
}

fn find_zookeeper() -> Result<Binary, TestkitError> {
    let java = std::env::var_os("JAVA_HOME")
        .map(|h| PathBuf::from(h).join("bin/java"))
        .filter(|p| p.is_file())
        .or_else(|| which("java"))
        .ok_or_else(|| TestkitError::NotInstalled {
            what: "java (for ZooKeeper)".into(),
        })?;
    let jar = std::env::var_os("SHARDJOB_ZOOKEEPER_JAR")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| Some(PathBuf::from("/usr/share/java/zookeeper.jar")).filter(|p| p.is_file()))
        .or_else(|| dpkg_find(&["libzookeeper-java", "zookeeper"], "/zookeeper.jar"))
        .ok_or_else(|| TestkitError::NotInstalled {
            what: "ZooKeeper (zookeeper.jar)".into(),
        })?;
    let mut classpath = jar.display().to_string();
    // Optional: without an SLF4J binding the server logs nothing.
    if let Some(slf4j) = Some(PathBuf::from("/usr/share/java/slf4j-simple.jar"))
        .filter(|p| p.is_file())
        .or_else(|| dpkg_find(&["libslf4j-java"], "/slf4j-simple.jar"))
    {
        classpath.push(':');
        classpath.push_str(&slf4j.display().to_string());
    }
    Ok(Binary::Zk { java, classpath })
}

fn find_etcd() -> Result<Binary, TestkitError> {
    let etcd = std::env::var_os("SHARDJOB_ETCD")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| which("etcd"))
        .or_else(|| Some(PathBuf::from("/usr/bin/etcd")).filter(|p| p.is_file()))
        .ok_or_else(|| TestkitError::NotInstalled {
            what: "etcd (etcd-server)".into(),
        })?;
    Ok(Binary::Etcd { etcd })
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn dpkg_find(packages: &[&str], suffix: &str) -> Option<PathBuf> {
    packages.iter().find_map(|pkg| {
        let out = Command::new("dpkg")
            .args(["-L", pkg])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.ends_with(suffix))
            .map(PathBuf::from)
            .filter(|p| p.is_file())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct() {
        let ports = free_ports(6).unwrap();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 6);
    }

    #[test]
    fn bad_member_numbers_are_errors() {
        let c = Cluster {
            kind: Kind::Etcd,
            dir: tempfile::tempdir().unwrap(),
            members: Vec::new(),
            binary: Binary::Etcd {
                etcd: PathBuf::from("/bin/false"),
            },
            extra_args: Vec::new(),
        };
        assert!(matches!(c.client_addr(0), Err(TestkitError::BadMember(_))));
        assert!(matches!(c.client_addr(1), Err(TestkitError::BadMember(_))));
    }

    #[test]
    fn dump_answers_list_sessions_by_whole_id() {
        let (a, b) = (0x0100_00a2_b3c0_0001_u64, 0x0100_00a2_b3c0_0012_u64);
        let dump = format!(
            "SessionTracker dump:\nSession Sets (2)/(2):\n0 expire at Wed Nov 25:\n\
             1 expire at Wed Nov 25 16:00:01 UTC 2026:\n\t0x{a:x}\n\t0x{b:x}\n\
             ephemeral nodes dump:\nSessions with Ephemerals (0):\n"
        );
        assert_eq!(dump_lists_session(&dump, a), Some(true));
        assert_eq!(dump_lists_session(&dump, b), Some(true));
        assert_eq!(dump_lists_session(&dump, a + 1), Some(false));
        assert_eq!(dump_lists_session(&dump, a >> 4), Some(false));
        assert_eq!(
            dump_lists_session(
                "This ZooKeeper instance is not currently serving requests",
                1
            ),
            None
        );
    }
}
