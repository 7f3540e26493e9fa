//! The shardjob registry over etcd.
//!
//! Not written yet: this crate exists so the workspace shows its final shape. It will implement
//! [`shardjob_core::registry::Registry`] with the same node layout as ElasticJob 3.0.x.
#![warn(missing_docs)]

pub use shardjob_core::registry::Registry;
