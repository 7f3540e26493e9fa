//! Real PostgreSQL and MariaDB servers for the job history's tests.
//!
//! [`DbServer::postgres`] runs Debian's PostgreSQL (`initdb`, then `postgres`, from
//! `$SHARDJOB_PG_BIN` or the newest `/usr/lib/postgresql/*/bin`), [`DbServer::mariadb`]
//! Debian's MariaDB (`mariadb-install-db`, then `mariadbd`), each in a fresh temporary
//! directory, on a free `127.0.0.1` port and a socket of its own in that directory, with a
//! database `shardjob` that the user of [`DbServer::url`] may use without a password. Neither
//! server accepts root: when the tests run as root (as CI does), the server runs as the
//! package's system user (`postgres`, `mysql`; `nobody` if it is missing) and the directory
//! is handed to that user.
//!
//! Each server runs under the same `sh` watchdog as the registries (see the crate's
//! documentation): it is SIGKILLed by PID when the [`DbServer`] is dropped or this process
//! ends in any way. [`DbServer::kill`] SIGKILLs it and keeps its data;
//! [`DbServer::restart`] starts it again from that data on the same port.

use std::fs;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{
    Process, READY_TIMEOUT, TestkitError, alive, finish, free_ports, io, signal, spawn_watchdog,
};

/// What to install when a database server is missing.
pub const DB_INSTALL_HINT: &str = "apt-get install -y --no-install-recommends postgresql \
    mariadb-server (or run .ci/run, which installs them)";

/// Which database a [`DbServer`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DbKind {
    /// PostgreSQL.
    Postgres,
    /// MariaDB (MySQL's protocol).
    MariaDb,
}

impl DbKind {
    fn name(self) -> &'static str {
        match self {
            DbKind::Postgres => "PostgreSQL",
            DbKind::MariaDb => "MariaDB",
        }
    }
}

/// A throw-away database server (see the module's documentation).
pub struct DbServer {
    kind: DbKind,
    dir: PathBuf,
    port: u16,
    argv: Vec<String>,
    run_as: Option<(u32, u32)>,
    process: Option<Process>,
}

impl std::fmt::Debug for DbServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbServer")
            .field("kind", &self.kind)
            .field("port", &self.port)
            .field("pid", &self.pid())
            .finish()
    }
}

impl DbServer {
    /// Starts a PostgreSQL server and waits until it accepts connections.
    pub fn postgres() -> Result<DbServer, TestkitError> {
        let bin = pg_bin()?;
        let (dir, run_as) = server_dir("shardjob-pg-", "postgres")?;
        let port = free_ports(1)?[0];
        let data = dir.join("data");
        let mut init = Command::new(bin.join("initdb"));
        init.args(["-D"])
            .arg(&data)
            .args([
                "-U",
                "shardjob",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--locale=C",
            ])
            .current_dir(&dir);
        run_setup(init, run_as, &dir.join("initdb.log"), "initdb")?;
        let argv = vec![
            bin.join("postgres").display().to_string(),
            "-D".into(),
            data.display().to_string(),
            "-p".into(),
            port.to_string(),
            "-k".into(),
            dir.display().to_string(),
            "-c".into(),
            "listen_addresses=127.0.0.1".into(),
            "-c".into(),
            "max_connections=50".into(),
        ];
        let mut server = DbServer {
            kind: DbKind::Postgres,
            dir,
            port,
            argv,
            run_as,
            process: None,
        };
        server.start()?;
        Ok(server)
    }

    /// Starts a MariaDB server and waits until it accepts connections.
    pub fn mariadb() -> Result<DbServer, TestkitError> {
        let install = find_binary("mariadb-install-db", "/usr/bin/mariadb-install-db")?;
        let server_bin = find_binary("mariadbd", "/usr/sbin/mariadbd")?;
        let (dir, run_as) = server_dir("shardjob-mariadb-", "mysql")?;
        let port = free_ports(1)?[0];
        let data = dir.join("data");
        let mut init = Command::new(install);
        init.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ])
            .current_dir(&dir);
        run_setup(init, run_as, &dir.join("install.log"), "mariadb-install-db")?;
        // A directory in the data directory is a database to MariaDB.
        let db = data.join("shardjob");
        fs::create_dir_all(&db).map_err(io(format!("create {}", db.display())))?;
        chown_tree(&db, run_as)?;
        let argv = vec![
            server_bin.display().to_string(),
            "--no-defaults".into(),
            format!("--datadir={}", data.display()),
            format!("--socket={}", dir.join("mariadb.sock").display()),
            format!("--pid-file={}", dir.join("mariadb.pid").display()),
            format!("--port={port}"),
            "--bind-address=127.0.0.1".into(),
            "--skip-name-resolve".into(),
            "--innodb-buffer-pool-size=64M".into(),
            "--max-connections=50".into(),
        ];
        let mut server = DbServer {
            kind: DbKind::MariaDb,
            dir,
            port,
            argv,
            run_as,
            process: None,
        };
        server.start()?;
        Ok(server)
    }

    /// The database kind.
    pub fn kind(&self) -> DbKind {
        self.kind
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of the `shardjob` database (`postgres://shardjob@127.0.0.1:PORT/postgres`,
    /// `mysql://root@127.0.0.1:PORT/shardjob`).
    pub fn url(&self) -> String {
        match self.kind {
            DbKind::Postgres => format!("postgres://shardjob@127.0.0.1:{}/postgres", self.port),
            DbKind::MariaDb => format!("mysql://root@127.0.0.1:{}/shardjob", self.port),
        }
    }

    /// The server's PID while it runs.
    pub fn pid(&self) -> Option<i32> {
        self.process.as_ref().map(|p| p.pid)
    }

    /// SIGKILLs the server (its data stays for [`DbServer::restart`]).
    pub fn kill(&mut self) -> Result<(), TestkitError> {
        let Some(mut p) = self.process.take() else {
            return Err(TestkitError::BadMember(format!(
                "the {} server is not running",
                self.kind.name()
            )));
        };
        signal(p.pid, libc::SIGKILL)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(p.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        finish(&mut p, true);
        Ok(())
    }

    /// Stops the server with SIGSTOP: connections stay open and get no answer, as from a
    /// database that hangs. (MariaDB is one process; PostgreSQL's backends are processes of
    /// their own, which this does not stop.)
    pub fn pause(&self) -> Result<(), TestkitError> {
        match &self.process {
            Some(p) => signal(p.pid, libc::SIGSTOP),
            None => Err(TestkitError::BadMember(format!(
                "the {} server is not running",
                self.kind.name()
            ))),
        }
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) -> Result<(), TestkitError> {
        match &self.process {
            Some(p) => signal(p.pid, libc::SIGCONT),
            None => Err(TestkitError::BadMember(format!(
                "the {} server is not running",
                self.kind.name()
            ))),
        }
    }

    /// Starts the server again from its data, on the same port, and waits until it accepts
    /// connections.
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        if self.process.is_some() {
            return Err(TestkitError::BadMember(format!(
                "the {} server is running",
                self.kind.name()
            )));
        }
        self.start()
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn start(&mut self) -> Result<(), TestkitError> {
        let log = self.dir.join("server.log");
        // As the registries' watchdog (see lib.rs), run as the server's user.
        let script = "\"$@\" >>\"$SHARDJOB_LOG\" 2>&1 </dev/null &\n\
                      echo $!\n\
                      read -r line || line=\n\
                      kill -9 $! 2>/dev/null\n\
                      wait $! 2>/dev/null\n\
                      if [ \"$line\" != keep ]; then rm -rf \"$SHARDJOB_DIR\"; fi\n\
                      exit 0\n";
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(script)
            .arg("shardjob-testkit-db")
            .args(&self.argv)
            .current_dir(&self.dir)
            .env("SHARDJOB_LOG", &log)
            .env("SHARDJOB_DIR", &self.dir)
            .env_remove("PGDATA")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
            if let Some((uid, gid)) = self.run_as {
                cmd.uid(uid).gid(gid);
            }
        }
        let process = spawn_watchdog(&mut cmd, &format!("{} watchdog", self.kind.name()))?;
        let pid = process.pid;
        self.process = Some(process);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if self.ready() {
                return Ok(());
            }
            if !alive(pid) || Instant::now() >= deadline {
                let tail = self.log_tail(30);
                if let Some(mut p) = self.process.take() {
                    let _ = signal(p.pid, libc::SIGKILL);
                    finish(&mut p, true);
                }
                return Err(TestkitError::BadMember(format!(
                    "the {} server on port {} did not accept connections within {:?}; log \
                     tail:\n{tail}",
                    self.kind.name(),
                    self.port,
                    READY_TIMEOUT
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether the server answers its protocol's greeting on the port.
    fn ready(&self) -> bool {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
        match self.kind {
            DbKind::MariaDb => {
                // The server speaks first: a handshake packet, protocol version 10.
                let mut head = [0u8; 5];
                s.read_exact(&mut head).is_ok() && head[4] == 10
            }
            DbKind::Postgres => {
                // A startup packet for the `shardjob` user: an authentication request ('R')
                // means the server takes connections (not starting up or recovering).
                use std::io::Write;
                let mut body = Vec::new();
                body.extend_from_slice(&196_608u32.to_be_bytes()); // protocol 3.0
                for (k, v) in [("user", "shardjob"), ("database", "postgres")] {
                    body.extend_from_slice(k.as_bytes());
                    body.push(0);
                    body.extend_from_slice(v.as_bytes());
                    body.push(0);
                }
                body.push(0);
                let mut packet = ((body.len() + 4) as u32).to_be_bytes().to_vec();
                packet.extend_from_slice(&body);
                let mut first = [0u8; 1];
                s.write_all(&packet).is_ok() && s.read_exact(&mut first).is_ok() && first[0] == b'R'
            }
        }
    }
}

impl Drop for DbServer {
    fn drop(&mut self) {
        if let Some(mut p) = self.process.take() {
            let _ = signal(p.pid, libc::SIGKILL);
            finish(&mut p, false);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn pg_bin() -> Result<PathBuf, TestkitError> {
    if let Some(dir) = std::env::var_os("SHARDJOB_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| TestkitError::NotInstalled {
            what: format!("PostgreSQL (/usr/lib/postgresql/*/bin/initdb): {DB_INSTALL_HINT}"),
        })
}

fn find_binary(name: &str, fallback: &str) -> Result<PathBuf, TestkitError> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    let p = PathBuf::from(fallback);
    if p.is_file() {
        Ok(p)
    } else {
        Err(TestkitError::NotInstalled {
            what: format!("{name}: {DB_INSTALL_HINT}"),
        })
    }
}

/// A fresh directory for a server, handed to `user` when this process runs as root.
fn server_dir(prefix: &str, user: &str) -> Result<(PathBuf, Option<(u32, u32)>), TestkitError> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(io("create a temporary directory"))?
        .keep();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let run_as = if root {
        Some(
            lookup_user(user)
                .or_else(|| lookup_user("nobody"))
                .ok_or_else(|| TestkitError::NotInstalled {
                    what: format!("a user `{user}` to run the server as (not root)"),
                })?,
        )
    } else {
        None
    };
    chown_tree(&dir, run_as)?;
    Ok((dir, run_as))
}

fn lookup_user(name: &str) -> Option<(u32, u32)> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getpwnam with a valid C string; the record is read at once, before any other
    // call that could reuse its static storage (tests start servers one at a time per thread;
    // a race would only yield another user's ids, which the server start would reject).
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    // SAFETY: pw is non-null and points to a passwd record.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Some((uid, gid))
}

fn chown_tree(path: &Path, run_as: Option<(u32, u32)>) -> Result<(), TestkitError> {
    let Some((uid, gid)) = run_as else {
        return Ok(());
    };
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(io(format!("hand {} to uid {uid}", path.display())))
}

/// Runs a set-up command (initdb, mariadb-install-db) as the server's user; its output goes to
/// `log`, shown when it fails.
fn run_setup(
    mut cmd: Command,
    run_as: Option<(u32, u32)>,
    log: &Path,
    what: &str,
) -> Result<(), TestkitError> {
    use std::os::unix::process::CommandExt;
    if let Some((uid, gid)) = run_as {
        cmd.uid(uid).gid(gid);
    }
    let out = fs::File::create(log).map_err(io(format!("create {}", log.display())))?;
    let err = out.try_clone().map_err(io("clone a log file"))?;
    let status = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .env_remove("PGDATA")
        .status()
        .map_err(io(format!("run {what}")))?;
    if status.success() {
        Ok(())
    } else {
        let text = fs::read_to_string(log).unwrap_or_default();
        Err(TestkitError::BadMember(format!(
            "{what} failed ({status}):\n{text}"
        )))
    }
}
