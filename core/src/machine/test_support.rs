//! Helpers shared by the machine's unit tests: instants and registry nodes as the tests build
//! them.

use chrono::{DateTime, Utc};

use crate::registry::{Node, NodePath, Revision, SessionId, Stat, Version};

use super::time::{Mono, Now};

/// The wall clock at monotonic 0 in the tests (epoch ms, a whole minute).
pub(crate) const WALL: i64 = 1_800_000_000_000;

/// The instant `mono` ms after the tests' start, the wall clock [`WALL`] plus it.
pub(crate) fn now(mono: u64) -> Now {
    Now {
        mono: Mono(mono),
        wall: DateTime::<Utc>::from_timestamp_millis(WALL + mono as i64).unwrap_or_default(),
    }
}

/// A node at version 0 created and last changed at revision 1, held by the session `owner`
/// (ephemeral) or by none (persistent).
pub(crate) fn node(path: &str, data: Vec<u8>, owner: Option<SessionId>) -> Node {
    Node {
        path: NodePath::new(path).unwrap(),
        data,
        stat: Stat {
            version: Version(0),
            created: Revision(1),
            modified: Revision(1),
            ephemeral_owner: owner,
            mtime_ms: None,
        },
    }
}

/// The metadata of a persistent node at `version`, created and last changed at revision 1.
pub(crate) fn stat(version: i64) -> Stat {
    Stat {
        version: Version(version),
        created: Revision(1),
        modified: Revision(1),
        ephemeral_owner: None,
        mtime_ms: None,
    }
}
