//! shardjob's web console: every job of every registry, live, with users and roles.
//!
//! `shardjob console --listen 127.0.0.1:8088 --config console.yaml` serves it. One binary, its
//! style sheet and script built in (no Node toolchain anywhere); server-rendered pages that a
//! little script keeps live; a JSON API under `/api` ([`api`]) with the same data for scripts.
//!
//! - **Registries**: several, named, added and removed on the registries page and kept in the
//!   configuration file ([`config`]): ZooKeeper (digest credentials), etcd (user and
//!   password), `mem://` (a demo whose jobs run inside the console). ElasticJob 3.0.x
//!   namespaces are read and operated by ElasticJob's rules ([`shardjob_ops`]).
//! - **Live, not polled**: per registry one client and one watch of the namespace's root feed a
//!   [`shardjob_ops::NamespaceView`]; pages follow it through server-sent events ([`events`]).
//!   Listing a thousand jobs makes no registry request at all.
//! - **Users and roles** ([`users`], [`auth`]): argon2id password hashes in the file, no
//!   default user or password ever (the console refuses to start without a user), roles
//!   `admin` and `viewer` enforced by the server on every write, session cookies `HttpOnly`
//!   and `SameSite=Strict` with an expiry, a CSRF token on every write, a brake on password
//!   guessing, and every write logged (`shardjob_console::audit`) with who did what.
//! - **Pages** ([`pages`]): overview, jobs, a job (sharding table, every operation, the
//!   configuration form with each problem next to its field), servers, a server, history
//!   (ElasticJob's execution log and status trace, with its console's filters).
#![warn(missing_docs)]

pub mod actions;
pub mod api;
mod assets;
pub mod auth;
pub mod config;
#[cfg(feature = "mem")]
mod demo;
pub mod events;
pub mod html;
pub mod hub;
pub mod pages;
pub mod server;
pub mod users;

use std::net::SocketAddr;
use std::path::Path;

pub use config::{ConfigError, ConsoleConfig, RegistryEntry, Role, UserEntry};
pub use server::{App, ServeError, router, serve};

/// The address the console listens on unless told otherwise (loopback only).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8088";

/// The configuration file used unless told otherwise.
pub const DEFAULT_CONFIG: &str = "console.yaml";

/// Adds a user to the configuration file (creating the file if needed), or replaces the
/// password and role of one that exists; returns whether the user is new.
pub fn add_user(path: &Path, name: &str, role: Role, password: &str) -> Result<bool, ConfigError> {
    config::check_name("user name", name)?;
    let hash = users::hash_password(password).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let mut config = ConsoleConfig::load(path)?;
    let new = config
        .users
        .insert(
            name.to_owned(),
            UserEntry {
                role,
                password_hash: hash,
            },
        )
        .is_none();
    config.save(path)?;
    Ok(new)
}

/// Parses a listen address; a bare port binds 127.0.0.1.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse::<SocketAddr>().map_err(|_| {
        format!("--listen {text:?}: expected HOST:PORT with an IP address, say 127.0.0.1:8088")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_added_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("console.yaml");
        assert!(add_user(&path, "alice", Role::Admin, "correct horse battery").unwrap());
        assert!(!add_user(&path, "alice", Role::Viewer, "another long password").unwrap());
        let config = ConsoleConfig::load(&path).unwrap();
        assert_eq!(config.users["alice"].role, Role::Viewer);
        assert!(users::verify_password(
            "another long password",
            &config.users["alice"].password_hash
        ));
        assert!(add_user(&path, "bob", Role::Admin, "short").is_err());
        assert!(add_user(&path, "b ob", Role::Admin, "correct horse battery").is_err());
        assert_eq!(
            parse_listen("9000").unwrap(),
            "127.0.0.1:9000".parse().unwrap()
        );
        assert!(parse_listen("localhost:1").is_err());
    }
}
