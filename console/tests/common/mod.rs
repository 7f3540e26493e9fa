//! What the console's HTTP tests share: the console in this process on a port of its own,
//! with an admin and a viewer, its audit log caught, and clients logged in as each.
#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use shardjob_console::{App, Role};

/// How long a condition is waited for (a loaded machine of two cores).
pub const WAIT: Duration = Duration::from_secs(60);

pub const ADMIN: (&str, &str) = ("ada", "a long admin password");
pub const VIEWER: (&str, &str) = ("vic", "a long viewer password");

/// Everything the process logged (the audit log among it).
static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Starts catching the log (once per test binary).
pub fn catch_log() {
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = Sink(Arc::clone(&buf));
        let _ = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_env_filter("info")
            .with_writer(move || sink.clone())
            .try_init();
        buf
    });
}

/// The log's lines so far.
pub fn log() -> String {
    LOG.get()
        .map(|b| String::from_utf8_lossy(&b.lock().unwrap_or_else(|e| e.into_inner())).into_owned())
        .unwrap_or_default()
}

/// Waits until the log has a line with every one of `words`.
pub async fn audit(words: &[&str]) {
    until(&format!("an audit line with {words:?}"), || async {
        let log = log();
        log.lines()
            .find(|l| l.contains("shardjob_console::audit") && words.iter().all(|w| l.contains(w)))
            .map(|_| ())
            .ok_or_else(|| "no such line".to_owned())
    })
    .await
}

/// Polls `probe` until it gives `Ok`, for up to [`WAIT`]; panics with what it last saw.
pub async fn until<T, F, Fut>(what: &str, mut probe: F) -> T
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

/// The console, serving on 127.0.0.1.
pub struct Console {
    pub app: Arc<App>,
    pub base: String,
    pub config: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<Result<(), shardjob_console::ServeError>>>,
    _dir: tempfile::TempDir,
}

impl Console {
    /// Starts a console with an admin and a viewer and no registry.
    pub async fn start() -> Console {
        catch_log();
        let dir = tempfile::tempdir().expect("a directory");
        let config = dir.path().join("console.yaml");
        shardjob_console::add_user(&config, ADMIN.0, Role::Admin, ADMIN.1).expect("the admin");
        shardjob_console::add_user(&config, VIEWER.0, Role::Viewer, VIEWER.1).expect("the viewer");
        let app = App::start(config.clone()).expect("the console starts");
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(shardjob_console::serve(
            Arc::clone(&app),
            "127.0.0.1:0".parse().expect("an address"),
            async move {
                let _ = stop_rx.await;
            },
            move |addr| {
                let _ = addr_tx.send(addr);
            },
        ));
        let base = format!("http://{}", addr_rx.await.expect("the console listens"));
        Console {
            app,
            base,
            config,
            stop: Some(stop_tx),
            server: Some(server),
            _dir: dir,
        }
    }

    /// A client logged in as `user`.
    pub async fn client(&self, user: (&str, &str)) -> Client {
        let http = reqwest::Client::builder()
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("a client");
        let r = http
            .post(format!("{}/api/login", self.base))
            .json(&json!({"user": user.0, "password": user.1}))
            .send()
            .await
            .expect("an answer");
        assert!(r.status().is_success(), "login of {}: {r:?}", user.0);
        let me: Value = r.json().await.expect("JSON");
        Client {
            http,
            base: self.base.clone(),
            csrf: me["csrf_token"].as_str().expect("a token").to_owned(),
        }
    }

    /// The configuration file's text.
    pub fn file(&self) -> String {
        std::fs::read_to_string(&self.config).expect("the configuration file")
    }

    /// Stops the server and every registry's task.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(s) = self.server.take() {
            let r = tokio::time::timeout(WAIT, s).await;
            assert!(matches!(r, Ok(Ok(Ok(())))), "the console stops cleanly");
        }
    }
}

/// A logged-in client.
pub struct Client {
    pub http: reqwest::Client,
    pub base: String,
    pub csrf: String,
}

impl Client {
    /// GET: the status and the text.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("an answer");
        (r.status().as_u16(), r.text().await.expect("a body"))
    }

    /// GET of JSON that must succeed.
    pub async fn json(&self, path: &str) -> Value {
        let (status, text) = self.get(path).await;
        assert_eq!(status, 200, "GET {path}: {text}");
        serde_json::from_str(&text).expect("JSON")
    }

    /// POSTs a page's form (with the session's CSRF token, as the page's forms carry it):
    /// the status and the text.
    pub async fn form(&self, path: &str, fields: &[(&str, &str)]) -> (u16, String) {
        let mut all: Vec<(&str, &str)> = fields.to_vec();
        all.push(("csrf", &self.csrf));
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .form(&all)
            .send()
            .await
            .expect("an answer");
        (r.status().as_u16(), r.text().await.expect("a body"))
    }

    /// POSTs JSON to the API with the CSRF header.
    pub async fn api_post(&self, path: &str, body: Value) -> (u16, String) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .header("X-CSRF-Token", &self.csrf)
            .json(&body)
            .send()
            .await
            .expect("an answer");
        (r.status().as_u16(), r.text().await.expect("a body"))
    }

    /// The message the last write left for the next page (its flash).
    pub async fn flash(&self, page: &str) -> String {
        let (_, text) = self.get(page).await;
        text.split("id=\"flash\"")
            .nth(1)
            .and_then(|r| r.split("</").next())
            .unwrap_or_default()
            .to_owned()
    }

    /// A registry's state on `GET /api/registries` (`None`: not listed).
    pub async fn registry(&self, name: &str) -> Option<Value> {
        let list = self.json("/api/registries").await;
        list.as_array()
            .expect("a list")
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
    }

    /// Waits until registry `name` is in state `state` and returns its entry.
    pub async fn registry_in(&self, name: &str, state: &str) -> Value {
        until(&format!("registry {name} {state}"), || async {
            match self.registry(name).await {
                Some(r) if r["state"] == state => Ok(r),
                other => Err(format!("{other:?}")),
            }
        })
        .await
    }

    /// Adds a registry with the registries page's form.
    pub async fn add_registry(
        &self,
        name: &str,
        url: &str,
        user: &str,
        password: &str,
    ) -> (u16, String) {
        self.form(
            "/registries",
            &[
                ("action", "add"),
                ("name", name),
                ("url", url),
                ("user", user),
                ("password", password),
            ],
        )
        .await
    }
}

/// A path under a directory, for messages.
pub fn show(p: &Path) -> String {
    p.display().to_string()
}
