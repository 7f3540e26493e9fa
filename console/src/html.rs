//! HTML text: escaping, the page frame, times, form bodies.

use std::fmt::Write as _;

use chrono::{DateTime, NaiveDateTime, SecondsFormat, Utc};

/// Escapes text for HTML content and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes a path segment for a URL (`/r/{reg}/jobs/{job}`).
pub fn seg(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~@".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Escapes a query value.
pub fn query_value(text: &str) -> String {
    seg(text)
}

/// A time as a `<time>` element: UTC text, turned into local time by the page's script.
pub fn time_ms(ms: Option<i64>) -> String {
    match ms.and_then(DateTime::<Utc>::from_timestamp_millis) {
        Some(t) => format!(
            "<time data-ms=\"{}\" datetime=\"{}\">{}</time>",
            t.timestamp_millis(),
            t.to_rfc3339_opts(SecondsFormat::Millis, true),
            t.format("%Y-%m-%d %H:%M:%S UTC")
        ),
        None => "<span class=\"muted\">–</span>".to_owned(),
    }
}

/// A UTC time of the history as a `<time>` element.
pub fn time_naive(t: Option<NaiveDateTime>) -> String {
    time_ms(t.map(|t| t.and_utc().timestamp_millis()))
}

/// Decodes an `application/x-www-form-urlencoded` body (or a query string) into pairs.
pub fn form_pairs(body: &[u8]) -> Vec<(String, String)> {
    body.split(|b| *b == b'&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let mut it = pair.splitn(2, |b| *b == b'=');
            let k = decode(it.next().unwrap_or_default());
            let v = decode(it.next().unwrap_or_default());
            (k, v)
        })
        .collect()
}

fn decode(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The navigation entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// The overview.
    Overview,
    /// The job list and a job.
    Jobs,
    /// The servers.
    Servers,
    /// The history.
    History,
    /// The registries.
    Registries,
    /// No entry (login, errors).
    None,
}

/// What the frame needs besides the body.
pub struct Frame<'a> {
    /// The page's title.
    pub title: &'a str,
    /// The registry shown, if any.
    pub registry: Option<&'a str>,
    /// The registries to switch to: name and link state.
    pub registries: Vec<(String, &'static str)>,
    /// The active entry.
    pub nav: Nav,
    /// The user and role, when logged in.
    pub user: Option<(&'a str, &'a str)>,
    /// The session's CSRF token (for the logout form and the page's script).
    pub csrf: Option<&'a str>,
    /// A message: ok and text.
    pub flash: Option<(bool, String)>,
    /// The server-sent events URL the page follows, if it is live.
    pub events: Option<String>,
    /// A warning about the registry (its link is down).
    pub warning: Option<String>,
}

/// The page: header, navigation, message, body.
pub fn page(frame: &Frame<'_>, body: &str) -> String {
    let mut h = String::with_capacity(body.len() + 4096);
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · shardjob console</title>\
         <link rel=\"stylesheet\" href=\"/assets/console.css\">\
         <link rel=\"icon\" href=\"/assets/favicon.svg\" type=\"image/svg+xml\">\
         <script src=\"/assets/console.js\" defer></script></head>",
        esc(frame.title)
    );
    let _ = write!(
        h,
        "<body{}{}>",
        frame
            .events
            .as_ref()
            .map(|e| format!(" data-events=\"{}\"", esc(e)))
            .unwrap_or_default(),
        frame
            .csrf
            .map(|c| format!(" data-csrf=\"{}\"", esc(c)))
            .unwrap_or_default()
    );
    h.push_str(
        "<header class=\"top\"><a class=\"brand\" href=\"/\">shardjob <span>console</span></a>",
    );
    if let Some(reg) = frame.registry {
        let r = seg(reg);
        let item = |nav: Nav, href: String, label: &str| {
            format!(
                "<a href=\"{href}\"{}>{label}</a>",
                if frame.nav == nav {
                    " class=\"active\" aria-current=\"page\""
                } else {
                    ""
                }
            )
        };
        h.push_str("<nav class=\"main\">");
        h.push_str(&item(Nav::Overview, format!("/r/{r}/"), "Overview"));
        h.push_str(&item(Nav::Jobs, format!("/r/{r}/jobs"), "Jobs"));
        h.push_str(&item(Nav::Servers, format!("/r/{r}/servers"), "Servers"));
        h.push_str(&item(Nav::History, format!("/r/{r}/history"), "History"));
        h.push_str("</nav>");
    }
    if frame.user.is_some() {
        h.push_str("<div class=\"switch\"><label>Registry <select id=\"registry-switch\" aria-label=\"registry\">");
        if frame.registry.is_none() {
            h.push_str("<option value=\"\" selected>choose…</option>");
        }
        for (name, state) in &frame.registries {
            let _ = write!(
                h,
                "<option value=\"{}\"{}>{} ({state})</option>",
                esc(&seg(name)),
                if Some(name.as_str()) == frame.registry {
                    " selected"
                } else {
                    ""
                },
                esc(name)
            );
        }
        let _ = write!(
            h,
            "</select></label> <a href=\"/registries\"{}>Registries</a></div>",
            if frame.nav == Nav::Registries {
                " class=\"active\""
            } else {
                ""
            }
        );
    }
    if let (Some((user, role)), Some(csrf)) = (frame.user, frame.csrf) {
        let _ = write!(
            h,
            "<form class=\"who\" method=\"post\" action=\"/logout\">\
             <span id=\"whoami\">{} · {}</span>\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button type=\"submit\" id=\"logout\">Log out</button></form>",
            esc(user),
            esc(role),
            esc(csrf)
        );
    }
    if frame.events.is_some() {
        h.push_str(
            "<span id=\"live\" class=\"live off\" title=\"live updates\">○ connecting</span>",
        );
    }
    h.push_str("</header><main>");
    if let Some(w) = &frame.warning {
        let _ = write!(
            h,
            "<div class=\"flash warn\" role=\"alert\">{}</div>",
            esc(w)
        );
    }
    if let Some((ok, text)) = &frame.flash {
        let _ = write!(
            h,
            "<div id=\"flash\" class=\"flash {}\" role=\"status\">{}</div>",
            if *ok { "ok" } else { "err" },
            esc(text)
        );
    }
    h.push_str(body);
    h.push_str("</main></body></html>");
    h
}

/// A hidden CSRF field.
pub fn csrf_field(csrf: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        esc(csrf)
    )
}

/// A status badge.
pub fn badge(status: &str) -> String {
    format!(
        "<span class=\"badge s-{}\">{}</span>",
        esc(&status.to_ascii_lowercase().replace('_', "-")),
        esc(status)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_decodes() {
        assert_eq!(
            esc("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
        );
        assert_eq!(seg("a b/c"), "a%20b%2Fc");
        assert_eq!(
            form_pairs(b"a=1+2&b=%3Cx%3E&c=&d=%zz&e"),
            vec![
                ("a".to_owned(), "1 2".to_owned()),
                ("b".to_owned(), "<x>".to_owned()),
                ("c".to_owned(), String::new()),
                ("d".to_owned(), "%zz".to_owned()),
                ("e".to_owned(), String::new()),
            ]
        );
        assert_eq!(form_pairs(b"x=%4"), vec![("x".to_owned(), "%4".to_owned())]);
        assert!(time_ms(Some(0)).contains("1970-01-01 00:00:00 UTC"));
        assert!(time_ms(None).contains('–'));
    }
}
