//! What an ElasticJob instance sees of a job: its Curator cache (kept by watch events, late by
//! the watch's delay) and direct reads (one atomic read of the job's subtree stands for the
//! `checkExists` / `getChildren` / `getData` calls ElasticJob makes one after another), and
//! the pure decisions it takes on them.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use shardjob_core::config::Strictness;
use shardjob_core::registry::{Node, Stat, Tree, WatchEvent, WatchEventKind};
use shardjob_core::sharding::java_string_cmp;
use shardjob_core::{InstanceId, JobConfig};

/// A path relative to the job's root (`sharding/0/running`; the root itself is `""`).
pub(crate) fn relative<'a>(job: &str, path: &'a str) -> Option<&'a str> {
    let rest = path.strip_prefix('/')?.strip_prefix(job)?;
    if rest.is_empty() {
        return Some("");
    }
    rest.strip_prefix('/')
}

/// The names of a node's children in `nodes` (relative paths), in the order ElasticJob's
/// registry client gives them: reverse Java string order.
fn children_of<'a, V>(nodes: &'a BTreeMap<String, V>, rel: &str) -> Vec<&'a str> {
    let prefix = if rel.is_empty() {
        String::new()
    } else {
        format!("{rel}/")
    };
    let mut out: Vec<&str> = nodes
        .range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix))
        .map(|(k, _)| &k[prefix.len()..])
        .filter(|rest| !rest.is_empty() && !rest.contains('/'))
        .collect();
    out.sort_by(|a, b| java_string_cmp(b, a));
    out
}

/// A Curator cache event, as ElasticJob's listeners get it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CacheEvent {
    /// What happened.
    pub(crate) kind: Change,
    /// The node, relative to the job.
    pub(crate) rel: String,
    /// Its data (the old data for a deletion).
    pub(crate) value: String,
}

/// ElasticJob's `DataChangedEvent.Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// `ADDED`.
    Added,
    /// `UPDATED`.
    Updated,
    /// `DELETED`.
    Deleted,
}

/// The Curator cache of one job's subtree.
#[derive(Debug, Default, Clone)]
pub(crate) struct Cache {
    nodes: BTreeMap<String, String>,
    /// While a (re)load is in flight: the events delivered meanwhile, applied on top of the
    /// read's snapshot when it comes.
    loading: Option<Vec<WatchEvent>>,
    /// The configuration as the cache holds it, read once per change.
    config: Option<JobConfig>,
}

impl Cache {
    /// The data of a node, if the cache holds it.
    pub(crate) fn get(&self, rel: &str) -> Option<&str> {
        self.nodes.get(rel).map(String::as_str)
    }

    /// The configuration as cached (`ConfigurationService.load(true)`), if readable.
    pub(crate) fn config(&self) -> Option<&JobConfig> {
        self.config.as_ref()
    }

    /// A (re)load starts: events are held until its snapshot comes.
    pub(crate) fn start_loading(&mut self) {
        self.loading.get_or_insert_with(Vec::new);
    }

    /// Whether a load is in flight.
    #[cfg(test)]
    pub(crate) fn loading(&self) -> bool {
        self.loading.is_some()
    }

    /// Applies one watch event of the job (`rel` its path). Returns the listeners' event, if
    /// the cache changed and is not loading.
    pub(crate) fn apply(&mut self, rel: &str, event: &WatchEvent) -> Option<CacheEvent> {
        if let Some(held) = &mut self.loading {
            held.push(event.clone());
            return None;
        }
        self.apply_now(rel, event)
    }

    fn apply_now(&mut self, rel: &str, event: &WatchEvent) -> Option<CacheEvent> {
        let value = String::from_utf8_lossy(&event.data).into_owned();
        let out = match event.kind {
            WatchEventKind::Deleted => {
                let old = self.nodes.remove(rel)?;
                CacheEvent {
                    kind: Change::Deleted,
                    rel: rel.to_owned(),
                    value: old,
                }
            }
            WatchEventKind::Created | WatchEventKind::Changed => {
                let kind = if self.nodes.contains_key(rel) {
                    Change::Updated
                } else {
                    Change::Added
                };
                self.nodes.insert(rel.to_owned(), value.clone());
                CacheEvent {
                    kind,
                    rel: rel.to_owned(),
                    value,
                }
            }
        };
        if rel == "config" {
            self.config = self.nodes.get("config").and_then(|t| read_config(t));
        }
        Some(out)
    }

    /// The (re)load's snapshot came: the cache becomes it, with the events held meanwhile
    /// that are newer than it on top. Returns the differences from the cache before, as
    /// the listeners get them (a new cache reports every node as added: pass `report`
    /// false to drop them).
    pub(crate) fn loaded(&mut self, job: &str, tree: &Tree, report: bool) -> Vec<CacheEvent> {
        let held = self.loading.take().unwrap_or_default();
        let mut fresh: BTreeMap<String, String> = BTreeMap::new();
        for node in &tree.nodes {
            if let Some(rel) = relative(job, node.path.as_str()) {
                fresh.insert(
                    rel.to_owned(),
                    String::from_utf8_lossy(&node.data).into_owned(),
                );
            }
        }
        let mut next = Cache {
            nodes: fresh,
            loading: None,
            config: None,
        };
        for event in held {
            if tree
                .revision
                .is_some_and(|r| event.revision.is_some_and(|e| e <= r))
            {
                continue;
            }
            if let Some(rel) = relative(job, event.path.as_str()) {
                next.apply_now(rel, &event);
            }
        }
        next.config = next.nodes.get("config").and_then(|t| read_config(t));
        let mut out = Vec::new();
        if report {
            for (rel, value) in &self.nodes {
                if !next.nodes.contains_key(rel) {
                    out.push(CacheEvent {
                        kind: Change::Deleted,
                        rel: rel.clone(),
                        value: value.clone(),
                    });
                }
            }
            for (rel, value) in &next.nodes {
                let kind = match self.nodes.get(rel) {
                    None => Change::Added,
                    Some(old) if old != value => Change::Updated,
                    Some(_) => continue,
                };
                out.push(CacheEvent {
                    kind,
                    rel: rel.clone(),
                    value: value.clone(),
                });
            }
        }
        *self = next;
        out
    }
}

/// Reads a job's configuration as ElasticJob does (`JobConfigurationPOJO`); `None` if it
/// does not read.
pub(crate) fn read_config(text: &str) -> Option<JobConfig> {
    JobConfig::from_yaml(text, Strictness::Strict).ok()
}

/// One direct read of a job's subtree.
#[derive(Debug, Default, Clone)]
pub(crate) struct Snap {
    nodes: BTreeMap<String, (String, Stat)>,
}

impl Snap {
    /// The snapshot of a tree read of the job (an empty one if the read failed: ElasticJob
    /// takes a failed `checkExists` as "absent", a failed `getChildren` as "none").
    pub(crate) fn new(job: &str, nodes: &[Node]) -> Self {
        let mut out = BTreeMap::new();
        for node in nodes {
            if let Some(rel) = relative(job, node.path.as_str()) {
                out.insert(
                    rel.to_owned(),
                    (String::from_utf8_lossy(&node.data).into_owned(), node.stat),
                );
            }
        }
        Self { nodes: out }
    }

    /// Whether the node exists.
    pub(crate) fn exists(&self, rel: &str) -> bool {
        self.nodes.contains_key(rel)
    }

    /// The node's data.
    pub(crate) fn data(&self, rel: &str) -> Option<&str> {
        self.nodes.get(rel).map(|(d, _)| d.as_str())
    }

    /// The node's metadata.
    pub(crate) fn stat(&self, rel: &str) -> Option<Stat> {
        self.nodes.get(rel).map(|(_, s)| *s)
    }

    /// The node's children, in ElasticJob's order (reverse Java string order).
    pub(crate) fn children(&self, rel: &str) -> Vec<&str> {
        children_of(&self.nodes, rel)
    }

    /// The configuration as a direct read gives it (`ConfigurationService.load(false)`).
    pub(crate) fn config(&self) -> Option<JobConfig> {
        self.data("config").and_then(read_config)
    }
}

/// An instance node's value as ElasticJob reads it (`JobInstance`: `jobInstanceId`, `labels`,
/// `serverIp`). `Ok(None)`: a blank value (SnakeYAML gives `null`, the instance is skipped).
/// `Err`: a value SnakeYAML cannot bind (a scalar, an unknown key): ElasticJob's call
/// throws.
pub(crate) fn read_instance(value: &str) -> Result<Option<JobInstance>, String> {
    if value.trim().is_empty() {
        return Ok(None);
    }
    let mut out = JobInstance::default();
    for line in value.lines().filter(|l| !l.trim().is_empty()) {
        let Some((key, val)) = line.split_once(':') else {
            return Err(format!("not a JobInstance: {value:?}"));
        };
        let val = val
            .trim()
            .trim_matches(|c| c == '\'' || c == '"')
            .to_owned();
        match key.trim() {
            "jobInstanceId" => out.id = val,
            "labels" => {}
            "serverIp" => out.server_ip = val,
            other => return Err(format!("unknown JobInstance property {other:?}")),
        }
    }
    Ok(Some(out))
}

/// A `JobInstance` as read from an instance node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JobInstance {
    /// `jobInstanceId`.
    pub(crate) id: String,
    /// `serverIp`.
    pub(crate) server_ip: String,
}

/// The value ElasticJob writes into its instance node.
pub(crate) fn instance_value(id: &InstanceId) -> String {
    format!("jobInstanceId: {id}\nserverIp: {}\n", id.server_ip())
}

/// What a `servers/{ip}` value says (`ServerService.isEnableServer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerState {
    /// `ENABLED`.
    Enabled,
    /// Anything else that is not blank (`DISABLED`, garbage).
    Off,
    /// Missing or blank: ElasticJob waits 100 ms and reads again, ten times.
    Blank,
}

/// Reads a server node's value.
pub(crate) fn server_state(value: Option<&str>) -> ServerState {
    match value.map(str::trim) {
        None | Some("") => ServerState::Blank,
        Some("ENABLED") => ServerState::Enabled,
        Some(_) => ServerState::Off,
    }
}

/// `ServerService.hasOnlineInstances`: an instance id *starts with* the IP (ElasticJob's
/// prefix test: `10.0.0.1` is online if only `10.0.0.12@-@7` is).
pub(crate) fn has_online_instances(instances: &[&str], ip: &str) -> bool {
    instances.iter().any(|id| id.starts_with(ip))
}

/// Whether a path under `servers/` is a server path (`ServerNode.isServerPath`: an IPv4
/// address).
pub(crate) fn is_server_path(rel: &str) -> bool {
    let Some(ip) = rel.strip_prefix("servers/") else {
        return false;
    };
    let parts: Vec<&str> = ip.split('.').collect();
    parts.len() == 4
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The items of `total` whose owner (`sharding/{i}/instance`, from `owner`) is `me`.
pub(crate) fn items_owned(total: u32, me: &str, owner: impl Fn(u32) -> Option<String>) -> Vec<u32> {
    (0..total)
        .filter(|i| owner(*i).as_deref() == Some(me))
        .collect()
}

/// The first child of `leader/failover/items` ElasticJob claims: the first in its order
/// (reverse Java string order, so `9` before `10`).
pub(crate) fn first_failover_item(children: &[&str]) -> Option<u32> {
    children
        .iter()
        .find_map(|c| shardjob_core::layout::parse_item(c))
}

/// The latch's children in the order the latch grants them: by creation (Curator numbers
/// them; the model's registry orders them by the revision that created them).
pub(crate) fn latch_order<'a>(children: impl IntoIterator<Item = (&'a str, Stat)>) -> Vec<&'a str> {
    let mut all: Vec<(&str, Stat)> = children.into_iter().collect();
    all.sort_by(|a, b| match a.1.created.cmp(&b.1.created) {
        Ordering::Equal => a.0.cmp(b.0),
        other => other,
    });
    all.into_iter().map(|(n, _)| n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardjob_core::registry::{NodePath, Revision, Version};

    fn stat(created: u64) -> Stat {
        Stat {
            version: Version(0),
            created: Revision(created),
            modified: Revision(created),
            ephemeral_owner: None,
            mtime_ms: None,
        }
    }

    fn node(path: &str, data: &str) -> Node {
        Node {
            path: NodePath::new(path).expect("a valid path"),
            data: data.as_bytes().to_vec(),
            stat: stat(1),
        }
    }

    #[test]
    fn children_come_in_reverse_java_order() {
        let snap = Snap::new(
            "j",
            &[
                node("/j", ""),
                node("/j/sharding", ""),
                node("/j/sharding/0", ""),
                node("/j/sharding/1", ""),
                node("/j/sharding/10", ""),
                node("/j/sharding/9", ""),
                node("/j/sharding/9/running", "x"),
            ],
        );
        assert_eq!(snap.children("sharding"), vec!["9", "10", "1", "0"]);
        assert_eq!(snap.children(""), vec!["sharding"]);
        assert_eq!(first_failover_item(&snap.children("sharding")), Some(9));
        assert_eq!(snap.data("sharding/9/running"), Some("x"));
    }

    #[test]
    fn instance_values_read_as_job_instance_or_fail() {
        let id = InstanceId::new("10.0.0.1@-@7").expect("a valid id");
        let read = read_instance(&instance_value(&id)).expect("readable");
        assert_eq!(
            read,
            Some(JobInstance {
                id: "10.0.0.1@-@7".into(),
                server_ip: "10.0.0.1".into()
            })
        );
        assert!(read_instance("labels: shardjob\njobInstanceId: a\nserverIp: b\n").is_ok());
        assert_eq!(read_instance("  "), Ok(None));
        assert!(read_instance("garbage").is_err());
        assert!(read_instance("jobInstanceId: a\nweight: 3\n").is_err());
    }

    #[test]
    fn server_paths_online_instances_and_owned_items() {
        assert!(is_server_path("servers/10.0.0.1"));
        assert!(!is_server_path("servers/host-a"));
        assert!(!is_server_path("servers"));
        assert_eq!(server_state(Some("ENABLED")), ServerState::Enabled);
        assert_eq!(server_state(Some("DISABLED")), ServerState::Off);
        assert_eq!(server_state(Some("")), ServerState::Blank);
        assert_eq!(server_state(None), ServerState::Blank);
        // ElasticJob's prefix test.
        assert!(has_online_instances(&["10.0.0.12@-@7"], "10.0.0.1"));
        assert!(!has_online_instances(&["10.0.0.2@-@7"], "10.0.0.1"));
        let owners = ["a", "b", "a"];
        assert_eq!(
            items_owned(3, "a", |i| Some(owners[i as usize].to_owned())),
            vec![0, 2]
        );
    }

    #[test]
    fn the_latch_goes_by_creation() {
        let order = latch_order([("_c_b", stat(9)), ("_c_a", stat(12)), ("_c_c", stat(3))]);
        assert_eq!(order, vec!["_c_c", "_c_b", "_c_a"]);
    }

    #[test]
    fn a_reload_reports_the_differences_and_keeps_newer_events() {
        use shardjob_core::registry::WatchEventKind;
        let mut cache = Cache::default();
        let tree = |nodes: Vec<Node>, rev| Tree {
            nodes,
            revision: Some(Revision(rev)),
        };
        cache.start_loading();
        cache.loaded(
            "j",
            &tree(vec![node("/j", ""), node("/j/a", "1")], 5),
            false,
        );
        assert_eq!(cache.get("a"), Some("1"));
        // A reload: a deleted, b added; an event held meanwhile newer than the read adds c,
        // an older one (already in the read) is dropped.
        cache.start_loading();
        let event = |path: &str, rev| WatchEvent {
            kind: WatchEventKind::Created,
            path: NodePath::new(path).expect("a valid path"),
            data: b"x".to_vec(),
            stat: None,
            revision: Some(Revision(rev)),
        };
        assert!(cache.apply("c", &event("/j/c", 9)).is_none());
        assert!(cache.apply("d", &event("/j/d", 7)).is_none());
        let diff = cache.loaded("j", &tree(vec![node("/j", ""), node("/j/b", "2")], 8), true);
        let kinds: Vec<(Change, &str)> = diff.iter().map(|e| (e.kind, e.rel.as_str())).collect();
        assert_eq!(
            kinds,
            vec![
                (Change::Deleted, "a"),
                (Change::Added, "b"),
                (Change::Added, "c")
            ]
        );
        assert_eq!(cache.get("d"), None);
        assert!(!cache.loading());
    }

    #[test]
    fn relative_paths() {
        assert_eq!(relative("j", "/j"), Some(""));
        assert_eq!(relative("j", "/j/sharding/0"), Some("sharding/0"));
        assert_eq!(relative("j", "/jj/sharding"), None);
        assert_eq!(relative("j", "/k"), None);
    }
}
