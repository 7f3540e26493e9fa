//! Logins and sessions: the session cookie (`HttpOnly`, `SameSite=Strict`, `Max-Age`), the
//! CSRF token every write must carry, the role check every write passes, and a brake on
//! password guessing.
//!
//! Sessions live in the console's memory: a restart logs everyone out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::Role;

/// The session cookie's name.
pub const COOKIE: &str = "shardjob_console";

/// The header a script's write carries the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The form field a page's write carries the CSRF token in.
pub const CSRF_FIELD: &str = "csrf";

/// Failed logins of one user name before it is locked for [`LOCKOUT`].
pub const MAX_FAILURES: u32 = 5;

/// How long a user name stays locked after [`MAX_FAILURES`] failures in a row.
pub const LOCKOUT: Duration = Duration::from_secs(60);

/// A logged-in user's session.
#[derive(Debug, Clone)]
pub struct Session {
    /// The session id (the cookie's value).
    pub id: String,
    /// The user.
    pub user: String,
    /// The user's role when they logged in (a role changed in the file applies at the next
    /// login).
    pub role: Role,
    /// The token every write of this session must carry.
    pub csrf: String,
    /// When the session ends.
    pub expires: Instant,
    /// A message for the next page (the outcome of the last operation): `ok` and text.
    pub flash: Option<(bool, String)>,
}

/// The sessions and the login brake.
#[derive(Debug, Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
    failures: Mutex<HashMap<String, (u32, Option<Instant>)>>,
}

/// 32 random bytes as hex.
pub fn random_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| format!("no random source: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Compares two secrets in time that depends on their length only.
pub fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a session for `user` lasting `ttl`.
    pub fn create(&self, user: &str, role: Role, ttl: Duration) -> Result<Session, String> {
        let now = Instant::now();
        let session = Session {
            id: random_token()?,
            user: user.to_owned(),
            role,
            csrf: random_token()?,
            expires: now + ttl,
            flash: None,
        };
        let mut map = self.lock();
        map.retain(|_, s| s.expires > now);
        map.insert(session.id.clone(), session.clone());
        Ok(session)
    }

    /// The live session of that id.
    pub fn get(&self, id: &str) -> Option<Session> {
        let mut map = self.lock();
        let s = map.get(id)?;
        if s.expires <= Instant::now() {
            map.remove(id);
            return None;
        }
        Some(s.clone())
    }

    /// Ends a session.
    pub fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Ends every session of a user (their password or role changed).
    pub fn remove_user(&self, user: &str) {
        self.lock().retain(|_, s| s.user != user);
    }

    /// Leaves a message for the session's next page.
    pub fn flash(&self, id: &str, ok: bool, text: String) {
        if let Some(s) = self.lock().get_mut(id) {
            s.flash = Some((ok, text));
        }
    }

    /// Takes the session's message, if any.
    pub fn take_flash(&self, id: &str) -> Option<(bool, String)> {
        self.lock().get_mut(id).and_then(|s| s.flash.take())
    }

    /// Whether the user name is locked after too many failures; how long it still is.
    pub fn locked(&self, user: &str) -> Option<Duration> {
        let failures = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (_, until) = failures.get(user)?;
        let left = until.as_ref()?.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// Counts a failed login of `user`.
    pub fn failed(&self, user: &str) {
        let mut failures = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if failures.len() > 10_000 {
            // Many names guessed: forget the oldest state rather than grow.
            failures.clear();
        }
        let entry = failures.entry(user.to_owned()).or_insert((0, None));
        if entry.1.is_some_and(|t| t <= Instant::now()) {
            *entry = (0, None);
        }
        entry.0 += 1;
        if entry.0 >= MAX_FAILURES {
            entry.1 = Some(Instant::now() + LOCKOUT);
        }
    }

    /// Forgets the failures of `user` (a login succeeded).
    pub fn succeeded(&self, user: &str) {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(user);
    }
}

/// The `Set-Cookie` value of a new session.
pub fn session_cookie(id: &str, ttl: Duration, secure: bool) -> String {
    format!(
        "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        ttl.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that ends the session in the browser.
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The session id in a `Cookie` header, if any.
pub fn cookie_value(header: &str) -> Option<&str> {
    header
        .split(';')
        .map(str::trim)
        .find_map(|pair| pair.strip_prefix(COOKIE)?.strip_prefix('='))
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_and_end() {
        let s = Sessions::default();
        let a = s
            .create("alice", Role::Admin, Duration::from_secs(60))
            .unwrap();
        assert_eq!(a.id.len(), 64);
        assert_ne!(a.id, a.csrf);
        assert_eq!(s.get(&a.id).unwrap().user, "alice");
        let short = s.create("bob", Role::Viewer, Duration::ZERO).unwrap();
        assert!(s.get(&short.id).is_none(), "expired at once");
        s.flash(&a.id, true, "done".into());
        assert_eq!(s.take_flash(&a.id), Some((true, "done".into())));
        assert_eq!(s.take_flash(&a.id), None);
        s.remove(&a.id);
        assert!(s.get(&a.id).is_none());
    }

    #[test]
    fn a_user_name_locks_after_failures() {
        let s = Sessions::default();
        for _ in 0..MAX_FAILURES - 1 {
            s.failed("eve");
        }
        assert!(s.locked("eve").is_none());
        s.failed("eve");
        assert!(s.locked("eve").is_some());
        assert!(s.locked("alice").is_none());
        s.succeeded("eve");
        assert!(s.locked("eve").is_none());
    }

    #[test]
    fn cookies_and_secrets() {
        let c = session_cookie("abc", Duration::from_secs(3600), false);
        assert_eq!(
            c,
            "shardjob_console=abc; Path=/; HttpOnly; SameSite=Strict; Max-Age=3600"
        );
        assert!(session_cookie("abc", Duration::ZERO, true).ends_with("; Secure"));
        assert_eq!(cookie_value("a=1; shardjob_console=xyz; b=2"), Some("xyz"));
        assert_eq!(cookie_value("shardjob_console_x=1"), None);
        assert_eq!(cookie_value("shardjob_console="), None);
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
    }
}
