//! The JSON API under `/api`: the same data and operations as the pages, for scripts.
//!
//! Log in with `POST /api/login` (`{"user": …, "password": …}`): the answer sets the session
//! cookie and gives the CSRF token, which every write carries in the `X-CSRF-Token` header.
//! Reads need the cookie; writes need the admin role too. Errors are
//! `{"error": "…", "status": N}` with the HTTP status: 400 bad input, 401 not logged in, 403
//! refused, 404 not found, 409 changed meanwhile, 503 registry unreachable.
//!
//! | method and path | what |
//! |---|---|
//! | `GET /api/me` | the user, role and CSRF token |
//! | `GET /api/registries` | the registries and their link state |
//! | `GET /api/r/{reg}/jobs` | every job: status, cron, items, instances, next fire |
//! | `GET /api/r/{reg}/jobs/{job}` | one job: items, instances, leader, runs |
//! | `GET /api/r/{reg}/jobs/{job}/config` | its configuration: `yaml`, `version` |
//! | `PUT /api/r/{reg}/jobs/{job}/config` | `{"yaml", "version"}`: replace it (validated, compare-and-set) |
//! | `GET /api/r/{reg}/servers`, `…/servers/{ip}` | the servers, a server's jobs |
//! | `POST /api/r/{reg}/ops` | an operation: `{"op": "trigger", "job": …, "parameter": …}`, `disable`, `enable`, `shutdown`, `remove` (`job` and/or `server`), `remove-job`, `reshard`, `disable-item`, `enable-item` (`job`, `item`) |
//! | `GET /api/r/{reg}/history/executions?…` | the execution log (the history page's filters) |
//! | `GET /api/r/{reg}/history/statuses?…` | the status trace |
//! | `POST /api/logout` | ends the session |

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;
use shardjob_core::registry::Version;
use shardjob_ops::Ops;

use crate::actions::{Action, ActionError};
use crate::auth::Session;
use crate::pages::HistoryQuery;
use crate::server::{AppState, check_login, cookie_header, refuse, registry_of};

/// The API's routes (behind the guard).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/me", get(me))
        .route("/api/logout", post(logout))
        .route("/api/registries", get(registries))
        .route("/api/r/{reg}/jobs", get(jobs))
        .route("/api/r/{reg}/jobs/{job}", get(job))
        .route(
            "/api/r/{reg}/jobs/{job}/config",
            get(config_get).put(config_put),
        )
        .route("/api/r/{reg}/servers", get(servers))
        .route("/api/r/{reg}/servers/{ip}", get(server))
        .route("/api/r/{reg}/ops", post(op))
        .route("/api/r/{reg}/history/executions", get(executions))
        .route("/api/r/{reg}/history/statuses", get(statuses))
}

fn error(status: u16, text: &str) -> Response {
    refuse(
        true,
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        text,
    )
}

fn action_error(e: &ActionError) -> Response {
    error(e.status(), &e.to_string())
}

#[derive(Deserialize)]
struct Login {
    user: String,
    password: String,
}

/// `POST /api/login`.
pub async fn login(State(app): State<AppState>, body: Bytes) -> Response {
    let Ok(login) = serde_json::from_slice::<Login>(&body) else {
        return error(400, "expected {\"user\": …, \"password\": …}");
    };
    match check_login(&app, login.user.trim(), &login.password).await {
        Ok(session) => {
            let mut r = Json(json!({
                "user": session.user,
                "role": session.role.as_str(),
                "csrf_token": session.csrf,
            }))
            .into_response();
            r.headers_mut()
                .insert(header::SET_COOKIE, cookie_header(&app, &session));
            r
        }
        Err(e) => error(401, &e),
    }
}

async fn me(axum::Extension(session): axum::Extension<Session>) -> Response {
    Json(json!({"user": session.user, "role": session.role.as_str(), "csrf_token": session.csrf}))
        .into_response()
}

async fn logout(
    State(app): State<AppState>,
    axum::Extension(session): axum::Extension<Session>,
) -> Response {
    app.sessions.remove(&session.id);
    Json(json!({"logged_out": session.user})).into_response()
}

async fn registries(State(app): State<AppState>) -> Response {
    let list: Vec<_> = app
        .hub
        .all()
        .iter()
        .map(|l| {
            let state = l.state();
            json!({
                "name": l.name(),
                "url": l.url.to_string(),
                "state": state.label(),
                "problem": match state { crate::hub::LinkState::Down(c) => Some(c), _ => None },
                "jobs": l.read_now(|v| v.jobs().len()),
                "history": l.history.is_some(),
            })
        })
        .collect();
    Json(list).into_response()
}

async fn jobs(State(app): State<AppState>, Path(reg): Path<String>) -> Response {
    let live = match registry_of(&app, &reg, true) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let now = chrono::Utc::now();
    match live.read(|v| v.lines(now)).await {
        Ok(lines) => Json(lines).into_response(),
        Err(e) => action_error(&e.into()),
    }
}

async fn job(State(app): State<AppState>, Path((reg, job)): Path<(String, String)>) -> Response {
    let live = match registry_of(&app, &reg, true) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let now = chrono::Utc::now();
    match live.read(|v| v.status(&job, now)).await {
        Ok(Some(s)) => Json(s).into_response(),
        Ok(None) => error(404, &format!("no job {job:?} in registry {reg:?}")),
        Err(e) => action_error(&e.into()),
    }
}

async fn config_get(
    State(app): State<AppState>,
    Path((reg, job)): Path<(String, String)>,
) -> Response {
    let live = match registry_of(&app, &reg, true) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let client = match live.client() {
        Ok(c) => c,
        Err(e) => return action_error(&e.into()),
    };
    match Ops::new(&*client).config(&job).await {
        Ok(c) => Json(json!({"yaml": c.yaml, "version": c.version.0})).into_response(),
        Err(e) => action_error(&e.into()),
    }
}

#[derive(Deserialize)]
struct ConfigPut {
    yaml: String,
    version: i64,
}

async fn config_put(
    State(app): State<AppState>,
    Path((reg, job)): Path<(String, String)>,
    axum::Extension(session): axum::Extension<Session>,
    body: Bytes,
) -> Response {
    let live = match registry_of(&app, &reg, true) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let Ok(put) = serde_json::from_slice::<ConfigPut>(&body) else {
        return error(
            400,
            "expected {\"yaml\": …, \"version\": N} (the version from GET …/config)",
        );
    };
    let client = match live.client() {
        Ok(c) => c,
        Err(e) => return action_error(&e.into()),
    };
    match Ops::new(&*client)
        .update_config_yaml(&job, &put.yaml, Version(put.version))
        .await
    {
        Ok(v) => {
            tracing::info!(target: "shardjob_console::audit", user = %session.user, registry = %reg, %job, "configuration replaced (API)");
            Json(json!({"version": v.0})).into_response()
        }
        Err(e) => {
            let problems: Vec<_> = match &e {
                shardjob_ops::OpsError::InvalidConfig { source, .. } => source
                    .problems()
                    .iter()
                    .map(|p| json!({"key": p.key, "problem": p.problem.to_string()}))
                    .collect(),
                _ => Vec::new(),
            };
            let status = ActionError::from(e).status();
            let mut r = (
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
                Json(json!({"error": "the configuration was not saved", "status": status, "problems": problems})),
            )
                .into_response();
            if problems.is_empty() {
                r = error(status, "the configuration was not saved");
            }
            r
        }
    }
}

async fn servers(State(app): State<AppState>, Path(reg): Path<String>) -> Response {
    let live = match registry_of(&app, &reg, true) {
        Ok(l) => l,
        Err(r) => return r,
    };
    match live.read(|v| v.servers()).await {
        Ok(s) => Json(s).into_response(),
        Err(e) => action_error(&e.into()),
    }
}

async fn server(State(app): State<AppState>, Path((reg, ip)): Path<(String, String)>) -> Response {
    let live = match registry_of(&app, &reg, true) {
        Ok(l) => l,
        Err(r) => return r,
    };
    match live.read(|v| v.server_jobs(&ip)).await {
        Ok(j) if j.is_empty() => error(
            404,
            &format!("server {ip:?} has no job in registry {reg:?}"),
        ),
        Ok(j) => Json(j).into_response(),
        Err(e) => action_error(&e.into()),
    }
}

async fn op(
    State(app): State<AppState>,
    Path(reg): Path<String>,
    axum::Extension(session): axum::Extension<Session>,
    body: Bytes,
) -> Response {
    let live = match registry_of(&app, &reg, true) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let action: Action = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => return error(400, &format!("not an operation: {e}")),
    };
    match action.run(&live).await {
        Ok(done) => {
            tracing::info!(target: "shardjob_console::audit", user = %session.user, registry = %reg, "{} (API): {done}", action.describe());
            Json(json!({"done": done})).into_response()
        }
        Err(e) => {
            tracing::warn!(target: "shardjob_console::audit", user = %session.user, registry = %reg, "{} (API) failed: {e}", action.describe());
            action_error(&e)
        }
    }
}

async fn executions(
    State(app): State<AppState>,
    Path(reg): Path<String>,
    Query(q): Query<HistoryQuery>,
) -> Response {
    let live = match registry_of(&app, &reg, true) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let Some(store) = &live.history else {
        return error(
            404,
            &format!("registry {reg:?} has no job history configured"),
        );
    };
    let query = match q.executions() {
        Ok(q) => q,
        Err(e) => return error(400, &e),
    };
    match store.executions(&query).await {
        Ok(p) => Json(p).into_response(),
        Err(e) => error(503, &e.to_string()),
    }
}

async fn statuses(
    State(app): State<AppState>,
    Path(reg): Path<String>,
    Query(q): Query<HistoryQuery>,
) -> Response {
    let live = match registry_of(&app, &reg, true) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let Some(store) = &live.history else {
        return error(
            404,
            &format!("registry {reg:?} has no job history configured"),
        );
    };
    let query = match q.statuses() {
        Ok(q) => q,
        Err(e) => return error(400, &e),
    };
    match store.status_page(&query).await {
        Ok(p) => Json(p).into_response(),
        Err(e) => error(503, &e.to_string()),
    }
}
