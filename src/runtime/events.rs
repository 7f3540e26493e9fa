//! Where a scheduler's [`RunEvent`]s go.
//!
//! Two kinds of listener hear them:
//! - **subscribers** ([`SchedulerHandle::subscribe`](crate::runtime::SchedulerHandle::subscribe)),
//!   through a broadcast channel of [`EVENT_CAPACITY`](crate::runtime::EVENT_CAPACITY) events:
//!   one that falls further behind misses events (and is told how many);
//! - **sinks**: the scheduler's own records that must see every event (the job history, the
//!   metrics). A sink is called in line by whoever sends the event, before the broadcast, so
//!   nothing stands between an event and the sink that could lose it. A sink's work is short
//!   and never waits: the history pushes onto its own bounded queue (whose bound is the only
//!   place events may be dropped, counted), the metrics add to counters.

use std::sync::Arc;

use tokio::sync::broadcast;

use super::RunEvent;

/// A record that hears every event of a scheduler, in line (see the module's doc).
pub(crate) trait RunEventSink: Send + Sync {
    /// Takes one event. Called by the task that sends it: must not block or wait.
    fn event(&self, event: &RunEvent);
}

/// The sending side of a scheduler's events: its sinks, then its subscribers.
#[derive(Clone)]
pub(crate) struct EventOut {
    broadcast: broadcast::Sender<RunEvent>,
    sinks: Arc<[Arc<dyn RunEventSink>]>,
}

impl std::fmt::Debug for EventOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventOut")
            .field("subscribers", &self.broadcast.receiver_count())
            .field("sinks", &self.sinks.len())
            .finish()
    }
}

impl EventOut {
    /// Events to `broadcast`'s subscribers, and to every sink.
    pub(crate) fn new(
        broadcast: broadcast::Sender<RunEvent>,
        sinks: Vec<Arc<dyn RunEventSink>>,
    ) -> EventOut {
        EventOut {
            broadcast,
            sinks: sinks.into(),
        }
    }

    /// Hands `event` to every sink, then to the subscribers.
    pub(crate) fn send(&self, event: RunEvent) {
        for sink in self.sinks.iter() {
            sink.event(&event);
        }
        // No subscriber is not an error: the event was for whoever listens.
        let _ = self.broadcast.send(event);
    }

    /// Whether anyone hears events now (a sink, or a subscriber): when nobody does, a run
    /// need not even build them.
    pub(crate) fn heard(&self) -> bool {
        !self.sinks.is_empty() || self.broadcast.receiver_count() > 0
    }

    /// A new subscriber, from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<RunEvent> {
        self.broadcast.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use shardjob_core::machine::MachineEvent;

    use super::*;

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl RunEventSink for Count {
        fn event(&self, _: &RunEvent) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn some_event() -> RunEvent {
        RunEvent::Machine(MachineEvent::JobLeft {
            job: "j".to_owned(),
        })
    }

    #[test]
    fn a_sink_hears_every_event_where_a_lagging_subscriber_misses_some() {
        let count = Arc::new(Count::default());
        let out = EventOut::new(broadcast::channel(4).0, vec![count.clone()]);
        let mut slow = out.subscribe();
        for _ in 0..10_000 {
            out.send(some_event());
        }
        assert_eq!(count.0.load(Ordering::Relaxed), 10_000);
        assert!(matches!(
            slow.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(9_996))
        ));
    }

    #[test]
    fn events_are_heard_only_when_someone_listens() {
        let alone = EventOut::new(broadcast::channel(4).0, Vec::new());
        assert!(!alone.heard());
        let rx = alone.subscribe();
        assert!(alone.heard());
        drop(rx);
        assert!(!alone.heard());
        let with_sink = EventOut::new(
            broadcast::channel(4).0,
            vec![Arc::new(Count::default()) as Arc<dyn RunEventSink>],
        );
        assert!(with_sink.heard());
    }
}
