//! A registry outage as the log tells it: when it starts (the connection is lost, or the
//! session ended), while it lasts (every [`REPORT_EVERY`]) and when it ends (the session came
//! back, or a new one was opened). Pure: the driver feeds it session events and the time.

use std::time::Duration;

use shardjob_core::registry::SessionEvent;
use tokio::time::Instant;

/// How often a lasting outage is logged again.
pub(crate) const REPORT_EVERY: Duration = Duration::from_secs(30);

/// Where the registry connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Connected (or not connected yet: the start-up is not an outage).
    Up,
    /// Down since `since`; `expired` once the session is known to be gone; `reported` is
    /// when the outage was last logged.
    Down {
        since: Instant,
        reported: Instant,
        expired: bool,
    },
    /// Closed on purpose: nothing more to say.
    Closed,
}

/// What to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Report {
    /// The connection was lost; the session may still come back.
    Lost,
    /// The session ended (its nodes are gone): a new one is opened when the registry answers.
    Expired {
        /// Whether the outage began with it (no connection loss was seen before).
        began: bool,
    },
    /// The outage lasts.
    Lasts(Duration),
    /// It ended: the same session came back.
    Reconnected(Duration),
    /// It ended with a new session (this instance registers again).
    NewSession(Duration),
}

/// Follows the registry connection for the log.
#[derive(Debug)]
pub(crate) struct Outage {
    state: State,
}

impl Outage {
    pub(crate) fn new() -> Self {
        Self { state: State::Up }
    }

    /// A session event from the watch.
    pub(crate) fn on_event(&mut self, event: &SessionEvent, now: Instant) -> Option<Report> {
        match (event, self.state) {
            (SessionEvent::Closed, _) => {
                self.state = State::Closed;
                None
            }
            (_, State::Closed) => None,
            (SessionEvent::Suspended(_), State::Up) => {
                self.state = State::Down {
                    since: now,
                    reported: now,
                    expired: false,
                };
                Some(Report::Lost)
            }
            (SessionEvent::Suspended(_), State::Down { .. }) => None,
            (SessionEvent::Expired(_), State::Up) => {
                self.state = State::Down {
                    since: now,
                    reported: now,
                    expired: true,
                };
                Some(Report::Expired { began: true })
            }
            (
                SessionEvent::Expired(_),
                State::Down {
                    since,
                    reported,
                    expired,
                },
            ) => {
                self.state = State::Down {
                    since,
                    reported,
                    expired: true,
                };
                (!expired).then_some(Report::Expired { began: false })
            }
            (SessionEvent::Reconnected(_), State::Down { since, .. }) => {
                self.state = State::Up;
                Some(Report::Reconnected(now.saturating_duration_since(since)))
            }
            (SessionEvent::Connected(_), State::Down { since, .. }) => {
                self.state = State::Up;
                Some(Report::NewSession(now.saturating_duration_since(since)))
            }
            (SessionEvent::Reconnected(_) | SessionEvent::Connected(_), State::Up) => None,
        }
    }

    /// When [`Outage::on_tick`] has something to say.
    pub(crate) fn next_report(&self) -> Option<Instant> {
        match self.state {
            State::Down { reported, .. } => Some(reported + REPORT_EVERY),
            _ => None,
        }
    }

    /// The time passed: a lasting outage is reported every [`REPORT_EVERY`].
    pub(crate) fn on_tick(&mut self, now: Instant) -> Option<Report> {
        let State::Down {
            since,
            reported,
            expired,
        } = self.state
        else {
            return None;
        };
        if now < reported + REPORT_EVERY {
            return None;
        }
        self.state = State::Down {
            since,
            reported: now,
            expired,
        };
        Some(Report::Lasts(now.saturating_duration_since(since)))
    }
}

/// `1m30s`, `45s`, `2h3m`.
pub(crate) fn human(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardjob_core::registry::{SessionId, SessionInfo};

    const ID: SessionId = SessionId(1);

    fn info() -> SessionInfo {
        SessionInfo {
            id: SessionId(2),
            timeout: Duration::from_secs(10),
        }
    }

    #[test]
    fn an_outage_is_told_when_it_starts_while_it_lasts_and_when_it_ends() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut o = Outage::new();
        // The first session is not the end of an outage.
        assert_eq!(o.on_event(&SessionEvent::Connected(info()), at(0)), None);
        assert_eq!(o.next_report(), None);
        assert_eq!(
            o.on_event(&SessionEvent::Suspended(ID), at(1)),
            Some(Report::Lost)
        );
        assert_eq!(o.on_event(&SessionEvent::Suspended(ID), at(2)), None);
        assert_eq!(o.next_report(), Some(at(31)));
        assert_eq!(o.on_tick(at(30)), None);
        assert_eq!(
            o.on_tick(at(31)),
            Some(Report::Lasts(Duration::from_secs(30)))
        );
        assert_eq!(o.on_tick(at(32)), None);
        assert_eq!(
            o.on_event(&SessionEvent::Expired(ID), at(40)),
            Some(Report::Expired { began: false })
        );
        assert_eq!(o.on_event(&SessionEvent::Expired(ID), at(41)), None);
        assert_eq!(
            o.on_tick(at(61)),
            Some(Report::Lasts(Duration::from_secs(60)))
        );
        assert_eq!(
            o.on_event(&SessionEvent::Connected(info()), at(91)),
            Some(Report::NewSession(Duration::from_secs(90)))
        );
        assert_eq!(o.next_report(), None);
        assert_eq!(o.on_tick(at(200)), None);
        // A short outage the session survives.
        assert_eq!(
            o.on_event(&SessionEvent::Suspended(ID), at(300)),
            Some(Report::Lost)
        );
        assert_eq!(
            o.on_event(&SessionEvent::Reconnected(ID), at(303)),
            Some(Report::Reconnected(Duration::from_secs(3)))
        );
        // An expiry seen first starts an outage too; a close ends the story.
        assert_eq!(
            o.on_event(&SessionEvent::Expired(ID), at(400)),
            Some(Report::Expired { began: true })
        );
        assert_eq!(o.on_event(&SessionEvent::Closed, at(401)), None);
        assert_eq!(o.next_report(), None);
        assert_eq!(o.on_event(&SessionEvent::Connected(info()), at(402)), None);
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(human(Duration::from_secs(45)), "45s");
        assert_eq!(human(Duration::from_secs(90)), "1m30s");
        assert_eq!(human(Duration::from_secs(7380)), "2h03m");
    }
}
