//! What a runner writes for a row's [`Before`] ([`Row`], [`SharedAt`]) and how it reads
//! what a backend stored back into a [`Seen`].

use super::vocabulary::*;

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
    pub(super) const fn expected(self, issued: u64) -> u64 {
        match self {
            Fence::Issued => issued,
            other => other.stored(),
        }
    }
}

impl Share {
    pub(super) fn seen(&self, issued: u64) -> SeenShare {
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
    /// An end that has come, as [`Seen::coarse`] writes every past end.
    pub const OVER: i64 = -1;

    /// The record as a backend that keeps no end times tells it, only whether each end
    /// has come: a hold past its end ended at [`Seen::OVER`] (when does not matter), one
    /// past its grace, a cooldown or a writer's marker that has ended are no longer there
    /// (the lock is free with its fencing token), and a free record that never issued a
    /// token is no record. An end at the very instant of the request has come (a hold is
    /// live strictly before its end, remembered strictly before the end of its grace).
    pub fn coarse(&self) -> Seen {
        let over = |at: &mut i64| {
            if *at <= 0 {
                *at = Seen::OVER;
            }
        };
        let mut seen = self.clone();
        match &mut seen {
            Seen::Free { fencing: 0 } => return Seen::Nothing,
            Seen::Cooling { fencing, left_ms } if *left_ms <= 0 => {
                return Seen::Free { fencing: *fencing }
            }
            Seen::Held {
                fencing,
                forget_in_ms,
                ..
            } if *forget_in_ms <= 0 => return Seen::Free { fencing: *fencing },
            Seen::Held { expires_in_ms, .. } => over(expires_in_ms),
            Seen::Shared {
                fencing,
                holds,
                writer,
                ..
            } => {
                holds.retain(|s| s.forget_in_ms > 0);
                holds.iter_mut().for_each(|s| over(&mut s.expires_in_ms));
                if writer.is_some_and(|(_, until)| until <= 0) {
                    *writer = None;
                }
                if holds.is_empty() && writer.is_none() {
                    return Seen::Free { fencing: *fencing };
                }
            }
            Seen::Nothing | Seen::Free { .. } | Seen::Cooling { .. } => {}
        }
        seen
    }

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
