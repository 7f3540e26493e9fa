//! The pages of one registry: overview, jobs, a job, servers, a server, history; the
//! operations' form handler; and the fragments the live updates replace.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use chrono::{Duration as ChronoDuration, NaiveDateTime, Utc};
use shardjob_history::{ExecutionQuery, JobRuns, MinuteCount, SortKey, StatusQuery};
use shardjob_ops::{ItemState, JobLine, JobStatus, ServerBrief};

use crate::actions::{Action, ConfigForm, FORM_FIELDS, FieldKind};
use crate::auth::Session;
use crate::config::Role;
use crate::html::{self, Nav, badge, csrf_field, esc, seg, time_ms, time_naive};
use crate::hub::Live;
use crate::server::{AppState, fields, refuse, registry_of};

/// The routes of the pages.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/r/{reg}/", get(overview))
        .route("/r/{reg}", get(|Path(reg): Path<String>| async move {
            Redirect::to(&format!("/r/{}/", seg(&reg)))
        }))
        .route("/r/{reg}/jobs", get(jobs))
        .route("/r/{reg}/jobs/{job}", get(job))
        .route("/r/{reg}/jobs/{job}/config", post(config_post))
        .route("/r/{reg}/jobs/{job}/dump", get(dump))
        .route("/r/{reg}/servers", get(servers))
        .route("/r/{reg}/servers/{ip}", get(server))
        .route("/r/{reg}/history", get(history))
        .route("/r/{reg}/op", post(op_post))
        .route("/r/{reg}/events", get(crate::events::events))
}

/// What a fragment needs to know of the viewer.
#[derive(Debug, Clone)]
pub struct Viewer {
    /// The registry's name.
    pub reg: String,
    /// The session's CSRF token.
    pub csrf: String,
    /// Whether the viewer may operate.
    pub admin: bool,
}

impl Viewer {
    /// The viewer of a session on a registry.
    pub fn new(reg: &str, session: &Session) -> Viewer {
        Viewer {
            reg: reg.to_owned(),
            csrf: session.csrf.clone(),
            admin: session.role == Role::Admin,
        }
    }

    fn r(&self) -> String {
        seg(&self.reg)
    }

    /// A one-button form posting an operation.
    fn op_button(
        &self,
        label: &str,
        op: &str,
        fields: &[(&str, &str)],
        class: &str,
        confirm: Option<&str>,
    ) -> String {
        if !self.admin {
            return String::new();
        }
        let mut h = format!(
            "<form method=\"post\" action=\"/r/{}/op\" class=\"inline\"{}>{}<input type=\"hidden\" name=\"op\" value=\"{}\">",
            self.r(),
            confirm
                .map(|c| format!(" data-confirm=\"{}\"", esc(c)))
                .unwrap_or_default(),
            csrf_field(&self.csrf),
            esc(op)
        );
        for (k, v) in fields {
            let _ = write!(
                h,
                "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
                esc(k),
                esc(v)
            );
        }
        let _ = write!(
            h,
            "<button type=\"submit\" class=\"{class}\" data-op=\"{}\">{}</button></form>",
            esc(op),
            esc(label)
        );
        h
    }
}

fn now() -> chrono::DateTime<Utc> {
    Utc::now()
}

/// The page of an error of a registry (unknown, or not read yet).
fn unavailable(e: &crate::hub::HubError) -> Response {
    let status = match e {
        crate::hub::HubError::Unknown(_) => StatusCode::NOT_FOUND,
        crate::hub::HubError::Unreachable { .. } => StatusCode::SERVICE_UNAVAILABLE,
    };
    refuse(false, status, &e.to_string())
}

fn page(
    app: &crate::server::App,
    session: &Session,
    title: &str,
    reg: &str,
    nav: Nav,
    events: Option<String>,
    body: &str,
) -> Response {
    let mut frame = app.frame(session, title, Some(reg), nav);
    frame.events = events;
    Html(html::page(&frame, body)).into_response()
}

// ---------------------------------------------------------------- overview

/// The counts of the overview.
pub fn overview_counts(v: &Viewer, lines: &[JobLine], servers: &[ServerBrief]) -> String {
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for l in lines {
        *by.entry(l.brief.status.as_str()).or_default() += 1;
    }
    let instances: BTreeSet<&String> = servers.iter().flat_map(|s| s.instances.iter()).collect();
    let running: usize = lines.iter().map(|l| l.running_items).sum();
    let mut h = String::from("<div id=\"overview-counts\" class=\"tiles\">");
    let r = v.r();
    let _ = write!(
        h,
        "<a class=\"tile\" href=\"/r/{r}/jobs\"><b id=\"count-jobs\">{}</b><span>jobs</span></a>",
        lines.len()
    );
    for s in ["OK", "CRASHED", "DISABLED", "SHARDING_FLAG"] {
        let n = by.get(s).copied().unwrap_or(0);
        let _ = write!(
            h,
            "<a class=\"tile s-{}{}\" href=\"/r/{r}/jobs?status={s}\"><b id=\"count-{}\">{n}</b><span>{}</span></a>",
            s.to_ascii_lowercase().replace('_', "-"),
            if n > 0 && s != "OK" { " alert" } else { "" },
            s.to_ascii_lowercase(),
            s
        );
    }
    let _ = write!(
        h,
        "<a class=\"tile\" href=\"/r/{r}/servers\"><b id=\"count-servers\">{}</b><span>servers</span></a>",
        servers.len()
    );
    let _ = write!(
        h,
        "<div class=\"tile\"><b id=\"count-instances\">{}</b><span>instances</span></div>",
        instances.len()
    );
    let _ = write!(
        h,
        "<div class=\"tile\"><b id=\"count-running\">{running}</b><span>items running</span></div>"
    );
    h.push_str("</div>");
    h
}

/// The runs per minute of the last hour as bars (SVG), with the failures in red.
pub fn chart(minutes: &[MinuteCount], until: chrono::DateTime<Utc>) -> String {
    let start = until - ChronoDuration::minutes(60);
    let by: BTreeMap<i64, &MinuteCount> = minutes
        .iter()
        .map(|m| ((m.minute.and_utc() - start).num_minutes(), m))
        .collect();
    let max = minutes.iter().map(|m| m.runs).max().unwrap_or(0).max(1);
    let total: u64 = minutes.iter().map(|m| m.runs).sum();
    let failed: u64 = minutes.iter().map(|m| m.failures).sum();
    let mut h = format!(
        "<div id=\"overview-chart\"><p><b id=\"runs-hour\">{total}</b> item runs, <b id=\"failures-hour\" class=\"{}\">{failed}</b> failed in the last hour</p>\
         <svg class=\"chart\" viewBox=\"0 0 600 120\" role=\"img\" aria-label=\"item runs per minute\">",
        if failed > 0 { "bad" } else { "" }
    );
    for i in 0..60i64 {
        let Some(m) = by.get(&i) else { continue };
        let x = i * 10;
        let hr = (m.runs as f64 / max as f64 * 110.0).round();
        let hf = (m.failures as f64 / max as f64 * 110.0).round();
        let _ = write!(
            h,
            "<g><title>{} UTC: {} runs, {} failed</title><rect x=\"{x}\" y=\"{}\" width=\"8\" height=\"{hr}\" class=\"ok\"/>\
             <rect x=\"{x}\" y=\"{}\" width=\"8\" height=\"{hf}\" class=\"bad\"/></g>",
            m.minute.format("%H:%M"),
            m.runs,
            m.failures,
            115.0 - hr,
            115.0 - hf
        );
    }
    h.push_str("<line x1=\"0\" y1=\"115\" x2=\"600\" y2=\"115\" class=\"axis\"/></svg><p class=\"muted\">one bar a minute, the last 60 minutes</p></div>");
    h
}

async fn overview(
    State(app): State<AppState>,
    Path(reg): Path<String>,
    axum::Extension(session): axum::Extension<Session>,
) -> Response {
    let live = match registry_of(&app, &reg, false) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let v = Viewer::new(&reg, &session);
    let t = now();
    let (lines, servers) = match live.read(|view| (view.lines(t), view.servers())).await {
        Ok(x) => x,
        Err(e) => return unavailable(&e),
    };
    let mut body = format!(
        "<section class=\"card\"><h1>{} <small class=\"muted\">{}</small></h1>{}</section>",
        esc(&reg),
        esc(&live.url.to_string()),
        overview_counts(&v, &lines, &servers)
    );
    body.push_str("<section class=\"card\"><h2>Runs per minute</h2>");
    match &live.history {
        None => body.push_str("<p class=\"muted\" id=\"overview-chart\">No job history is configured for this registry: add its database on the registries page to see runs and failures.</p>"),
        Some(store) => match store.runs_per_minute(t - ChronoDuration::minutes(60), t).await {
            Ok(m) => body.push_str(&chart(&m, t)),
            Err(e) => { let _ = write!(body, "<p class=\"field-error\" id=\"overview-chart\">history database: {}</p>", esc(&e.to_string())); }
        },
    }
    body.push_str("</section>");
    if let Some(store) = &live.history {
        let q = ExecutionQuery {
            success: Some(false),
            page_size: 10,
            ..ExecutionQuery::default()
        };
        if let Ok(page) = store.executions(&q).await {
            let rows: Vec<_> = page
                .rows
                .into_iter()
                .filter(|r| r.complete_time.is_some())
                .collect();
            body.push_str("<section class=\"card\"><h2>Latest failures</h2>");
            if rows.is_empty() {
                body.push_str("<p class=\"muted\">None.</p>");
            } else {
                body.push_str(&executions_table(&v, &rows));
            }
            let _ = write!(
                body,
                "<p><a href=\"/r/{}/history?success=false\">All failures</a></p></section>",
                v.r()
            );
        }
    }
    let crashed: Vec<&JobLine> = lines
        .iter()
        .filter(|l| l.brief.status.as_str() != "OK")
        .collect();
    if !crashed.is_empty() {
        body.push_str("<section class=\"card\"><h2>Jobs that need a look</h2><ul>");
        for l in crashed.iter().take(50) {
            let _ = write!(
                body,
                "<li><a href=\"/r/{}/jobs/{}\">{}</a> {}</li>",
                v.r(),
                seg(&l.brief.name),
                esc(&l.brief.name),
                badge(l.brief.status.as_str())
            );
        }
        body.push_str("</ul></section>");
    }
    page(
        &app,
        &session,
        &reg,
        &reg,
        Nav::Overview,
        Some(format!("/r/{}/events?view=overview", v.r())),
        &body,
    )
}

// ---------------------------------------------------------------- jobs

/// The last result cell of a job.
fn last_result(line: &JobLine, runs: Option<&JobRuns>) -> String {
    match runs {
        Some(r) if r.last_complete.is_some() => format!(
            "{} {} <small class=\"muted\">{}/{} failed, 24 h</small>",
            if r.last_failed() {
                badge("FAILED")
            } else {
                badge("SUCCESS")
            },
            time_naive(r.last_complete),
            r.failures,
            r.runs
        ),
        // No run in the history: the execution records' last fire done, "never" where they
        // prove none was done (`shardjob_ops::last_done`), else nothing known.
        _ => match (line.last_done_ms, line.never_done) {
            (Some(ms), _) => format!(
                "<small class=\"muted\">fire done</small> {}",
                time_ms(Some(ms))
            ),
            (None, true) => {
                "<small class=\"muted\">fire done</small> <span class=\"never\">never</span>"
                    .to_owned()
            }
            (None, false) => "<span class=\"muted\">–</span>".to_owned(),
        },
    }
}

/// One row of the job list.
pub fn job_row(v: &Viewer, line: &JobLine, runs: Option<&JobRuns>) -> String {
    let b = &line.brief;
    let name = &b.name;
    let search = format!(
        "{} {} {} {}",
        name,
        b.description,
        b.cron.as_deref().unwrap_or(""),
        b.status.as_str()
    )
    .to_lowercase();
    format!(
        "<tr id=\"job-{}\" data-search=\"{}\" data-status=\"{}\"><td><a href=\"/r/{}/jobs/{}\">{}</a>{}<div class=\"muted small\">{}</div></td>\
         <td class=\"status\">{}</td><td><code>{}</code></td><td>{}{}{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"actions\">{}</td></tr>",
        esc(name),
        esc(&search),
        b.status.as_str(),
        v.r(),
        seg(name),
        esc(name),
        b.config_problem
            .as_ref()
            .map(|p| format!(
                " <span class=\"badge s-crashed\" title=\"{}\">bad config</span>",
                esc(p)
            ))
            .unwrap_or_default(),
        esc(&b.description),
        badge(b.status.as_str()),
        esc(b.cron.as_deref().unwrap_or("–")),
        b.sharding_total_count,
        if line.running_items > 0 {
            format!(
                " <small class=\"running\">{} running</small>",
                line.running_items
            )
        } else {
            String::new()
        },
        if line.disabled_items > 0 {
            format!(
                " <small class=\"muted\">{} disabled</small>",
                line.disabled_items
            )
        } else {
            String::new()
        },
        b.instance_count,
        time_ms(line.next_fire_ms),
        last_result(line, runs),
        v.op_button(
            "Trigger",
            "trigger",
            &[("job", name), ("back", &format!("/r/{}/jobs", v.reg))],
            "small",
            None
        ),
    )
}

/// The rows of the job list.
pub fn job_rows(v: &Viewer, lines: &[JobLine], runs: &BTreeMap<String, JobRuns>) -> String {
    let mut h = String::with_capacity(lines.len() * 600);
    h.push_str("<tbody id=\"jobs-body\">");
    for l in lines {
        h.push_str(&job_row(v, l, runs.get(&l.brief.name)));
    }
    if lines.is_empty() {
        h.push_str("<tr class=\"empty\"><td colspan=\"8\">No job in this namespace yet.</td></tr>");
    }
    h.push_str("</tbody>");
    h
}

/// The history's per-job figures of the last 24 hours (cached a few seconds per registry).
pub async fn job_runs(live: &Live) -> BTreeMap<String, JobRuns> {
    let Some(store) = &live.history else {
        return BTreeMap::new();
    };
    if let Some(cached) = live.runs_cache() {
        return (*cached).clone();
    }
    match store.job_runs(now() - ChronoDuration::hours(24)).await {
        Ok(rows) => {
            let map: BTreeMap<String, JobRuns> =
                rows.into_iter().map(|r| (r.job_name.clone(), r)).collect();
            live.set_runs_cache(Arc::new(map.clone()));
            map
        }
        Err(e) => {
            tracing::warn!(registry = %live.name(), "history: {e}");
            BTreeMap::new()
        }
    }
}

#[derive(serde::Deserialize, Default)]
struct JobsQuery {
    q: Option<String>,
    status: Option<String>,
}

async fn jobs(
    State(app): State<AppState>,
    Path(reg): Path<String>,
    Query(q): Query<JobsQuery>,
    axum::Extension(session): axum::Extension<Session>,
) -> Response {
    let live = match registry_of(&app, &reg, false) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let v = Viewer::new(&reg, &session);
    let t = now();
    let lines = match live.read(|view| view.lines(t)).await {
        Ok(x) => x,
        Err(e) => return unavailable(&e),
    };
    let runs = job_runs(&live).await;
    let search = q.q.unwrap_or_default();
    let status = q.status.unwrap_or_default();
    let mut body = format!(
        "<section class=\"card\"><div class=\"bar\"><h1>Jobs <small class=\"muted\" id=\"jobs-count\">{}</small></h1>\
         <input type=\"search\" id=\"job-search\" placeholder=\"search name, description, cron, status\" value=\"{}\" aria-label=\"search jobs\" autocomplete=\"off\">\
         <select id=\"job-status\" aria-label=\"status\"><option value=\"\">any status</option>",
        lines.len(),
        esc(&search)
    );
    for s in ["OK", "CRASHED", "DISABLED", "SHARDING_FLAG"] {
        let _ = write!(
            body,
            "<option{}>{s}</option>",
            if status == s { " selected" } else { "" }
        );
    }
    body.push_str("</select></div><table class=\"grid\" id=\"jobs\"><thead><tr><th>Job</th><th>Status</th><th>Cron</th><th>Items</th><th>Instances</th><th>Next fire</th><th>Last result</th><th></th></tr></thead>");
    body.push_str(&job_rows(&v, &lines, &runs));
    body.push_str("</table></section>");
    page(
        &app,
        &session,
        "Jobs",
        &reg,
        Nav::Jobs,
        Some(format!("/r/{}/events?view=jobs", v.r())),
        &body,
    )
}

// ---------------------------------------------------------------- a job

/// The job's summary (live).
pub fn job_summary(v: &Viewer, s: &JobStatus) -> String {
    let b = &s.brief;
    let mut h = format!(
        "<div id=\"job-summary\"><dl class=\"facts\"><dt>Status</dt><dd id=\"job-status\">{}</dd><dt>Cron</dt><dd><code>{}</code></dd>\
         <dt>Items</dt><dd>{}</dd><dt>Instances</dt><dd id=\"job-instances\">{}</dd><dt>Leader</dt><dd>{}</dd><dt>Next fire</dt><dd>{}</dd>",
        badge(b.status.as_str()),
        esc(b.cron.as_deref().unwrap_or("– (runs only when triggered)")),
        b.sharding_total_count,
        b.instance_count,
        esc(s.leader.as_deref().unwrap_or("–")),
        time_ms(s.next_fire_ms),
    );
    if s.reshard_pending || s.resharding {
        let _ = write!(
            h,
            "<dt>Sharding</dt><dd>{}</dd>",
            if s.resharding {
                "re-sharding now"
            } else {
                "re-shard pending"
            }
        );
    }
    if !s.failover_queue.is_empty() {
        let q: Vec<String> = s.failover_queue.iter().map(u32::to_string).collect();
        let _ = write!(h, "<dt>Failover queue</dt><dd>items {}</dd>", q.join(", "));
    }
    if !s.pending_triggers.is_empty() {
        let _ = write!(
            h,
            "<dt>Triggers waiting</dt><dd>{}</dd>",
            s.pending_triggers.len()
        );
    }
    if !b.description.is_empty() {
        let _ = write!(h, "<dt>Description</dt><dd>{}</dd>", esc(&b.description));
    }
    if let Some(p) = &b.config_problem {
        let _ = write!(
            h,
            "<dt>Configuration</dt><dd class=\"field-error\">{}</dd>",
            esc(p)
        );
    }
    h.push_str("</dl>");
    let _ = v;
    h.push_str("</div>");
    h
}

/// The sharding table (live).
pub fn sharding_table(v: &Viewer, s: &JobStatus) -> String {
    let job = &s.brief.name;
    let back = format!("/r/{}/jobs/{}", v.reg, job);
    let mut h = String::from(
        "<table class=\"grid\" id=\"sharding\"><thead><tr><th>Item</th><th>Owner</th><th>Server</th><th>Status</th><th>Failover</th>\
         <th>Last fire done</th><th>Running since</th><th>Fencing token</th><th></th></tr></thead><tbody>",
    );
    for i in &s.items {
        let item = i.item.to_string();
        let (since, token) = match &i.run {
            Some(run) => (
                format!(
                    "{} <small class=\"muted\">{}</small>",
                    time_ms(Some(run.since_ms)),
                    esc(&format!("{:?}", run.kind).to_uppercase())
                ),
                run.fencing_token
                    .map(|t| t.to_string())
                    .unwrap_or_else(|| "–".to_owned()),
            ),
            None => ("<span class=\"muted\">–</span>".to_owned(), "–".to_owned()),
        };
        let toggle = if i.status == ItemState::Disabled {
            v.op_button(
                "Enable",
                "enable-item",
                &[("job", job), ("item", &item), ("back", &back)],
                "small",
                None,
            )
        } else {
            v.op_button(
                "Disable",
                "disable-item",
                &[("job", job), ("item", &item), ("back", &back)],
                "small",
                None,
            )
        };
        let _ = write!(
            h,
            "<tr id=\"item-{item}\" data-status=\"{}\"><td>{item}</td><td><code>{}</code></td><td>{}</td><td class=\"status\">{}</td><td>{}{}</td><td>{}</td><td>{since}</td><td>{token}</td><td>{toggle}</td></tr>",
            i.status.as_str(),
            esc(i.instance.as_deref().unwrap_or("–")),
            esc(i.server_ip.as_deref().unwrap_or("–")),
            badge(i.status.as_str()),
            if i.failover { "yes" } else { "–" },
            if i.misfire {
                " <small class=\"muted\">misfire</small>"
            } else {
                ""
            },
            if i.never_done {
                "<span class=\"muted never\">never</span>".to_owned()
            } else {
                time_ms(i.last_done_ms)
            },
        );
    }
    if s.items.is_empty() {
        h.push_str("<tr class=\"empty\"><td colspan=\"9\">Not sharded yet: the leader shards at the next fire.</td></tr>");
    }
    h.push_str("</tbody></table>");
    h
}

/// The instances table (live).
pub fn instances_table(v: &Viewer, s: &JobStatus) -> String {
    let job = &s.brief.name;
    let back = format!("/r/{}/jobs/{}", v.reg, job);
    let mut h = String::from(
        "<table class=\"grid\" id=\"instances\"><thead><tr><th>Instance</th><th>Server</th><th>Items</th><th>Leader</th><th>Server state</th><th></th></tr></thead><tbody>",
    );
    for i in &s.instances {
        let items: Vec<String> = i.items.iter().map(u32::to_string).collect();
        let toggle = if i.server_disabled {
            v.op_button(
                "Enable server",
                "enable",
                &[("job", job), ("server", &i.server_ip), ("back", &back)],
                "small",
                None,
            )
        } else {
            v.op_button(
                "Disable server",
                "disable",
                &[("job", job), ("server", &i.server_ip), ("back", &back)],
                "small",
                None,
            )
        };
        let _ = write!(
            h,
            "<tr><td><code>{}</code></td><td><a href=\"/r/{}/servers/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{toggle} {}</td></tr>",
            esc(&i.id),
            v.r(),
            seg(&i.server_ip),
            esc(&i.server_ip),
            esc(&items.join(", ")),
            if i.leader { "★" } else { "" },
            if i.server_disabled { badge("DISABLED") } else { badge("ENABLED") },
            v.op_button("Shut down", "shutdown", &[("job", job), ("server", &i.server_ip), ("back", &back)], "small danger", Some(&format!("Shut down the instances of job {job} on {}? They stop running it until restarted.", i.server_ip))),
        );
    }
    if s.instances.is_empty() {
        h.push_str(
            "<tr class=\"empty\"><td colspan=\"6\">No live instance: the job is CRASHED.</td></tr>",
        );
    }
    h.push_str("</tbody></table>");
    h
}

fn operations(v: &Viewer, s: &JobStatus) -> String {
    let job = &s.brief.name;
    if !v.admin {
        return "<p class=\"muted\" id=\"read-only\">Your role is viewer: you can look, not operate.</p>".to_owned();
    }
    let back = format!("/r/{}/jobs/{}", v.reg, job);
    let disabled = s.brief.status.as_str() == "DISABLED";
    format!(
        "<div class=\"ops\">\
         <form method=\"post\" action=\"/r/{r}/op\" class=\"inline\" id=\"trigger-form\">{csrf}<input type=\"hidden\" name=\"op\" value=\"trigger\">\
         <input type=\"hidden\" name=\"job\" value=\"{j}\"><input type=\"hidden\" name=\"back\" value=\"{b}\">\
         <input name=\"parameter\" id=\"trigger-parameter\" placeholder=\"parameter (optional)\" aria-label=\"trigger parameter\">\
         <button type=\"submit\" id=\"trigger\">Trigger now</button></form>\
         {toggle}{reshard}{shutdown}{remove}</div>",
        r = v.r(),
        csrf = csrf_field(&v.csrf),
        j = esc(job),
        b = esc(&back),
        toggle = if disabled {
            v.op_button("Enable job", "enable", &[("job", job), ("back", &back)], "", None)
        } else {
            v.op_button("Disable job", "disable", &[("job", job), ("back", &back)], "", None)
        },
        reshard = v.op_button("Re-shard", "reshard", &[("job", job), ("back", &back)], "", None),
        shutdown = v.op_button("Shut down", "shutdown", &[("job", job), ("back", &back)], "danger", Some(&format!("Shut down every instance of job {job}? They stop running it until restarted."))),
        remove = v.op_button("Remove job", "remove-job", &[("job", job), ("back", &format!("/r/{}/jobs", v.reg))], "danger", Some(&format!("Remove job {job} from the registry, with all its nodes? Its instances stop running it."))),
    )
}

/// The configuration form, with each problem next to its field.
pub fn config_form(
    v: &Viewer,
    job: &str,
    form: &ConfigForm,
    executor: Option<(&str, String)>,
) -> String {
    let mut h = format!(
        "<form method=\"post\" action=\"/r/{}/jobs/{}/config\" id=\"config-form\" class=\"grid-form\">{}<input type=\"hidden\" name=\"version\" value=\"{}\">",
        v.r(),
        seg(job),
        csrf_field(&v.csrf),
        form.version
    );
    if let Some(general) = form.errors.get("") {
        for e in general {
            let _ = write!(h, "<p class=\"field-error\" data-field=\"\">{}</p>", esc(e));
        }
    }
    let ro = if v.admin { "" } else { " disabled" };
    for (key, kind, label) in FORM_FIELDS {
        let value = form.values.get(*key).cloned().unwrap_or_default();
        let errors = form.errors.get(*key);
        let invalid = if errors.is_some() {
            " aria-invalid=\"true\" class=\"invalid\""
        } else {
            ""
        };
        let input = match kind {
            FieldKind::Bool => format!(
                "<input type=\"checkbox\" name=\"{k}\" id=\"f-{k}\" value=\"true\"{}{invalid}{ro}>",
                if value == "true" { " checked" } else { "" },
                k = key
            ),
            FieldKind::Props => format!(
                "<textarea name=\"{k}\" id=\"f-{k}\" rows=\"3\"{invalid}{ro}>{}</textarea>",
                esc(&value),
                k = key
            ),
            _ => format!(
                "<input name=\"{k}\" id=\"f-{k}\" value=\"{}\"{invalid}{ro}>",
                esc(&value),
                k = key
            ),
        };
        let _ = write!(
            h,
            "<label class=\"{}\"><span>{}</span>{input}",
            if *kind == FieldKind::Bool {
                "check"
            } else {
                ""
            },
            esc(label)
        );
        if let Some(errors) = errors {
            for e in errors {
                let _ = write!(
                    h,
                    "<span class=\"field-error\" id=\"error-{}\" data-field=\"{}\">{}</span>",
                    esc(key),
                    esc(key),
                    esc(e)
                );
            }
        }
        h.push_str("</label>");
    }
    if let Some((key, value)) = executor {
        let _ = write!(
            h,
            "<p class=\"muted\">{} is <code>{}</code> (kept as it is).</p>",
            esc(key),
            esc(&value)
        );
    }
    if v.admin {
        h.push_str("<div><button type=\"submit\" id=\"save-config\">Save configuration</button> <span class=\"muted\">validated first; saved only if nobody changed it since this page was read</span></div>");
    }
    h.push_str("</form>");
    h
}

fn recent_runs(v: &Viewer, rows: &[shardjob_history::ExecutionRow]) -> String {
    if rows.is_empty() {
        return "<p class=\"muted\">No run recorded yet.</p>".to_owned();
    }
    executions_table(v, rows)
}

async fn job_page(
    app: &crate::server::App,
    live: &Live,
    session: &Session,
    reg: &str,
    job: &str,
    form: Option<ConfigForm>,
) -> Response {
    let v = Viewer::new(reg, session);
    let t = now();
    let found = live
        .read(|view| (view.status(job, t), view.config_yaml(job)))
        .await;
    let (status, config) = match found {
        Ok((Some(s), Some(c))) => (s, c),
        Ok(_) => {
            return refuse(
                false,
                StatusCode::NOT_FOUND,
                &format!("No job {job:?} in registry {reg:?} (it has no config node)."),
            );
        }
        Err(e) => return unavailable(&e),
    };
    let invalid = form.is_some();
    let form = form.unwrap_or_else(|| ConfigForm::from_config(&config.0, config.1));
    let map: serde_yaml_ng::Mapping = serde_yaml_ng::from_str(&config.0).unwrap_or_default();
    let executor = [
        "jobExecutorServiceHandlerType",
        "jobExecutorThreadPoolSizeProviderType",
    ]
    .into_iter()
    .find_map(|k| {
        map.get(k)
            .and_then(|v| v.as_str())
            .map(|v| (k, v.to_owned()))
    });
    let elasticjob = map.contains_key("jobExecutorServiceHandlerType");
    let mut body = format!(
        "<section class=\"card\"><h1>{} {}</h1>{}{}{}</section>",
        esc(job),
        if elasticjob {
            "<span class=\"badge\" title=\"its config node is in ElasticJob 3.0.x's form\">ElasticJob 3.0.x</span>"
        } else {
            ""
        },
        job_summary(&v, &status),
        operations(&v, &status),
        format_args!(
            "<p class=\"small\"><a href=\"/r/{}/jobs/{}/dump\" id=\"dump-link\">Dump (ElasticJob's format)</a> · <a href=\"/r/{}/history?job={}\">History</a> · <a href=\"/api/r/{}/jobs/{}\">JSON</a></p>",
            v.r(),
            seg(job),
            v.r(),
            html::query_value(job),
            v.r(),
            seg(job)
        ),
    );
    let _ = write!(
        body,
        "<section class=\"card\"><h2>Sharding</h2>{}</section>",
        sharding_table(&v, &status)
    );
    let _ = write!(
        body,
        "<section class=\"card\"><h2>Instances</h2>{}</section>",
        instances_table(&v, &status)
    );
    let _ = write!(
        body,
        "<section class=\"card\" id=\"config\"><h2>Configuration</h2>{}<details><summary>As stored (version {})</summary><pre>{}</pre></details></section>",
        config_form(&v, job, &form, executor),
        config.1.0,
        esc(&config.0)
    );
    if let Some(store) = &live.history {
        let q = ExecutionQuery {
            job: Some(job.to_owned()),
            page_size: 20,
            ..ExecutionQuery::default()
        };
        let runs = match store.executions(&q).await {
            Ok(p) => recent_runs(&v, &p.rows),
            Err(e) => format!(
                "<p class=\"field-error\">history database: {}</p>",
                esc(&e.to_string())
            ),
        };
        let _ = write!(
            body,
            "<section class=\"card\"><h2>Latest runs</h2>{runs}</section>"
        );
    }
    let mut response = page(
        app,
        session,
        job,
        reg,
        Nav::Jobs,
        Some(format!(
            "/r/{}/events?view=job&job={}",
            v.r(),
            html::query_value(job)
        )),
        &body,
    );
    if invalid {
        *response.status_mut() = StatusCode::UNPROCESSABLE_ENTITY;
    }
    response
}

async fn job(
    State(app): State<AppState>,
    Path((reg, job)): Path<(String, String)>,
    axum::Extension(session): axum::Extension<Session>,
) -> Response {
    let live = match registry_of(&app, &reg, false) {
        Ok(l) => l,
        Err(r) => return r,
    };
    job_page(&app, &live, &session, &reg, &job, None).await
}

async fn config_post(
    State(app): State<AppState>,
    Path((reg, job)): Path<(String, String)>,
    axum::Extension(session): axum::Extension<Session>,
    body: Bytes,
) -> Response {
    let live = match registry_of(&app, &reg, false) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let mut form = ConfigForm::from_fields(&fields(&body));
    match form.apply(&live, &job).await {
        Ok(done) => {
            tracing::info!(target: "shardjob_console::audit", user = %session.user, registry = %reg, %job, "{done}");
            app.sessions.flash(&session.id, true, done);
            Redirect::to(&format!("/r/{}/jobs/{}", seg(&reg), seg(&job))).into_response()
        }
        Err(e) => {
            tracing::warn!(target: "shardjob_console::audit", user = %session.user, registry = %reg, %job,
                errors = ?form.errors, "configuration not saved: {e}");
            if form.errors.is_empty() {
                form.errors
                    .entry(String::new())
                    .or_default()
                    .push(e.to_string());
            }
            job_page(&app, &live, &session, &reg, &job, Some(form)).await
        }
    }
}

async fn dump(State(app): State<AppState>, Path((reg, job)): Path<(String, String)>) -> Response {
    let live = match registry_of(&app, &reg, false) {
        Ok(l) => l,
        Err(r) => return r,
    };
    match live.read(|view| view.dump(&job)).await {
        Ok(Some(text)) => {
            ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
        }
        Ok(None) => refuse(
            false,
            StatusCode::NOT_FOUND,
            &format!("No job {job:?} in registry {reg:?}."),
        ),
        Err(e) => unavailable(&e),
    }
}

// ---------------------------------------------------------------- servers

/// The rows of the server list (live).
pub fn server_rows(v: &Viewer, servers: &[ServerBrief]) -> String {
    let mut h = String::from("<tbody id=\"servers-body\">");
    for s in servers {
        let ip = &s.ip;
        let back = format!("/r/{}/servers", v.reg);
        let _ = write!(
            h,
            "<tr id=\"server-{}\"><td><a href=\"/r/{}/servers/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td class=\"actions\">{}{}{}{}</td></tr>",
            esc(ip),
            v.r(),
            seg(ip),
            esc(ip),
            s.instances.len(),
            s.jobs.len(),
            s.disabled_jobs,
            v.op_button("Disable", "disable", &[("server", ip), ("back", &back)], "small", None),
            v.op_button("Enable", "enable", &[("server", ip), ("back", &back)], "small", None),
            v.op_button("Shut down", "shutdown", &[("server", ip), ("back", &back)], "small danger", Some(&format!("Shut down every instance on server {ip}, in every job?"))),
            v.op_button("Remove", "remove", &[("server", ip), ("back", &back)], "small danger", Some(&format!("Shut down every instance on server {ip} and delete its server nodes in every job?"))),
        );
    }
    if servers.is_empty() {
        h.push_str(
            "<tr class=\"empty\"><td colspan=\"5\">No server has registered a job.</td></tr>",
        );
    }
    h.push_str("</tbody>");
    h
}

async fn servers(
    State(app): State<AppState>,
    Path(reg): Path<String>,
    axum::Extension(session): axum::Extension<Session>,
) -> Response {
    let live = match registry_of(&app, &reg, false) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let v = Viewer::new(&reg, &session);
    let list = match live.read(|view| view.servers()).await {
        Ok(x) => x,
        Err(e) => return unavailable(&e),
    };
    let body = format!(
        "<section class=\"card\"><h1>Servers</h1><table class=\"grid\" id=\"servers\"><thead><tr><th>IP</th><th>Instances</th><th>Jobs</th><th>Disabled jobs</th><th></th></tr></thead>{}</table></section>",
        server_rows(&v, &list)
    );
    page(
        &app,
        &session,
        "Servers",
        &reg,
        Nav::Servers,
        Some(format!("/r/{}/events?view=servers", v.r())),
        &body,
    )
}

/// The jobs of one server (live).
pub fn server_jobs(v: &Viewer, ip: &str, jobs: &[shardjob_ops::JobBrief]) -> String {
    let back = format!("/r/{}/servers/{}", v.reg, ip);
    let mut h = String::from(
        "<table class=\"grid\" id=\"server-jobs\"><thead><tr><th>Job</th><th>On this server</th><th>Instances here</th><th>Cron</th><th></th></tr></thead><tbody>",
    );
    for b in jobs {
        let job = &b.name;
        let toggle = if b.status.as_str() == "DISABLED" {
            v.op_button(
                "Enable",
                "enable",
                &[("job", job), ("server", ip), ("back", &back)],
                "small",
                None,
            )
        } else {
            v.op_button(
                "Disable",
                "disable",
                &[("job", job), ("server", ip), ("back", &back)],
                "small",
                None,
            )
        };
        let _ = write!(
            h,
            "<tr id=\"server-job-{}\"><td><a href=\"/r/{}/jobs/{}\">{}</a></td><td>{}</td><td>{}</td><td><code>{}</code></td><td class=\"actions\">{toggle}{}{} <a class=\"small\" href=\"/r/{}/jobs/{}/dump\">dump</a></td></tr>",
            esc(job),
            v.r(),
            seg(job),
            esc(job),
            badge(b.status.as_str()),
            b.instance_count,
            esc(b.cron.as_deref().unwrap_or("–")),
            v.op_button(
                "Shut down",
                "shutdown",
                &[("job", job), ("server", ip), ("back", &back)],
                "small danger",
                Some(&format!("Shut down job {job} on {ip}?"))
            ),
            v.op_button(
                "Remove",
                "remove",
                &[("job", job), ("server", ip), ("back", &back)],
                "small danger",
                Some(&format!(
                    "Shut down job {job} on {ip} and delete its server node?"
                ))
            ),
            v.r(),
            seg(job),
        );
    }
    if jobs.is_empty() {
        h.push_str(
            "<tr class=\"empty\"><td colspan=\"5\">This server has no job (any more).</td></tr>",
        );
    }
    h.push_str("</tbody></table>");
    h
}

async fn server(
    State(app): State<AppState>,
    Path((reg, ip)): Path<(String, String)>,
    axum::Extension(session): axum::Extension<Session>,
) -> Response {
    let live = match registry_of(&app, &reg, false) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let v = Viewer::new(&reg, &session);
    let jobs = match live.read(|view| view.server_jobs(&ip)).await {
        Ok(x) => x,
        Err(e) => return unavailable(&e),
    };
    let back = format!("/r/{}/servers/{}", reg, ip);
    let body = format!(
        "<section class=\"card\"><h1>Server {}</h1><div class=\"ops\">{}{}{}{}</div>{}</section>",
        esc(&ip),
        v.op_button(
            "Disable everywhere",
            "disable",
            &[("server", &ip), ("back", &back)],
            "",
            None
        ),
        v.op_button(
            "Enable everywhere",
            "enable",
            &[("server", &ip), ("back", &back)],
            "",
            None
        ),
        v.op_button(
            "Shut down",
            "shutdown",
            &[("server", &ip), ("back", &back)],
            "danger",
            Some(&format!("Shut down every instance on server {ip}?"))
        ),
        v.op_button(
            "Remove",
            "remove",
            &[("server", &ip), ("back", &format!("/r/{}/servers", reg))],
            "danger",
            Some(&format!(
                "Shut down every instance on {ip} and delete its server nodes?"
            ))
        ),
        server_jobs(&v, &ip, &jobs)
    );
    page(
        &app,
        &session,
        &ip,
        &reg,
        Nav::Servers,
        Some(format!(
            "/r/{}/events?view=server&ip={}",
            v.r(),
            html::query_value(&ip)
        )),
        &body,
    )
}

// ---------------------------------------------------------------- history

fn executions_table(v: &Viewer, rows: &[shardjob_history::ExecutionRow]) -> String {
    let mut h = String::from(
        "<table class=\"grid history\" id=\"executions\"><thead><tr><th>Job</th><th>Item</th><th>IP</th><th>Source</th><th>Started</th><th>Ended</th><th>Result</th><th>Instance · token</th><th>Failure cause</th></tr></thead><tbody>",
    );
    for r in rows {
        let result = if r.complete_time.is_none() {
            badge("RUNNING")
        } else if r.success {
            badge("SUCCESS")
        } else {
            badge("FAILED")
        };
        let cause = match &r.failure_cause {
            Some(c) if !c.is_empty() => {
                let first = c.lines().next().unwrap_or_default();
                format!(
                    "<details class=\"cause\"><summary>{}</summary><pre>{}</pre></details>",
                    esc(&truncate(first, 80)),
                    esc(c)
                )
            }
            _ => String::new(),
        };
        let _ = write!(
            h,
            "<tr class=\"{}\"><td><a href=\"/r/{}/jobs/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td><td>{result}</td><td><small>{}{}</small></td><td>{cause}</td></tr>",
            if !r.success && r.complete_time.is_some() {
                "failed"
            } else {
                ""
            },
            v.r(),
            seg(&r.job_name),
            esc(&r.job_name),
            r.sharding_item,
            esc(&r.ip),
            esc(&r.execution_source),
            r.run_kind
                .as_deref()
                .map(|k| format!(" <small class=\"muted\">{}</small>", esc(k)))
                .unwrap_or_default(),
            time_naive(r.start_time),
            time_naive(r.complete_time),
            esc(r.instance_id.as_deref().unwrap_or(&r.hostname)),
            r.fencing_token
                .map(|t| format!(" · {t}"))
                .unwrap_or_default(),
        );
    }
    h.push_str("</tbody></table>");
    h
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

/// The query of the history page.
#[derive(Debug, Default, serde::Deserialize)]
pub struct HistoryQuery {
    /// `executions` (default) or `status`.
    pub tab: Option<String>,
    /// Job name prefix (exact with `exact=1`).
    pub job: Option<String>,
    /// IP (executions).
    pub ip: Option<String>,
    /// `true` or `false` (executions).
    pub success: Option<String>,
    /// Since (`YYYY-MM-DDTHH:MM`, UTC).
    pub since: Option<String>,
    /// Until (`YYYY-MM-DDTHH:MM`, UTC).
    pub until: Option<String>,
    /// `start`, `complete` or `job` (executions).
    pub sort: Option<String>,
    /// `asc` or `desc`.
    pub order: Option<String>,
    /// Source (status).
    pub source: Option<String>,
    /// Execution type (status).
    pub execution_type: Option<String>,
    /// State (status).
    pub state: Option<String>,
    /// The page, from 1.
    pub page: Option<u32>,
    /// Rows per page.
    pub size: Option<u32>,
}

fn some(s: &Option<String>) -> Option<String> {
    s.as_ref()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// Reads a `datetime-local` value (or RFC 3339) as UTC.
pub fn parse_when(text: &str) -> Result<chrono::DateTime<Utc>, String> {
    let t = text.trim();
    if let Ok(d) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(d.with_timezone(&Utc));
    }
    for f in [
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%d %H:%M:%S",
    ] {
        if let Ok(n) = NaiveDateTime::parse_from_str(t, f) {
            return Ok(n.and_utc());
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc());
    }
    Err(format!("{t:?} is not a time (2026-01-31T12:00, UTC)"))
}

impl HistoryQuery {
    /// The execution log query, or the problem with a filter.
    pub fn executions(&self) -> Result<ExecutionQuery, String> {
        let mut q = ExecutionQuery {
            job_prefix: some(&self.job),
            ip: some(&self.ip),
            ..ExecutionQuery::default()
        };
        q.success = match some(&self.success).as_deref() {
            None => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(o) => return Err(format!("success: {o:?} is neither true nor false")),
        };
        q.since = some(&self.since)
            .map(|s| parse_when(&s))
            .transpose()
            .map_err(|e| format!("since: {e}"))?;
        q.until = some(&self.until)
            .map(|s| parse_when(&s))
            .transpose()
            .map_err(|e| format!("until: {e}"))?;
        q.sort = match some(&self.sort).as_deref() {
            None | Some("start") => SortKey::StartTime,
            Some("complete") => SortKey::CompleteTime,
            Some("job") => SortKey::JobName,
            Some(o) => return Err(format!("sort: {o:?} is not start, complete or job")),
        };
        q.descending = some(&self.order).as_deref() != Some("asc");
        q.page = self.page.unwrap_or(1).max(1) - 1;
        q.page_size = self.size.unwrap_or(50).clamp(1, 500);
        Ok(q)
    }

    /// The status trace query, or the problem with a filter.
    pub fn statuses(&self) -> Result<StatusQuery, String> {
        Ok(StatusQuery {
            job: None,
            job_prefix: some(&self.job),
            source: some(&self.source),
            execution_type: some(&self.execution_type),
            state: some(&self.state),
            since: some(&self.since)
                .map(|s| parse_when(&s))
                .transpose()
                .map_err(|e| format!("since: {e}"))?,
            until: some(&self.until)
                .map(|s| parse_when(&s))
                .transpose()
                .map_err(|e| format!("until: {e}"))?,
            descending: some(&self.order).as_deref() != Some("asc"),
            page: self.page.unwrap_or(1).max(1) - 1,
            page_size: self.size.unwrap_or(50).clamp(1, 500),
        })
    }

    fn link(&self, page: u32) -> String {
        let mut parts = Vec::new();
        for (k, v) in [
            ("tab", &self.tab),
            ("job", &self.job),
            ("ip", &self.ip),
            ("success", &self.success),
            ("since", &self.since),
            ("until", &self.until),
            ("sort", &self.sort),
            ("order", &self.order),
            ("source", &self.source),
            ("execution_type", &self.execution_type),
            ("state", &self.state),
        ] {
            if let Some(v) = some(v) {
                parts.push(format!("{k}={}", html::query_value(&v)));
            }
        }
        parts.push(format!("page={page}"));
        if let Some(s) = self.size {
            parts.push(format!("size={s}"));
        }
        format!("?{}", parts.join("&"))
    }
}

fn select(name: &str, current: &Option<String>, options: &[(&str, &str)]) -> String {
    let cur = some(current).unwrap_or_default();
    let mut h = format!("<select name=\"{name}\" id=\"h-{name}\">");
    for (value, label) in options {
        let _ = write!(
            h,
            "<option value=\"{value}\"{}>{label}</option>",
            if cur == *value { " selected" } else { "" }
        );
    }
    h.push_str("</select>");
    h
}

fn pager(q: &HistoryQuery, page: u32, size: u32, total: u64) -> String {
    let pages = total.div_ceil(u64::from(size.max(1))).max(1);
    let current = u64::from(page) + 1;
    let mut h = format!("<p class=\"pager\">{total} row(s) · page {current} of {pages} ");
    if current > 1 {
        let _ = write!(
            h,
            "<a href=\"{}\" rel=\"prev\">← newer</a> ",
            esc(&q.link(page))
        );
    }
    if current < pages {
        let _ = write!(
            h,
            "<a href=\"{}\" rel=\"next\">older →</a>",
            esc(&q.link(page + 2))
        );
    }
    h.push_str("</p>");
    h
}

async fn history(
    State(app): State<AppState>,
    Path(reg): Path<String>,
    Query(q): Query<HistoryQuery>,
    axum::Extension(session): axum::Extension<Session>,
) -> Response {
    let live = match registry_of(&app, &reg, false) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let v = Viewer::new(&reg, &session);
    let tab = some(&q.tab).unwrap_or_else(|| "executions".to_owned());
    let names: Vec<String> = live.read_now(|view| view.names()).unwrap_or_default();
    let mut body = format!(
        "<section class=\"card\"><h1>History</h1><nav class=\"tabs\"><a href=\"?tab=executions\"{}>Execution log</a><a href=\"?tab=status\"{}>Status trace</a></nav>",
        if tab == "executions" {
            " class=\"active\""
        } else {
            ""
        },
        if tab == "status" {
            " class=\"active\""
        } else {
            ""
        }
    );
    let Some(store) = &live.history else {
        body.push_str("<p class=\"muted\" id=\"no-history\">No job history is configured for this registry. The jobs record one when their file has tracing settings (ElasticJob's <code>elasticjob.tracing</code>); give the console the same database on the registries page.</p></section>");
        return page(&app, &session, "History", &reg, Nav::History, None, &body);
    };
    let _ = write!(
        body,
        "<datalist id=\"job-names\">{}</datalist>",
        names
            .iter()
            .map(|n| format!("<option value=\"{}\">", esc(n)))
            .collect::<String>()
    );
    let job_input = format!(
        "<label>Job (prefix) <input name=\"job\" id=\"h-job\" list=\"job-names\" value=\"{}\"></label>",
        esc(&some(&q.job).unwrap_or_default())
    );
    let when = format!(
        "<label>From (UTC) <input type=\"datetime-local\" name=\"since\" id=\"h-since\" value=\"{}\"></label><label>To (UTC) <input type=\"datetime-local\" name=\"until\" id=\"h-until\" value=\"{}\"></label>",
        esc(&some(&q.since).unwrap_or_default()),
        esc(&some(&q.until).unwrap_or_default())
    );
    let order = select(
        "order",
        &q.order,
        &[("desc", "newest first"), ("asc", "oldest first")],
    );
    if tab == "status" {
        let _ = write!(
            body,
            "<form method=\"get\" class=\"filters\" id=\"status-filters\"><input type=\"hidden\" name=\"tab\" value=\"status\">{job_input}\
             <label>Source {}</label><label>Execution type {}</label><label>State {}</label>{when}<label>Order {order}</label><button type=\"submit\">Filter</button></form>",
            select(
                "source",
                &q.source,
                &[
                    ("", "any"),
                    ("LITE_EXECUTOR", "LITE_EXECUTOR"),
                    ("CLOUD_EXECUTOR", "CLOUD_EXECUTOR"),
                    ("CLOUD_SCHEDULER", "CLOUD_SCHEDULER")
                ]
            ),
            select(
                "execution_type",
                &q.execution_type,
                &[("", "any"), ("READY", "READY"), ("FAILOVER", "FAILOVER")]
            ),
            select(
                "state",
                &q.state,
                &[
                    ("", "any"),
                    ("TASK_STAGING", "TASK_STAGING"),
                    ("TASK_RUNNING", "TASK_RUNNING"),
                    ("TASK_FINISHED", "TASK_FINISHED"),
                    ("TASK_ERROR", "TASK_ERROR"),
                    ("TASK_KILLED", "TASK_KILLED"),
                    ("TASK_LOST", "TASK_LOST"),
                    ("TASK_FAILED", "TASK_FAILED"),
                    ("TASK_DROPPED", "TASK_DROPPED"),
                    ("TASK_GONE", "TASK_GONE"),
                    ("TASK_UNKNOWN", "TASK_UNKNOWN")
                ]
            ),
        );
        match q.statuses() {
            Err(e) => {
                let _ = write!(body, "<p class=\"field-error\">{}</p>", esc(&e));
            }
            Ok(sq) => match store.status_page(&sq).await {
                Err(e) => {
                    let _ = write!(
                        body,
                        "<p class=\"field-error\">history database: {}</p>",
                        esc(&e.to_string())
                    );
                }
                Ok(p) => {
                    body.push_str("<table class=\"grid history\" id=\"statuses\"><thead><tr><th>Job</th><th>Items</th><th>Slave</th><th>Source</th><th>Type</th><th>State</th><th>Created</th><th>Message</th><th>Task</th></tr></thead><tbody>");
                    for r in &p.rows {
                        let _ = write!(
                            body,
                            "<tr><td><a href=\"/r/{}/jobs/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><small><code>{}</code></small></td></tr>",
                            v.r(), seg(&r.job_name), esc(&r.job_name), esc(&r.sharding_item), esc(&r.slave_id), esc(&r.source), esc(&r.execution_type),
                            badge(&r.state), time_naive(r.creation_time),
                            r.message.as_deref().filter(|m| !m.is_empty()).map(|m| format!("<details class=\"cause\"><summary>{}</summary><pre>{}</pre></details>", esc(&truncate(m.lines().next().unwrap_or_default(), 60)), esc(m))).unwrap_or_default(),
                            esc(&r.task_id)
                        );
                    }
                    body.push_str("</tbody></table>");
                    body.push_str(&pager(&q, p.page, p.page_size, p.total));
                }
            },
        }
    } else {
        let _ = write!(
            body,
            "<form method=\"get\" class=\"filters\" id=\"execution-filters\"><input type=\"hidden\" name=\"tab\" value=\"executions\">{job_input}\
             <label>IP <input name=\"ip\" id=\"h-ip\" value=\"{}\"></label><label>Result {}</label>{when}<label>Sort {}</label><label>Order {order}</label><button type=\"submit\">Filter</button></form>",
            esc(&some(&q.ip).unwrap_or_default()),
            select(
                "success",
                &q.success,
                &[
                    ("", "any"),
                    ("true", "succeeded"),
                    ("false", "failed or running")
                ]
            ),
            select(
                "sort",
                &q.sort,
                &[
                    ("start", "start time"),
                    ("complete", "end time"),
                    ("job", "job name")
                ]
            ),
        );
        match q.executions() {
            Err(e) => {
                let _ = write!(body, "<p class=\"field-error\">{}</p>", esc(&e));
            }
            Ok(eq) => match store.executions(&eq).await {
                Err(e) => {
                    let _ = write!(
                        body,
                        "<p class=\"field-error\">history database: {}</p>",
                        esc(&e.to_string())
                    );
                }
                Ok(p) => {
                    body.push_str(&executions_table(&v, &p.rows));
                    body.push_str(&pager(&q, p.page, p.page_size, p.total));
                }
            },
        }
    }
    body.push_str("</section>");
    page(&app, &session, "History", &reg, Nav::History, None, &body)
}

// ---------------------------------------------------------------- operations

async fn op_post(
    State(app): State<AppState>,
    Path(reg): Path<String>,
    axum::Extension(session): axum::Extension<Session>,
    body: Bytes,
) -> Response {
    let live = match registry_of(&app, &reg, false) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let f = fields(&body);
    let back = f
        .get("back")
        .filter(|b| b.starts_with("/r/") && !b.starts_with("//"))
        .cloned()
        .unwrap_or_else(|| format!("/r/{}/", seg(&reg)));
    let back = back
        .split('/')
        .map(|s| if s.is_empty() { String::new() } else { seg(s) })
        .collect::<Vec<_>>()
        .join("/");
    let action = match Action::from_form(&f) {
        Ok(a) => a,
        Err(e) => return refuse(false, StatusCode::BAD_REQUEST, &e.to_string()),
    };
    match action.run(&live).await {
        Ok(done) => {
            tracing::info!(target: "shardjob_console::audit", user = %session.user, registry = %reg, "{}: {done}", action.describe());
            app.sessions.flash(&session.id, true, done);
        }
        Err(e) => {
            tracing::warn!(target: "shardjob_console::audit", user = %session.user, registry = %reg, "{} failed: {e}", action.describe());
            app.sessions.flash(
                &session.id,
                false,
                format!("Could not {}: {e}", action.describe()),
            );
        }
    }
    Redirect::to(&back).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_filters_read_or_say_why_not() {
        let q = HistoryQuery {
            job: Some(" settle ".into()),
            success: Some("false".into()),
            since: Some("2026-01-31T12:00".into()),
            sort: Some("complete".into()),
            order: Some("asc".into()),
            page: Some(3),
            ..HistoryQuery::default()
        };
        let e = q.executions().unwrap();
        assert_eq!(e.job_prefix.as_deref(), Some("settle"));
        assert_eq!(e.success, Some(false));
        assert_eq!(e.since.unwrap().to_rfc3339(), "2026-01-31T12:00:00+00:00");
        assert_eq!(
            (e.sort, e.descending, e.page),
            (SortKey::CompleteTime, false, 2)
        );
        let bad = HistoryQuery {
            since: Some("yesterday".into()),
            ..HistoryQuery::default()
        };
        assert!(bad.executions().unwrap_err().contains("since"));
        assert!(bad.statuses().is_err());
        assert!(q.link(2).contains("page=2"));
        assert!(q.link(2).contains("job=settle"));
    }

    #[test]
    fn the_chart_draws_a_bar_per_minute_with_runs() {
        let until = Utc::now();
        let m = MinuteCount {
            minute: (until - ChronoDuration::minutes(5)).naive_utc(),
            runs: 4,
            failures: 1,
        };
        let svg = chart(&[m], until);
        assert!(svg.contains("4 runs, 1 failed"), "{svg}");
        assert!(svg.contains("id=\"runs-hour\">4<"));
    }
}
