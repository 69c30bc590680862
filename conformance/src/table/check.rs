//! Running a row: sending the request through a backend ([`Case::send`]), and the checker
//! ([`Case::check`]) that compares what the backend answered and stored with the row.

use std::fmt;

use lock_core::backend::{ObtainRequest, ProlongRequest, ReleaseRequest, Token};
use lock_core::{
    ErrorKind, HolderInfo, Key, LockBackend, LockState, ObtainOutcome, ProlongOutcome,
    ReleaseOutcome, Ttl,
};

use super::vocabulary::*;

/// A mismatch between a case and what a backend did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch(String);

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Mismatch {}

fn close(got: i128, want: i128, slack_ms: u64) -> bool {
    (got - want).abs() <= i128::from(slack_ms)
}

impl Case {
    /// Sends the case's request for `key` through `backend` (configured with a grace period
    /// of [`GRACE_MS`]), by `token` (who is [`Who::A`]).
    ///
    /// # Errors
    /// The backend's.
    pub async fn send(
        &self,
        backend: &dyn LockBackend,
        key: &Key,
        token: &Token,
    ) -> lock_core::Result<Answer> {
        let ttl = Ttl::from_millis(TTL_MS)?;
        Ok(match self.ask {
            Ask::Obtain => {
                let holder = HolderInfo::current();
                let req = ObtainRequest::new(key, token, ttl, &holder);
                Answer::Obtain(backend.obtain(req).await?)
            }
            Ask::ObtainAs { mode, queue } => {
                let holder = HolderInfo::current();
                let req = ObtainRequest::new(key, token, ttl, &holder)
                    .with_mode(mode)
                    .with_queue(queue);
                match backend.obtain(req).await {
                    Err(e) if e.kind() == ErrorKind::InvalidInput => Answer::Refused,
                    answer => Answer::Obtain(answer?),
                }
            }
            Ask::Change { mode, of } => {
                let holder = HolderInfo::current();
                let req = ObtainRequest::new(key, token, ttl, &holder)
                    .with_mode(mode)
                    .with_change(lock_core::Fencing(of));
                match backend.obtain(req).await {
                    Err(e) if e.kind() == ErrorKind::InvalidInput => Answer::Refused,
                    answer => Answer::Obtain(answer?),
                }
            }
            Ask::Prolong => {
                let req = ProlongRequest { key, token, ttl };
                Answer::Prolong(backend.prolongate(req).await?)
            }
            Ask::Release { delay } => {
                let delay_after = if delay {
                    Some(Ttl::from_millis(DELAY_MS)?)
                } else {
                    None
                };
                let req = ReleaseRequest {
                    key,
                    token,
                    delay_after,
                };
                Answer::Release(backend.release(req).await?)
            }
            Ask::Inspect => Answer::State(backend.inspect(key).await?),
            Ask::Force => Answer::State(backend.force_release(key).await?),
        })
    }

    /// Checks a backend's answer and the record it stored afterwards. Remaining times and
    /// record times may be off by `slack_ms` (0 for an exact clock; a real server's clock
    /// moves between the write of [`Before`] and the request). A record past its grace
    /// period may also be gone where the case expects it unchanged (a backend may sweep it).
    ///
    /// # Errors
    /// What differs, naming the case.
    pub fn check(&self, answer: &Answer, after: &Seen, slack_ms: u64) -> Result<(), Mismatch> {
        self.check_as(answer, after, slack_ms, false)
    }

    /// [`Case::check`] for a backend that keeps no end times, only whether each has come:
    /// etcd's leases hold their keys until they end, and nothing says when a lease ended.
    /// Both the record the row expects and the one found are taken as such a backend can
    /// tell them ([`Seen::coarse`]) before they are compared; the answer is checked as
    /// [`Case::check`] does. `slack_ms` also covers the rounding of the backend's times
    /// (etcd reports a lease's time left in whole seconds).
    ///
    /// # Errors
    /// What differs, naming the case.
    pub fn check_coarse(
        &self,
        answer: &Answer,
        after: &Seen,
        slack_ms: u64,
    ) -> Result<(), Mismatch> {
        self.check_as(answer, after, slack_ms, true)
    }

    fn check_as(
        &self,
        answer: &Answer,
        after: &Seen,
        slack_ms: u64,
        coarse: bool,
    ) -> Result<(), Mismatch> {
        let fail = |what: String| Err(Mismatch(format!("case \"{}\": {what}", self.name)));
        let before_fencing = match self.before {
            Before::Nothing => 0,
            _ => FENCING,
        };
        let ms = |d: std::time::Duration| i128::try_from(d.as_millis()).unwrap_or(i128::MAX);
        let issued =
            match (self.outcome, answer) {
                (Outcome::Acquired, Answer::Obtain(ObtainOutcome::Acquired { fencing, .. }))
                    if fencing.0 > before_fencing =>
                {
                    Some(fencing.0)
                }
                (
                    Outcome::AcquiredKept,
                    Answer::Obtain(ObtainOutcome::Acquired { fencing, .. }),
                ) if fencing.0 == FENCING => None,
                (
                    Outcome::BusyFor {
                        reason,
                        holders,
                        remaining_ms,
                    },
                    Answer::Obtain(ObtainOutcome::Busy(busy)),
                ) if busy.reason == reason
                    && busy.holders == holders
                    && close(ms(busy.remaining), remaining_ms.into(), slack_ms) =>
                {
                    None
                }
                (Outcome::Refused, Answer::Refused) => None,
                (
                    Outcome::Shared { holds: n },
                    Answer::State(LockState::Shared {
                        capacity, holds, ..
                    }),
                ) if *capacity == CAPACITY && holds.len() == n as usize => None,
                (Outcome::Reacquired(n), Answer::Obtain(ObtainOutcome::Reacquired { holds }))
                    if *holds == n =>
                {
                    None
                }
                (
                    Outcome::Busy {
                        holder,
                        remaining_ms,
                    },
                    Answer::Obtain(ObtainOutcome::Busy(busy)),
                ) if busy.holder.is_some() == holder
                    && close(ms(busy.remaining), remaining_ms.into(), slack_ms) =>
                {
                    None
                }
                (Outcome::Prolonged, Answer::Prolong(ProlongOutcome::Prolonged))
                | (Outcome::ProlongedLate, Answer::Prolong(ProlongOutcome::ProlongedLate))
                | (Outcome::Lost, Answer::Prolong(ProlongOutcome::Lost))
                | (Outcome::Released, Answer::Release(ReleaseOutcome::Released))
                | (Outcome::ReleasedLate, Answer::Release(ReleaseOutcome::ReleasedLate))
                | (Outcome::Lost, Answer::Release(ReleaseOutcome::Lost))
                | (Outcome::Lost, Answer::Obtain(ObtainOutcome::Lost))
                | (Outcome::Free, Answer::State(LockState::Free)) => None,
                (
                    Outcome::Decremented(n),
                    Answer::Release(ReleaseOutcome::Decremented { holds }),
                ) if *holds == n => None,
                (
                    Outcome::Cooling { remaining_ms },
                    Answer::State(LockState::Cooling { remaining }),
                ) if close(ms(*remaining), remaining_ms.into(), slack_ms) => None,
                (
                    Outcome::Held {
                        holds: n,
                        remaining_ms,
                    },
                    Answer::State(LockState::Held {
                        fencing,
                        remaining,
                        holds,
                        ..
                    }),
                ) if *holds == n
                    && fencing.0 == FENCING
                    && close(ms(*remaining), remaining_ms.into(), slack_ms) =>
                {
                    None
                }
                (want, got) => return fail(format!("expected {want:?}, got {got:?}")),
            };
        let expected = match self.after {
            After::Unchanged => self.before.seen(),
            After::Free => Seen::Free {
                fencing: before_fencing,
            },
            After::Cooling { left_ms } => Seen::Cooling {
                fencing: before_fencing,
                left_ms,
            },
            After::Held {
                by,
                holds,
                fencing,
                expires_in_ms,
                forget_in_ms,
            } => Seen::Held {
                by: Some(by),
                holds,
                // The outcome check above made sure an issuing case has one.
                fencing: fencing.expected(issued.unwrap_or(0)),
                expires_in_ms,
                forget_in_ms,
            },
            After::Shared {
                fencing,
                holds,
                writer,
            } => Seen::Shared {
                fencing: match fencing {
                    Fence::Kept => before_fencing,
                    other => other.expected(issued.unwrap_or(0)),
                },
                capacity: CAPACITY,
                holds: holds.iter().map(|s| s.seen(issued.unwrap_or(0))).collect(),
                writer: writer.map(|m| (Some(m.by), m.until_in_ms)),
            },
        };
        // A record past its grace may also have been swept where it should be unchanged.
        let swept = self.after == After::Unchanged
            && matches!(self.before, Before::Held { forget_in_ms, .. } if forget_in_ms < 0)
            && *after == Seen::Nothing;
        let ok = if coarse {
            same(&expected.coarse(), &after.coarse(), slack_ms)
        } else {
            same(&expected, after, slack_ms) || swept
        };
        if !ok {
            return fail(format!(
                "expected the record {:?} afterwards (before: {:?}), found {after:?}",
                self.after, self.before
            ));
        }
        Ok(())
    }
}

fn same(a: &Seen, b: &Seen, slack_ms: u64) -> bool {
    let near = |x: i64, y: i64| close(x.into(), y.into(), slack_ms);
    match (a, b) {
        (
            Seen::Cooling { fencing, left_ms },
            Seen::Cooling {
                fencing: f,
                left_ms: l,
            },
        ) => fencing == f && near(*left_ms, *l),
        (
            Seen::Held {
                by,
                holds,
                fencing,
                expires_in_ms,
                forget_in_ms,
            },
            Seen::Held {
                by: b,
                holds: h,
                fencing: f,
                expires_in_ms: e,
                forget_in_ms: g,
            },
        ) => {
            by == b
                && holds == h
                && fencing == f
                && near(*expires_in_ms, *e)
                && near(*forget_in_ms, *g)
        }
        (
            Seen::Shared {
                fencing,
                capacity,
                holds,
                writer,
            },
            Seen::Shared {
                fencing: f,
                capacity: c,
                holds: h,
                writer: w,
            },
        ) => {
            let same_share = |x: &SeenShare, y: &SeenShare| {
                (x.by, x.weight, x.holds, x.fencing) == (y.by, y.weight, y.holds, y.fencing)
                    && near(x.expires_in_ms, y.expires_in_ms)
                    && near(x.forget_in_ms, y.forget_in_ms)
            };
            let same_writer = match (writer, w) {
                (Some((x, at)), Some((y, bt))) => x == y && near(*at, *bt),
                (x, y) => x == y,
            };
            fencing == f
                && capacity == c
                && holds.len() == h.len()
                && holds.iter().zip(h).all(|(x, y)| same_share(x, y))
                && same_writer
        }
        (a, b) => a == b,
    }
}
