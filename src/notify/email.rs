//! The `EMAIL` notifier: one HTML mail per message through SMTP (lettre), authenticated with
//! `email.username` / `email.password` as ElasticJob does.
//!
//! `email.useSsl: true` (ElasticJob's default) connects with TLS from the first byte (SMTPS,
//! as JavaMail's SSL socket factory); `false` upgrades with STARTTLS when the server offers
//! it, and sends in clear otherwise (JavaMail's plain SMTP never upgrades). `email.ssl.trust`
//! naming the host (or `*`) accepts its certificate unchecked, as JavaMail's `ssl.trust`
//! (for both).

use std::time::Duration;

use lettre::message::header::{ContentTransferEncoding, ContentType};
use lettre::message::{Body, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

/// How long one SMTP command may take, and a whole mail (connection to `QUIT`) at most.
pub const SMTP_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// See [`SMTP_COMMAND_TIMEOUT`].
pub const SMTP_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// How the connection to the SMTP server is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    /// TLS from the first byte (`email.useSsl: true`); `trust_any`: the certificate is not
    /// checked (`email.ssl.trust` names the host or is `*`).
    Tls {
        /// Whether any certificate is accepted.
        trust_any: bool,
    },
    /// STARTTLS when the server offers it, clear otherwise (`email.useSsl: false`);
    /// `trust_any` as for [`Security::Tls`].
    StartTlsIfOffered {
        /// Whether any certificate is accepted.
        trust_any: bool,
    },
}

/// The `EMAIL` handler's settings.
#[derive(Clone, PartialEq, Eq)]
pub struct EmailSettings {
    /// `email.host`.
    pub host: String,
    /// `email.port`.
    pub port: u16,
    /// `email.username`.
    pub username: String,
    /// `email.password`.
    pub password: String,
    /// `email.useSsl` and `email.ssl.trust`.
    pub security: Security,
    /// `email.subject`.
    pub subject: String,
    /// `email.from`.
    pub from: Mailbox,
    /// `email.to` (a comma list).
    pub to: Vec<Mailbox>,
    /// `email.cc`.
    pub cc: Vec<Mailbox>,
    /// `email.bcc`.
    pub bcc: Vec<Mailbox>,
    /// `email.debug`: each mail's SMTP outcome is logged at info level.
    pub debug: bool,
}

impl std::fmt::Debug for EmailSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("username", &self.username)
            .field("password", &"<hidden>")
            .field("security", &self.security)
            .field("subject", &self.subject)
            .field("from", &self.from)
            .field("to", &self.to)
            .field("cc", &self.cc)
            .field("bcc", &self.bcc)
            .field("debug", &self.debug)
            .finish()
    }
}

/// The mail of a message: ElasticJob's form (a multipart whose one part is the text as HTML,
/// UTF-8), the body in base64 so that no line of an error is cut or re-wrapped.
pub fn build_message(settings: &EmailSettings, text: &str) -> Result<Message, String> {
    let mut builder = Message::builder()
        .from(settings.from.clone())
        .subject(settings.subject.clone())
        .date_now();
    for m in &settings.to {
        builder = builder.to(m.clone());
    }
    for m in &settings.cc {
        builder = builder.cc(m.clone());
    }
    for m in &settings.bcc {
        builder = builder.bcc(m.clone());
    }
    let body = Body::new_with_encoding(html(text), ContentTransferEncoding::Base64)
        .map_err(|_| "the message cannot be encoded in base64".to_owned())?;
    let part = SinglePart::builder()
        .header(ContentType::TEXT_HTML)
        .body(body);
    builder
        .multipart(MultiPart::mixed().singlepart(part))
        .map_err(|e| format!("cannot build the mail: {e}"))
}

/// The text as HTML: escaped, lines kept.
pub fn html(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    out.push_str("<pre>");
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out.push_str("</pre>");
    out
}

fn transport(s: &EmailSettings) -> Result<AsyncSmtpTransport<Tokio1Executor>, String> {
    let tls = |trust_any: bool| {
        TlsParameters::builder(s.host.clone())
            .dangerous_accept_invalid_certs(trust_any)
            .build()
            .map_err(|e| format!("cannot set up TLS for {}: {e}", s.host))
    };
    let tls = match s.security {
        Security::Tls { trust_any } => Tls::Wrapper(tls(trust_any)?),
        Security::StartTlsIfOffered { trust_any } => Tls::Opportunistic(tls(trust_any)?),
    };
    Ok(
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(s.host.clone())
            .port(s.port)
            .tls(tls)
            .credentials(Credentials::new(s.username.clone(), s.password.clone()))
            .timeout(Some(SMTP_COMMAND_TIMEOUT))
            .build(),
    )
}

/// Sends the message as a mail.
pub async fn send(settings: &EmailSettings, text: &str) -> Result<(), String> {
    let mail = build_message(settings, text)?;
    let transport = transport(settings)?;
    let where_ = format!("{}:{}", settings.host, settings.port);
    match tokio::time::timeout(SMTP_SEND_TIMEOUT, transport.send(mail)).await {
        Err(_) => Err(format!(
            "the SMTP server {where_} did not take the mail within {SMTP_SEND_TIMEOUT:?}"
        )),
        Ok(Err(e)) => Err(format!("the SMTP server {where_} refused the mail: {e}")),
        Ok(Ok(response)) => {
            if settings.debug {
                tracing::info!(
                    server = %where_,
                    "email.debug: the SMTP server answered {} {}",
                    response.code(),
                    response.message().collect::<Vec<_>>().join(" ")
                );
            }
            Ok(())
        }
    }
}
