//! Runs announced ahead (`Command::Prepare`) follow the protocol: a run is prepared once,
//! started or discarded once, and a start or a discard names a prepared run. The cluster
//! records each breach as it carries out the commands ([`Cluster::protocol_errors`]).

use super::Violation;
use crate::cluster::Cluster;

/// Reports every breach the cluster recorded.
pub fn check(c: &Cluster) -> Vec<Violation> {
    c.protocol_errors
        .iter()
        .map(|(time, why)| Violation {
            subject: Default::default(),
            checker: "prepare",
            time: *time,
            message: why.clone(),
        })
        .collect()
}
