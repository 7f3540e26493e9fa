//! Live pages: server-sent events, one stream per open page, fed by the registry's watch (the
//! hub's updates): each event is a fragment of HTML (an element's id and its new content) that
//! the page's script puts in place. A page sees its data change within the coalescing window
//! of the change, and no request is made to the registry for it.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use chrono::{Duration as ChronoDuration, Utc};
use futures_util::stream::Stream;
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use crate::auth::Session;
use crate::hub::{Live, Update};
use crate::pages::{self, Viewer};
use crate::server::{AppState, registry_of};

/// Which page follows.
#[derive(Debug, Clone, Deserialize)]
pub struct EventsQuery {
    /// `overview`, `jobs`, `job`, `servers` or `server`.
    pub view: String,
    /// The job (`view=job`).
    pub job: Option<String>,
    /// The server (`view=server`).
    pub ip: Option<String>,
}

/// How often the overview's chart is redrawn at most (it reads the history database).
const CHART_EVERY: Duration = Duration::from_secs(5);

/// A fragment: the element's id and its new outer HTML (empty: remove it).
#[derive(Debug, serde::Serialize)]
struct Fragment<'a> {
    id: &'a str,
    html: String,
}

fn event(id: &str, html: String) -> Event {
    let data = serde_json::to_string(&Fragment { id, html }).unwrap_or_default();
    Event::default().event("fragment").data(data)
}

/// What one page knows, to send only what changed.
struct Follower {
    live: Arc<Live>,
    viewer: Viewer,
    query: EventsQuery,
    /// The jobs the job list shows.
    listed: BTreeSet<String>,
    last_chart: Option<tokio::time::Instant>,
    session_id: String,
}

impl Follower {
    /// The fragments for an update (`None`: everything the page follows).
    async fn fragments(&mut self, update: Option<&Update>, app: &crate::server::App) -> Vec<Event> {
        let now = Utc::now();
        let touched = |job: &str| update.is_none_or(|u| u.reloaded || u.jobs.contains(job));
        let v = self.viewer.clone();
        let mut out = Vec::new();
        match self.query.view.as_str() {
            "jobs" => {
                let runs = pages::job_runs(&self.live).await;
                let Some(lines) = self.live.read_now(|view| view.lines(now)) else {
                    return out;
                };
                let names: BTreeSet<String> = lines.iter().map(|l| l.brief.name.clone()).collect();
                if update.is_none() || names != self.listed || update.is_some_and(|u| u.reloaded) {
                    self.listed = names;
                    out.push(event("jobs-body", pages::job_rows(&v, &lines, &runs)));
                    out.push(event(
                        "jobs-count",
                        format!(
                            "<small class=\"muted\" id=\"jobs-count\">{}</small>",
                            lines.len()
                        ),
                    ));
                } else {
                    for l in &lines {
                        if touched(&l.brief.name) {
                            out.push(event(
                                &format!("job-{}", l.brief.name),
                                pages::job_row(&v, l, runs.get(&l.brief.name)),
                            ));
                        }
                    }
                }
            }
            "job" => {
                let Some(job) = self.query.job.clone() else {
                    return out;
                };
                if !touched(&job) {
                    return out;
                }
                match self.live.read_now(|view| view.status(&job, now)).flatten() {
                    Some(status) => {
                        out.push(event("job-summary", pages::job_summary(&v, &status)));
                        out.push(event("sharding", pages::sharding_table(&v, &status)));
                        out.push(event("instances", pages::instances_table(&v, &status)));
                    }
                    None => out.push(event(
                        "job-summary",
                        "<div id=\"job-summary\"><p class=\"flash err\">This job is gone from the registry.</p></div>".to_owned(),
                    )),
                }
            }
            "overview" => {
                if let Some((lines, servers)) =
                    self.live.read_now(|view| (view.lines(now), view.servers()))
                {
                    out.push(event(
                        "overview-counts",
                        pages::overview_counts(&v, &lines, &servers),
                    ));
                }
                let due = self.last_chart.is_none_or(|t| t.elapsed() >= CHART_EVERY);
                if due && let Some(store) = &self.live.history {
                    self.last_chart = Some(tokio::time::Instant::now());
                    if let Ok(m) = store
                        .runs_per_minute(now - ChronoDuration::minutes(60), now)
                        .await
                    {
                        out.push(event("overview-chart", pages::chart(&m, now)));
                    }
                }
            }
            "servers" => {
                if let Some(list) = self.live.read_now(|view| view.servers()) {
                    out.push(event("servers-body", pages::server_rows(&v, &list)));
                }
            }
            "server" => {
                let ip = self.query.ip.clone().unwrap_or_default();
                if let Some(jobs) = self.live.read_now(|view| view.server_jobs(&ip)) {
                    out.push(event("server-jobs", pages::server_jobs(&v, &ip, &jobs)));
                }
            }
            _ => {}
        }
        // A session that ended (logout, expiry) stops getting data.
        if app.sessions.get(&self.session_id).is_none() {
            out.clear();
        }
        out
    }
}

/// `GET /r/{reg}/events?view=…`: the page's live updates.
pub async fn events(
    State(app): State<AppState>,
    Path(reg): Path<String>,
    Query(query): Query<EventsQuery>,
    axum::Extension(session): axum::Extension<Session>,
) -> Response {
    let live = match registry_of(&app, &reg, false) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let updates = live.subscribe();
    let state = live.watch_state();
    let follower = Follower {
        viewer: Viewer::new(&reg, &session),
        live,
        query,
        listed: BTreeSet::new(),
        last_chart: None,
        session_id: session.id.clone(),
    };
    Sse::new(stream(app, follower, updates, state))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn link_event(state: &crate::hub::LinkState) -> Event {
    let text = match state {
        crate::hub::LinkState::Down(cause) => format!("registry unreachable: {cause}"),
        other => other.label().to_owned(),
    };
    Event::default().event("link").data(text)
}

fn stream(
    app: AppState,
    follower: Follower,
    updates: tokio::sync::broadcast::Receiver<Update>,
    state: tokio::sync::watch::Receiver<crate::hub::LinkState>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    struct S {
        app: AppState,
        follower: Follower,
        updates: tokio::sync::broadcast::Receiver<Update>,
        state: tokio::sync::watch::Receiver<crate::hub::LinkState>,
        queue: std::collections::VecDeque<Event>,
        started: bool,
    }
    let s = S {
        app,
        follower,
        updates,
        state,
        queue: Default::default(),
        started: false,
    };
    futures_util::stream::unfold(s, |mut s| async move {
        loop {
            if let Some(e) = s.queue.pop_front() {
                return Some((Ok(e), s));
            }
            if !s.started {
                // Everything once: what changed between the page's rendering and now.
                s.started = true;
                s.queue.push_back(link_event(&s.state.borrow()));
                let f = s.follower.fragments(None, &s.app).await;
                s.queue.extend(f);
                continue;
            }
            // A session that ended (logout, expiry) ends its streams.
            s.app.sessions.get(&s.follower.session_id)?;
            tokio::select! {
                got = s.updates.recv() => match got {
                    Ok(update) => {
                        let f = s.follower.fragments(Some(&update), &s.app).await;
                        s.queue.extend(f);
                    }
                    Err(RecvError::Lagged(_)) => {
                        let f = s.follower.fragments(None, &s.app).await;
                        s.queue.extend(f);
                    }
                    Err(RecvError::Closed) => return None,
                },
                changed = s.state.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    let e = link_event(&s.state.borrow_and_update());
                    s.queue.push_back(e);
                }
            }
        }
    })
}
