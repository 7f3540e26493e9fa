//! The default instance id, `{ip}@-@{pid}`, and `{ip}@-@{pid}-{random}` when the machine has
//! no address but loopback.

use std::net::{IpAddr, Ipv4Addr};

use shardjob_core::{InstanceId, InstanceIdError};

/// `{ip}@-@{pid}` with [`local_ipv4`] and this process's id, as ElasticJob forms it; when the
/// only address is loopback, `127.0.0.1@-@{pid}-{random}`.
///
/// Two processes on machines that have only loopback (two containers without a network of
/// their own, each its own pid 1) would otherwise have the same id, and each would take the
/// other's items for its own. The random part (12 hex digits, drawn at each start) keeps them
/// apart. ElasticJob's console still reads such an id: it takes the server IP from the part
/// before the first `@-@` (`127.0.0.1`) and shows the rest as the instance; nothing reads
/// the rest as a number, and it holds no `@-@`, so a task id `{job}@-@{items}@-@READY@-@{id}`
/// still has its five parts.
pub fn default_instance_id() -> Result<InstanceId, InstanceIdError> {
    id_for(local_ipv4(), std::process::id())
}

/// The default id of process `pid` on a machine whose address is `ip`.
fn id_for(ip: Ipv4Addr, pid: u32) -> Result<InstanceId, InstanceIdError> {
    if ip.is_loopback() {
        InstanceId::new(format!("{ip}@-@{pid}-{}", random_part()))
    } else {
        InstanceId::from_parts(&ip.to_string(), pid)
    }
}

/// This machine's first non-loopback IPv4 address of an interface that is up, or
/// `127.0.0.1` when there is none.
///
/// The addresses are those of the OS's interface list (`getifaddrs`, through the `if-addrs`
/// crate), in its order; loopback, unspecified and link-local (169.254/16) addresses are
/// skipped, as are interfaces that are not running, as ElasticJob's `IpUtils` skips them. Set
/// the id explicitly ([`SchedulerBuilder::instance_id`](super::SchedulerBuilder::instance_id))
/// where that is not good enough.
pub fn local_ipv4() -> Ipv4Addr {
    let interfaces = if_addrs::get_if_addrs().unwrap_or_default();
    first_usable(interfaces.iter().map(|i| (i.ip(), i.is_oper_up()))).unwrap_or(Ipv4Addr::LOCALHOST)
}

/// The first address, of an interface that is up, that names this machine to others: IPv4,
/// not loopback, unspecified or link-local.
fn first_usable(addresses: impl IntoIterator<Item = (IpAddr, bool)>) -> Option<Ipv4Addr> {
    addresses.into_iter().find_map(|(ip, up)| match ip {
        IpAddr::V4(ip)
            if up && !ip.is_loopback() && !ip.is_unspecified() && !ip.is_link_local() =>
        {
            Some(ip)
        }
        _ => None,
    })
}

/// 48 random bits as 12 hex digits. The standard library draws the keys of its hasher from the
/// OS's random source once per process; the time of day is mixed in besides.
fn random_part() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    if let Ok(since) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(since.as_nanos());
    }
    format!("{:012x}", hasher.finish() & 0xffff_ffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_first_usable_address() {
        let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
        let listed = [
            (v4(127, 0, 0, 1), true),
            (IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), true),
            (v4(169, 254, 1, 2), true),
            (v4(10, 9, 9, 9), false),
            (v4(10, 1, 2, 3), true),
            (v4(192, 168, 0, 1), true),
        ];
        assert_eq!(first_usable(listed), Some(Ipv4Addr::new(10, 1, 2, 3)));
        assert_eq!(first_usable([(v4(127, 0, 0, 1), true)]), None);
        assert_eq!(first_usable([]), None);
    }

    #[test]
    fn an_address_and_the_pid_make_elasticjobs_id() {
        let id = id_for(Ipv4Addr::new(10, 1, 2, 3), 1).unwrap();
        assert_eq!(id.as_str(), "10.1.2.3@-@1");
        let id = default_instance_id().unwrap();
        assert_eq!(id.server_ip(), local_ipv4().to_string());
    }

    #[test]
    fn loopback_only_ids_get_a_random_part() {
        // Two containers with only loopback, each its own pid 1.
        let a = id_for(Ipv4Addr::LOCALHOST, 1).unwrap();
        let b = id_for(Ipv4Addr::LOCALHOST, 1).unwrap();
        assert_ne!(a, b);
        for id in [&a, &b] {
            // ElasticJob's console takes the server IP from before the first `@-@`.
            assert_eq!(id.server_ip(), "127.0.0.1");
            let rest = id.as_str().strip_prefix("127.0.0.1@-@1-").unwrap();
            assert_eq!(rest.len(), 12, "{id}");
            assert!(rest.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
            assert_eq!(id.as_str().matches("@-@").count(), 1, "{id}");
        }
    }

    #[test]
    fn the_random_part_differs_between_draws() {
        // Each draw takes new keys: two ids made in one process (as two processes would) differ.
        let parts: std::collections::BTreeSet<String> = (0..64).map(|_| random_part()).collect();
        assert_eq!(parts.len(), 64);
        assert!(parts.iter().all(|p| p.len() == 12));
    }
}
