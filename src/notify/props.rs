//! The notifiers' props, with ElasticJob 3.0's keys and checks (its
//! `*JobErrorHandlerPropertiesValidator`s: required keys present, ports and timeouts positive
//! integers), and stricter where ElasticJob would fail at the first failure instead of at
//! start: addresses and webhooks parsed, booleans `true` or `false`, unknown keys refused.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use lettre::message::Mailbox;
use shardjob_core::config::ErrorHandlerType;

use super::email::{EmailSettings, Security};
#[cfg(feature = "http")]
use super::webhook::WebhookSettings;
use super::{Channel, Settings};

/// The `EMAIL` handler's props (ElasticJob's `EmailPropertiesConstants`).
pub const EMAIL_PROPS: &[&str] = &[
    "email.host",
    "email.port",
    "email.username",
    "email.password",
    "email.useSsl",
    "email.ssl.trust",
    "email.subject",
    "email.from",
    "email.to",
    "email.cc",
    "email.bcc",
    "email.debug",
];

/// The `WECHAT` handler's props (ElasticJob's `WechatPropertiesConstants`).
pub const WECHAT_PROPS: &[&str] = &[
    "wechat.webhook",
    "wechat.connectTimeoutMilliseconds",
    "wechat.readTimeoutMilliseconds",
];

/// The `DINGTALK` handler's props (ElasticJob's `DingtalkPropertiesConstants`).
pub const DINGTALK_PROPS: &[&str] = &[
    "dingtalk.webhook",
    "dingtalk.keyword",
    "dingtalk.secret",
    "dingtalk.connectTimeoutMilliseconds",
    "dingtalk.readTimeoutMilliseconds",
];

/// shardjob's prop: a notifier's window, in milliseconds (at most one message per window
/// after the first failure of a quiet job; the others are folded and counted).
pub const WINDOW_PROP: &str = "shardjob.notify.windowMilliseconds";

/// The window when [`WINDOW_PROP`] is not set: one minute.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// ElasticJob's default mail subject.
const DEFAULT_SUBJECT: &str = "ElasticJob error message";
/// ElasticJob's default webhook timeouts, in milliseconds.
#[cfg(feature = "http")]
const DEFAULT_CONNECT_MS: u64 = 3000;
#[cfg(feature = "http")]
const DEFAULT_READ_MS: u64 = 5000;

/// The prefixes of the keys this module owns, with the handler that reads them.
const PREFIXES: &[(&str, ErrorHandlerType, &[&str])] = &[
    ("email.", ErrorHandlerType::Email, EMAIL_PROPS),
    ("wechat.", ErrorHandlerType::Wechat, WECHAT_PROPS),
    ("dingtalk.", ErrorHandlerType::Dingtalk, DINGTALK_PROPS),
];

/// Whether a prop key belongs to the notifiers (checked by [`Settings::from_props`]).
pub fn owns_key(key: &str) -> bool {
    key == WINDOW_PROP
        || key.starts_with("shardjob.notify.")
        || PREFIXES.iter().any(|(p, _, _)| key.starts_with(p))
}

/// " (did you mean `x`?)" when `written` looks like a typo of a name in `known`, else nothing.
fn did_you_mean(written: &str, known: &[&str]) -> String {
    match shardjob_core::config::nearest_name(written, known) {
        Some(name) => format!(" (did you mean `{name}`?)"),
        None => String::new(),
    }
}

/// One problem of a notifier's props.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropError {
    /// The prop key at fault.
    pub key: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for PropError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "props {}: {}", self.key, self.message)
    }
}

struct Reader<'p> {
    props: &'p BTreeMap<String, String>,
    problems: Vec<PropError>,
}

impl<'p> Reader<'p> {
    fn bad(&mut self, key: &str, message: impl Into<String>) {
        self.problems.push(PropError {
            key: key.to_owned(),
            message: message.into(),
        });
    }

    /// The trimmed value, `None` when absent or blank.
    fn get(&self, key: &str) -> Option<&'p str> {
        self.props
            .get(key)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    fn required(&mut self, key: &str, handler: &str) -> Option<&'p str> {
        let v = self.get(key);
        if v.is_none() {
            self.bad(key, format!("is required by the {handler} error handler"));
        }
        v
    }

    /// A positive integer (ElasticJob's `validateIsPositiveInteger`, an int).
    fn positive(&mut self, key: &str, default: u64) -> u64 {
        let Some(text) = self.get(key) else {
            return default;
        };
        match text.parse::<i32>() {
            Ok(n) if n > 0 => n as u64,
            _ => {
                self.bad(key, format!("{text:?} is not a positive integer"));
                default
            }
        }
    }

    fn boolean(&mut self, key: &str, default: bool) -> bool {
        match self.get(key) {
            None => default,
            Some(t) if t.eq_ignore_ascii_case("true") => true,
            Some(t) if t.eq_ignore_ascii_case("false") => false,
            Some(t) => {
                self.bad(key, format!("{t:?} is neither true nor false"));
                default
            }
        }
    }

    fn mailboxes(&mut self, key: &str, text: &str) -> Vec<Mailbox> {
        let mut out = Vec::new();
        for one in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match one.parse::<Mailbox>() {
                Ok(m) => out.push(m),
                Err(e) => self.bad(key, format!("{one:?} is not a mail address ({e})")),
            }
        }
        if out.is_empty() && !text.trim().is_empty() {
            self.bad(key, format!("{text:?} names no mail address"));
        }
        out
    }

    #[cfg(feature = "http")]
    fn webhook(&mut self, key: &str, handler: &str) -> Option<reqwest::Url> {
        let text = self.required(key, handler)?;
        match reqwest::Url::parse(text) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Some(url),
            Ok(url) => {
                self.bad(
                    key,
                    format!(
                        "{text:?} is not an http:// or https:// URL with a host (scheme {:?})",
                        url.scheme()
                    ),
                );
                None
            }
            Err(e) => {
                self.bad(key, format!("{text:?} is not a URL ({e})"));
                None
            }
        }
    }
}

/// See [`Settings::from_props`].
pub(super) fn read(
    handler: ErrorHandlerType,
    props: &BTreeMap<String, String>,
) -> Result<Option<Settings>, Vec<PropError>> {
    let mut r = Reader {
        props,
        problems: Vec::new(),
    };
    let notifies = PREFIXES.iter().any(|(_, h, _)| *h == handler);
    // Keys: each known, and read by the job's handler.
    for key in props.keys().filter(|k| owns_key(k)) {
        if key.starts_with("shardjob.notify.") {
            if key != WINDOW_PROP {
                let hint = did_you_mean(key, &[WINDOW_PROP]);
                r.bad(key, format!("unknown prop{hint} (known: {WINDOW_PROP})"));
            } else if !notifies {
                r.bad(
                    key,
                    format!(
                        "only the EMAIL, WECHAT and DINGTALK error handlers read it; \
                         jobErrorHandlerType is {handler}"
                    ),
                );
            }
            continue;
        }
        let Some((_, owner, known)) = PREFIXES.iter().find(|(p, _, _)| key.starts_with(p)) else {
            continue;
        };
        if !known.contains(&key.as_str()) {
            let hint = did_you_mean(key, known);
            r.bad(
                key,
                format!(
                    "unknown prop of the {owner} error handler{hint} (known: {})",
                    known.join(", ")
                ),
            );
        } else if *owner != handler {
            r.bad(
                key,
                format!(
                    "configures the {owner} error handler, but jobErrorHandlerType is {handler} \
                     (set jobErrorHandlerType: {owner}, or remove the prop)"
                ),
            );
        }
    }
    let window = Duration::from_millis(r.positive(WINDOW_PROP, DEFAULT_WINDOW.as_millis() as u64));
    let channel = match handler {
        ErrorHandlerType::Email => email(&mut r),
        #[cfg(feature = "http")]
        ErrorHandlerType::Wechat => webhook(&mut r, "wechat", false).map(Channel::Wechat),
        #[cfg(feature = "http")]
        ErrorHandlerType::Dingtalk => webhook(&mut r, "dingtalk", true).map(Channel::Dingtalk),
        #[cfg(not(feature = "http"))]
        ErrorHandlerType::Wechat | ErrorHandlerType::Dingtalk => {
            // Refused, never skipped: the job would otherwise run with its failures unsent.
            let prefix = if handler == ErrorHandlerType::Wechat {
                "wechat"
            } else {
                "dingtalk"
            };
            r.bad(
                &format!("{prefix}.webhook"),
                format!(
                    "the {handler} error handler posts to its webhook over HTTP, and this build \
                     of shardjob has no HTTP client: build it with its `http` feature"
                ),
            );
            None
        }
        _ => None,
    };
    if !r.problems.is_empty() {
        return Err(r.problems);
    }
    Ok(channel.map(|channel| Settings { channel, window }))
}

fn email(r: &mut Reader<'_>) -> Option<Channel> {
    const H: &str = "EMAIL";
    let host = r.required("email.host", H);
    let port = r
        .required("email.port", H)
        .and_then(|p| match p.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                r.bad(
                    "email.port",
                    format!("{p:?} is not a port (a whole number from 1 to 65535)"),
                );
                None
            }
        });
    let username = r.required("email.username", H);
    let password = r.required("email.password", H);
    let from = r
        .required("email.from", H)
        .map(|f| r.mailboxes("email.from", f));
    if let Some(from) = &from
        && from.len() > 1
    {
        r.bad("email.from", "names more than one address");
    }
    let to = r
        .required("email.to", H)
        .map(|t| r.mailboxes("email.to", t));
    let cc = r
        .get("email.cc")
        .map(|t| r.mailboxes("email.cc", t))
        .unwrap_or_default();
    let bcc = r
        .get("email.bcc")
        .map(|t| r.mailboxes("email.bcc", t))
        .unwrap_or_default();
    let use_ssl = r.boolean("email.useSsl", true);
    let debug = r.boolean("email.debug", false);
    let trust = r.get("email.ssl.trust");
    let subject = r
        .props
        .get("email.subject")
        .filter(|s| !s.trim().is_empty())
        .cloned()
        .unwrap_or_else(|| DEFAULT_SUBJECT.to_owned());
    let host = host?;
    // JavaMail's `mail.smtp.ssl.trust`: `*` trusts every host, else the hosts listed (for
    // TLS from the first byte and for STARTTLS alike).
    let trust_any = match trust {
        None => false,
        Some("*") => true,
        Some(t) if t.split_whitespace().any(|h| h.eq_ignore_ascii_case(host)) => true,
        Some(t) => {
            r.bad(
                "email.ssl.trust",
                format!(
                    "{t:?} does not name email.host {host:?}: its certificate would not be \
                     trusted (name it, or use *)"
                ),
            );
            false
        }
    };
    let security = if use_ssl {
        Security::Tls { trust_any }
    } else {
        Security::StartTlsIfOffered { trust_any }
    };
    Some(Channel::Email(EmailSettings {
        host: host.to_owned(),
        port: port?,
        username: username?.to_owned(),
        password: password?.to_owned(),
        security,
        subject,
        from: from?.into_iter().next()?,
        to: to?,
        cc,
        bcc,
        debug,
    }))
}

#[cfg(feature = "http")]
fn webhook(r: &mut Reader<'_>, prefix: &str, dingtalk: bool) -> Option<WebhookSettings> {
    let handler = if dingtalk { "DINGTALK" } else { "WECHAT" };
    let url = r.webhook(&format!("{prefix}.webhook"), handler);
    let connect = r.positive(
        &format!("{prefix}.connectTimeoutMilliseconds"),
        DEFAULT_CONNECT_MS,
    );
    let read = r.positive(
        &format!("{prefix}.readTimeoutMilliseconds"),
        DEFAULT_READ_MS,
    );
    let (keyword, secret) = if dingtalk {
        (
            r.props
                .get("dingtalk.keyword")
                .filter(|k| !k.is_empty())
                .cloned(),
            r.props
                .get("dingtalk.secret")
                .filter(|s| !s.is_empty())
                .cloned(),
        )
    } else {
        (None, None)
    };
    Some(WebhookSettings {
        url: url?,
        connect_timeout: Duration::from_millis(connect),
        read_timeout: Duration::from_millis(read),
        keyword,
        secret,
    })
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

    fn problems(handler: ErrorHandlerType, pairs: &[(&str, &str)]) -> Vec<String> {
        match read(handler, &props(pairs)) {
            Ok(_) => Vec::new(),
            Err(p) => p.iter().map(ToString::to_string).collect(),
        }
    }

    const MAIL: &[(&str, &str)] = &[
        ("email.host", "smtp.example.com"),
        ("email.port", "465"),
        ("email.username", "robot"),
        ("email.password", "secret"),
        ("email.from", "robot@example.com"),
        ("email.to", "a@example.com, b@example.com"),
    ];

    #[test]
    // Without the `http` feature EMAIL is the only channel.
    #[cfg_attr(not(feature = "http"), allow(irrefutable_let_patterns))]
    fn email_defaults_are_elasticjobs() {
        let Ok(Some(s)) = read(ErrorHandlerType::Email, &props(MAIL)) else {
            panic!("accepted");
        };
        assert_eq!(s.window, DEFAULT_WINDOW);
        let Channel::Email(e) = s.channel else {
            panic!("email")
        };
        assert_eq!(e.subject, "ElasticJob error message");
        assert_eq!(e.security, Security::Tls { trust_any: false });
        assert_eq!(e.to.len(), 2);
        assert!(!e.debug);
    }

    #[test]
    fn email_requires_elasticjobs_keys_and_a_port() {
        let m = problems(ErrorHandlerType::Email, &[("email.port", "0")]);
        for key in [
            "email.host",
            "email.username",
            "email.password",
            "email.from",
            "email.to",
        ] {
            assert!(
                m.iter().any(|p| p.contains(key) && p.contains("required")),
                "{key}: {m:?}"
            );
        }
        assert!(
            m.iter()
                .any(|p| p.contains("email.port") && p.contains("not a port"))
        );
        let mut bad = MAIL.to_vec();
        bad.push(("email.port", "70000"));
        bad.push(("email.protocol", "smtp"));
        bad.push(("email.useSsl", "yes"));
        bad.push(("email.hots", "x"));
        let m = problems(ErrorHandlerType::Email, &bad);
        assert!(
            m.iter().any(|p| p.contains("\"70000\" is not a port")),
            "{m:?}"
        );
        assert!(
            m.iter().any(|p| p.contains("email.protocol: unknown prop")),
            "{m:?}"
        );
        assert!(
            m.iter().any(|p| p.contains("neither true nor false")),
            "{m:?}"
        );
        assert!(
            m.iter().any(|p| p.contains("did you mean `email.host`")),
            "{m:?}"
        );
    }

    #[cfg(feature = "http")]
    #[test]
    fn webhooks_are_required_and_timeouts_positive() {
        let m = problems(
            ErrorHandlerType::Dingtalk,
            &[("dingtalk.readTimeoutMilliseconds", "-1")],
        );
        assert!(
            m.iter()
                .any(|p| p.contains("dingtalk.webhook: is required")),
            "{m:?}"
        );
        assert!(
            m.iter().any(|p| p.contains("not a positive integer")),
            "{m:?}"
        );
        let m = problems(ErrorHandlerType::Wechat, &[("wechat.webhook", "ftp://x")]);
        assert!(m.iter().any(|p| p.contains("not an http://")), "{m:?}");
        let ok = read(
            ErrorHandlerType::Wechat,
            &props(&[
                (
                    "wechat.webhook",
                    "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k",
                ),
                (WINDOW_PROP, "5000"),
            ]),
        );
        let Ok(Some(s)) = ok else { panic!("{ok:?}") };
        assert_eq!(s.window, Duration::from_secs(5));
        let Channel::Wechat(w) = s.channel else {
            panic!("wechat")
        };
        assert_eq!(w.connect_timeout, Duration::from_millis(3000));
        assert_eq!(w.read_timeout, Duration::from_millis(5000));
    }

    #[cfg(not(feature = "http"))]
    #[test]
    fn webhooks_without_the_http_feature_are_refused_not_skipped() {
        for handler in [ErrorHandlerType::Wechat, ErrorHandlerType::Dingtalk] {
            let m = problems(handler, &[]);
            assert_eq!(m.len(), 1, "{m:?}");
            assert!(m[0].contains("build it with its `http` feature"), "{m:?}");
        }
    }

    #[test]
    fn notifier_props_of_another_handler_are_refused() {
        let m = problems(ErrorHandlerType::Log, &[("dingtalk.webhook", "http://x/")]);
        assert!(
            m.iter().any(|p| p
                .contains("configures the DINGTALK error handler, but jobErrorHandlerType is LOG")),
            "{m:?}"
        );
        let m = problems(ErrorHandlerType::Throw, &[(WINDOW_PROP, "1000")]);
        assert!(m.iter().any(|p| p.contains("only the EMAIL")), "{m:?}");
        assert_eq!(read(ErrorHandlerType::Log, &props(&[])), Ok(None));
    }
}
