//! The wire between the nodes and the registry when a world races ([`Races`]): each request
//! reaches the registry after a one-way delay of its own and applies there then, its reply
//! comes back after another, each watch delivery is late by a drawn delay, some replies are
//! lost after their request applied, the nodes act in a drawn order at each instant, and a
//! node's timer goes off a little after the time its machine asked for, as a runtime's timers
//! do under load.
//!
//! One session's messages keep their order, as ZooKeeper and etcd promise: a request never
//! reaches the registry before an earlier one of the same node, nor a reply or a watch delivery
//! the node before an earlier one. Different nodes race: a request sent later by one node may
//! apply before a request sent earlier by another, and a watch delivery may reach one node long
//! before another. Replies and watch deliveries travel apart (as etcd's watch stream and its
//! requests do, and as the fixed-latency world with a watch delay already had them). Every draw
//! comes from one seeded stream, so a seed replays the same races.

use std::collections::BTreeMap;
use std::fmt;

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use shardjob_core::registry::{RegistryOp, RequestId, SessionId};

/// The race knobs of a world. [`Races::NONE`] (the default) is the fixed-latency world: a
/// request applies when it is sent and is answered after [`crate::cluster::Cluster::latency`],
/// nodes act in index order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Races {
    /// The most a request usually takes to reach the registry, and its reply to come back, ms:
    /// each leg is drawn apart, from 0 to this, and one leg in 32 spikes to up to three times
    /// it. 0: fixed latency, requests apply when sent.
    pub spread: u64,
    /// The most a watch delivery is late beyond [`crate::cluster::Cluster::watch_delay`], ms,
    /// drawn per delivery. 0: none.
    pub watch_spread: u64,
    /// Whether the nodes act in a drawn order at each instant (else in index order).
    pub shuffle: bool,
    /// The chance, per mille, that a request's reply is lost after the request applied: the
    /// node hears a timeout after [`crate::cluster::Cluster::request_timeout`] instead, as
    /// with [`crate::node::Node::lose_replies`]. Ended by [`crate::cluster::Cluster::calm`].
    pub reply_loss: u32,
    /// The most a node's timer goes off late, ms: each time the machine is asked when it wants
    /// [`shardjob_core::machine::Machine::handle_timeout`], the answer is put off by a delay
    /// drawn from 0 to this (a driver's sleep never wakes early, and wakes late on a busy
    /// machine). 0: timers go off on time.
    pub timer_lag: u64,
}

impl Races {
    /// No races: the fixed-latency world.
    pub const NONE: Races = Races {
        spread: 0,
        watch_spread: 0,
        shuffle: false,
        reply_loss: 0,
        timer_lag: 0,
    };

    /// A world's races, from a seed of their own: half of the seeds get none (their worlds stay
    /// the fixed-latency worlds they were); the others get each kind of race or not, and at
    /// least one. The timers' lag, added later, is drawn from a stream of its own, so that a
    /// racing seed that draws none races as it did before.
    pub fn draw(seed: u64) -> Races {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut between = |lo: u64, hi: u64| lo + rng.next_u64() % (hi - lo + 1);
        if between(0, 1) == 0 {
            return Races::NONE;
        }
        let mut races = Races::NONE;
        if between(1, 100) <= 70 {
            races.spread = between(1, 40);
        }
        if between(1, 100) <= 60 {
            races.watch_spread = between(1, 250);
        }
        races.shuffle = between(1, 100) <= 70;
        if between(1, 100) <= 30 {
            races.reply_loss = between(1, 30) as u32;
        }
        if races == Races::NONE {
            races.shuffle = true;
        }
        let mut lag = ChaCha8Rng::seed_from_u64(seed);
        lag.set_stream(3);
        if lag.next_u64() % 2 == 0 {
            races.timer_lag = 1 + lag.next_u64() % 20;
        }
        races
    }

    /// Whether any race is on.
    pub fn any(&self) -> bool {
        *self != Races::NONE
    }
}

impl fmt::Display for Races {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.any() {
            return f.write_str("none (fixed latency, nodes in index order)");
        }
        let mut parts = Vec::new();
        if self.spread > 0 {
            parts.push(format!("each leg of a request 0-{} ms", self.spread));
        }
        if self.watch_spread > 0 {
            parts.push(format!(
                "watch deliveries up to {} ms late",
                self.watch_spread
            ));
        }
        if self.shuffle {
            parts.push("nodes in a drawn order".to_owned());
        }
        if self.reply_loss > 0 {
            parts.push(format!("{}‰ of replies lost", self.reply_loss));
        }
        if self.timer_lag > 0 {
            parts.push(format!("timers up to {} ms late", self.timer_lag));
        }
        f.write_str(&parts.join(", "))
    }
}

/// A request on its way to the registry.
#[derive(Debug)]
pub(crate) struct InFlight {
    /// The node that sent it (an index into the cluster's ElasticJob nodes if `java`).
    pub(crate) node: usize,
    /// Whether an ElasticJob node sent it.
    pub(crate) java: bool,
    /// The ElasticJob runs (run id, item) whose end it commits if it applies.
    pub(crate) ends: Vec<(u64, u32)>,
    /// The session it was sent in.
    pub(crate) session: Option<SessionId>,
    /// The node's clock when it sent it (epoch ms).
    pub(crate) wall: i64,
    /// The request.
    pub(crate) id: RequestId,
    /// What it asks.
    pub(crate) op: RegistryOp,
    /// Whether its reply goes back (not when the node is deaf or the reply is lost: the node
    /// hears a timeout, queued when it was sent).
    pub(crate) answered: bool,
}

/// The wire: the race knobs, their seeded stream, and the requests in flight.
#[derive(Debug)]
pub(crate) struct Network {
    pub(crate) races: Races,
    rng: ChaCha8Rng,
    /// Requests in flight by (arrival, sequence): the sequence keeps one node's requests of the
    /// same arrival in the order they were sent.
    in_flight: BTreeMap<(u64, u64), InFlight>,
    seq: u64,
    /// The order of the nodes at this instant, kept to be refilled.
    order: Vec<usize>,
    /// The timers' lags ([`Races::timer_lag`]), a stream of their own.
    lag_rng: ChaCha8Rng,
}

impl Network {
    /// A network with these races, drawing from `seed`.
    pub(crate) fn new(races: Races, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // Apart from the stream `Races::draw` read from the same seed.
        rng.set_stream(1);
        let mut lag_rng = ChaCha8Rng::seed_from_u64(seed);
        lag_rng.set_stream(4);
        Self {
            races,
            rng,
            in_flight: BTreeMap::new(),
            seq: 0,
            order: Vec::new(),
            lag_rng,
        }
    }

    /// How late the timer a machine just asked for goes off, ms ([`Races::timer_lag`]).
    pub(crate) fn timer_lag(&mut self) -> u64 {
        match self.races.timer_lag {
            0 => 0,
            most => self.lag_rng.next_u64() % (most + 1),
        }
    }

    /// Whether requests travel (and apply on arrival) rather than apply when sent.
    pub(crate) fn travels(&self) -> bool {
        self.races.spread > 0
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.rng.next_u64() % n }
    }

    /// One leg of a request's trip, ms.
    pub(crate) fn leg(&mut self) -> u64 {
        let spread = self.races.spread;
        if self.below(32) == 0 {
            spread + self.below(2 * spread + 1)
        } else {
            self.below(spread + 1)
        }
    }

    /// How late one watch delivery is, ms.
    pub(crate) fn watch_lag(&mut self) -> u64 {
        let spread = self.races.watch_spread;
        self.below(spread + 1)
    }

    /// Whether a reply is lost, with a chance of `per_mille` on top of the drawn one. Draws
    /// nothing when both are zero.
    pub(crate) fn loses(&mut self, per_mille: u32) -> bool {
        let chance = u64::from(self.races.reply_loss) + u64::from(per_mille);
        chance > 0 && self.below(1_000) < chance
    }

    /// Sends a request that reaches the registry at `at`.
    pub(crate) fn send(&mut self, at: u64, request: InFlight) {
        self.seq += 1;
        self.in_flight.insert((at, self.seq), request);
    }

    /// The next request to reach the registry by `now`, in arrival order.
    pub(crate) fn arrived(&mut self, now: u64) -> Option<InFlight> {
        let entry = self.in_flight.first_entry()?;
        if entry.key().0 > now {
            return None;
        }
        Some(entry.remove())
    }

    /// When the next request reaches the registry.
    pub(crate) fn next_arrival(&self) -> Option<u64> {
        self.in_flight.first_key_value().map(|((at, _), _)| *at)
    }

    /// Forgets the requests of a node whose process is gone.
    pub(crate) fn drop_node(&mut self, node: usize) {
        self.in_flight.retain(|_, r| r.java || r.node != node);
    }

    /// Forgets the requests of an ElasticJob node whose process is gone.
    pub(crate) fn drop_java(&mut self, node: usize) {
        self.in_flight.retain(|_, r| !r.java || r.node != node);
    }

    /// The order in which `len` nodes act at this instant: drawn when the races shuffle, else
    /// `None` (index order).
    pub(crate) fn order(&mut self, len: usize) -> Option<Vec<usize>> {
        if !self.races.shuffle || len < 2 {
            return None;
        }
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend(0..len);
        for i in (1..len).rev() {
            let j = self.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        Some(order)
    }

    /// Gives back the order's buffer for the next instant.
    pub(crate) fn reuse(&mut self, order: Vec<usize>) {
        self.order = order;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_of_the_seeds_race_and_each_race_is_drawn() {
        let drawn: Vec<Races> = (0..400).map(Races::draw).collect();
        let racing = drawn.iter().filter(|r| r.any()).count();
        assert!((150..250).contains(&racing), "{racing} of 400 race");
        assert!(drawn.iter().any(|r| r.spread > 0));
        assert!(drawn.iter().any(|r| r.watch_spread > 0));
        assert!(drawn.iter().any(|r| r.shuffle));
        assert!(drawn.iter().any(|r| r.reply_loss > 0));
        assert!(drawn.iter().any(|r| r.any() && r.spread == 0));
        assert_eq!(Races::draw(7), Races::draw(7));
    }

    #[test]
    fn legs_stay_within_three_spreads_and_vary() {
        let races = Races {
            spread: 10,
            ..Races::NONE
        };
        let mut net = Network::new(races, 1);
        let legs: Vec<u64> = (0..2_000).map(|_| net.leg()).collect();
        assert!(legs.iter().all(|l| *l <= 30));
        assert!(legs.iter().any(|l| *l > 10), "no spike in 2,000 legs");
        assert!(legs.contains(&0));
    }

    #[test]
    fn the_order_is_a_permutation_that_varies() {
        let races = Races {
            shuffle: true,
            ..Races::NONE
        };
        let mut net = Network::new(races, 3);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let order = net.order(4).expect("an order when shuffling");
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(sorted, vec![0, 1, 2, 3]);
            seen.insert(order.clone());
            net.reuse(order);
        }
        assert!(seen.len() > 5, "{} orders in 50 instants", seen.len());
        assert!(Network::new(Races::NONE, 3).order(4).is_none());
    }

    #[test]
    fn no_chance_draws_nothing_and_a_certain_loss_always_loses() {
        let mut a = Network::new(Races::NONE, 9);
        let mut b = Network::new(Races::NONE, 9);
        assert!(!a.loses(0));
        assert!(a.loses(1_000));
        // `a` drew once (for the certain loss), `b` not at all: the next draws differ by one.
        b.below(1_000);
        assert_eq!(a.below(1_000), b.below(1_000));
    }

    #[test]
    fn arrivals_come_in_time_order_then_send_order() {
        let mut net = Network::new(Races::NONE, 0);
        let req = |node, id| InFlight {
            node,
            java: false,
            ends: Vec::new(),
            session: None,
            wall: 0,
            id: RequestId(id),
            op: RegistryOp::Get(shardjob_core::registry::NodePath::root()),
            answered: true,
        };
        net.send(5, req(0, 1));
        net.send(3, req(1, 2));
        net.send(5, req(0, 3));
        assert_eq!(net.next_arrival(), Some(3));
        assert!(net.arrived(2).is_none());
        let got: Vec<u64> = std::iter::from_fn(|| net.arrived(5))
            .map(|r| r.id.0)
            .collect();
        assert_eq!(got, vec![2, 1, 3]);
    }
}
