//! Instance identity: the `{ip}@-@{pid}` id that ElasticJob writes under `instances/`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The delimiter ElasticJob puts between the parts of an instance id and of a task id.
pub const DELIMITER: &str = "@-@";

/// The id of one scheduler instance, `{ip}@-@{pid}` by default.
///
/// The id names the instance's ephemeral node `instances/{id}` and is the value of
/// `sharding/{item}/instance`. Its server part (before the first `@-@`) names the `servers/{ip}`
/// node whose ENABLED/DISABLED state applies to the instance. An id may be overridden by the
/// operator; it must then still be a valid registry node name (see [`InstanceId::new`]).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct InstanceId(String);

/// Why a string is not a valid instance id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstanceIdError {
    /// The id is empty.
    #[error("instance id is empty")]
    Empty,
    /// The id contains a character that cannot appear in a registry node name.
    #[error("instance id {0:?} contains '/', whitespace or a control character")]
    BadCharacter(String),
    /// The server part of the id (before the first `@-@`) is empty, `.` or `..`, so it cannot
    /// name a `servers/{ip}` node.
    #[error("instance id {0:?} has no usable server part before '@-@'")]
    BadServerPart(String),
}

impl InstanceId {
    /// Checks and wraps an id. It must be non-empty and hold no `/`, whitespace or control
    /// character, so that it is a single registry node name; its server part (see
    /// [`InstanceId::server_ip`]) must not be empty, `.` or `..`.
    pub fn new(id: impl Into<String>) -> Result<Self, InstanceIdError> {
        let id = Self(id.into());
        if id.0.is_empty() {
            return Err(InstanceIdError::Empty);
        }
        if has_bad_character(&id.0) {
            return Err(InstanceIdError::BadCharacter(id.0));
        }
        if matches!(id.server_ip(), "" | "." | "..") {
            return Err(InstanceIdError::BadServerPart(id.0));
        }
        Ok(id)
    }

    /// The ElasticJob form `{ip}@-@{pid}`.
    pub fn from_parts(server_ip: &str, pid: u32) -> Result<Self, InstanceIdError> {
        Self::new(format!("{server_ip}{DELIMITER}{pid}"))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The server part of the id: everything before the first `@-@`, or the whole id if it has
    /// no delimiter. This names the `servers/{ip}` node that enables or disables the instance.
    pub fn server_ip(&self) -> &str {
        // A byte scan: `str::find` sets up a general substring search on every call, which
        // costs more than the scan of an id this short (the view asks for each owner).
        let at = self
            .0
            .as_bytes()
            .windows(DELIMITER.len())
            .position(|w| matches!(w, [b'@', b'-', b'@']));
        match at {
            Some(at) => &self.0[..at],
            None => &self.0,
        }
    }
}

/// Whether `id` holds a `/`, whitespace or a control character. Ids are nearly always ASCII and
/// every record a machine reads names one: those are checked a byte at a time. (Among ASCII
/// characters, `char::is_whitespace` adds only the vertical tab to `u8::is_ascii_whitespace`,
/// and that is a control character.)
fn has_bad_character(id: &str) -> bool {
    if id.is_ascii() {
        id.bytes()
            .any(|b| b == b'/' || b.is_ascii_whitespace() || b.is_ascii_control())
    } else {
        id.chars()
            .any(|c| c == '/' || c.is_whitespace() || c.is_control())
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl FromStr for InstanceId {
    type Err = InstanceIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for InstanceId {
    type Error = InstanceIdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<InstanceId> for String {
    fn from(id: InstanceId) -> String {
        id.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_ip_is_the_part_before_the_first_delimiter() {
        let id = InstanceId::from_parts("192.168.1.10", 200).unwrap();
        assert_eq!(id.as_str(), "192.168.1.10@-@200");
        assert_eq!(id.server_ip(), "192.168.1.10");
        assert_eq!(InstanceId::new("custom").unwrap().server_ip(), "custom");
    }

    #[test]
    fn rejects_names_that_are_not_one_node() {
        assert_eq!(InstanceId::new(""), Err(InstanceIdError::Empty));
        assert!(matches!(
            InstanceId::new("a/b"),
            Err(InstanceIdError::BadCharacter(_))
        ));
        assert!(matches!(
            InstanceId::new("a b"),
            Err(InstanceIdError::BadCharacter(_))
        ));
        assert!(matches!(
            InstanceId::new("@-@12"),
            Err(InstanceIdError::BadServerPart(_))
        ));
        assert!(matches!(
            InstanceId::new(".."),
            Err(InstanceIdError::BadServerPart(_))
        ));
    }

    #[test]
    fn the_byte_checks_agree_with_the_char_checks() {
        for b in 0u8..=127 {
            let c = char::from(b);
            let by_char = c == '/' || c.is_whitespace() || c.is_control();
            assert_eq!(has_bad_character(&format!("a{c}b")), by_char, "{b:#x}");
        }
        assert!(has_bad_character("\u{e9}\u{85}"));
        assert!(!has_bad_character("\u{e9}@-@1"));
        assert_eq!(
            InstanceId::new("a@b-@@-@1@-@2").unwrap().server_ip(),
            "a@b-@"
        );
    }
}
