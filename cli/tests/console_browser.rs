//! The web console in a real headless Chromium, over a real cluster.
//!
//! The test starts a ZooKeeper server (the test kit), two `shardjob run` processes sharing two
//! SCRIPT jobs that record their history in SQLite, the console itself (`shardjob console`,
//! the real binary, its users added by `--add-user`), and Chromium through chromedriver
//! (WebDriver, driven by `fantoccini`). Then, as a person would: a wrong password is refused;
//! the admin logs in, adds the registry on the registries page, looks at every page, disables
//! an item and sees the sharding table change, sees another client's change arrive without a
//! reload, triggers a job with a parameter and finds the run in the history, types a bad cron
//! and sees the error next to the field with nothing written; writes without the CSRF token
//! are refused; a viewer sees no buttons, and the server refuses the viewer's writes even when
//! they are sent by hand.
//!
//! Every page is photographed into `target/console-screenshots/` (or `$SHARDJOB_SCREENSHOTS`).
//!
//! Needs the Debian packages `chromium` and `chromium-driver` (`/usr/bin/chromium`,
//! `/usr/bin/chromedriver`; `SHARDJOB_CHROMIUM` and `SHARDJOB_CHROMEDRIVER` name others) and
//! ZooKeeper; `.ci/run` installs them. Nothing is asserted against the clock: each step waits
//! for what it expects, up to [`WAIT`], and says what it last saw when that does not come.

#![cfg(unix)]

use std::fs;
use std::future::Future;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use shardjob_backend_zk::{ZkConfig, ZkRegistry};
use shardjob_core::InstanceId;
use shardjob_core::layout::JobPaths;
use shardjob_core::registry::{CreateMode, NodePath, Registry, TxnOp};
use shardjob_testkit::Cluster;

/// How long any step waits for what it expects: generous, so that a loaded machine only makes
/// the test slower.
const WAIT: Duration = Duration::from_secs(60);

/// The registry's name in the console.
const REG: &str = "zk";

const ADMIN: (&str, &str) = ("ada", "correct horse battery staple");
const VIEWER: (&str, &str) = ("vic", "viewer's own long password");

/// A process this test started, in a process group of its own: a `Drop` SIGKILLs the group by
/// its id (chromedriver takes its Chromium with it, `shardjob run` its scripts).
struct Group {
    name: String,
    child: Option<Child>,
    stderr: PathBuf,
}

impl Group {
    fn spawn(name: &str, dir: &Path, command: &mut Command) -> Group {
        let stdout = dir.join(format!("{name}.stdout"));
        let stderr = dir.join(format!("{name}.stderr"));
        let child = command
            .stdin(Stdio::null())
            .stdout(fs::File::create(&stdout).expect("a log file"))
            .stderr(fs::File::create(&stderr).expect("a log file"))
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Group {
            name: name.to_owned(),
            child: Some(child),
            stderr,
        }
    }

    /// SIGTERM, then waits for the exit (SIGKILL past [`WAIT`]); whether it exited with
    /// success.
    fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        // SAFETY: kill(2) on a child this test started and has not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + WAIT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    // SAFETY: the group this test created; its leader is not reaped yet.
                    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                    let _ = child.wait();
                    return false;
                }
            }
        }
    }

    fn check_alive(&mut self) {
        if let Some(child) = &mut self.child {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "{} exited early ({status}):\n{}",
                    self.name,
                    fs::read_to_string(&self.stderr).unwrap_or_default()
                );
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the process group this test created; its leader is not reaped.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
        }
    }
}

/// Runs `shardjob` to its end; its exit success and stdout (stderr appended).
fn shardjob(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("shardjob starts");
    {
        let mut input = child.stdin.take().expect("stdin");
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).expect("stdin written");
        }
    }
    let out = child.wait_with_output().expect("shardjob ends");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// A free port on 127.0.0.1 (bound, read, released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Polls `probe` until it gives `Some`, for up to [`WAIT`]; panics with what it last saw.
async fn until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(seen) if Instant::now() >= deadline => {
                panic!("waited {WAIT:?} for {what}; last seen: {seen}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

fn binary(env: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    assert!(
        path.exists(),
        "{} not found: install the Debian packages chromium and chromium-driver \
         (or name the binary in {env})",
        path.display()
    );
    path
}

/// Where the screenshots go: `$SHARDJOB_SCREENSHOTS`, else `console-screenshots/` in the
/// target directory.
fn screenshot_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SHARDJOB_SCREENSHOTS") {
        return PathBuf::from(dir);
    }
    // CARGO_TARGET_TMPDIR is `<target>/tmp`.
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).join("console-screenshots")
}

/// The browser: chromedriver (and the Chromium it starts) and a WebDriver session.
struct Browser {
    client: Client,
    base: String,
    shots: PathBuf,
    driver: Group,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start(dir: &Path, base: &str) -> Browser {
        let chromium = binary("SHARDJOB_CHROMIUM", "/usr/bin/chromium");
        let chromedriver = binary("SHARDJOB_CHROMEDRIVER", "/usr/bin/chromedriver");
        let port = free_port();
        let driver = Group::spawn(
            "chromedriver",
            dir,
            Command::new(chromedriver)
                .arg(format!("--port={port}"))
                .arg("--allowed-ips=127.0.0.1"),
        );
        let profile = tempfile::tempdir().expect("a profile directory");
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium.display().to_string(),
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-dev-shm-usage",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        });
        let Value::Object(caps) = caps else {
            unreachable!()
        };
        let url = format!("http://127.0.0.1:{port}");
        let client = until("chromedriver to start a session", || {
            let caps = caps.clone();
            let url = url.clone();
            async move {
                ClientBuilder::new(HttpConnector::new())
                    .capabilities(caps)
                    .connect(&url)
                    .await
                    .map_err(|e| e.to_string())
            }
        })
        .await;
        let shots = screenshot_dir();
        fs::create_dir_all(&shots).expect("the screenshot directory");
        Browser {
            client,
            base: base.to_owned(),
            shots,
            driver,
            _profile: profile,
        }
    }

    async fn goto(&self, path: &str) {
        let url = format!("{}{path}", self.base);
        self.client
            .goto(&url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
    }

    /// The path and query of the page shown.
    async fn path(&self) -> String {
        let url = self.client.current_url().await.expect("the URL");
        match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        }
    }

    /// Photographs the page to `{name}.png` (without the glow of the rows just updated).
    async fn shot(&self, name: &str) {
        let _ = self
            .client
            .execute(
                "const s = document.createElement('style');\
                 s.textContent = '.flash-update { animation: none !important; }';\
                 document.head.appendChild(s);\
                 document.querySelectorAll('.flash-update').forEach(e => e.classList.remove('flash-update'));",
                vec![],
            )
            .await;
        let png = self.client.screenshot().await.expect("a screenshot");
        let path = self.shots.join(format!("{name}.png"));
        fs::write(&path, png).expect("the screenshot written");
        eprintln!("screenshot: {}", path.display());
    }

    /// The text of the first element `css` finds, once there is one.
    async fn text(&self, css: &str) -> String {
        until(&format!("an element {css}"), || async {
            match self.client.find(Locator::Css(css)).await {
                Ok(e) => e.text().await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        })
        .await
    }

    /// Waits until the first element `css` finds has `attr` equal to `want`.
    async fn attr_is(&self, css: &str, attr: &str, want: &str) {
        until(&format!("{css} with {attr}={want:?}"), || async {
            let e = self
                .client
                .find(Locator::Css(css))
                .await
                .map_err(|e| e.to_string())?;
            match e.attr(attr).await.map_err(|e| e.to_string())? {
                Some(v) if v == want => Ok(()),
                other => Err(format!("{attr}={other:?}")),
            }
        })
        .await
    }

    /// Clicks the first element `css` finds, once there is one (a page still loading may not
    /// have it yet).
    async fn click(&self, css: &str) {
        until(&format!("a click on {css}"), || async {
            let e = self
                .client
                .find(Locator::Css(css))
                .await
                .map_err(|e| e.to_string())?;
            e.click().await.map_err(|e| e.to_string())
        })
        .await;
    }

    /// Clicks an operation's button once, then waits until `done` holds. Live updates change
    /// a table's rows in place (the button keeps its node and its place), so one click is
    /// enough: no retry that could do an operation twice.
    async fn press<F, Fut>(&self, css: &str, what: &str, done: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        self.click(css).await;
        until(&format!("{what} after a click on {css}"), done).await;
    }

    /// The `data-status` of the element `css` finds.
    async fn status_of(&self, css: &str) -> Result<String, String> {
        let e = self
            .client
            .find(Locator::Css(css))
            .await
            .map_err(|e| e.to_string())?;
        e.attr("data-status")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{css} has no data-status"))
    }

    async fn fill(&self, css: &str, text: &str) {
        let e = self
            .client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|err| panic!("{css}: {err}"));
        e.clear().await.unwrap_or_else(|err| panic!("{css}: {err}"));
        e.send_keys(text)
            .await
            .unwrap_or_else(|err| panic!("{css}: {err}"));
    }

    async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map(|v| v.len())
            .unwrap_or(0)
    }

    async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}"))
    }

    /// POSTs `body` to `path` from the page, with the browser's cookies (the session),
    /// as a script on the page could: the answer's status and text.
    async fn post(
        &self,
        path: &str,
        content_type: &str,
        body: &str,
        csrf: Option<&str>,
    ) -> (u64, String) {
        let answer = self
            .client
            .execute_async(
                "const [path, type, body, token, done] = arguments;\
                 const headers = {'Content-Type': type};\
                 if (token) headers['X-CSRF-Token'] = token;\
                 fetch(path, {method: 'POST', headers, body, credentials: 'same-origin', redirect: 'manual'})\
                   .then(async r => done([r.status, await r.text()]))\
                   .catch(e => done([0, String(e)]));",
                vec![
                    json!(path),
                    json!(content_type),
                    json!(body),
                    csrf.map_or(Value::Null, |t| json!(t)),
                ],
            )
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        (
            answer[0].as_u64().unwrap_or(0),
            answer[1].as_str().unwrap_or_default().to_owned(),
        )
    }

    /// The CSRF token the page carries (its logout form's).
    async fn csrf(&self) -> String {
        self.client
            .find(Locator::Css("form.who input[name=csrf]"))
            .await
            .expect("the logout form")
            .attr("value")
            .await
            .expect("its token")
            .expect("a token")
    }

    /// Adds registry [`REG`] in the registries page's form and waits until it is read.
    async fn add_registry(&self, url: &str, history: Option<&str>) {
        self.goto("/registries").await;
        self.fill("#add-registry input[name=name]", REG).await;
        self.fill("#add-registry input[name=url]", url).await;
        if let Some(h) = history {
            self.fill("#add-registry input[name=history]", h).await;
        }
        self.click("#add-registry button[type=submit]").await;
        until("the registry to be read", || async {
            let row = self.text(&format!("#registry-{REG}")).await;
            if row.contains("live") {
                Ok(())
            } else {
                self.client.refresh().await.map_err(|e| e.to_string())?;
                Err(row)
            }
        })
        .await;
    }

    async fn log_in(&self, user: &str, password: &str) {
        self.goto("/login").await;
        self.fill("#user", user).await;
        self.fill("#password", password).await;
        self.click("#login").await;
        until(&format!("{user} to be logged in"), || async {
            let path = self.path().await;
            if path.starts_with("/login") {
                return Err(path);
            }
            self.client
                .find(Locator::Css("#logout"))
                .await
                .map(|_| ())
                .map_err(|e| format!("{path}: {e}"))
        })
        .await;
    }

    async fn log_out(&self) {
        self.click("#logout").await;
        until("the login page after logging out", || async {
            let path = self.path().await;
            if path.starts_with("/login") {
                Ok(())
            } else {
                Err(path)
            }
        })
        .await;
    }

    async fn session_cookie(&self) -> Option<fantoccini::cookies::Cookie<'static>> {
        self.client
            .get_all_cookies()
            .await
            .expect("the cookies")
            .into_iter()
            .find(|c| c.name() == "shardjob_console")
    }
}

/// The cluster: ZooKeeper, two `shardjob run` processes, the job history's SQLite file.
struct World {
    dir: tempfile::TempDir,
    zk_url: String,
    zk_connect: String,
    history_url: String,
    trigger_log: PathBuf,
    instances: Vec<Group>,
    _zk: Cluster,
}

impl Drop for World {
    /// A failed test keeps its directory (the processes' logs) and shows the console's log.
    fn drop(&mut self) {
        if std::thread::panicking() {
            let dir = self.dir.path();
            let log = fs::read_to_string(dir.join("console.stderr")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!(
                "console log (last lines):\n{}\nkept {} for inspection",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
                dir.display()
            );
            let kept = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("a directory"));
            let _ = kept.keep();
        }
    }
}

impl World {
    fn start() -> World {
        let zk = Cluster::zookeeper(1).unwrap_or_else(|e| panic!("ZooKeeper: {e}"));
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = dir.path().join("history.db");
        let trigger_log = dir.path().join("manual.log");
        let script = dir.path().join("manual.sh");
        // The last argument of a Script job is its sharding context (JSON, with the
        // trigger's parameter as `jobParameter`).
        fs::write(
            &script,
            format!(
                "#!/bin/sh\nfor last; do :; done\nprintf '%s\\n' \"$last\" >> '{}'\n",
                trigger_log.display()
            ),
        )
        .expect("the script written");
        let jobs = dir.path().join("jobs.yaml");
        fs::write(
            &jobs,
            format!(
                "spring:\n  datasource:\n    url: jdbc:sqlite:{db}\n\
                 elasticjob:\n  tracing:\n    type: RDB\n  jobs:\n    \
                 tick:\n      elasticJobType: SCRIPT\n      cron: \"*/2 * * * * ?\"\n      \
                 shardingTotalCount: 4\n      description: fires every two seconds\n      \
                 props:\n        script.command.line: \"true\"\n    \
                 manual:\n      elasticJobType: SCRIPT\n      cron: \"0 0 3 1 1 ?\"\n      \
                 shardingTotalCount: 2\n      description: runs when triggered\n      \
                 props:\n        script.command.line: \"sh '{script}'\"\n",
                db = db.display(),
                script = script.display()
            ),
        )
        .expect("the job file written");
        let zk_url = format!("zk://{}/console-browser", zk.connect_string());
        let mut instances = Vec::new();
        for name in ["a", "b"] {
            instances.push(Group::spawn(
                &format!("run-{name}"),
                dir.path(),
                Command::new(env!("CARGO_BIN_EXE_shardjob"))
                    .arg("run")
                    .arg(&jobs)
                    .args(["--registry", &zk_url])
                    .env("RUST_LOG", "info"),
            ));
        }
        World {
            history_url: format!("sqlite://{}", db.display()),
            zk_connect: zk.connect_string(),
            dir,
            zk_url,
            trigger_log,
            instances,
            _zk: zk,
        }
    }

    fn cli(&self, args: &[&str]) -> String {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--registry", &self.zk_url]);
        let (ok, out) = shardjob(&all, None);
        assert!(ok, "shardjob {all:?}: {out}");
        out
    }
}

/// A job as ElasticJob 3.0.4 leaves it in the namespace (its config node in ElasticJob's
/// form, one instance on server 192.168.10.11 owning items 0..3, the leader): the returned
/// client holds the instance's and the leader's ephemeral nodes.
async fn elasticjob_job(connect: &str, namespace: &str) -> ZkRegistry {
    const CONFIG: &str = "cron: 0 0 3 1 1 ?\ndescription: ''\ndisabled: false\nfailover: true\n\
        jobErrorHandlerType: LOG\njobExecutorServiceHandlerType: CPU\njobName: settle304\n\
        jobParameter: ''\njobShardingStrategyType: AVG_ALLOCATION\nmaxTimeDiffSeconds: -1\n\
        misfire: true\nmonitorExecution: true\noverwrite: false\nreconcileIntervalMinutes: 10\n\
        shardingItemParameters: 0=a,1=b,2=c\nshardingTotalCount: 3\nstaticSharding: false\n";
    let zk = ZkRegistry::connect(
        ZkConfig::new(connect.to_owned())
            .namespace(namespace.to_owned())
            .session_timeout(Duration::from_secs(30)),
    )
    .await
    .expect("ZooKeeper");
    let job = JobPaths::new("settle304").expect("a job name");
    let id = InstanceId::new("192.168.10.11@-@4021").expect("an instance id");
    let put = |path: NodePath, data: String, mode: CreateMode| {
        let zk = &zk;
        async move {
            if let Some(parent) = path.parent() {
                zk.ensure_path(&parent).await.expect("the parent");
            }
            zk.create(&path, data.into_bytes(), mode)
                .await
                .unwrap_or_else(|e| panic!("{path}: {e}"));
        }
    };
    let persistent = CreateMode::Persistent;
    put(
        job.root().clone(),
        "com.example.SettleJob".into(),
        persistent,
    )
    .await;
    put(job.config(), CONFIG.into(), persistent).await;
    put(job.server_of(&id), "ENABLED".into(), persistent).await;
    put(
        job.instance(&id),
        format!("jobInstanceId: {id}\nserverIp: 192.168.10.11\n"),
        CreateMode::Ephemeral,
    )
    .await;
    for item in 0..3 {
        put(job.item_instance(item), id.as_str().into(), persistent).await;
    }
    put(
        job.leader_instance(),
        id.as_str().into(),
        CreateMode::Ephemeral,
    )
    .await;
    zk
}

/// The console: `shardjob console` on a port of its own, with an admin and a viewer.
fn start_console(dir: &Path) -> (Group, String, PathBuf) {
    let config = dir.join("console.yaml");
    let config_arg = config.display().to_string();
    // No user, no console: it refuses to start, and says how to add one.
    let (ok, out) = shardjob(
        &[
            "console",
            "--config",
            &config_arg,
            "--listen",
            "127.0.0.1:0",
        ],
        None,
    );
    assert!(!ok && out.contains("--add-user"), "{out}");
    for ((user, password), role) in [(ADMIN, "admin"), (VIEWER, "viewer")] {
        let (ok, out) = shardjob(
            &[
                "console",
                "--config",
                &config_arg,
                "--add-user",
                user,
                "--role",
                role,
            ],
            Some(&format!("{password}\n")),
        );
        assert!(ok, "{out}");
        assert!(
            out.contains(&format!("added user {user} ({role})")),
            "{out}"
        );
    }
    let text = fs::read_to_string(&config).expect("the console's configuration");
    assert!(
        text.contains("$argon2id$") && !text.contains(ADMIN.1),
        "{text}"
    );

    let console = Group::spawn(
        "console",
        dir,
        Command::new(env!("CARGO_BIN_EXE_shardjob"))
            .args([
                "console",
                "--listen",
                "127.0.0.1:0",
                "--config",
                &config_arg,
            ])
            .env("RUST_LOG", "info"),
    );
    let stdout = dir.join("console.stdout");
    let deadline = Instant::now() + WAIT;
    let base = loop {
        let text = fs::read_to_string(&stdout).unwrap_or_default();
        if let Some(rest) = text.split("shardjob console: ").nth(1) {
            if let Some(url) = rest.split_whitespace().next() {
                break url.trim_end_matches('/').to_owned();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the console did not say where it listens: {text}\n{}",
            fs::read_to_string(dir.join("console.stderr")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    (console, base, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_a_browser() {
    let mut world = World::start();
    let dir = world.dir.path().to_owned();
    let (mut console, base, config) = start_console(&dir);
    let b = Browser::start(&dir, &base).await;

    // --- A wrong password is refused: the login page again, no session cookie.
    b.goto("/r/zk/jobs").await;
    until("the login page", || async {
        let p = b.path().await;
        if p.starts_with("/login?next=") {
            Ok(())
        } else {
            Err(p)
        }
    })
    .await;
    b.shot("login").await;
    b.fill("#user", ADMIN.0).await;
    b.fill("#password", "not the password").await;
    b.click("#login").await;
    let flash = b.text("#flash").await;
    assert!(flash.contains("Wrong user name or password"), "{flash}");
    assert!(b.path().await.starts_with("/login"));
    assert!(
        b.session_cookie().await.is_none(),
        "a failed login opens no session"
    );

    // --- The admin logs in: no registry yet, so the registries page.
    b.log_in(ADMIN.0, ADMIN.1).await;
    let cookie = b.session_cookie().await.expect("a session cookie");
    assert_eq!(cookie.http_only(), Some(true), "{cookie}");
    assert_eq!(
        cookie.same_site().map(|s| s.to_string()).as_deref(),
        Some("Strict"),
        "{cookie}"
    );
    assert!(
        cookie.expires().is_some(),
        "the session cookie expires: {cookie}"
    );
    assert_eq!(b.path().await, "/registries");

    // --- Adds the cluster's registry, with its history database, in the form.
    b.add_registry(&world.zk_url, Some(&world.history_url))
        .await;
    b.shot("registries").await;
    let text = fs::read_to_string(&config).expect("the console's configuration");
    assert!(
        text.contains(&world.zk_url),
        "the registry is kept in the file: {text}"
    );

    // --- The jobs page lists both jobs, live.
    b.goto(&format!("/r/{REG}/jobs")).await;
    b.attr_is("#job-tick", "data-status", "OK").await;
    b.attr_is("#job-manual", "data-status", "OK").await;
    // manual never fired (once a year, not yet triggered): no fire done, whatever its items'
    // records were set up with.
    let manual = b.text("#job-manual").await;
    assert!(manual.contains("never"), "{manual}");
    b.shot("jobs").await;

    // --- The overview.
    b.goto(&format!("/r/{REG}/")).await;
    b.text("main").await;
    b.shot("overview").await;

    // --- A job: its sharding table, once both instances share it.
    b.goto(&format!("/r/{REG}/jobs/tick")).await;
    until("tick's four items on two instances", || async {
        let rows = b.count("#sharding tbody tr[id^=item-]").await;
        let instances = b.count("#instances tbody tr:not(.empty)").await;
        if rows == 4 && instances == 2 {
            Ok(())
        } else {
            Err(format!("{rows} items, {instances} instances"))
        }
    })
    .await;
    b.shot("job").await;

    // Disable item 1 with its button: the page comes back with it disabled.
    b.press(
        "#item-1 button[data-op=disable-item]",
        "item 1 disabled",
        || async {
            match b.status_of("#item-1").await? {
                s if s == "DISABLED" => Ok(()),
                other => Err(other),
            }
        },
    )
    .await;
    let flash = b.text("#flash").await;
    assert!(flash.to_lowercase().contains("item 1"), "{flash}");

    // Another client disables item 2: the open page shows it without a reload (the
    // registry's watch, then server-sent events).
    b.js(
        "window.__notReloaded = true;\
         window.__row2 = document.getElementById('item-2');\
         window.__button1 = document.querySelector('#item-1 button[data-op=enable-item]');",
        vec![],
    )
    .await;
    until("the page to be live", || async {
        let v = b
            .js(
                "return document.getElementById('live')?.textContent ?? '';",
                vec![],
            )
            .await;
        let s = v.as_str().unwrap_or_default().to_owned();
        if s.contains("live") && !s.contains("reconnecting") {
            Ok(())
        } else {
            Err(s)
        }
    })
    .await;
    world.cli(&["disable", "tick", "--item", "2"]);
    b.attr_is("#item-2", "data-status", "DISABLED").await;
    world.cli(&["enable", "tick", "--item", "2"]);
    until("item 2 enabled again, live", || async {
        match b.status_of("#item-2").await? {
            s if s != "DISABLED" => Ok(()),
            other => Err(other),
        }
    })
    .await;
    let same = b.js("return window.__notReloaded === true;", vec![]).await;
    assert_eq!(same, json!(true), "the table changed without a reload");
    // Updated in place: the row that changed and the button of the row beside it are the
    // same DOM nodes as before (a button a user is about to click does not move).
    let kept = b
        .js(
            "return [window.__row2 === document.getElementById('item-2'),\
                     window.__button1 !== null && window.__button1 ===\
                       document.querySelector('#item-1 button[data-op=enable-item]'),\
                     Number(document.body.dataset.updates || '0') > 0];",
            vec![],
        )
        .await;
    assert_eq!(
        kept,
        json!([true, true, true]),
        "live updates keep the rows' nodes"
    );
    b.shot("job-live").await;
    b.press(
        "#item-1 button[data-op=enable-item]",
        "item 1 enabled again",
        || async {
            match b.status_of("#item-1").await? {
                s if s != "DISABLED" => Ok(()),
                other => Err(other),
            }
        },
    )
    .await;

    // --- A bad cron: the error next to the field, nothing written.
    let before = world.cli(&["config", "get", "tick", "--json"]);
    b.fill("#f-cron", "every now and then").await;
    b.click("#save-config").await;
    let error = b.text("#error-cron").await;
    assert!(!error.trim().is_empty(), "the cron field's error is shown");
    b.attr_is("#f-cron", "aria-invalid", "true").await;
    let value = b
        .client
        .find(Locator::Css("#f-cron"))
        .await
        .expect("the cron field")
        .prop("value")
        .await
        .expect("its value");
    assert_eq!(
        value.as_deref(),
        Some("every now and then"),
        "what was typed is kept"
    );
    b.shot("job-config-error").await;
    let after = world.cli(&["config", "get", "tick", "--json"]);
    assert_eq!(before, after, "a refused form writes nothing");
    assert!(after.contains("*/2 * * * * ?"), "{after}");

    // --- Trigger with a parameter; the run is in the history.
    b.goto(&format!("/r/{REG}/jobs/manual")).await;
    b.fill("#trigger-parameter", "from-the-browser").await;
    b.click("#trigger").await;
    let flash = b.text("#flash").await;
    assert!(flash.to_lowercase().contains("trigger"), "{flash}");
    let history = format!("/r/{REG}/history?tab=executions&job=manual");
    b.goto(&history).await;
    until("the triggered run in the history", || async {
        let rows = b
            .client
            .find_all(Locator::Css("#executions tbody tr"))
            .await
            .map_err(|e| e.to_string())?;
        let mut seen = Vec::new();
        for r in rows {
            let t = r.text().await.map_err(|e| e.to_string())?;
            if t.contains("TRIGGER") && t.contains("SUCCESS") {
                return Ok(());
            }
            seen.push(t);
        }
        b.client.refresh().await.map_err(|e| e.to_string())?;
        Err(format!("{seen:?}"))
    })
    .await;
    b.shot("history").await;
    let ran = fs::read_to_string(&world.trigger_log).unwrap_or_default();
    assert!(
        ran.lines()
            .any(|l| l.contains("\"jobParameter\":\"from-the-browser\"")),
        "the script got the trigger's parameter: {ran}"
    );
    b.goto(&format!("/r/{REG}/history?tab=status&job=manual"))
        .await;
    until("the status trace of the triggered run", || async {
        let n = b.count("#statuses tbody tr").await;
        if n > 0 {
            Ok(())
        } else {
            b.client.refresh().await.map_err(|e| e.to_string())?;
            Err("no row".to_owned())
        }
    })
    .await;
    b.shot("history-status").await;

    // --- Servers, and a server.
    b.goto(&format!("/r/{REG}/servers")).await;
    b.text("main table").await;
    b.shot("servers").await;
    let server = until("a server's link", || async {
        let a = b
            .client
            .find(Locator::Css("main table tbody a"))
            .await
            .map_err(|e| e.to_string())?;
        a.attr("href")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "no href".to_owned())
    })
    .await;
    b.goto(&server).await;
    until("a server's page", || async {
        let p = b.path().await;
        if p.starts_with(&format!("/r/{REG}/servers/")) {
            Ok(())
        } else {
            Err(p)
        }
    })
    .await;
    b.text("main").await;
    b.shot("server").await;

    // --- A job of ElasticJob 3.0.4: read and operated.
    let _elasticjob = elasticjob_job(&world.zk_connect, "/console-browser").await;
    b.goto(&format!("/r/{REG}/jobs/settle304")).await;
    until("ElasticJob's job with its three items", || async {
        let n = b.count("#sharding tbody tr[id^=item-]").await;
        if n == 3 {
            Ok(())
        } else {
            b.client.refresh().await.map_err(|e| e.to_string())?;
            Err(format!("{n} items"))
        }
    })
    .await;
    let title = b.text("main h1").await;
    assert!(title.contains("ElasticJob 3.0.x"), "{title}");
    b.press(
        "#item-2 button[data-op=disable-item]",
        "item 2 of ElasticJob's job disabled",
        || async {
            match b.status_of("#item-2").await? {
                s if s == "DISABLED" => Ok(()),
                other => Err(other),
            }
        },
    )
    .await;
    b.shot("job-elasticjob").await;
    let status = world.cli(&["status", "settle304", "--json"]);
    assert!(status.contains("DISABLED"), "{status}");

    // --- Writes without the CSRF token are refused, by the form's route and by the API.
    b.goto(&format!("/r/{REG}/jobs/tick")).await;
    let form = "application/x-www-form-urlencoded";
    let (status, text) = b
        .post(&format!("/r/{REG}/op"), form, "op=disable&job=tick", None)
        .await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("CSRF"), "{text}");
    let (status, text) = b
        .post(
            &format!("/r/{REG}/op"),
            form,
            "op=disable&job=tick&csrf=guessed",
            None,
        )
        .await;
    assert_eq!(status, 403, "{text}");
    let (status, text) = b
        .post(
            &format!("/api/r/{REG}/ops"),
            "application/json",
            r#"{"op":"disable","job":"tick"}"#,
            None,
        )
        .await;
    assert_eq!(status, 403, "{text}");
    // The same write with the token goes through the guard (here: a harmless re-shard).
    let token = b.csrf().await;
    let (status, text) = b
        .post(
            &format!("/api/r/{REG}/ops"),
            "application/json",
            r#"{"op":"reshard","job":"tick"}"#,
            Some(&token),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    let jobs = world.cli(&["jobs", "--json"]);
    assert!(!jobs.contains("DISABLED"), "nothing was disabled: {jobs}");

    // --- Logging out ends the session.
    b.log_out().await;
    b.goto(&format!("/r/{REG}/jobs")).await;
    assert!(b.path().await.starts_with("/login"), "logged out");

    // --- A viewer sees no button, and the server refuses the viewer's writes.
    b.log_in(VIEWER.0, VIEWER.1).await;
    b.goto(&format!("/r/{REG}/jobs/tick")).await;
    b.text("#read-only").await;
    assert_eq!(b.count("#trigger").await, 0);
    assert_eq!(b.count("button[data-op]").await, 0);
    assert_eq!(b.count("#save-config").await, 0);
    b.shot("job-viewer").await;
    let token = b.csrf().await;
    let (status, text) = b
        .post(
            &format!("/r/{REG}/op"),
            form,
            &format!("op=disable&job=tick&csrf={token}"),
            None,
        )
        .await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("may only read"), "{text}");
    let (status, text) = b
        .post(
            &format!("/api/r/{REG}/ops"),
            "application/json",
            r#"{"op":"trigger","job":"manual"}"#,
            Some(&token),
        )
        .await;
    assert_eq!(status, 403, "{text}");
    let (status, text) = b
        .post(
            "/registries",
            form,
            &format!("action=remove&name={REG}&csrf={token}"),
            None,
        )
        .await;
    assert_eq!(status, 403, "{text}");
    let (status, text) = b
        .post(
            &format!("/r/{REG}/jobs/tick/config"),
            form,
            &format!("cron=0+*+*+*+*+%3F&csrf={token}"),
            None,
        )
        .await;
    assert_eq!(status, 403, "{text}");
    let jobs = world.cli(&["jobs", "--json"]);
    assert!(
        !jobs.contains("DISABLED"),
        "the viewer changed nothing: {jobs}"
    );
    assert!(
        fs::read_to_string(&config)
            .unwrap_or_default()
            .contains(&world.zk_url)
    );
    b.log_out().await;

    // --- The audit log names who did what, and what was refused.
    let log = fs::read_to_string(dir.join("console.stderr")).unwrap_or_default();
    assert!(log.contains("write refused: no valid CSRF token"), "{log}");
    assert!(log.contains("write refused: role viewer"), "{log}");
    assert!(log.contains("login refused"), "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("disable item 1 of job tick") && l.contains("user=ada")),
        "{log}"
    );

    // --- Everything stops cleanly.
    console.check_alive();
    for i in &mut world.instances {
        i.check_alive();
    }
    let Browser {
        client, mut driver, ..
    } = b;
    let _ = client.close().await;
    driver.stop();
    assert!(console.stop(), "the console exits with success on SIGTERM");
    for i in &mut world.instances {
        i.stop();
    }
}

fn median(mut d: Vec<f64>) -> f64 {
    d.sort_by(f64::total_cmp);
    d[d.len() / 2]
}

/// Benchmark: the console's jobs page over a ZooKeeper namespace of 1,000 jobs (10 items each,
/// two instances), and a job's page, as Chromium loads them (goals of issue #26: ≤ 1 s and
/// ≤ 200 ms). Prints medians of the browser's own navigation timing; asserts only what the
/// pages hold. `shardjob-console`'s `bench_zk` measures the same pages over plain HTTP.
///
/// ```text
/// cargo test -p shardjob-cli --features zk --test console_browser -- --ignored --nocapture
/// ```
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: 1,000 jobs in a ZooKeeper of its own, loaded in Chromium"]
async fn a_thousand_jobs_in_the_browser() {
    const JOBS: usize = 1_000;
    const ITEMS: u32 = 10;
    const ROUNDS: usize = 11;
    let zk = Cluster::zookeeper(1).unwrap_or_else(|e| panic!("ZooKeeper: {e}"));
    let connect = |ns: &str| {
        ZkConfig::new(zk.connect_string())
            .namespace(ns.to_owned())
            .session_timeout(Duration::from_secs(30))
            .request_timeout(Duration::from_secs(30))
    };
    let writer = ZkRegistry::connect(connect("/bench"))
        .await
        .expect("ZooKeeper");
    let session = ZkRegistry::connect(connect("/bench"))
        .await
        .expect("ZooKeeper");
    let a = InstanceId::new("10.1.0.1@-@1").expect("an instance id");
    let b_id = InstanceId::new("10.1.0.2@-@2").expect("an instance id");
    let cron = shardjob_core::CronExpr::parse("0 * * * * ?").expect("a cron");
    for j in 0..JOBS {
        let name = format!("job-{j:05}");
        let job = JobPaths::new(&name).expect("a job name");
        let config = shardjob_core::JobConfig::new(name.as_str(), ITEMS).with_cron(cron.clone());
        let mut ops = vec![
            TxnOp::create(job.root().clone(), "SIMPLE"),
            TxnOp::create(job.config(), config.to_yaml()),
            TxnOp::create(job.servers(), ""),
            TxnOp::create(job.server_of(&a), "ENABLED"),
            TxnOp::create(job.server_of(&b_id), "ENABLED"),
            TxnOp::create(job.sharding(), ""),
        ];
        for item in 0..ITEMS {
            let owner = if item % 2 == 0 { &a } else { &b_id };
            ops.push(TxnOp::create(job.item(item), ""));
            ops.push(TxnOp::create(job.item_instance(item), owner.as_str()));
        }
        writer.transact(ops).await.expect("a job written");
        let mut ephemeral = Vec::new();
        for id in [&a, &b_id] {
            ephemeral.push(TxnOp::create_ephemeral(
                job.instance(id),
                format!("jobInstanceId: {id}\nserverIp: {}\n", id.server_ip()),
            ));
        }
        ephemeral.push(TxnOp::create_ephemeral(job.leader_instance(), a.as_str()));
        for parent in [job.instances(), job.leader_election()] {
            writer.ensure_path(&parent).await.expect("a parent");
        }
        session
            .transact(ephemeral)
            .await
            .expect("instances written");
    }

    let dir = tempfile::tempdir().expect("a directory");
    let (_console, base, _config) = start_console(dir.path());
    let b = Browser::start(dir.path(), &base).await;
    b.log_in(ADMIN.0, ADMIN.1).await;
    b.add_registry(&format!("zk://{}/bench", zk.connect_string()), None)
        .await;

    // The browser's own figures of one navigation: the server's answer (request to last byte),
    // the document parsed (domInteractive), its script's start-up done (DOMContentLoaded's
    // handlers), the page loaded (style sheet, script, icon).
    const TIMING: &str = "const n = performance.getEntriesByType('navigation')[0];\
        return [n.responseEnd - n.requestStart, n.domInteractive - n.startTime, n.domContentLoadedEventEnd - n.startTime, n.loadEventEnd - n.startTime];";
    async fn timed(b: &Browser, path: &str, rows: &str, want: usize) -> [f64; 4] {
        b.goto(path).await;
        let n = b.count(rows).await;
        assert_eq!(n, want, "{path}: {rows}");
        let t = b.js(TIMING, vec![]).await;
        [0, 1, 2, 3].map(|i| t[i].as_f64().unwrap_or(f64::NAN))
    }
    until("the 1,000 jobs listed", || async {
        b.goto(&format!("/r/{REG}/jobs")).await;
        let n = b.count("#jobs-body tr[id^=job-]").await;
        if n == JOBS {
            Ok(())
        } else {
            Err(format!("{n} jobs"))
        }
    })
    .await;
    let mut list: [Vec<f64>; 4] = Default::default();
    for _ in 0..ROUNDS {
        let t = timed(
            &b,
            &format!("/r/{REG}/jobs"),
            "#jobs-body tr[id^=job-]",
            JOBS,
        )
        .await;
        for i in 0..4 {
            list[i].push(t[i]);
        }
    }
    let mut one: [Vec<f64>; 4] = Default::default();
    for round in 0..ROUNDS {
        let name = format!("job-{:05}", round * 37 % JOBS);
        let t = timed(
            &b,
            &format!("/r/{REG}/jobs/{name}"),
            "#sharding tbody tr[id^=item-]",
            ITEMS as usize,
        )
        .await;
        for i in 0..4 {
            one[i].push(t[i]);
        }
    }
    b.shot("jobs-1000").await;
    for (what, d) in [
        ("jobs page, 1,000 jobs", &list),
        ("a job's page, 10 items", &one),
    ] {
        println!(
            "{what} (medians of {ROUNDS} loads in Chromium, from the navigation's start): answer {:.1} ms, parsed {:.1} ms, DOMContentLoaded done {:.1} ms, loaded {:.1} ms",
            median(d[0].clone()),
            median(d[1].clone()),
            median(d[2].clone()),
            median(d[3].clone())
        );
    }
    let Browser {
        client, mut driver, ..
    } = b;
    let _ = client.close().await;
    driver.stop();
}
