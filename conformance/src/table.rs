//! The decision table: every rule of [`lock_core::backend::rules`] as a row (a stored record, a
//! request, the outcome and the record afterwards), one row per line.
//!
//! This crate's tests run it through the [`lock_core::backend::rules`] functions with an exact clock
//! (`tests/table.rs`); the
//! Redis and Postgres tests write each row's record on a real server, send the request
//! through the backend and read the record back, so the Lua script and the SQL function are
//! held to the same table as the Rust rules. A backend that decides in its own code (a
//! script, a stored procedure) can do the same: write [`Before`], call, decode what is
//! stored into a [`Seen`], and [`Case::check`].
//!
//! Times are milliseconds relative to the instant of the request; they are tens of seconds
//! apart so that a runner on a real server can allow a [`Case::check`] `slack` of a second.
//!
//! The rows after the mutex's are shared holds (a semaphore of [`CAPACITY`] permits, a
//! waiting writer's marker, mode changes): a runner writes [`Before::Shared`] as its backend
//! stores shared holds ([`Before::shared_at`]) and decodes them back with
//! [`Seen::shared_from_json`] when it stores them as JSON.

use std::fmt;

use lock_core::backend::{ObtainRequest, ProlongRequest, ReleaseRequest, Token};
use lock_core::{
    BusyReason, ErrorKind, HolderInfo, Key, LockBackend, LockState, Mode, ObtainOutcome,
    ProlongOutcome, ReleaseOutcome, Ttl,
};

/// The ttl of every obtain and prolong of the table.
pub const TTL_MS: u64 = 30_000;
/// The grace period of every obtain and prolong of the table (configure the backend with it).
pub const GRACE_MS: u64 = 60_000;
/// The delay of the releases that start a cooldown.
pub const DELAY_MS: u64 = 20_000;
/// The fencing token of every stored record of the table.
pub const FENCING: u64 = 1_000;
/// The capacity of every stored shared record of the table.
pub const CAPACITY: u32 = 3;

/// One of the two owner tokens of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// The token of every request.
    A,
    /// Another token.
    B,
    /// A third token (two expired shares of others, to say which one is kept).
    C,
}

/// The record stored before the request (fencing token [`FENCING`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Before {
    /// No record.
    Nothing,
    /// A free record.
    Free,
    /// Cooling until `left_ms` from the request (negative: the cooldown has ended).
    Cooling {
        /// The cooldown's end.
        left_ms: i64,
    },
    /// Held.
    Held {
        /// By whom.
        by: Who,
        /// The hold count.
        holds: u32,
        /// The end of its ttl.
        expires_in_ms: i64,
        /// The end of its grace period.
        forget_in_ms: i64,
    },
    /// Shared holds of a semaphore of [`CAPACITY`] permits, oldest first.
    Shared {
        /// The holds, at least one within its grace.
        holds: &'static [Share],
        /// A waiting writer's marker.
        writer: Option<Marker>,
    },
}

/// One shared hold in a table record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// Whose.
    pub by: Who,
    /// Its permits.
    pub weight: u32,
    /// Its reentrant count.
    pub holds: u32,
    /// Its own fencing token: [`Fence::Of`] in a stored record, or [`Fence::Issued`]
    /// afterwards for the request's admission.
    pub fencing: Fence,
    /// The end of its ttl.
    pub expires_in_ms: i64,
    /// The end of its grace period.
    pub forget_in_ms: i64,
}

/// A waiting writer's marker in a table record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// The writer.
    pub by: Who,
    /// The marker's end.
    pub until_in_ms: i64,
}

/// The request, always by [`Who::A`] when it has a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// obtain for [`TTL_MS`], grace [`GRACE_MS`].
    Obtain,
    /// obtain in `mode` for [`TTL_MS`], grace [`GRACE_MS`], leaving a writer's marker when
    /// busy if `queue`.
    ObtainAs {
        /// The mode asked for.
        mode: Mode,
        /// Whether the request waits (an exclusive one may leave a marker).
        queue: bool,
    },
    /// A mode change to `mode` of A's hold with fencing token `of`
    /// ([`ObtainRequest::change`]), for [`TTL_MS`], grace [`GRACE_MS`].
    Change {
        /// The mode asked for.
        mode: Mode,
        /// The fencing token of the hold the change names.
        of: u64,
    },
    /// prolongate for [`TTL_MS`], grace [`GRACE_MS`].
    Prolong,
    /// release, with [`DELAY_MS`] of cooldown when `true`.
    Release {
        /// Whether the release asks for a cooldown.
        delay: bool,
    },
    /// inspect.
    Inspect,
    /// force_release.
    Force,
}

/// The expected outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `Acquired`, with a fencing token above [`FENCING`] (above 0 without a record).
    Acquired,
    /// `Acquired` with [`FENCING`] itself (a downgrade keeps its token).
    AcquiredKept,
    /// `Busy` for `reason`, counting `holders`, with this remaining time.
    BusyFor {
        /// Why.
        reason: BusyReason,
        /// The live holds counted.
        holders: u32,
        /// Until the hold that opens room ends (or the marker).
        remaining_ms: u64,
    },
    /// `InvalidInput`: a capacity, weight or mode the record refuses.
    Refused,
    /// `Reacquired` with this hold count.
    Reacquired(u32),
    /// `Busy`, with the stored holder or none, and this remaining time.
    Busy {
        /// Whether the holder info is given.
        holder: bool,
        /// The remaining ttl or cooldown.
        remaining_ms: u64,
    },
    /// `Prolonged`.
    Prolonged,
    /// `ProlongedLate`.
    ProlongedLate,
    /// `Released`.
    Released,
    /// `ReleasedLate`.
    ReleasedLate,
    /// `Decremented` with this hold count.
    Decremented(u32),
    /// `Lost` (a prolong, a release, or a mode change whose hold is gone).
    Lost,
    /// `LockState::Free` (inspect or force).
    Free,
    /// `LockState::Cooling`.
    Cooling {
        /// The remaining cooldown.
        remaining_ms: u64,
    },
    /// `LockState::Held` with fencing [`FENCING`].
    Held {
        /// The hold count.
        holds: u32,
        /// The remaining ttl.
        remaining_ms: u64,
    },
    /// `LockState::Shared` of [`CAPACITY`] with this many live holds.
    Shared {
        /// The live holds.
        holds: u32,
    },
}

/// Whether a fencing token was kept or newly issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// [`FENCING`], as before.
    Kept,
    /// The one the `Acquired` outcome carries, above the one before.
    Issued,
    /// This one (a shared hold's own, as stored before).
    Of(u64),
}

/// The expected record afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// As it was (no record stays no record).
    Unchanged,
    /// Free, with the fencing token it had.
    Free,
    /// Cooling for `left_ms`, with the fencing token it had.
    Cooling {
        /// The cooldown's end.
        left_ms: i64,
    },
    /// Held.
    Held {
        /// By whom.
        by: Who,
        /// The hold count.
        holds: u32,
        /// Kept or issued.
        fencing: Fence,
        /// The end of its ttl.
        expires_in_ms: i64,
        /// The end of its grace period.
        forget_in_ms: i64,
    },
    /// Shared holds of [`CAPACITY`].
    Shared {
        /// The record's fencing token: kept, or the one issued.
        fencing: Fence,
        /// The holds, in the order stored.
        holds: &'static [Share],
        /// A waiting writer's marker.
        writer: Option<Marker>,
    },
}

/// A stored record as a runner decoded it, times relative to the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// No record.
    Nothing,
    /// Free.
    Free {
        /// Its fencing token.
        fencing: u64,
    },
    /// Cooling.
    Cooling {
        /// Its fencing token.
        fencing: u64,
        /// The cooldown's end.
        left_ms: i64,
    },
    /// Held; `by` is `None` for a token that is neither A's nor B's.
    Held {
        /// By whom.
        by: Option<Who>,
        /// The hold count.
        holds: u32,
        /// Its fencing token.
        fencing: u64,
        /// The end of its ttl.
        expires_in_ms: i64,
        /// The end of its grace period.
        forget_in_ms: i64,
    },
    /// Shared holds.
    Shared {
        /// The record's fencing token.
        fencing: u64,
        /// The capacity.
        capacity: u32,
        /// The holds, in the order stored.
        holds: Vec<SeenShare>,
        /// A writer's marker: whose (`None`: neither A's nor B's), and its end.
        writer: Option<(Option<Who>, i64)>,
    },
}

/// A stored shared hold as a runner decoded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenShare {
    /// Whose (`None`: neither A's nor B's).
    pub by: Option<Who>,
    /// Its permits.
    pub weight: u32,
    /// Its reentrant count.
    pub holds: u32,
    /// Its fencing token.
    pub fencing: u64,
    /// The end of its ttl.
    pub expires_in_ms: i64,
    /// The end of its grace period.
    pub forget_in_ms: i64,
}

/// A backend's answer to a case's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// To an obtain.
    Obtain(ObtainOutcome),
    /// To a prolong.
    Prolong(ProlongOutcome),
    /// To a release.
    Release(ReleaseOutcome),
    /// To an inspect or a force_release.
    State(LockState),
    /// `InvalidInput`.
    Refused,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    /// A name to report.
    pub name: &'static str,
    /// The stored record.
    pub before: Before,
    /// The request.
    pub ask: Ask,
    /// What the caller is told.
    pub outcome: Outcome,
    /// What is stored afterwards.
    pub after: After,
}

const fn held(by: Who, holds: u32, expires_in_ms: i64, forget_in_ms: i64) -> Before {
    Before::Held {
        by,
        holds,
        expires_in_ms,
        forget_in_ms,
    }
}

const LIVE: Before = held(Who::A, 1, 10_000, 70_000);
const LIVE_TWICE: Before = held(Who::A, 2, 10_000, 70_000);
const EXPIRED: Before = held(Who::A, 2, -10_000, 50_000);
const FORGOTTEN: Before = held(Who::A, 1, -70_000, -10_000);
const OTHERS_LIVE: Before = held(Who::B, 2, 10_000, 70_000);
const OTHERS_EXPIRED: Before = held(Who::B, 1, -10_000, 50_000);
const COOLING: Before = Before::Cooling { left_ms: 20_000 };
const COOLED: Before = Before::Cooling { left_ms: -10_000 };

const TTL: i64 = TTL_MS as i64;
const GRACE: i64 = GRACE_MS as i64;

const fn held_by_a(holds: u32, fencing: Fence) -> After {
    After::Held {
        by: Who::A,
        holds,
        fencing,
        expires_in_ms: TTL,
        forget_in_ms: TTL + GRACE,
    }
}

/// Still held by A with `holds`, the expiry as it was (a decrement keeps it).
const fn decremented(holds: u32) -> After {
    After::Held {
        by: Who::A,
        holds,
        fencing: Fence::Kept,
        expires_in_ms: 10_000,
        forget_in_ms: 70_000,
    }
}

const fn case(
    name: &'static str,
    before: Before,
    ask: Ask,
    outcome: Outcome,
    after: After,
) -> Case {
    Case {
        name,
        before,
        ask,
        outcome,
        after,
    }
}

const ISSUED: After = held_by_a(1, Fence::Issued);

const fn share(by: Who, weight: u32, holds: u32, fencing: u64, expires: i64, forget: i64) -> Share {
    Share {
        by,
        weight,
        holds,
        fencing: Fence::Of(fencing),
        expires_in_ms: expires,
        forget_in_ms: forget,
    }
}
const A1: Share = share(Who::A, 1, 1, 900, 10_000, 70_000);
const A1_TWICE: Share = share(Who::A, 1, 2, 900, 10_000, 70_000);
const A1_EXPIRED: Share = share(Who::A, 1, 1, 900, -10_000, 50_000);
const B1: Share = share(Who::B, 1, 1, 950, 20_000, 80_000);
const B2: Share = share(Who::B, 2, 1, 950, 20_000, 80_000);
const B1_EXPIRED: Share = share(Who::B, 1, 1, 950, -10_000, 50_000);
const B2_EXPIRED: Share = share(Who::B, 2, 1, 950, -10_000, 50_000);
const C1_EXPIRED: Share = share(Who::C, 1, 1, 960, -5_000, 55_000);
const C1: Share = share(Who::C, 1, 1, 960, 25_000, 85_000);
// Ends at the very instant of the request: a hold is live strictly before its end, and
// remembered strictly before the end of its grace (a real server reads these a few
// milliseconds late, which gives the same answers).
const A1_ENDING: Share = share(Who::A, 1, 1, 900, 0, 60_000);
const A1_FORGETTING: Share = share(Who::A, 1, 1, 900, -60_000, 0);
const B1_ENDING: Share = share(Who::B, 1, 1, 950, 0, 60_000);
const B2_ENDING: Share = share(Who::B, 2, 1, 950, 0, 60_000);
const B1_FORGETTING: Share = share(Who::B, 1, 1, 950, -60_000, 0);
/// A's share renewed by the request (ttl and grace from now) with `holds`.
const fn renewed(s: Share, holds: u32) -> Share {
    Share {
        holds,
        expires_in_ms: TTL,
        forget_in_ms: TTL + GRACE,
        ..s
    }
}
/// A's new share of `weight`, with the fencing token the outcome carries.
const fn admitted(weight: u32) -> Share {
    Share {
        by: Who::A,
        weight,
        holds: 1,
        fencing: Fence::Issued,
        expires_in_ms: TTL,
        forget_in_ms: TTL + GRACE,
    }
}
const fn shares(holds: &'static [Share]) -> Before {
    Before::Shared {
        holds,
        writer: None,
    }
}
const fn marked(holds: &'static [Share], by: Who) -> Before {
    Before::Shared {
        holds,
        writer: Some(Marker {
            by,
            until_in_ms: 5_000,
        }),
    }
}
/// Shared holds afterwards, the record's fencing token `fencing`.
const fn shares_after(fencing: Fence, holds: &'static [Share]) -> After {
    After::Shared {
        fencing,
        holds,
        writer: None,
    }
}
const fn sem(weight: u32) -> Ask {
    Ask::ObtainAs {
        mode: Mode::Shared {
            capacity: CAPACITY,
            weight,
        },
        queue: false,
    }
}
const WRITE: Ask = Ask::ObtainAs {
    mode: Mode::Exclusive,
    queue: false,
};
const WRITE_QUEUED: Ask = Ask::ObtainAs {
    mode: Mode::Exclusive,
    queue: true,
};
/// A's upgrade of its share with fencing token `of`.
const fn up(of: u64) -> Ask {
    Ask::Change {
        mode: Mode::Exclusive,
        of,
    }
}
/// A's downgrade, to `weight` of [`CAPACITY`], of its exclusive hold with fencing `of`.
const fn down(weight: u32, of: u64) -> Ask {
    Ask::Change {
        mode: Mode::Shared {
            capacity: CAPACITY,
            weight,
        },
        of,
    }
}
const OTHER_CAPACITY: Ask = Ask::ObtainAs {
    mode: Mode::Shared {
        capacity: CAPACITY + 1,
        weight: 1,
    },
    queue: false,
};
const fn busy(reason: BusyReason, holders: u32, remaining_ms: u64) -> Outcome {
    Outcome::BusyFor {
        reason,
        holders,
        remaining_ms,
    }
}
const KEPT: Fence = Fence::Kept;
const ISSUES: Fence = Fence::Issued;
const RELEASE: Ask = Ask::Release { delay: false };
const RELEASE_DELAYED: Ask = Ask::Release { delay: true };
use After::Unchanged;
use Ask::{Force, Inspect, Obtain, Prolong};
use Before::{Free as FreeRecord, Nothing};

/// Every row.
#[rustfmt::skip]
pub const CASES: &[Case] = &[
    //   name                               before                           request          outcome                                                after
    // obtain
    case("obtain, no record",               Nothing,                         Obtain,          Outcome::Acquired,                                     ISSUED),
    case("obtain, free",                    FreeRecord,                      Obtain,          Outcome::Acquired,                                     ISSUED),
    case("obtain, cooling",                 COOLING,                         Obtain,          Outcome::Busy { holder: false, remaining_ms: 20_000 }, Unchanged),
    case("obtain, cooldown over",           COOLED,                          Obtain,          Outcome::Acquired,                                     ISSUED),
    case("obtain, own live hold",           LIVE,                            Obtain,          Outcome::Reacquired(2),                                held_by_a(2, Fence::Kept)),
    case("obtain, another's live hold",     OTHERS_LIVE,                     Obtain,          Outcome::Busy { holder: true, remaining_ms: 10_000 },  Unchanged),
    case("obtain, own expired hold",        EXPIRED,                         Obtain,          Outcome::Acquired,                                     ISSUED),
    case("obtain, another's expired hold",  OTHERS_EXPIRED,                  Obtain,          Outcome::Acquired,                                     ISSUED),
    case("obtain, past the grace",          FORGOTTEN,                       Obtain,          Outcome::Acquired,                                     ISSUED),
    // prolong
    case("prolong, no record",              Nothing,                         Prolong,         Outcome::Lost,                                         Unchanged),
    case("prolong, free",                   FreeRecord,                      Prolong,         Outcome::Lost,                                         Unchanged),
    case("prolong, cooling",                COOLING,                         Prolong,         Outcome::Lost,                                         Unchanged),
    case("prolong, live",                   LIVE_TWICE,                      Prolong,         Outcome::Prolonged,                                    held_by_a(2, Fence::Kept)),
    case("prolong, expired",                EXPIRED,                         Prolong,         Outcome::ProlongedLate,                                held_by_a(2, Fence::Kept)),
    case("prolong, past the grace",         FORGOTTEN,                       Prolong,         Outcome::Lost,                                         Unchanged),
    case("prolong, another's live hold",    OTHERS_LIVE,                     Prolong,         Outcome::Lost,                                         Unchanged),
    case("prolong, another's expired hold", OTHERS_EXPIRED,                  Prolong,         Outcome::Lost,                                         Unchanged),
    // release
    case("release, no record",              Nothing,                         RELEASE,         Outcome::Lost,                                         Unchanged),
    case("release, free",                   FreeRecord,                      RELEASE,         Outcome::Lost,                                         Unchanged),
    case("release, cooling",                COOLING,                         RELEASE,         Outcome::Lost,                                         Unchanged),
    case("release, live",                   LIVE,                            RELEASE,         Outcome::Released,                                     After::Free),
    case("release with a delay, live",      LIVE,                            RELEASE_DELAYED, Outcome::Released,                                     After::Cooling { left_ms: 20_000 }),
    case("release, live twice",             LIVE_TWICE,                      RELEASE,         Outcome::Decremented(1),                               decremented(1)),
    case("release with a delay, reentrant", held(Who::A, 3, 10_000, 70_000), RELEASE_DELAYED, Outcome::Decremented(2),                               decremented(2)),
    case("release, expired reentrant hold", EXPIRED,                         RELEASE,         Outcome::ReleasedLate,                                 After::Free),
    case("release with a delay, expired",   EXPIRED,                         RELEASE_DELAYED, Outcome::ReleasedLate,                                 After::Cooling { left_ms: 20_000 }),
    case("release, past the grace",         FORGOTTEN,                       RELEASE,         Outcome::Lost,                                         Unchanged),
    case("release, another's live hold",    OTHERS_LIVE,                     RELEASE,         Outcome::Lost,                                         Unchanged),
    case("release, another's expired hold", OTHERS_EXPIRED,                  RELEASE,         Outcome::Lost,                                         Unchanged),
    // inspect
    case("inspect, no record",              Nothing,                         Inspect,         Outcome::Free,                                         Unchanged),
    case("inspect, free",                   FreeRecord,                      Inspect,         Outcome::Free,                                         Unchanged),
    case("inspect, cooling",                COOLING,                         Inspect,         Outcome::Cooling { remaining_ms: 20_000 },             Unchanged),
    case("inspect, live",                   OTHERS_LIVE,                     Inspect,         Outcome::Held { holds: 2, remaining_ms: 10_000 },      Unchanged),
    case("inspect, expired",                EXPIRED,                         Inspect,         Outcome::Free,                                         Unchanged),
    case("inspect, cooldown over",          COOLED,                          Inspect,         Outcome::Free,                                         Unchanged),
    // force_release
    case("force, no record",                Nothing,                         Force,           Outcome::Free,                                         Unchanged),
    case("force, live",                     OTHERS_LIVE,                     Force,           Outcome::Held { holds: 2, remaining_ms: 10_000 },      After::Free),
    case("force, cooling",                  COOLING,                         Force,           Outcome::Cooling { remaining_ms: 20_000 },             After::Free),
    case("force, expired",                  OTHERS_EXPIRED,                  Force,           Outcome::Free,                                         After::Free),
    // shared obtain (a semaphore of 3 permits; A1 takes 1 and ends in 10 s, B2 takes 2 and ends in 20 s)
    case("shared obtain, no record",        Nothing,                         sem(1),          Outcome::Acquired,                                     shares_after(ISSUES, &[admitted(1)])),
    case("shared obtain, beside a share",   shares(&[B2]),                   sem(1),          Outcome::Acquired,                                     shares_after(ISSUES, &[B2, admitted(1)])),
    case("shared obtain, full",             shares(&[B2]),                   sem(2),          busy(BusyReason::Full, 1, 20_000),                     Unchanged),
    case("shared obtain, other capacity",   shares(&[B2]),                   OTHER_CAPACITY,  Outcome::Refused,                                      Unchanged),
    case("shared obtain, own share",        shares(&[A1, B2]),               sem(1),          Outcome::Reacquired(2),                                shares_after(KEPT, &[renewed(A1, 2), B2])),
    case("shared obtain, own, other weight",shares(&[A1, B2]),               sem(2),          Outcome::Refused,                                      Unchanged),
    case("shared obtain, a writer waits",   marked(&[B1], Who::B),           sem(1),          busy(BusyReason::WriterWaiting, 1, 5_000),             Unchanged),
    case("shared obtain, own marker goes",  marked(&[B1], Who::A),           sem(1),          Outcome::Acquired,                                     shares_after(ISSUES, &[B1, admitted(1)])),
    case("shared obtain, held exclusively", OTHERS_LIVE,                     sem(1),          busy(BusyReason::Held, 1, 10_000),                     Unchanged),
    case("shared obtain, expired fits",     shares(&[B2_EXPIRED]),           sem(1),          Outcome::Acquired,                                     shares_after(ISSUES, &[B2_EXPIRED, admitted(1)])),
    case("shared obtain, expired no room",  shares(&[B2_EXPIRED]),           sem(2),          Outcome::Acquired,                                     shares_after(ISSUES, &[admitted(2)])),
    case("shared obtain, oldest expired kept", shares(&[B1_EXPIRED, C1_EXPIRED]), sem(2),     Outcome::Acquired,                                     shares_after(ISSUES, &[B1_EXPIRED, admitted(2)])),
    case("shared obtain, full, weight 3",   shares(&[B1, C1]),               sem(3),          busy(BusyReason::Full, 2, 25_000),                     Unchanged),
    case("shared obtain, ending share fits",shares(&[B2_ENDING]),            sem(1),          Outcome::Acquired,                                     shares_after(ISSUES, &[B2_ENDING, admitted(1)])),
    case("shared obtain, ending share no room", shares(&[B2_ENDING]),        sem(2),          Outcome::Acquired,                                     shares_after(ISSUES, &[admitted(2)])),
    case("shared obtain, beside one forgetting", shares(&[B1_FORGETTING, C1]), sem(1),       Outcome::Acquired,                                     shares_after(ISSUES, &[C1, admitted(1)])),
    case("shared obtain, own expired share",shares(&[A1_EXPIRED, B1]),       sem(1),          Outcome::Acquired,                                     shares_after(ISSUES, &[B1, admitted(1)])),
    // exclusive obtain on shared holds, and mode changes
    case("write, behind shares",            shares(&[B2]),                   WRITE,           busy(BusyReason::Shared, 1, 20_000),                   Unchanged),
    case("write, behind shares, queued",    shares(&[B2]),                   WRITE_QUEUED,    busy(BusyReason::Shared, 1, 20_000),                   After::Shared { fencing: KEPT, holds: &[B2], writer: Some(Marker { by: Who::A, until_in_ms: TTL }) }),
    case("write, queued again, renewed",    marked(&[B2], Who::A),           WRITE_QUEUED,    busy(BusyReason::Shared, 1, 20_000),                   After::Shared { fencing: KEPT, holds: &[B2], writer: Some(Marker { by: Who::A, until_in_ms: TTL }) }),
    case("write, expired shares",           shares(&[B2_EXPIRED]),           WRITE,           Outcome::Acquired,                                     ISSUED),
    case("downgrade",                       LIVE,                            sem(2),          Outcome::AcquiredKept,                                 shares_after(KEPT, &[renewed(share(Who::A, 2, 1, FENCING, 0, 0), 1)])),
    case("downgrade, reentrant",            LIVE_TWICE,                      sem(1),          Outcome::Refused,                                      Unchanged),
    case("upgrade, alone",                  shares(&[A1]),                   WRITE,           Outcome::Acquired,                                     ISSUED),
    case("upgrade, beside a share",         shares(&[A1, B2]),               WRITE,           busy(BusyReason::Shared, 1, 20_000),                   Unchanged),
    case("upgrade, reentrant",              shares(&[A1_TWICE]),             WRITE,           Outcome::Refused,                                      Unchanged),
    // mode changes that name their hold: that hold, live, or nothing (Lost)
    case("change up, alone",                shares(&[A1]),                   up(900),         Outcome::Acquired,                                     ISSUED),
    case("change up, beside a share",       shares(&[A1, B2]),               up(900),         busy(BusyReason::Shared, 1, 20_000),                   Unchanged),
    case("change up, reentrant",            shares(&[A1_TWICE]),             up(900),         Outcome::Refused,                                      Unchanged),
    case("change up, another fencing",      shares(&[A1, B2]),               up(950),         Outcome::Lost,                                         Unchanged),
    case("change up, own share expired",    shares(&[A1_EXPIRED, B1]),       up(900),         Outcome::Lost,                                         Unchanged),
    case("change up, own share ending",     shares(&[A1_ENDING]),            up(900),         Outcome::Lost,                                         Unchanged),
    case("change up, no record",            Nothing,                         up(900),         Outcome::Lost,                                         Unchanged),
    case("change up, key free",             FreeRecord,                      up(900),         Outcome::Lost,                                         Unchanged),
    case("change up, held exclusively",     OTHERS_LIVE,                     up(900),         Outcome::Lost,                                         Unchanged),
    case("change up, cooling",              COOLING,                         up(900),         Outcome::Lost,                                         Unchanged),
    case("change down",                     LIVE,                            down(2, FENCING), Outcome::AcquiredKept,                                shares_after(KEPT, &[renewed(share(Who::A, 2, 1, FENCING, 0, 0), 1)])),
    case("change down, reentrant",          LIVE_TWICE,                      down(1, FENCING), Outcome::Refused,                                     Unchanged),
    case("change down, another fencing",    LIVE,                            down(1, FENCING + 1), Outcome::Lost,                                    Unchanged),
    case("change down, own hold expired",   EXPIRED,                         down(1, FENCING), Outcome::Lost,                                        Unchanged),
    case("change down, another's hold",     OTHERS_LIVE,                     down(1, FENCING), Outcome::Lost,                                        Unchanged),
    case("change down, no record",          Nothing,                         down(1, FENCING), Outcome::Lost,                                        Unchanged),
    case("change down, a share",            shares(&[A1]),                   down(1, 900),    Outcome::Lost,                                         Unchanged),
    // prolong and release of shared holds
    case("prolong, own share",              shares(&[A1, B2]),               Prolong,         Outcome::Prolonged,                                    shares_after(KEPT, &[renewed(A1, 1), B2])),
    case("prolong, own expired share",      shares(&[A1_EXPIRED, B1]),       Prolong,         Outcome::ProlongedLate,                                shares_after(KEPT, &[renewed(A1_EXPIRED, 1), B1])),
    case("prolong, own share ending",       shares(&[A1_ENDING, B1]),        Prolong,         Outcome::ProlongedLate,                                shares_after(KEPT, &[renewed(A1_ENDING, 1), B1])),
    case("prolong, own share forgetting",   shares(&[A1_FORGETTING, B1]),    Prolong,         Outcome::Lost,                                         Unchanged),
    case("prolong, beside a share forgetting", shares(&[A1, B1_FORGETTING]), Prolong,         Outcome::Prolonged,                                    shares_after(KEPT, &[renewed(A1, 1)])),
    case("prolong, another's share",        shares(&[B2]),                   Prolong,         Outcome::Lost,                                         Unchanged),
    case("release, own share",              shares(&[A1, B2]),               RELEASE,         Outcome::Released,                                     shares_after(KEPT, &[B2])),
    case("release with a delay, a share",   shares(&[A1, B2]),               RELEASE_DELAYED, Outcome::Released,                                     shares_after(KEPT, &[B2])),
    case("release, own share twice",        shares(&[A1_TWICE, B2]),         RELEASE,         Outcome::Decremented(1),                               shares_after(KEPT, &[A1, B2])),
    case("release with a delay, last share",shares(&[A1]),                   RELEASE_DELAYED, Outcome::Released,                                     After::Cooling { left_ms: 20_000 }),
    case("release, beside an expired share",shares(&[A1, B1_EXPIRED]),       RELEASE,         Outcome::Released,                                     shares_after(KEPT, &[B1_EXPIRED])),
    case("release, own expired share",      shares(&[A1_EXPIRED, B1]),       RELEASE,         Outcome::ReleasedLate,                                 shares_after(KEPT, &[B1])),
    case("release, own share ending",       shares(&[A1_ENDING, B1]),        RELEASE,         Outcome::ReleasedLate,                                 shares_after(KEPT, &[B1])),
    case("release, beside a share forgetting", shares(&[A1, B1_FORGETTING]), RELEASE,         Outcome::Released,                                     After::Free),
    case("release with a delay, beside one ending", shares(&[A1, B1_ENDING]),RELEASE_DELAYED, Outcome::Released,                                     After::Cooling { left_ms: 20_000 }),
    case("release, a writer gives up",      marked(&[B2], Who::A),           RELEASE,         Outcome::Lost,                                         shares_after(KEPT, &[B2])),
    // inspect and force
    case("inspect, shares",                 shares(&[A1, B2_EXPIRED]),       Inspect,         Outcome::Shared { holds: 1 },                          Unchanged),
    case("inspect, expired shares",         shares(&[B2_EXPIRED]),           Inspect,         Outcome::Free,                                         Unchanged),
    case("force, shares",                   marked(&[A1, B2], Who::B),       Force,           Outcome::Shared { holds: 2 },                          After::Free),
];

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
