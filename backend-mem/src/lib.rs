//! An in-process shardjob registry: versioned nodes, sessions, ephemeral nodes, transactions and
//! recursive watches, with a controllable clock and fault hooks.
//!
//! It serves three purposes: several shardjob instances in one process coordinate through it for
//! real (the runtime's default, embedded registry), tests drive it through hooks to expire
//! sessions, cut clients off or delay watch events, and the deterministic simulator reuses its
//! [`Store`] with virtual time. It follows the registry model of
//! [`shardjob_core::registry`] strictly (the common ground of ZooKeeper and etcd), so code that
//! works against it does not lean on one backend's leniency.
//!
//! # Layers
//!
//! * [`Store`] (module [`store`]): synchronous and deterministic — no clock, no thread, no
//!   randomness. Every operation takes `now`; see the module documentation for the exact
//!   semantics (one revision per committed transaction, queued events for suspended clients,
//!   lazy expiry processing in session-id order).
//! * [`MemServer`]: a cloneable handle around a store and a [`MemClock`]. [`MemServer::connect`]
//!   gives a [`MemClient`], which implements [`Registry`](shardjob_core::registry::Registry).
//!
//! # Clocks
//!
//! * [`MemClock::system`] (the default): real time since the server was made. Connected clients
//!   heartbeat, so their sessions never expire by themselves; expiry comes from the hooks
//!   ([`MemServer::expire_session`], or [`MemServer::kill`] / [`MemServer::suspend`] and time
//!   passing). Deadlines are checked on every call; while one is pending, a small timer thread
//!   processes it on time and wakes the event streams, and exits when none is left.
//! * [`MemClock::manual`]: time stands still until [`MemServer::advance`]; nothing happens
//!   behind the test's back.
//!
//! # Sessions seen from a client
//!
//! A client has one session at a time. When it expires (and the client is not cut off) the
//! client gets a new session at once: its streams see
//! [`SessionEvent::Expired`](shardjob_core::registry::SessionEvent::Expired) of the old one and
//! then [`SessionEvent::Connected`](shardjob_core::registry::SessionEvent::Connected) of the new
//! one, like the ZooKeeper backend. A stream opened on a connected client gets `Connected` only
//! when the session changes later. A suspended client sees `Suspended`, then on resume
//! `Reconnected` and the node events it missed, in order (or `Expired` and `Connected` if the
//! session expired meanwhile). After [`Registry::close`](shardjob_core::registry::Registry)
//! streams end with `Closed`; a killed client's streams just end.
//!
//! # Hooks
//!
//! [`MemServer`]: `expire_session`, `suspend`, `resume`, `kill`, `hold_watches` /
//! `release_watches`, `delay_watches`, `set_watch_latency`, `advance`, `now`, `dump`,
//! `session_ids`, `session`, `is_alive`, `revision` and `with_store` for anything else.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use shardjob_backend_mem::MemServer;
//! use shardjob_core::registry::{CreateMode, NodePath, Registry, RegistryEvent, WatchEventKind};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let server = MemServer::manual();
//! let a = server.connect(Duration::from_secs(5));
//! let b = server.connect(Duration::from_secs(5));
//! let leader = NodePath::new("/leader")?;
//!
//! let mut events = b.watch(&NodePath::root()).await?;
//! a.create(&leader, b"a".to_vec(), CreateMode::Ephemeral).await?;
//! assert!(b.get(&leader).await?.is_some());
//!
//! // A's session expires: its ephemeral node vanishes and B is told.
//! let old = a.session().unwrap().id;
//! server.expire_session(old);
//! assert_eq!(b.get(&leader).await?, None);
//! let Some(RegistryEvent::Node(created)) = events.next().await else { panic!() };
//! let Some(RegistryEvent::Node(deleted)) = events.next().await else { panic!() };
//! assert_eq!((created.kind, deleted.kind), (WatchEventKind::Created, WatchEventKind::Deleted));
//!
//! // A carries on with a new session.
//! assert_ne!(a.session().unwrap().id, old);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
#![warn(missing_docs)]

mod server;
pub mod store;

pub use server::{DEFAULT_SESSION_TIMEOUT, MemClient, MemClock, MemServer};
pub use store::{Link, SessionStatus, SessionView, Store, WatchId, txn_cost};
