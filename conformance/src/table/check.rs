//! Running a row: what a runner writes for [`Before`] ([`Row`], [`SharedAt`]), sending the
//! request through a backend ([`Case::send`]), and the checker ([`Case::check`]) that
//! compares what the backend answered and stored with the row.

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

/// A [`Before`] as the fields a runner writes, at absolute times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// `held`, `cooling`, `free`, or `shared` (then write [`Before::shared_at`]'s holds).
    pub state: &'static str,
    /// Whose token, when held.
    pub by: Option<Who>,
    /// The hold count (0 unless held).
    pub holds: u32,
    /// The end of the ttl or of the cooldown (the write's instant when free).
    pub expires: i64,
    /// The end of the grace period (as `expires` unless held).
    pub forget: i64,
}

impl Before {
    /// The record to write when the clock reads `now` (in milliseconds); `None` for no
    /// record.
    pub fn row(self, now: i64) -> Option<Row> {
        let plain = |state, at| Row {
            state,
            by: None,
            holds: 0,
            expires: at,
            forget: at,
        };
        match self {
            Before::Nothing => None,
            Before::Free => Some(plain("free", now)),
            Before::Cooling { left_ms } => Some(plain("cooling", now + left_ms)),
            Before::Held {
                by,
                holds,
                expires_in_ms,
                forget_in_ms,
            } => Some(Row {
                state: "held",
                by: Some(by),
                holds,
                expires: now + expires_in_ms,
                forget: now + forget_in_ms,
            }),
            Before::Shared { .. } => Some(plain("shared", now)),
        }
    }

    /// The shared holds to write when the clock reads `now` (in milliseconds), for
    /// [`Before::Shared`].
    pub fn shared_at(self, now: i64) -> Option<SharedAt> {
        let Before::Shared { holds, writer } = self else {
            return None;
        };
        Some(SharedAt {
            capacity: CAPACITY,
            holds: holds
                .iter()
                .map(|s| ShareAt {
                    by: s.by,
                    weight: s.weight,
                    holds: s.holds,
                    fencing: s.fencing.stored(),
                    expires: now + s.expires_in_ms,
                    forget: now + s.forget_in_ms,
                })
                .collect(),
            writer: writer.map(|m| (m.by, now + m.until_in_ms)),
        })
    }

    /// The stored record as a runner would decode it.
    pub fn seen(self) -> Seen {
        match self {
            Before::Nothing => Seen::Nothing,
            Before::Free => Seen::Free { fencing: FENCING },
            Before::Cooling { left_ms } => Seen::Cooling {
                fencing: FENCING,
                left_ms,
            },
            Before::Held {
                by,
                holds,
                expires_in_ms,
                forget_in_ms,
            } => Seen::Held {
                by: Some(by),
                holds,
                fencing: FENCING,
                expires_in_ms,
                forget_in_ms,
            },
            Before::Shared { holds, writer } => Seen::Shared {
                fencing: FENCING,
                capacity: CAPACITY,
                holds: holds.iter().map(|s| s.seen(0)).collect(),
                writer: writer.map(|m| (Some(m.by), m.until_in_ms)),
            },
        }
    }
}

/// [`Before::Shared`] at absolute times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedAt {
    /// The capacity.
    pub capacity: u32,
    /// The holds, oldest first.
    pub holds: Vec<ShareAt>,
    /// A waiting writer's marker and its end.
    pub writer: Option<(Who, i64)>,
}

impl SharedAt {
    /// The row's `shares` and `writer` as the SQL backends store them
    /// (`lock_core::backend::rules::columns`): times in `per_ms` units per millisecond,
    /// each hold's token as `token` spells it and its holder info `holder`; with the end
    /// (ms) of the hold that ends last and of the last grace period, for the row's own
    /// columns (`None` without holds).
    pub fn columns(&self, per_ms: i64, token: impl Fn(Who) -> String, holder: &str) -> SharedRow {
        let holds: Vec<_> = self
            .holds
            .iter()
            .map(|h| {
                serde_json::json!({"token": token(h.by), "holder": holder, "holds": h.holds,
                    "expires": h.expires * per_ms, "forget": h.forget * per_ms,
                    "fencing": h.fencing, "weight": h.weight})
            })
            .collect();
        SharedRow {
            shares: serde_json::json!({"capacity": self.capacity, "holds": holds}).to_string(),
            writer: self.writer.map(|(by, until)| {
                serde_json::json!({"token": token(by), "until": until * per_ms}).to_string()
            }),
            expires: self.holds.iter().map(|h| h.expires).max(),
            forget: self.holds.iter().map(|h| h.forget).max(),
        }
    }
}

/// [`SharedAt::columns`]: shared holds as an SQL row stores them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedRow {
    /// The `shares` column, JSON.
    pub shares: String,
    /// The `writer` column, JSON.
    pub writer: Option<String>,
    /// The end of the hold that ends last (ms).
    pub expires: Option<i64>,
    /// The end of the last grace period (ms).
    pub forget: Option<i64>,
}

/// One shared hold at absolute times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareAt {
    /// Whose.
    pub by: Who,
    /// Its permits.
    pub weight: u32,
    /// Its reentrant count.
    pub holds: u32,
    /// Its fencing token.
    pub fencing: u64,
    /// The end of its ttl.
    pub expires: i64,
    /// The end of its grace period.
    pub forget: i64,
}

impl Fence {
    /// The token of a stored record's share ([`Fence::Of`]); the table's [`FENCING`]
    /// otherwise.
    const fn stored(self) -> u64 {
        match self {
            Fence::Of(n) => n,
            Fence::Kept | Fence::Issued => FENCING,
        }
    }

    /// The token expected: `issued` for [`Fence::Issued`].
    const fn expected(self, issued: u64) -> u64 {
        match self {
            Fence::Issued => issued,
            other => other.stored(),
        }
    }
}

impl Share {
    fn seen(&self, issued: u64) -> SeenShare {
        SeenShare {
            by: Some(self.by),
            weight: self.weight,
            holds: self.holds,
            fencing: self.fencing.expected(issued),
            expires_in_ms: self.expires_in_ms,
            forget_in_ms: self.forget_in_ms,
        }
    }
}

impl Seen {
    /// Decodes shared holds stored as JSON the way the Redis and Postgres backends store
    /// them: `shares` an object with `capacity` and `holds` (each with `token`, `holds`,
    /// `expires`, `forget`, `fencing`, `weight`), `writer` an object with `token` and
    /// `until`; times in `per_ms` units per millisecond since the epoch, made relative to
    /// `now_ms`; `who` names a stored token. `None` when the JSON is not of that shape.
    pub fn shared_from_json(
        fencing: u64,
        shares: &serde_json::Value,
        writer: Option<&serde_json::Value>,
        per_ms: i64,
        now_ms: i64,
        who: impl Fn(&str) -> Option<Who>,
    ) -> Option<Seen> {
        let int = |v: &serde_json::Value, k: &str| v.get(k).and_then(serde_json::Value::as_i64);
        let at = |v: &serde_json::Value, k: &str| int(v, k).map(|t| t / per_ms - now_ms);
        let small = |v: &serde_json::Value, k: &str| int(v, k).and_then(|n| u32::try_from(n).ok());
        let holds = shares
            .get("holds")?
            .as_array()?
            .iter()
            .map(|h| {
                Some(SeenShare {
                    by: who(h.get("token")?.as_str()?),
                    weight: small(h, "weight")?,
                    holds: small(h, "holds")?,
                    fencing: u64::try_from(int(h, "fencing")?).ok()?,
                    expires_in_ms: at(h, "expires")?,
                    forget_in_ms: at(h, "forget")?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let writer = match writer {
            None => None,
            Some(w) => Some((who(w.get("token")?.as_str()?), at(w, "until")?)),
        };
        Some(Seen::Shared {
            fencing,
            capacity: small(shares, "capacity")?,
            holds,
            writer,
        })
    }
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
        let ok = same(&expected, after, slack_ms) || swept;
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
