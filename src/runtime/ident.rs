//! The default instance id, `{ip}@-@{pid}`.

use std::net::Ipv4Addr;

use shardjob_core::{InstanceId, InstanceIdError};

/// `{ip}@-@{pid}` with [`local_ipv4`] and this process's id, as ElasticJob forms it.
pub fn default_instance_id() -> Result<InstanceId, InstanceIdError> {
    InstanceId::from_parts(&local_ipv4().to_string(), std::process::id())
}

/// This machine's first non-loopback IPv4 address, or `127.0.0.1` when none can be found.
///
/// On Linux it is read from the kernel's table of local addresses (`/proc/net/fib_trie`,
/// entries marked `/32 host LOCAL`), which needs no extra crate, no `unsafe` and no network
/// traffic; elsewhere, and when that file cannot be read, it is `127.0.0.1`. Set the id
/// explicitly ([`SchedulerBuilder::instance_id`](super::SchedulerBuilder::instance_id)) where
/// that is not good enough.
pub fn local_ipv4() -> Ipv4Addr {
    std::fs::read_to_string("/proc/net/fib_trie")
        .ok()
        .and_then(|text| first_local_address(&text))
        .unwrap_or(Ipv4Addr::LOCALHOST)
}

/// The first address of a `fib_trie` listing that is a local host address and not loopback,
/// unspecified, or link-local.
fn first_local_address(fib_trie: &str) -> Option<Ipv4Addr> {
    let mut last: Option<Ipv4Addr> = None;
    for line in fib_trie.lines() {
        let line = line.trim();
        if let Some(addr) = line.strip_prefix("|-- ") {
            last = addr.trim().parse().ok();
        } else if line.starts_with("/32 host LOCAL") {
            if let Some(ip) = last.take() {
                if !ip.is_loopback() && !ip.is_unspecified() && !ip.is_link_local() {
                    return Some(ip);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_first_local_non_loopback_address() {
        let text = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n\
            \x20          |-- 127.0.0.1\n              /32 host LOCAL\n\
            \x20          |-- 10.1.2.0\n              /24 link UNICAST\n\
            \x20          |-- 10.1.2.3\n              /32 host LOCAL\n\
            \x20       |-- 10.1.2.255\n           /32 link BROADCAST\n";
        assert_eq!(first_local_address(text), Some(Ipv4Addr::new(10, 1, 2, 3)));
        assert_eq!(first_local_address("garbage"), None);
    }

    #[test]
    fn default_id_has_the_pid() {
        let id = default_instance_id().unwrap();
        assert!(id.as_str().ends_with(&format!("@-@{}", std::process::id())));
    }
}
