//! A job's `props` checked against its type: the keys the SCRIPT and HTTP jobs read (see
//! [`ScriptJob`](shardjob::jobs::ScriptJob) and [`HttpJob`](shardjob::jobs::HttpJob)), with their values parsed as the job
//! will parse them at every run, so a file that would fail every run fails its check.
//! Prop keys are literal (dotted), never relaxed.

use std::collections::BTreeMap;

use super::FileJobKind;
use super::keys::did_you_mean;
use shardjob::jobs::{http, script};

/// The props a SCRIPT job reads.
pub const SCRIPT_PROPS: &[&str] = script::PROPS;

/// The props an HTTP job reads.
pub const HTTP_PROPS: &[&str] = http::PROPS;

/// shardjob's own props (under `shardjob.`), read by the runtime for every job type.
pub const SHARDJOB_PROPS: &[&str] = &[
    shardjob_core::config::MISFIRE_CATCHUP_PROP,
    shardjob_core::config::COMPAT_PROP,
];

/// One problem of one prop: the key and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropProblem {
    /// The prop key at fault (`None`: a required prop is missing).
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// Checks the props of a job of this kind.
pub fn check(kind: FileJobKind, props: &BTreeMap<String, String>) -> Vec<PropProblem> {
    let (own, other, other_kind) = match kind {
        FileJobKind::Script => (SCRIPT_PROPS, HTTP_PROPS, "HTTP"),
        FileJobKind::Http => (HTTP_PROPS, SCRIPT_PROPS, "SCRIPT"),
    };
    let mut problems = Vec::new();
    let mut bad = |key: &str, message: String| {
        problems.push(PropProblem {
            key: Some(key.to_owned()),
            message,
        })
    };
    for (key, value) in props {
        if own.contains(&key.as_str()) {
            if let Err(why) = check_value(kind, key, value) {
                bad(key, why);
            }
        } else if SHARDJOB_PROPS.contains(&key.as_str()) {
        } else if other.contains(&key.as_str()) {
            bad(
                key,
                format!(
                    "is a prop of {other_kind} jobs; this is a {} job",
                    kind.name()
                ),
            );
        } else if shardjob::notify::owns_key(key) {
            // The notifiers' props: checked with the job's error handler
            // (`shardjob::notify::Settings::from_props`).
        } else {
            let known: Vec<&str> = own.iter().chain(SHARDJOB_PROPS).copied().collect();
            let mut hint = did_you_mean(key, &known);
            if hint.is_empty() {
                hint = did_you_mean(key, other);
            }
            bad(
                key,
                format!(
                    "unknown prop for a {} job{hint} (known: {})",
                    kind.name(),
                    own.join(", ")
                ),
            );
        }
    }
    let required: &[&str] = match kind {
        FileJobKind::Script => script::REQUIRED_PROPS,
        FileJobKind::Http => http::REQUIRED_PROPS,
    };
    for key in required {
        if props.get(*key).is_none_or(|v| v.trim().is_empty()) {
            problems.push(PropProblem {
                key: None,
                message: format!("props {key} is required for a {} job", kind.name()),
            });
        }
    }
    problems
}

/// Parses a prop's value as the job does at run time (the library's check of the job's kind;
/// a kind this build lacks is refused before its props are read).
fn check_value(kind: FileJobKind, key: &str, value: &str) -> Result<(), String> {
    match kind {
        #[cfg(feature = "script")]
        FileJobKind::Script => script::check_prop(key, value),
        #[cfg(feature = "http")]
        FileJobKind::Http => http::check_prop(key, value),
        #[allow(unreachable_patterns)]
        _ => {
            let _ = (key, value);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn messages(kind: FileJobKind, pairs: &[(&str, &str)]) -> Vec<String> {
        check(kind, &props(pairs))
            .into_iter()
            .map(|p| format!("{}: {}", p.key.unwrap_or_default(), p.message))
            .collect()
    }

    #[test]
    fn good_props_pass() {
        assert!(
            messages(
                FileJobKind::Script,
                &[
                    ("script.command.line", "echo 'a b'"),
                    ("script.timeout.milliseconds", "3000")
                ]
            )
            .is_empty()
        );
        assert!(
            messages(
                FileJobKind::Http,
                &[
                    ("http.uri", "http://127.0.0.1:8080/x"),
                    ("http.method", "post"),
                    ("http.failure.status", "0")
                ]
            )
            .is_empty()
        );
    }

    #[test]
    fn typos_other_types_handlers_and_bad_values_are_refused() {
        let m = messages(
            FileJobKind::Script,
            &[
                ("script.command.line", "echo"),
                ("script.timeout.miliseconds", "1"),
            ],
        );
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].contains("did you mean `script.timeout.milliseconds`?"),
            "{m:?}"
        );
        let m = messages(
            FileJobKind::Script,
            &[("script.command.line", "echo"), ("http.uri", "http://a/")],
        );
        assert!(
            m[0].contains("is a prop of HTTP jobs; this is a SCRIPT job"),
            "{m:?}"
        );
        let m = messages(
            FileJobKind::Http,
            &[
                ("http.uri", "http://a/"),
                ("http.method", "GET"),
                ("email.host", "x"),
            ],
        );
        assert!(m.is_empty(), "checked with the error handler: {m:?}");
        let m = messages(
            FileJobKind::Http,
            &[("http.uri", "not a url"), ("http.method", "GET")],
        );
        assert!(m[0].contains("is not a URL"), "{m:?}");
        let m = messages(
            FileJobKind::Http,
            &[("http.uri", "ftp://a/"), ("http.method", "GET")],
        );
        assert!(m[0].contains("http:// or https://"), "{m:?}");
        let m = messages(
            FileJobKind::Script,
            &[("script.command.line", "echo 'open")],
        );
        assert!(m[0].contains("cannot be split"), "{m:?}");
        let m = messages(
            FileJobKind::Script,
            &[("script.timeout.milliseconds", "3s")],
        );
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(
            m.iter()
                .any(|m| m.contains("script.command.line is required")),
            "{m:?}"
        );
        let m = messages(FileJobKind::Http, &[("http.uri", "http://a/")]);
        assert!(m[0].contains("http.method is required"), "{m:?}");
    }
}
