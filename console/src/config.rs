//! The console's configuration file (`console.yaml`): its users with their roles and
//! argon2-hashed passwords, the registries it shows, and a few settings.
//!
//! ```yaml
//! session_hours: 8
//! users:
//!   alice:
//!     role: admin
//!     password_hash: $argon2id$v=19$m=19456,t=2,p=1$…
//! registries:
//!   - name: prod
//!     url: zk://10.0.0.5:2181/shop
//!     user: ops            # ZooKeeper digest / etcd user (optional)
//!     password: s3cret
//!     history: postgres://console@db/jobs   # the job history's database (optional)
//!   - name: demo
//!     url: mem://          # jobs that run inside the console, for a look around
//! ```
//!
//! The file holds password hashes and registry passwords: it is written with mode 0600, through
//! a temporary file renamed over it (a crash never leaves half a file). Unknown keys are
//! refused, never ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use shardjob::registry_url::RegistryUrl;
use shardjob_history::DatabaseUrl;

/// The default session lifetime, in hours.
pub const DEFAULT_SESSION_HOURS: u32 = 8;

/// The longest session lifetime accepted, in hours (a week).
pub const MAX_SESSION_HOURS: u32 = 24 * 7;

/// A user's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads everything and operates: trigger, disable, shutdown, edit, remove, registries.
    Admin,
    /// Reads everything, changes nothing (the server refuses every write).
    Viewer,
}

impl Role {
    /// The role's name as the file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Viewer => "viewer",
        }
    }

    /// Whether the role may change anything.
    pub fn can_write(self) -> bool {
        self == Role::Admin
    }
}

impl std::str::FromStr for Role {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Role, ConfigError> {
        match s {
            "admin" => Ok(Role::Admin),
            "viewer" => Ok(Role::Viewer),
            other => Err(ConfigError::Invalid(format!(
                "unknown role {other:?}: admin (operates) or viewer (reads only)"
            ))),
        }
    }
}

/// A user of the console.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    /// What the user may do.
    pub role: Role,
    /// The password's argon2 hash in PHC form (`$argon2id$…`).
    pub password_hash: String,
}

/// A registry the console shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryEntry {
    /// The name the console shows it under (letters, digits, `.`, `_`, `-`).
    pub name: String,
    /// `zk://host:port[,host:port]/namespace`, `etcd://host:port[,…]/namespace` or `mem://`
    /// (a demo: a few jobs run inside the console), without credentials.
    pub url: String,
    /// The ZooKeeper digest user or etcd user, if the registry wants one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Its password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The job history's database (`sqlite://…`, `postgres://…`, `mysql://…`), if the jobs
    /// record one: the history page and the overview's runs per minute read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<String>,
}

impl RegistryEntry {
    /// The URL with the entry's credentials, checked.
    pub fn registry_url(&self) -> Result<RegistryUrl, ConfigError> {
        let url = RegistryUrl::parse(self.url.trim())
            .map_err(|e| ConfigError::Invalid(format!("registry {:?}: {e}", self.name)))?;
        if url.credentials().is_some() {
            return Err(ConfigError::Invalid(format!(
                "registry {:?}: put the user and password in `user` and `password`, not in the URL",
                self.name
            )));
        }
        url.with_credentials_from(self.user.clone(), self.password.clone())
            .map_err(|e| ConfigError::Invalid(format!("registry {:?}: {e}", self.name)))
    }

    /// The history database's URL, checked, if there is one.
    pub fn history_url(&self) -> Result<Option<DatabaseUrl>, ConfigError> {
        self.history
            .as_deref()
            .filter(|h| !h.trim().is_empty())
            .map(|h| {
                DatabaseUrl::parse(h.trim()).map_err(|e| {
                    ConfigError::Invalid(format!("registry {:?}: history: {e}", self.name))
                })
            })
            .transpose()
    }

    /// Checks the name, the URL and the history URL.
    pub fn check(&self) -> Result<(), ConfigError> {
        check_name("registry name", &self.name)?;
        self.registry_url()?;
        self.history_url()?;
        Ok(())
    }
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    /// How long a login lasts, in hours (1 to a week; 8 by default).
    #[serde(default = "default_session_hours")]
    pub session_hours: u32,
    /// Mark the session cookie `Secure` (when the console is served over HTTPS by a proxy).
    #[serde(default, skip_serializing_if = "is_false")]
    pub secure_cookie: bool,
    /// The users, by name.
    #[serde(default)]
    pub users: BTreeMap<String, UserEntry>,
    /// The registries, in the order the console lists them.
    #[serde(default)]
    pub registries: Vec<RegistryEntry>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn default_session_hours() -> u32 {
    DEFAULT_SESSION_HOURS
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            session_hours: DEFAULT_SESSION_HOURS,
            secure_cookie: false,
            users: BTreeMap::new(),
            registries: Vec::new(),
        }
    }
}

/// Why the configuration cannot be read, used or written.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not the console's YAML.
    #[error("{path}: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// What is wrong, with its line and column.
        message: String,
    },
    /// A value is not acceptable.
    #[error("{0}")]
    Invalid(String),
}

/// Checks a user or registry name: 1 to 64 of letters, digits, `.`, `_`, `-`.
pub fn check_name(what: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Invalid(format!(
            "{what} {name:?}: use 1 to 64 letters, digits, '.', '_' or '-'"
        )))
    }
}

impl ConsoleConfig {
    /// Reads the file; a file that does not exist is an empty configuration.
    pub fn load(path: &Path) -> Result<ConsoleConfig, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(ConsoleConfig::default());
            }
            Err(source) => {
                return Err(ConfigError::Io {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let config = ConsoleConfig::parse(&text).map_err(|e| match e {
            ConfigError::Invalid(message) => ConfigError::Syntax {
                path: path.to_owned(),
                message,
            },
            other => other,
        })?;
        Ok(config)
    }

    /// Reads and checks the YAML text.
    pub fn parse(text: &str) -> Result<ConsoleConfig, ConfigError> {
        if text.trim().is_empty() {
            return Ok(ConsoleConfig::default());
        }
        let config: ConsoleConfig =
            serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        config.check()?;
        Ok(config)
    }

    /// Checks every value: the names, the URLs, the hashes, no registry named twice.
    pub fn check(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_SESSION_HOURS).contains(&self.session_hours) {
            return Err(ConfigError::Invalid(format!(
                "session_hours: {} is out of range 1..={MAX_SESSION_HOURS}",
                self.session_hours
            )));
        }
        for (name, user) in &self.users {
            check_name("user name", name)?;
            crate::users::check_hash(&user.password_hash)
                .map_err(|e| ConfigError::Invalid(format!("user {name:?}: {e}")))?;
        }
        let mut seen = std::collections::BTreeSet::new();
        for r in &self.registries {
            r.check()?;
            if !seen.insert(r.name.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "registry {:?} is listed twice",
                    r.name
                )));
            }
        }
        Ok(())
    }

    /// Writes the file: mode 0600, through a temporary file renamed over it.
    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        let io = |source| ConfigError::Io {
            path: path.to_owned(),
            source,
        };
        let text = serde_yaml_ng::to_string(self).map_err(|e| {
            ConfigError::Invalid(format!("cannot write the configuration as YAML: {e}"))
        })?;
        let text = format!(
            "# shardjob console configuration: users (argon2 hashes), registries.\n\
             # Written by `shardjob console`; add users with `shardjob console --add-user`.\n{text}"
        );
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "console.yaml".to_owned());
        let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        {
            use std::io::Write;
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                options.mode(0o600);
            }
            let mut file = options.open(&tmp).map_err(io)?;
            file.write_all(text.as_bytes()).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })
    }

    /// The registry of that name.
    pub fn registry(&self, name: &str) -> Option<&RegistryEntry> {
        self.registries.iter().find(|r| r.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_checks_and_writes_the_file() {
        let hash = crate::users::hash_password("correct horse").unwrap();
        let text = format!(
            "session_hours: 2\nusers:\n  alice:\n    role: admin\n    password_hash: '{hash}'\n\
             registries:\n  - name: prod\n    url: zk://127.0.0.1:2181/shop\n    user: ops\n    \
             password: pw\n    history: sqlite:///tmp/h.db\n  - name: demo\n    url: mem://\n"
        );
        let config = ConsoleConfig::parse(&text).unwrap();
        assert_eq!(config.session_hours, 2);
        assert_eq!(config.users["alice"].role, Role::Admin);
        let prod = config.registry("prod").unwrap();
        assert_eq!(
            prod.registry_url().unwrap().to_string(),
            "zk://ops:***@127.0.0.1:2181/shop"
        );
        assert!(prod.history_url().unwrap().is_some());

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("console.yaml");
        config.save(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(ConsoleConfig::load(&path).unwrap(), config);
        assert_eq!(
            ConsoleConfig::load(&dir.path().join("none.yaml")).unwrap(),
            ConsoleConfig::default()
        );
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        let bad = [
            ("unknown: 1\n", "unknown field"),
            ("session_hours: 0\n", "out of range"),
            (
                "registries:\n  - name: a\n    url: zk://u:p@h:1/ns\n",
                "not in the URL",
            ),
            ("registries:\n  - name: a b\n    url: mem://\n", "letters"),
            (
                "registries:\n  - name: a\n    url: mem://\n  - name: a\n    url: mem://\n",
                "twice",
            ),
            (
                "registries:\n  - name: a\n    url: zk://h:1/ns\n    history: oracle://x\n",
                "history",
            ),
            (
                "users:\n  bob:\n    role: admin\n    password_hash: plain\n",
                "bob",
            ),
            (
                "users:\n  bob:\n    role: root\n    password_hash: x\n",
                "unknown variant",
            ),
        ];
        for (text, says) in bad {
            let e = ConsoleConfig::parse(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}
