//! The `WECHAT` and `DINGTALK` notifiers: a JSON text message POSTed to a group robot's
//! webhook, `{"msgtype":"text","text":{"content":"…"}}`, sent when the answer is HTTP 200
//! with `errcode` 0 (as ElasticJob checks it).
//!
//! DingTalk's `dingtalk.keyword` is put before the text (a robot with a keyword rule drops
//! messages without it); with `dingtalk.secret` set, the URL gets `timestamp` (milliseconds)
//! and `sign`: the base64 of HMAC-SHA256 keyed by the secret over `"{timestamp}\n{secret}"`,
//! URL-encoded.

use std::time::Duration;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A webhook notifier's settings.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// `wechat.webhook` / `dingtalk.webhook`.
    pub url: reqwest::Url,
    /// `*.connectTimeoutMilliseconds` (default 3000).
    pub connect_timeout: Duration,
    /// `*.readTimeoutMilliseconds` (default 5000).
    pub read_timeout: Duration,
    /// `dingtalk.keyword`.
    pub keyword: Option<String>,
    /// `dingtalk.secret`.
    pub secret: Option<String>,
}

impl std::fmt::Debug for WebhookSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A robot's URL carries its access token: only the host is shown.
        f.debug_struct("WebhookSettings")
            .field("host", &self.url.host_str())
            .field("connect_timeout", &self.connect_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("keyword", &self.keyword)
            .field("secret", &self.secret.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

/// The HTTP client of a webhook notifier, with its timeouts.
pub(super) fn client(s: &WebhookSettings) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(s.connect_timeout)
        .read_timeout(s.read_timeout)
        // A server that trickles its answer is cut off too.
        .timeout(s.connect_timeout + s.read_timeout)
        .build()
        .map_err(|e| e.to_string())
}

/// DingTalk's signature of a request at `timestamp_ms`: base64(HMAC-SHA256(key = secret,
/// `"{timestamp_ms}\n{secret}"`)), before URL encoding.
pub fn dingtalk_sign(secret: &str, timestamp_ms: i64) -> String {
    // HMAC takes a key of any length.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(format!("{timestamp_ms}\n{secret}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// The URL and JSON body of a message.
pub(super) fn request(
    s: &WebhookSettings,
    text: &str,
    timestamp_ms: i64,
) -> (reqwest::Url, String) {
    let mut url = s.url.clone();
    if let Some(secret) = &s.secret {
        url.query_pairs_mut()
            .append_pair("timestamp", &timestamp_ms.to_string())
            .append_pair("sign", &dingtalk_sign(secret, timestamp_ms));
    }
    let content = match &s.keyword {
        Some(k) => format!("{k}{text}"),
        None => text.to_owned(),
    };
    let body = serde_json::json!({"msgtype": "text", "text": {"content": content}});
    (url, body.to_string())
}

/// Posts the message.
pub(super) async fn post(
    http: &reqwest::Client,
    s: &WebhookSettings,
    text: &str,
    dingtalk: bool,
) -> Result<(), String> {
    let ts = if dingtalk {
        chrono::Utc::now().timestamp_millis()
    } else {
        0
    };
    let (url, body) = request(s, text, ts);
    let host = url.host_str().unwrap_or("?").to_owned();
    let response = http
        .post(url)
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/json; charset=utf-8",
        )
        .body(body)
        .send()
        .await
        .map_err(|e| format!("the webhook at {host} did not answer: {}", describe(&e)))?;
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .map_err(|e| format!("the webhook at {host} did not answer: {}", describe(&e)))?;
    if status != reqwest::StatusCode::OK {
        return Err(format!(
            "the webhook at {host} answered HTTP {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        ));
    }
    let answer: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("the webhook at {host} answered HTTP 200 with no JSON ({e})"))?;
    match answer.get("errcode") {
        Some(code) if code == 0 || code == "0" => Ok(()),
        code => Err(format!(
            "the webhook at {host} answered errcode {}: {}",
            code.map_or("(none)".to_owned(), ToString::to_string),
            answer.get("errmsg").and_then(|m| m.as_str()).unwrap_or("")
        )),
    }
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!("timed out ({e})")
    } else {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dingtalk_signature_matches_a_known_value() {
        // Computed independently: printf '1700000000000\nSECxyz' | openssl dgst -sha256
        // -hmac SECxyz -binary | base64
        assert_eq!(
            dingtalk_sign("SECxyz", 1_700_000_000_000),
            "0PUR1j8g85Xg3vlFV/UrEcxXfF5HpCAGzcjrNfyJoyg="
        );
    }

    #[test]
    fn a_signed_url_keeps_the_token_and_encodes_the_sign() {
        let s = WebhookSettings {
            url: reqwest::Url::parse("https://oapi.dingtalk.com/robot/send?access_token=T")
                .unwrap_or_else(|e| panic!("{e}")),
            connect_timeout: Duration::from_secs(3),
            read_timeout: Duration::from_secs(5),
            keyword: Some("[alert] ".to_owned()),
            secret: Some("SECxyz".to_owned()),
        };
        let (url, body) = request(&s, "it \"broke\"", 1_700_000_000_000);
        let sign = dingtalk_sign("SECxyz", 1_700_000_000_000);
        let encoded = sign
            .replace('+', "%2B")
            .replace('/', "%2F")
            .replace('=', "%3D");
        assert_eq!(
            url.as_str(),
            format!(
                "https://oapi.dingtalk.com/robot/send?access_token=T&timestamp=1700000000000&sign={encoded}"
            )
        );
        assert_eq!(
            body,
            r#"{"msgtype":"text","text":{"content":"[alert] it \"broke\""}}"#
        );
    }
}
