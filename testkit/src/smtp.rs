//! A real SMTP server for the mail notifier's tests: Debian's `python3-aiosmtpd` (run by
//! `$SHARDJOB_PYTHON`, else `/usr/bin/python3`, else `python3` on `PATH`), on a free
//! `127.0.0.1` port, requiring `AUTH` (PLAIN or LOGIN, without TLS) with the user and password
//! given, and writing each mail it accepts to a file of its own in a temporary directory, with
//! its envelope: `MAIL FROM: …`, `RCPT TO: a,b`, `AUTH: user`, `TLS: yes|no`, an empty line, then the mail as
//! received. [`SmtpServer::mails`] reads them back, in the order received.
//! [`SmtpServer::start_with`] serves TLS from the first byte (SMTPS) or requires STARTTLS,
//! with a self-signed certificate for `127.0.0.1` made by `openssl`.
//!
//! The server runs under the same `sh` watchdog as the registries (see the crate's
//! documentation): it is SIGKILLed by PID when the [`SmtpServer`] is dropped or this process
//! ends in any way.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{
    Process, READY_TIMEOUT, TestkitError, alive, finish, free_ports, io, signal, spawn_watchdog,
};

/// What to install when aiosmtpd is missing.
pub const SMTP_INSTALL_HINT: &str = "apt-get install -y --no-install-recommends python3-aiosmtpd (or run .ci/run, which installs it)";

/// The server: aiosmtpd's controller with an authenticator and a handler that stores each
/// mail under a sequence number (written aside, then renamed: a file seen is whole).
const SCRIPT: &str = r#"
import os, sys, threading
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

port, out, user, password, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
tls = {}
if mode != "plain":
    import ssl
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(sys.argv[6], sys.argv[7])
    if mode == "implicit":
        tls = {"ssl_context": context}
    else:
        tls = {"tls_context": context, "require_starttls": True}
lock = threading.Lock()
count = [0]

class Store:
    async def handle_DATA(self, server, session, envelope):
        with lock:
            count[0] += 1
            n = count[0]
        login = session.auth_data.login.decode() if session.authenticated else "-"
        secured = session.ssl is not None or \
            server.transport.get_extra_info("ssl_object") is not None
        head = "MAIL FROM: %s\nRCPT TO: %s\nAUTH: %s\nTLS: %s\n\n" % (
            envelope.mail_from, ",".join(envelope.rcpt_tos), login, "yes" if secured else "no")
        tmp = os.path.join(out, ".%06d.tmp" % n)
        with open(tmp, "wb") as f:
            f.write(head.encode())
            f.write(envelope.original_content or envelope.content)
        os.rename(tmp, os.path.join(out, "%06d.eml" % n))
        return "250 OK"

def check(server, session, envelope, mechanism, data):
    ok = isinstance(data, LoginPassword) and data.login.decode() == user \
        and data.password.decode() == password
    return AuthResult(success=ok, handled=False, auth_data=data)

controller = Controller(Store(), hostname="127.0.0.1", port=port, authenticator=check,
                        auth_required=True, auth_require_tls=False, **tls)
controller.start()
print("ready", flush=True)
threading.Event().wait()
"#;

/// How the server secures its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpTls {
    /// Plain SMTP, no STARTTLS offered.
    Plain,
    /// TLS from the first byte (SMTPS), with a self-signed certificate for `127.0.0.1`.
    Implicit,
    /// Plain SMTP that offers STARTTLS (same certificate) and requires it before `MAIL`.
    StartTls,
}

/// One mail the server accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMail {
    /// The envelope's sender.
    pub mail_from: String,
    /// The envelope's recipients (`To`, `Cc` and `Bcc` alike).
    pub rcpt_to: Vec<String>,
    /// The user the client authenticated as (`-`: none).
    pub auth: String,
    /// Whether the mail came over TLS (SMTPS or after STARTTLS).
    pub tls: bool,
    /// The mail (headers and body) as received.
    pub data: String,
}

/// A throw-away SMTP server (see the module's documentation).
pub struct SmtpServer {
    dir: tempfile::TempDir,
    port: u16,
    process: Option<Process>,
}

impl std::fmt::Debug for SmtpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpServer")
            .field("port", &self.port)
            .field("pid", &self.process.as_ref().map(|p| p.pid))
            .finish()
    }
}

impl SmtpServer {
    /// Starts a plain SMTP server, accepting `user` / `password`, and waits until it serves.
    pub fn start(user: &str, password: &str) -> Result<SmtpServer, TestkitError> {
        Self::start_with(user, password, SmtpTls::Plain)
    }

    /// Starts the server with TLS as `tls` says (a certificate made with `openssl`).
    pub fn start_with(
        user: &str,
        password: &str,
        tls: SmtpTls,
    ) -> Result<SmtpServer, TestkitError> {
        // Debian's aiosmtpd is a module of Debian's Python, which another `python3` on PATH
        // (pyenv, a virtualenv) may not see.
        let python = std::env::var_os("SHARDJOB_PYTHON")
            .map(PathBuf::from)
            .or_else(|| {
                let debian = PathBuf::from("/usr/bin/python3");
                debian.is_file().then_some(debian)
            })
            .unwrap_or_else(|| PathBuf::from("python3"));
        let have = Command::new(&python)
            .args(["-c", "import aiosmtpd"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !have {
            return Err(TestkitError::BadMember(format!(
                "aiosmtpd is not installed: {SMTP_INSTALL_HINT}"
            )));
        }
        let dir = tempfile::Builder::new()
            .prefix("shardjob-smtp-")
            .tempdir()
            .map_err(io("create the SMTP server's directory"))?;
        let mails = dir.path().join("mails");
        fs::create_dir(&mails).map_err(io("create the SMTP server's mail directory"))?;
        let script = dir.path().join("server.py");
        fs::write(&script, SCRIPT).map_err(io("write the SMTP server's script"))?;
        let port = free_ports(1)?[0];
        let mut server = SmtpServer {
            dir,
            port,
            process: None,
        };
        let mut argv = vec![
            python.to_string_lossy().into_owned(),
            script.to_string_lossy().into_owned(),
            port.to_string(),
            mails.to_string_lossy().into_owned(),
            user.to_owned(),
            password.to_owned(),
        ];
        match tls {
            SmtpTls::Plain => argv.push("plain".to_owned()),
            SmtpTls::Implicit | SmtpTls::StartTls => {
                let (cert, key) = self_signed(server.dir.path())?;
                argv.push(
                    if tls == SmtpTls::Implicit {
                        "implicit"
                    } else {
                        "starttls"
                    }
                    .to_owned(),
                );
                argv.push(cert.to_string_lossy().into_owned());
                argv.push(key.to_string_lossy().into_owned());
            }
        }
        server.spawn(&argv)?;
        Ok(server)
    }

    /// The server's port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The mails received so far, in order.
    pub fn mails(&self) -> Vec<ReceivedMail> {
        let Ok(entries) = fs::read_dir(self.dir.path().join("mails")) else {
            return Vec::new();
        };
        let mut names: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "eml"))
            .collect();
        names.sort();
        names.iter().filter_map(|p| parse(p)).collect()
    }

    /// Waits (up to `timeout`) until at least `n` mails have arrived, and returns them all.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Result<Vec<ReceivedMail>, TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            let mails = self.mails();
            if mails.len() >= n {
                return Ok(mails);
            }
            if Instant::now() >= deadline {
                return Err(TestkitError::BadMember(format!(
                    "{} mail(s) of {n} arrived within {timeout:?}; server log:\n{}",
                    mails.len(),
                    self.log_tail(20)
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn spawn(&mut self, argv: &[String]) -> Result<(), TestkitError> {
        let log = self.dir.path().join("server.log");
        // As the registries' watchdog (see lib.rs); the directory is the TempDir's to remove.
        let script = "\"$@\" >>\"$SHARDJOB_LOG\" 2>&1 </dev/null &\n\
                      echo $!\n\
                      read -r line || line=\n\
                      kill -9 $! 2>/dev/null\n\
                      wait $! 2>/dev/null\n\
                      exit 0\n";
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(script)
            .arg("shardjob-testkit-smtp")
            .args(argv)
            .current_dir(self.dir.path())
            .env("SHARDJOB_LOG", &log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
        }
        let process = spawn_watchdog(&mut cmd, "SMTP server watchdog")?;
        let pid = process.pid;
        self.process = Some(process);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            // The script says `ready` once aiosmtpd's controller has checked it serves.
            if self.log_tail(1000).lines().any(|l| l == "ready") {
                return Ok(());
            }
            if !alive(pid) || Instant::now() >= deadline {
                let tail = self.log_tail(30);
                if let Some(mut p) = self.process.take() {
                    let _ = signal(p.pid, libc::SIGKILL);
                    finish(&mut p, false);
                }
                return Err(TestkitError::BadMember(format!(
                    "the SMTP server on port {} did not greet within {READY_TIMEOUT:?}; log \
                     tail:\n{tail}",
                    self.port
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        if let Some(mut p) = self.process.take() {
            let _ = signal(p.pid, libc::SIGKILL);
            finish(&mut p, false);
        }
    }
}

/// A self-signed certificate and key for `127.0.0.1`, made by `openssl` in `dir`.
fn self_signed(dir: &Path) -> Result<(PathBuf, PathBuf), TestkitError> {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdin(Stdio::null())
        .output()
        .map_err(io("run openssl to make the SMTP server's certificate"))?;
    if !out.status.success() {
        return Err(TestkitError::BadMember(format!(
            "openssl could not make a certificate: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok((cert, key))
}

fn parse(path: &Path) -> Option<ReceivedMail> {
    let text = fs::read_to_string(path).ok()?;
    let (head, data) = text.split_once("\n\n")?;
    let mut mail = ReceivedMail {
        mail_from: String::new(),
        rcpt_to: Vec::new(),
        auth: String::new(),
        tls: false,
        data: data.to_owned(),
    };
    for line in head.lines() {
        if let Some(v) = line.strip_prefix("MAIL FROM: ") {
            mail.mail_from = v.to_owned();
        } else if let Some(v) = line.strip_prefix("RCPT TO: ") {
            mail.rcpt_to = v.split(',').map(str::to_owned).collect();
        } else if let Some(v) = line.strip_prefix("AUTH: ") {
            mail.auth = v.to_owned();
        } else if let Some(v) = line.strip_prefix("TLS: ") {
            mail.tls = v == "yes";
        }
    }
    Some(mail)
}
