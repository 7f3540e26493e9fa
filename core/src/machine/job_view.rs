//! A job's registry subtree read as the facts decisions need: [`JobView`] and its items'
//! [`ItemView`]s, kept current by the [`Cache`](super::cache::Cache).

use std::collections::{BTreeMap, BTreeSet};

use crate::instance::InstanceId;
use crate::layout::ItemLeaf;
use crate::registry::{NodePath, Stat, Version};

use super::cache::leaf_bit;
use super::collections::{Counted, VecMap, VecSet};
use super::record::ItemRecord;

/// One item's state read off the cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ItemView {
    pub exists: bool,
    pub owner: Option<InstanceId>,
    pub owner_stat: Option<Stat>,
    /// The `running` marker: who, and its metadata.
    pub running: Option<(String, Stat)>,
    pub disabled: bool,
    pub failover: Option<Stat>,
    /// The `failovering` node (ElasticJob's mark of a failover claimed and under way): its
    /// value (the instance running the failover) and metadata.
    pub failovering: Option<(String, Stat)>,
    pub record: Option<(ItemRecord, Version)>,
    /// Which leaves exist, one bit per [`ItemLeaf`] (the entry goes when neither they nor the
    /// item's node do).
    pub(crate) leaves: u8,
}

impl ItemView {
    /// Whether the leaf's node exists.
    pub(crate) fn has(&self, leaf: ItemLeaf) -> bool {
        self.leaves & leaf_bit(leaf) != 0
    }
}

/// An `instances/{id}` node that no session holds (a persistent node: written by hand, or
/// by a tool): never a candidate for items (see [`JobView::eligible`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unbound {
    /// The node's data version, for a deletion that checks it.
    pub version: Version,
    /// The node's value, for the warning.
    pub value: String,
}

/// Whether a node's metadata says it is bound to a session: an ephemeral node, or one whose
/// metadata is not known (an event without it: given the benefit of the doubt).
pub(crate) fn session_bound(stat: &Stat) -> bool {
    stat.ephemeral_owner.is_some() || stat.version == Version(-1)
}

/// The facts of one job that decisions need.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JobView {
    /// Every registered instance node, bound to a session or not.
    pub instances: VecSet<InstanceId>,
    /// The instance nodes of [`JobView::instances`] that no session holds.
    pub unbound: BTreeMap<InstanceId, Unbound>,
    /// The instances of [`JobView::instances`] that are ElasticJob's (see [`is_java`]) and
    /// bound to a session: while one of them can lead, the job is led by ElasticJob.
    pub java: VecSet<InstanceId>,
    /// Each server's node value, by ip.
    pub servers: VecMap<String, String>,
    pub leader: Option<String>,
    pub necessary: Option<Version>,
    /// The latest fire done by items since removed (the `sharding` node's record).
    pub sharding_done: Option<i64>,
    /// The `sharding` node's data version, when known: shardjob's re-shards write the node
    /// whenever they remove items (ElasticJob never writes it), so a claim that checks it
    /// knows that no item was removed, and none re-created, since its view (see
    /// [`super::claim`], the owner check).
    pub sharding_version: Option<Version>,
    /// When the job's cluster last started (the `instances` node's [`StartRecord`]).
    pub started: Option<i64>,
    /// Boxed: a map node holds room for eleven entries, and most jobs have a few items.
    pub items: BTreeMap<u32, Box<ItemView>>,
    /// How many items have a `running` marker.
    pub running: usize,
    /// The items whose `running` marker no session holds (persistent: an ElasticJob
    /// instance's with `failover` on, or one written by hand): the leader clears those whose
    /// owner is gone (see [`super::leader::stale`]).
    pub persistent_running: BTreeSet<u32>,
    /// ElasticJob's queue of failovers not claimed yet (`leader/failover/items/{item}`), by
    /// item, with each node's version: cleared by the leader once no ElasticJob instance is
    /// left to claim them (see [`super::leader::leftovers`]).
    pub failover_queue: BTreeMap<u32, Version>,
    /// The last fires done of the items' run records.
    pub dones: Counted<i64>,
    pub triggers: BTreeMap<InstanceId, String>,
    pub corrupt: BTreeMap<NodePath, String>,
}

/// The label a shardjob instance writes into its instance node (`labels`, a property of
/// ElasticJob's `JobInstance` that ElasticJob itself never sets).
pub(crate) const SHARDJOB_LABEL: &str = "shardjob";

/// Whether the instance node `id` with `value` is an ElasticJob instance's: its value reads
/// as the instance YAML of `id` (ElasticJob writes `jobInstanceId: …` and `serverIp: …`) and
/// carries no `labels: shardjob`. A value that names no instance (empty, written by hand) is
/// nobody's: not counted as ElasticJob's.
pub(crate) fn is_java(id: &str, value: &str) -> bool {
    super::leader::stale::instance_yaml(id, value)
        && !value.lines().any(|line| {
            line.trim()
                .strip_prefix("labels:")
                .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\''))
                == Some(SHARDJOB_LABEL)
        })
}

pub(crate) fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// [`text`] of data the caller gives up: valid UTF-8 (nearly always) is kept, not copied.
pub(crate) fn into_text(data: Vec<u8>) -> String {
    String::from_utf8(data).unwrap_or_else(|e| text(e.as_bytes()))
}

impl JobView {
    /// One node of item `i` is gone: drop the entry with the last one.
    pub(crate) fn release(&mut self, i: u32) {
        if self
            .items
            .get(&i)
            .is_some_and(|item| !item.exists && item.leaves == 0)
        {
            self.items.remove(&i);
        }
    }

    /// Whether a server (by ip) is enabled: its node is absent or not `DISABLED`.
    pub fn server_enabled(&self, ip: &str) -> bool {
        self.servers.get(ip).is_none_or(|v| v.trim() != "DISABLED")
    }

    /// Live instances whose server is enabled: the candidates for items. An instance node no
    /// session holds is never one (`unbound_too` is a planted bug's switch: it is).
    pub fn eligible(&self, unbound_too: bool) -> Vec<InstanceId> {
        self.instances
            .iter()
            .filter(|i| self.server_enabled(i.server_ip()))
            .filter(|i| unbound_too || !self.unbound.contains_key(*i))
            .cloned()
            .collect()
    }

    /// Whether an ElasticJob instance of the job can lead it: one is registered, bound to a
    /// session, on an enabled server. A shardjob instance then neither stands for election nor
    /// keeps the lead (`docs/migration-design.md` 3.3): ElasticJob cannot follow another
    /// leader safely, shardjob can.
    pub fn java_can_lead(&self) -> bool {
        self.java
            .iter()
            .any(|id| self.server_enabled(id.server_ip()))
    }

    /// Whether the job's leader is an ElasticJob instance of [`JobView::java`].
    pub fn led_by_java(&self) -> bool {
        // Asked at every decision: no parse of the leader's id unless the job is mixed.
        !self.java.is_empty()
            && self
                .leader
                .as_deref()
                .and_then(|l| InstanceId::new(l.trim()).ok())
                .is_some_and(|l| self.java.contains(&l))
    }

    /// Whether `id` names a live instance: its node exists and a session holds it.
    pub fn is_live(&self, id: &str) -> bool {
        InstanceId::new(id.trim()).is_ok_and(|id| self.is_live_id(&id))
    }

    /// [`JobView::is_live`] of an id already parsed.
    pub fn is_live_id(&self, id: &InstanceId) -> bool {
        self.instances.contains(id) && !self.unbound.contains_key(id)
    }

    /// Whether item `item`'s record names a run in progress of a live instance other than
    /// `me` while the item shows no `running` marker: the marker went under a run that may go
    /// on (ElasticJob's completion or failover listener deletes markers by path, an operator
    /// may), so the item is that instance's to end or fail over, not an orphan.
    pub fn run_of_another_live(&self, item: u32, me: &InstanceId) -> bool {
        self.items.get(&item).is_some_and(|v| {
            v.running.is_none()
                && v.record
                    .as_ref()
                    .and_then(|(r, _)| r.run.as_ref())
                    .is_some_and(|run| &run.instance != me && self.is_live_id(&run.instance))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> InstanceId {
        InstanceId::new(s).unwrap()
    }

    /// A server is enabled unless its node says DISABLED (blanks around it aside); an absent
    /// node is enabled. Only the instances on enabled servers are eligible, in their order.
    #[test]
    fn disabled_servers_and_the_eligible_instances() {
        let mut view = JobView::default();
        for (ip, value) in [
            ("10.0.0.1", "ENABLED"),
            ("10.0.0.2", "DISABLED"),
            ("10.0.0.3", " DISABLED\n"),
            ("10.0.0.4", ""),
            ("10.0.0.5", "disabled"),
        ] {
            view.servers.insert(ip.to_owned(), value.to_owned());
        }
        #[rustfmt::skip]
        let cases = [
            ("10.0.0.1", true),
            ("10.0.0.2", false),
            ("10.0.0.3", false),
            ("10.0.0.4", true),
            ("10.0.0.5", true),
            ("10.0.0.6", true),
        ];
        for (ip, enabled) in cases {
            assert_eq!(view.server_enabled(ip), enabled, "server {ip}");
        }
        for s in [
            "10.0.0.6@-@6",
            "10.0.0.1@-@1",
            "10.0.0.2@-@2",
            "10.0.0.3@-@3",
            "10.0.0.1@-@7",
        ] {
            view.instances.insert(id(s));
        }
        assert_eq!(
            view.eligible(false),
            [id("10.0.0.1@-@1"), id("10.0.0.1@-@7"), id("10.0.0.6@-@6")]
        );
    }

    /// Who is ElasticJob's: an instance YAML of the id without shardjob's label; shardjob's
    /// own value, an empty one or another id's are not.
    #[test]
    fn elasticjob_instances_by_their_value() {
        const ID: &str = "10.0.0.1@-@7";
        #[rustfmt::skip]
        let cases = [
            ("jobInstanceId: 10.0.0.1@-@7\nserverIp: 10.0.0.1\n", true),
            ("jobInstanceId: '10.0.0.1@-@7'\nlabels: other\nserverIp: 10.0.0.1\n", true),
            ("jobInstanceId: 10.0.0.1@-@7\nlabels: shardjob\nserverIp: 10.0.0.1\n", false),
            ("jobInstanceId: 10.0.0.1@-@7\nlabels: 'shardjob'\n", false),
            ("jobInstanceId: 10.0.0.2@-@2\nserverIp: 10.0.0.2\n", false),
            ("", false),
            ("garbage", false),
        ];
        for (value, java) in cases {
            assert_eq!(is_java(ID, value), java, "{value:?}");
        }
    }

    /// A marker's owner lives while its instance node exists and a session holds it: a live
    /// shardjob instance's persistent marker (a job shared with ElasticJob, failover on) is no
    /// stale one, however long it stays; an owner whose node is gone, or held by no session,
    /// does not live; nor does a value that is no instance id.
    #[test]
    fn which_owners_of_markers_live() {
        let mut view = JobView::default();
        view.instances.insert(id("10.0.0.1@-@1"));
        view.instances.insert(id("10.0.0.2@-@2"));
        view.unbound.insert(
            id("10.0.0.2@-@2"),
            Unbound {
                version: Version(0),
                value: String::new(),
            },
        );
        #[rustfmt::skip]
        let cases = [
            ("registered, bound to a session", "10.0.0.1@-@1", true),
            ("blanks around it", " 10.0.0.1@-@1\n", true),
            ("registered, no session holds it", "10.0.0.2@-@2", false),
            ("not registered", "10.0.0.3@-@3", false),
            ("no instance id", "garbage", false),
        ];
        for (what, owner, live) in cases {
            assert_eq!(view.is_live(owner), live, "{what}");
        }
    }

    /// ElasticJob leads when one of its instances is on an enabled server.
    #[test]
    fn elasticjob_can_lead_from_an_enabled_server_only() {
        let mut view = JobView::default();
        assert!(!view.java_can_lead(), "no ElasticJob instance");
        view.java.insert(id("10.0.0.2@-@2"));
        assert!(view.java_can_lead(), "no server node: enabled");
        view.servers
            .insert("10.0.0.2".to_owned(), "DISABLED".to_owned());
        assert!(!view.java_can_lead(), "its server disabled");
        view.java.insert(id("10.0.0.3@-@3"));
        assert!(view.java_can_lead(), "another on an enabled server");
    }
}
