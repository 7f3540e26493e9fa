//! Folding a job's failures into at most one message per window (a pure decision, with the
//! time given).
//!
//! A failure when the job is quiet (nothing sent within the last window) goes at once and
//! opens a window. Failures within an open window are folded: when the window ends, one
//! message carries the latest of them and counts the others ("and N more ... since" the first
//! folded one), and opens the next window. A window that ends with nothing folded closes.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::Failure;

/// One message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// The failure the message shows.
    pub failure: Failure,
    /// How many other failures the message folds.
    pub more: u64,
    /// The fire time of the first folded failure (the shown one's when none is folded).
    pub since: DateTime<Utc>,
}

/// Failures held for the end of the window.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Folded {
    latest: Option<Failure>,
    /// Failures besides `latest` (including those that came without their text).
    more: u64,
    since: DateTime<Utc>,
}

/// One job's window.
#[derive(Debug, Clone)]
pub struct Window {
    length: Duration,
    /// When the open window ends (`None`: the job is quiet).
    ends: Option<Instant>,
    folded: Option<Folded>,
}

impl Window {
    /// A quiet job's window of this length.
    pub fn new(length: Duration) -> Window {
        Window {
            length,
            ends: None,
            folded: None,
        }
    }

    /// When [`Window::on_due`] must be called (`None`: nothing to wait for).
    pub fn due(&self) -> Option<Instant> {
        self.ends
    }

    /// A failure, and `uncounted` failures that came without their text (a full queue).
    /// Returns the message to send now, if any.
    pub fn on_failure(&mut self, failure: Failure, uncounted: u64, now: Instant) -> Option<Alert> {
        if let Some(ends) = self.ends
            && now >= ends
        {
            // The window ended unnoticed: what it folded goes first.
            if let Some(alert) = self.on_due(now, 0) {
                self.fold(failure, uncounted);
                return Some(alert);
            }
        }
        if self.ends.is_some() {
            self.fold(failure, uncounted);
            return None;
        }
        self.ends = Some(now + self.length);
        // Failures counted without their text before (a full queue) go with this one.
        let carried = self.folded.take();
        Some(Alert {
            since: carried
                .as_ref()
                .map_or(failure.fire_time, |f| f.since.min(failure.fire_time)),
            more: uncounted + carried.map_or(0, |f| f.more),
            failure,
        })
    }

    /// The window's end: the folded message, if anything was folded (and the next window
    /// opens), else the job is quiet again. `uncounted` as in [`Window::on_failure`].
    pub fn on_due(&mut self, now: Instant, uncounted: u64) -> Option<Alert> {
        if uncounted > 0 {
            self.fold_uncounted(uncounted, Utc::now());
        }
        match self.take() {
            Some(alert) => {
                self.ends = Some(now + self.length);
                Some(alert)
            }
            None => {
                self.ends = None;
                None
            }
        }
    }

    /// The notifier stops: what is folded, now.
    pub fn flush(&mut self, uncounted: u64) -> Option<Alert> {
        if uncounted > 0 {
            self.fold_uncounted(uncounted, Utc::now());
        }
        self.ends = None;
        self.take()
    }

    fn take(&mut self) -> Option<Alert> {
        let folded = self.folded.take()?;
        match folded.latest {
            Some(failure) => Some(Alert {
                failure,
                more: folded.more,
                since: folded.since,
            }),
            // Only failures without their text: no message can show one; they are counted
            // into the next.
            None => {
                self.folded = Some(Folded {
                    latest: None,
                    ..folded
                });
                None
            }
        }
    }

    fn fold(&mut self, failure: Failure, uncounted: u64) {
        match &mut self.folded {
            Some(f) => {
                f.more += uncounted + u64::from(f.latest.is_some());
                f.latest = Some(failure);
            }
            None => {
                self.folded = Some(Folded {
                    since: failure.fire_time,
                    latest: Some(failure),
                    more: uncounted,
                })
            }
        }
    }

    fn fold_uncounted(&mut self, uncounted: u64, now: DateTime<Utc>) {
        match &mut self.folded {
            Some(f) => f.more += uncounted,
            None => {
                self.folded = Some(Folded {
                    latest: None,
                    more: uncounted,
                    since: now,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(item: u32, secs: i64) -> Failure {
        let at = DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap_or_default();
        Failure {
            item: Some(item),
            fire_time: at,
            error: format!("boom {item}"),
        }
    }

    #[test]
    fn a_quiet_job_sends_at_once_then_folds_the_window_into_one_message() {
        let t0 = Instant::now();
        let mut w = Window::new(Duration::from_secs(60));
        let first = w.on_failure(failure(0, 0), 0, t0);
        assert_eq!(first.map(|a| (a.failure.item, a.more)), Some((Some(0), 0)));
        for i in 1..=5 {
            let at = t0 + Duration::from_secs(u64::from(i));
            assert_eq!(w.on_failure(failure(i, i64::from(i)), 0, at), None);
        }
        assert_eq!(w.due(), Some(t0 + Duration::from_secs(60)));
        let folded = w.on_due(t0 + Duration::from_secs(60), 0);
        let folded = folded.expect("the folded message");
        assert_eq!(folded.failure.item, Some(5), "the latest is shown");
        assert_eq!(folded.more, 4, "the four others are counted");
        assert_eq!(
            folded.since,
            failure(1, 1).fire_time,
            "since the first folded"
        );
        // The next window opened; it ends with nothing folded: the job is quiet again.
        assert_eq!(w.due(), Some(t0 + Duration::from_secs(120)));
        assert_eq!(w.on_due(t0 + Duration::from_secs(120), 0), None);
        assert_eq!(w.due(), None);
        let again = w.on_failure(failure(9, 200), 0, t0 + Duration::from_secs(200));
        assert_eq!(again.map(|a| a.more), Some(0), "a quiet job sends at once");
    }

    #[test]
    fn failures_every_second_for_a_day_send_one_message_a_minute() {
        let t0 = Instant::now();
        let mut w = Window::new(Duration::from_secs(60));
        let mut sent = 0u64;
        let mut counted = 0u64;
        for s in 0..86_400u64 {
            let now = t0 + Duration::from_secs(s);
            if let Some(due) = w.due()
                && now >= due
                && let Some(a) = w.on_due(now, 0)
            {
                sent += 1;
                counted += 1 + a.more;
            }
            if let Some(a) = w.on_failure(failure(0, s as i64), 0, now) {
                sent += 1;
                counted += 1 + a.more;
            }
        }
        if let Some(a) = w.flush(0) {
            sent += 1;
            counted += 1 + a.more;
        }
        assert_eq!(counted, 86_400, "every failure is counted once");
        assert!(sent <= 1 + 86_400 / 60 + 1, "{sent} messages");
    }

    #[test]
    fn failures_without_text_are_counted_into_the_next_message() {
        let t0 = Instant::now();
        let mut w = Window::new(Duration::from_secs(60));
        assert!(w.on_failure(failure(0, 0), 0, t0).is_some());
        // Only uncounted failures in the window: nothing to show, kept for the next message.
        assert_eq!(w.on_due(t0 + Duration::from_secs(60), 3), None);
        let a = w.on_failure(failure(1, 70), 2, t0 + Duration::from_secs(70));
        assert_eq!(a.map(|a| a.more), Some(5));
    }

    #[test]
    fn a_stop_flushes_what_is_folded() {
        let t0 = Instant::now();
        let mut w = Window::new(Duration::from_secs(60));
        assert!(w.on_failure(failure(0, 0), 0, t0).is_some());
        assert_eq!(w.on_failure(failure(1, 1), 0, t0), None);
        assert_eq!(w.on_failure(failure(2, 1), 0, t0), None);
        let a = w.flush(0).expect("flushed");
        assert_eq!((a.failure.item, a.more), (Some(2), 1));
        assert_eq!(w.flush(0), None);
    }
}
