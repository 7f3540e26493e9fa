//! The leader's duties: the sharding plan and the housekeeping of a job's nodes.

pub(crate) mod housekeeping;
pub(crate) mod reshard;
