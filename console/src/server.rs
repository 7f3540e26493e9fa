//! The HTTP server: its state, its routes, the guard every request passes (session, CSRF
//! token, role), the login and logout, the registries page.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use crate::auth::{self, Session, Sessions};
use crate::config::{ConsoleConfig, RegistryEntry, Role};
use crate::html::{self, Frame, Nav, esc};
use crate::hub::Hub;

/// The console's shared state.
pub struct App {
    /// The configuration file.
    pub config_path: PathBuf,
    /// The configuration as last read or written.
    pub config: Mutex<ConsoleConfig>,
    /// The registries.
    pub hub: Hub,
    /// The sessions.
    pub sessions: Sessions,
}

/// The state handlers get.
pub type AppState = Arc<App>;

/// Why the console does not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration cannot be read or used.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// No user can log in.
    #[error(
        "{path} has no user: nobody could log in. Add one first:\n  shardjob console --config {path} --add-user NAME --role admin\n(it asks for the password; there is no default user or password)"
    )]
    NoUser {
        /// The configuration file.
        path: String,
    },
    /// The address cannot be listened on.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The server failed.
    #[error("the console's server failed: {0}")]
    Serve(std::io::Error),
}

impl App {
    /// Reads the configuration and starts following its registries. Refuses a configuration
    /// without users.
    pub fn start(config_path: PathBuf) -> Result<Arc<App>, ServeError> {
        let config = ConsoleConfig::load(&config_path)?;
        if config.users.is_empty() {
            return Err(ServeError::NoUser {
                path: config_path.display().to_string(),
            });
        }
        let hub = Hub::start(&config.registries)?;
        Ok(Arc::new(App {
            config_path,
            config: Mutex::new(config),
            hub,
            sessions: Sessions::default(),
        }))
    }

    /// The configuration now.
    pub fn config(&self) -> ConsoleConfig {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn session_ttl(&self) -> Duration {
        Duration::from_secs(u64::from(self.config().session_hours) * 3600)
    }

    fn secure_cookie(&self) -> bool {
        self.config().secure_cookie
    }

    /// The frame of a page for a session.
    pub fn frame<'a>(
        &self,
        session: &'a Session,
        title: &'a str,
        registry: Option<&'a str>,
        nav: Nav,
    ) -> Frame<'a> {
        let registries = self
            .hub
            .all()
            .iter()
            .map(|l| (l.name().to_owned(), l.state().label()))
            .collect();
        let warning = registry
            .and_then(|r| self.hub.get(r).ok())
            .and_then(|l| match l.state() {
                crate::hub::LinkState::Down(cause) => Some(format!(
                    "Registry {} ({}) is unreachable: {cause}. What is shown may be out of date; \
                     operations fail until it is back.",
                    l.name(),
                    l.url
                )),
                _ => None,
            });
        Frame {
            title,
            registry,
            registries,
            nav,
            user: Some((&session.user, session.role.as_str())),
            csrf: Some(&session.csrf),
            flash: self.sessions.take_flash(&session.id),
            events: None,
            warning,
        }
    }
}

/// Builds the router.
pub fn router(app: AppState) -> Router {
    let guarded = Router::new()
        .route("/", get(home))
        .route("/logout", post(logout))
        .route("/registries", get(registries_page).post(registries_post))
        .merge(crate::pages::routes())
        .merge(crate::api::routes())
        .layer(middleware::from_fn_with_state(Arc::clone(&app), guard));
    Router::new()
        .route("/login", get(login_page).post(login_post))
        .route("/api/login", post(crate::api::login))
        .route("/assets/{file}", get(crate::assets::serve))
        .route("/healthz", get(|| async { "ok" }))
        .merge(guarded)
        .with_state(app)
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    app: AppState,
    listen: SocketAddr,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    bound: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: listen.to_string(),
            source,
        })?;
    let addr = listener.local_addr().map_err(ServeError::Serve)?;
    bound(addr);
    let result = axum::serve(listener, router(Arc::clone(&app)))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(ServeError::Serve);
    app.hub.stop().await;
    result
}

/// Whether a request only reads.
fn is_read(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The largest form or JSON body accepted.
const MAX_BODY: usize = 1 << 20;

/// A page or JSON answer for an error, by the request's path.
pub fn refuse(api: bool, status: StatusCode, text: &str) -> Response {
    if api {
        (
            status,
            axum::Json(serde_json::json!({"error": text, "status": status.as_u16()})),
        )
            .into_response()
    } else {
        let frame = Frame {
            title: "Refused",
            registry: None,
            registries: Vec::new(),
            nav: Nav::None,
            user: None,
            csrf: None,
            flash: None,
            events: None,
            warning: None,
        };
        let body = format!(
            "<section class=\"card\"><h1>{} {}</h1><p id=\"refusal\">{}</p>\
             <p><a href=\"javascript:history.back()\">Back</a> · <a href=\"/\">Home</a></p></section>",
            status.as_u16(),
            esc(status.canonical_reason().unwrap_or("")),
            esc(text)
        );
        (status, Html(html::page(&frame, &body))).into_response()
    }
}

/// Every guarded request: a live session (else the login page, or 401 for the API); every
/// write: the session's CSRF token (a header or the form's field), and the admin role
/// (except logging out). Writes are logged with who did what, and how it went.
async fn guard(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    let api = path.starts_with("/api/");
    let method = request.method().clone();
    let session = request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(auth::cookie_value)
        .and_then(|id| app.sessions.get(id));
    let Some(session) = session else {
        if api {
            return refuse(
                true,
                StatusCode::UNAUTHORIZED,
                "log in first: POST /api/login",
            );
        }
        if is_read(&method) {
            let next = request
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_else(|| "/".to_owned());
            return Redirect::to(&format!("/login?next={}", html::query_value(&next)))
                .into_response();
        }
        return refuse(
            false,
            StatusCode::UNAUTHORIZED,
            "Your session has ended: log in again.",
        );
    };
    if is_read(&method) {
        let mut request = request;
        request.extensions_mut().insert(session);
        return next.run(request).await;
    }

    // A write: the CSRF token first, then the role.
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => {
            return refuse(
                api,
                StatusCode::PAYLOAD_TOO_LARGE,
                "the request is too large",
            );
        }
    };
    let header_token = parts
        .headers
        .get(auth::CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let form_token = is_form(&parts.headers)
        .then(|| {
            html::form_pairs(&bytes)
                .into_iter()
                .find(|(k, _)| k == auth::CSRF_FIELD)
                .map(|(_, v)| v)
        })
        .flatten();
    let token_ok = header_token
        .or(form_token)
        .is_some_and(|t| auth::same_secret(&t, &session.csrf));
    let who = format!("{} ({})", session.user, session.role.as_str());
    if !token_ok {
        tracing::warn!(target: "shardjob_console::audit", user = %session.user, %method, %path,
            "write refused: no valid CSRF token");
        return refuse(
            api,
            StatusCode::FORBIDDEN,
            "refused: the request carries no valid CSRF token (reload the page and try again)",
        );
    }
    let logout = path == "/logout" || path == "/api/logout";
    if !logout && !session.role.can_write() {
        tracing::warn!(target: "shardjob_console::audit", user = %session.user, %method, %path,
            "write refused: role viewer");
        return refuse(
            api,
            StatusCode::FORBIDDEN,
            &format!("refused: {who} may only read; operations need the admin role"),
        );
    }
    let user = session.user.clone();
    let mut request = Request::from_parts(parts, Body::from(bytes));
    request.extensions_mut().insert(session);
    let response = next.run(request).await;
    let status = response.status();
    if status.is_success() || status.is_redirection() {
        tracing::info!(target: "shardjob_console::audit", %user, %method, %path,
            status = status.as_u16(), "write");
    } else {
        tracing::warn!(target: "shardjob_console::audit", %user, %method, %path,
            status = status.as_u16(), "write failed");
    }
    response
}

fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
}

/// The fields of a posted form, by name (the last wins).
pub fn fields(body: &Bytes) -> BTreeMap<String, String> {
    html::form_pairs(body).into_iter().collect()
}

async fn home(State(app): State<AppState>) -> Response {
    match app.hub.all().first() {
        Some(l) => Redirect::to(&format!("/r/{}/", html::seg(l.name()))).into_response(),
        None => Redirect::to("/registries").into_response(),
    }
}

#[derive(serde::Deserialize)]
struct NextQuery {
    next: Option<String>,
}

/// Only paths of this site are followed after a login.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.to_owned(),
        _ => "/".to_owned(),
    }
}

fn login_form(next: &str, user: &str, error: Option<&str>) -> String {
    let frame = Frame {
        title: "Log in",
        registry: None,
        registries: Vec::new(),
        nav: Nav::None,
        user: None,
        csrf: None,
        flash: error.map(|e| (false, e.to_owned())),
        events: None,
        warning: None,
    };
    let body = format!(
        "<section class=\"card login\"><h1>Log in</h1>\
         <form method=\"post\" action=\"/login\" id=\"login-form\">\
         <input type=\"hidden\" name=\"next\" value=\"{}\">\
         <label>User <input name=\"user\" id=\"user\" autocomplete=\"username\" value=\"{}\" required autofocus></label>\
         <label>Password <input name=\"password\" id=\"password\" type=\"password\" autocomplete=\"current-password\" required></label>\
         <button type=\"submit\" id=\"login\">Log in</button></form>\
         <p class=\"muted\">Users are kept in the console's configuration file; add one with \
         <code>shardjob console --add-user NAME --role admin|viewer</code>.</p></section>",
        esc(next),
        esc(user)
    );
    html::page(&frame, &body)
}

async fn login_page(Query(q): Query<NextQuery>) -> Html<String> {
    Html(login_form(&safe_next(q.next.as_deref()), "", None))
}

/// Checks a user's password; the session it opens, or why not.
pub async fn check_login(app: &App, user: &str, password: &str) -> Result<Session, String> {
    if let Some(left) = app.sessions.locked(user) {
        tracing::warn!(target: "shardjob_console::audit", %user, "login refused: locked");
        return Err(format!(
            "Too many failed logins for this user: try again in {} s.",
            left.as_secs().max(1)
        ));
    }
    let entry = app.config().users.get(user).cloned();
    let given = password.to_owned();
    let ok = tokio::task::spawn_blocking(move || match &entry {
        Some(e) => crate::users::verify_password(&given, &e.password_hash).then_some(e.role),
        None => {
            crate::users::verify_nobody(&given);
            None
        }
    })
    .await
    .ok()
    .flatten();
    let Some(role) = ok else {
        app.sessions.failed(user);
        tracing::warn!(target: "shardjob_console::audit", %user, "login refused: wrong user name or password");
        return Err("Wrong user name or password.".to_owned());
    };
    app.sessions.succeeded(user);
    let session = app
        .sessions
        .create(user, role, app.session_ttl())
        .map_err(|e| format!("cannot open a session: {e}"))?;
    tracing::info!(target: "shardjob_console::audit", %user, role = role.as_str(), "logged in");
    Ok(session)
}

/// The `Set-Cookie` header of a session.
pub fn cookie_header(app: &App, session: &Session) -> HeaderValue {
    HeaderValue::from_str(&auth::session_cookie(
        &session.id,
        app.session_ttl(),
        app.secure_cookie(),
    ))
    .unwrap_or_else(|_| HeaderValue::from_static(""))
}

async fn login_post(State(app): State<AppState>, body: Bytes) -> Response {
    let f = fields(&body);
    let user = f.get("user").cloned().unwrap_or_default();
    let password = f.get("password").cloned().unwrap_or_default();
    let next = safe_next(f.get("next").map(String::as_str));
    match check_login(&app, user.trim(), &password).await {
        Ok(session) => {
            let mut r = Redirect::to(&next).into_response();
            r.headers_mut()
                .insert(header::SET_COOKIE, cookie_header(&app, &session));
            r
        }
        Err(e) => (
            StatusCode::UNAUTHORIZED,
            Html(login_form(&next, &user, Some(&e))),
        )
            .into_response(),
    }
}

async fn logout(
    State(app): State<AppState>,
    axum::Extension(session): axum::Extension<Session>,
) -> Response {
    app.sessions.remove(&session.id);
    tracing::info!(target: "shardjob_console::audit", user = %session.user, "logged out");
    let mut r = Redirect::to("/login").into_response();
    if let Ok(v) = HeaderValue::from_str(&auth::clear_cookie(app.secure_cookie())) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

fn registries_body(
    app: &App,
    session: &Session,
    form: &RegistryEntry,
    error: Option<&str>,
) -> String {
    let admin = session.role == Role::Admin;
    let mut h = String::from(
        "<section class=\"card\"><h1>Registries</h1><table class=\"grid\" id=\"registries\">\
         <thead><tr><th>Name</th><th>URL</th><th>Link</th><th>Jobs</th><th>Nodes</th><th>History</th><th>Last read</th><th></th></tr></thead><tbody>",
    );
    for live in app.hub.all() {
        let (jobs, nodes) = live
            .read_now(|v| (v.jobs().len(), v.node_count()))
            .unwrap_or((0, 0));
        let state = live.state();
        let load = live
            .last_load
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|(at, ms)| format!("{} ({ms} ms)", html::time_ms(Some(at.timestamp_millis()))))
            .unwrap_or_default();
        let name = live.name();
        h.push_str(&format!(
            "<tr id=\"registry-{}\"><td><a href=\"/r/{}/\">{}</a></td><td><code>{}</code></td>\
             <td>{}{}</td><td>{jobs}</td><td>{nodes}</td><td>{}</td><td>{load}</td><td>",
            esc(name),
            html::seg(name),
            esc(name),
            esc(&live.url.to_string()),
            html::badge(state.label()),
            match &state {
                crate::hub::LinkState::Down(c) => format!(" <small>{}</small>", esc(c)),
                _ => String::new(),
            },
            if live.history.is_some() { "yes" } else { "–" },
        ));
        if admin {
            h.push_str(&format!(
                "<form method=\"post\" action=\"/registries\" data-confirm=\"Stop showing registry {0}? (The registry itself is not touched.)\">{1}\
                 <input type=\"hidden\" name=\"action\" value=\"remove\"><input type=\"hidden\" name=\"name\" value=\"{0}\">\
                 <button class=\"danger\" type=\"submit\">Remove</button></form>",
                esc(name),
                html::csrf_field(&session.csrf)
            ));
        }
        h.push_str("</td></tr>");
    }
    h.push_str("</tbody></table></section>");
    if admin {
        h.push_str(&format!(
            "<section class=\"card\"><h2>Add a registry</h2>{}\
             <form method=\"post\" action=\"/registries\" class=\"grid-form\" id=\"add-registry\">{}\
             <input type=\"hidden\" name=\"action\" value=\"add\">\
             <label>Name <input name=\"name\" value=\"{}\" required pattern=\"[A-Za-z0-9._-]+\"></label>\
             <label>URL <input name=\"url\" value=\"{}\" required placeholder=\"zk://host:2181/namespace · etcd://host:2379/namespace · mem://\"></label>\
             <label>User (ZooKeeper digest / etcd) <input name=\"user\" value=\"{}\" autocomplete=\"off\"></label>\
             <label>Password <input name=\"password\" type=\"password\" autocomplete=\"new-password\"></label>\
             <label>History database (optional) <input name=\"history\" value=\"{}\" placeholder=\"sqlite:///var/lib/jobs.db · postgres://… · mysql://…\"></label>\
             <button type=\"submit\">Add</button></form>\
             <p class=\"muted\">Kept in {}. <code>mem://</code> starts a demo: a few jobs that run inside the console.</p></section>",
            error
                .map(|e| format!("<p class=\"field-error\" id=\"registry-error\">{}</p>", esc(e)))
                .unwrap_or_default(),
            html::csrf_field(&session.csrf),
            esc(&form.name),
            esc(&form.url),
            esc(form.user.as_deref().unwrap_or("")),
            esc(form.history.as_deref().unwrap_or("")),
            esc(&app.config_path.display().to_string()),
        ));
    }
    h
}

async fn registries_page(
    State(app): State<AppState>,
    axum::Extension(session): axum::Extension<Session>,
) -> Html<String> {
    let empty = RegistryEntry {
        name: String::new(),
        url: String::new(),
        user: None,
        password: None,
        history: None,
    };
    let body = registries_body(&app, &session, &empty, None);
    let frame = app.frame(&session, "Registries", None, Nav::Registries);
    Html(html::page(&frame, &body))
}

/// Adds a registry to the file and starts following it.
pub async fn add_registry(app: &App, entry: RegistryEntry) -> Result<(), String> {
    entry.check().map_err(|e| e.to_string())?;
    {
        let mut config = app.config.lock().unwrap_or_else(|e| e.into_inner());
        if config.registry(&entry.name).is_some() {
            return Err(format!("a registry named {:?} exists already", entry.name));
        }
        let mut new = config.clone();
        new.registries.push(entry.clone());
        new.save(&app.config_path).map_err(|e| e.to_string())?;
        *config = new;
    }
    app.hub.add(entry).map_err(|e| e.to_string())?;
    Ok(())
}

/// Removes a registry from the file and stops following it.
pub async fn remove_registry(app: &App, name: &str) -> Result<(), String> {
    {
        let mut config = app.config.lock().unwrap_or_else(|e| e.into_inner());
        if config.registry(name).is_none() {
            return Err(format!("no registry named {name:?}"));
        }
        let mut new = config.clone();
        new.registries.retain(|r| r.name != name);
        new.save(&app.config_path).map_err(|e| e.to_string())?;
        *config = new;
    }
    app.hub.remove(name).await;
    Ok(())
}

async fn registries_post(
    State(app): State<AppState>,
    axum::Extension(session): axum::Extension<Session>,
    body: Bytes,
) -> Response {
    let f = fields(&body);
    let get = |k: &str| {
        f.get(k)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let name = get("name").unwrap_or_default();
    match get("action").as_deref() {
        Some("remove") => match remove_registry(&app, &name).await {
            Ok(()) => {
                tracing::info!(target: "shardjob_console::audit", user = %session.user, registry = %name, "registry removed");
                app.sessions
                    .flash(&session.id, true, format!("Registry {name} removed"));
            }
            Err(e) => app.sessions.flash(&session.id, false, e),
        },
        Some("add") => {
            let entry = RegistryEntry {
                name: name.clone(),
                url: get("url").unwrap_or_default(),
                user: get("user"),
                password: f.get("password").cloned().filter(|p| !p.is_empty()),
                history: get("history"),
            };
            if let Err(e) = add_registry(&app, entry.clone()).await {
                let body = registries_body(&app, &session, &entry, Some(&e));
                let frame = app.frame(&session, "Registries", None, Nav::Registries);
                return (StatusCode::BAD_REQUEST, Html(html::page(&frame, &body))).into_response();
            }
            tracing::info!(target: "shardjob_console::audit", user = %session.user, registry = %name, url = %entry.url, "registry added");
            app.sessions
                .flash(&session.id, true, format!("Registry {name} added"));
        }
        _ => app
            .sessions
            .flash(&session.id, false, "unknown registry action".to_owned()),
    }
    Redirect::to("/registries").into_response()
}

/// The registry of a path, or the page that says it is unknown.
// The error is the answer itself, which the handler returns at once (axum's way).
#[allow(clippy::result_large_err)]
pub fn registry_of(app: &App, name: &str, api: bool) -> Result<Arc<crate::hub::Live>, Response> {
    app.hub
        .get(name)
        .map_err(|e| refuse(api, StatusCode::NOT_FOUND, &e.to_string()))
}

/// `Path` of one registry.
pub type RegPath = Path<String>;
