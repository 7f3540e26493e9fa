//! Dump: a job's registry tree in ElasticJob's snapshot format (`SnapshotService` of 3.0.4):
//! one line `{path} | {value}` per node below `/{job}`, depth first, children in ElasticJob's
//! (reverse) order, IPv4 addresses masked as `ip1`, `ip2`, … in the order first seen, a
//! trailing newline. With a local cache beside the registry, a node whose cached copy differs
//! gets `{path} | {value} | {cachePath} | {cacheValue}` (empty cache fields when the cache
//! lacks it).

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use shardjob_core::registry::{Node, NodePath, Registry};

use crate::error::{OpsError, Result};
use crate::{Ops, job_paths, stats};

/// Formats the nodes of a tree read of `/{job}` (any order) as ElasticJob's dump body.
/// `cache` is the instance's local copy of the job's nodes (path → value), if there is one.
pub fn format_dump(
    job: &str,
    nodes: &[Node],
    cache: Option<&BTreeMap<NodePath, Vec<u8>>>,
) -> String {
    let Ok(root) = NodePath::root().join(job) else {
        return "\n".to_owned();
    };
    let mut children: HashMap<NodePath, Vec<&Node>> = HashMap::new();
    for node in nodes {
        if let Some(parent) = node.path.parent() {
            children.entry(parent).or_default().push(node);
        }
    }
    for list in children.values_mut() {
        // ElasticJob's `getChildrenKeys` sorts names in reverse (Java string order).
        list.sort_by(|a, b| reverse_java(a.path.name(), b.path.name()));
    }
    let mut lines = Vec::new();
    let mut stack: Vec<&Node> = children
        .get(&root)
        .map(|l| l.iter().rev().copied().collect())
        .unwrap_or_default();
    while let Some(node) = stack.pop() {
        let value = String::from_utf8_lossy(&node.data);
        let path = node.path.as_str();
        let line = match cache {
            None => format!("{path} | {value}"),
            Some(cache) => {
                let (cache_path, cache_value) = match cache.get(&node.path) {
                    Some(v) => (path, String::from_utf8_lossy(v)),
                    None => ("", "".into()),
                };
                if cache_path == path && cache_value == value {
                    format!("{path} | {value}")
                } else {
                    format!("{path} | {value} | {cache_path} | {cache_value}")
                }
            }
        };
        lines.push(line);
        if let Some(list) = children.get(&node.path) {
            stack.extend(list.iter().rev().copied());
        }
    }
    let mut out = mask_ipv4(&lines).join("\n");
    out.push('\n');
    out
}

fn reverse_java(a: &str, b: &str) -> Ordering {
    stats::java_cmp(b, a)
}

/// Replaces IPv4 addresses by `ip1`, `ip2`, … (one name per address across all lines, in the
/// order first seen), as ElasticJob's `SensitiveInfoUtils.filterSensitiveIps` does: its
/// pattern, matched leftmost-first without word boundaries, each address found replaced
/// wherever it occurs in the line.
pub fn mask_ipv4(lines: &[String]) -> Vec<String> {
    let mut names: HashMap<String, String> = HashMap::new();
    lines
        .iter()
        .map(|line| {
            let mut out = line.clone();
            for ip in find_ipv4(line) {
                let next = names.len() + 1;
                let fake = names
                    .entry(ip.to_owned())
                    .or_insert_with(|| format!("ip{next}"));
                out = out.replace(ip, fake);
            }
            out
        })
        .collect()
}

/// The matches of ElasticJob's `IpUtils.IP_REGEX` in `s`, as Java's `Matcher.find` gives them:
/// `(\d|[1-9]\d|1\d{2}|2[0-4]\d|25[0-5])(\.(1\d{2}|2[0-4]\d|25[0-5]|[1-9]\d|\d)){3}`.
fn find_ipv4(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while at < b.len() {
        // Every alternative starts with a digit: skip the rest cheaply (most of a dump).
        if !b[at].is_ascii_digit() {
            at += 1;
            continue;
        }
        match match_at(b, at) {
            Some(end) => {
                found.push(&s[at..end]);
                at = end;
            }
            None => at += 1,
        }
    }
    found
}

/// Length of each alternative of an octet that matches at `i`, in the pattern's order.
fn octet_lengths(b: &[u8], i: usize, first: bool) -> Vec<usize> {
    let d = |k: usize| b.get(i + k).copied().filter(u8::is_ascii_digit);
    let one = d(0).map(|_| 1);
    let two = d(0).filter(|c| *c != b'0').and(d(1)).map(|_| 2);
    let hundred = d(0).filter(|c| *c == b'1').and(d(1)).and(d(2)).map(|_| 3);
    let two_hundred = d(0)
        .filter(|c| *c == b'2')
        .and(d(1).filter(|c| (b'0'..=b'4').contains(c)))
        .and(d(2))
        .map(|_| 3);
    let two_fifty = d(0)
        .filter(|c| *c == b'2')
        .and(d(1).filter(|c| *c == b'5'))
        .and(d(2).filter(|c| (b'0'..=b'5').contains(c)))
        .map(|_| 3);
    let order = if first {
        [one, two, hundred, two_hundred, two_fifty]
    } else {
        [hundred, two_hundred, two_fifty, two, one]
    };
    order.into_iter().flatten().collect()
}

fn match_at(b: &[u8], i: usize) -> Option<usize> {
    octet_lengths(b, i, true)
        .into_iter()
        .find_map(|len| rest(b, i + len, 0))
}

fn rest(b: &[u8], i: usize, done: usize) -> Option<usize> {
    if done == 3 {
        return Some(i);
    }
    if b.get(i) != Some(&b'.') {
        return None;
    }
    octet_lengths(b, i + 1, false)
        .into_iter()
        .find_map(|len| rest(b, i + 1 + len, done + 1))
}

impl<R: Registry + ?Sized> Ops<'_, R> {
    /// The job's tree in ElasticJob's dump format, read from the registry in one tree read
    /// (what `dump@{job}` answers, without the cache columns). [`OpsError::JobNotFound`] if
    /// `/{job}` does not exist.
    pub async fn dump(&self, job: &str) -> Result<String> {
        let paths = job_paths(job)?;
        let nodes = self
            .registry
            .get_tree(paths.root())
            .await
            .map_err(|e| OpsError::registry(format!("reading job {job:?}"), e))?;
        if nodes.is_empty() {
            return Err(OpsError::JobNotFound {
                job: job.to_owned(),
            });
        }
        Ok(format_dump(job, &nodes, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardjob_core::registry::{Revision, Stat, Version};

    fn node(path: &str, data: &str) -> Node {
        Node {
            path: NodePath::new(path).unwrap(),
            data: data.as_bytes().to_vec(),
            stat: Stat {
                version: Version(0),
                created: Revision(1),
                modified: Revision(1),
                ephemeral_owner: None,
                mtime_ms: None,
            },
        }
    }

    #[test]
    fn masks_as_elasticjob_does() {
        // SensitiveInfoUtilsTest's case.
        let lines: Vec<String> = [
            "/simpleElasticDemoJob/servers/127.0.0.1",
            "/simpleElasticDemoJob/servers/192.168.0.1/hostName | 192.168.0.1",
            "/simpleElasticDemoJob/servers/192.168.0.11",
            "/simpleElasticDemoJob/servers/192.168.0.111",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            mask_ipv4(&lines),
            [
                "/simpleElasticDemoJob/servers/ip1",
                "/simpleElasticDemoJob/servers/ip2/hostName | ip2",
                "/simpleElasticDemoJob/servers/ip3",
                "/simpleElasticDemoJob/servers/ip4",
            ]
        );
        // Leftmost-first alternatives without boundaries: `256` ends after `25`.
        assert_eq!(find_ipv4("a 10.0.0.256 b"), ["10.0.0.25"]);
        assert_eq!(find_ipv4("1192.168.0.1@-@7"), ["192.168.0.1"]);
        assert!(find_ipv4("no.ip.here.x 1.2.3").is_empty());
    }

    #[test]
    fn walks_depth_first_in_reverse_order() {
        let nodes = [
            node("/j", "SIMPLE"),
            node("/j/config", "cron: x"),
            node("/j/instances", ""),
            node("/j/instances/10.0.0.1@-@42", "jobInstanceId: 10.0.0.1@-@42"),
            node("/j/servers", ""),
            node("/j/servers/10.0.0.1", "ENABLED"),
            node("/j/sharding", ""),
            node("/j/sharding/0", ""),
            node("/j/sharding/0/instance", "10.0.0.1@-@42"),
            node("/j/sharding/1", ""),
        ];
        let text = format_dump("j", &nodes, None);
        assert_eq!(
            text,
            "/j/sharding | \n/j/sharding/1 | \n/j/sharding/0 | \n/j/sharding/0/instance | ip1@-@42\n\
             /j/servers | \n/j/servers/ip1 | ENABLED\n/j/instances | \n\
             /j/instances/ip1@-@42 | jobInstanceId: ip1@-@42\n/j/config | cron: x\n"
        );
        let mut cache = BTreeMap::new();
        for n in &nodes {
            cache.insert(n.path.clone(), n.data.clone());
        }
        cache.insert(NodePath::new("/j/config").unwrap(), b"cron: y".to_vec());
        cache.remove(&NodePath::new("/j/sharding/1").unwrap());
        let text = format_dump("j", &nodes, Some(&cache));
        assert!(
            text.contains("/j/config | cron: x | /j/config | cron: y\n"),
            "{text}"
        );
        assert!(text.contains("/j/sharding/1 |  |  | \n"), "{text}");
        assert!(text.contains("/j/servers/ip1 | ENABLED\n"), "{text}");
    }
}
