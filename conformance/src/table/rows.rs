//! The rows, one per line: the mutex's, then the shared holds' (a semaphore of
//! [`CAPACITY`] permits, a waiting writer's marker, mode changes).

use lock_core::{BusyReason, Mode};

use super::vocabulary::*;

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

/// Whom each row's write wakes among the key's waiters (lock-core's `rules::Wake`): the
/// rows listed here wake one waiter or every waiter; every other row wakes nobody. The table
/// runner checks lock-core's rules against it row by row (`tests/table.rs`); on real
/// backends, waiters in other processes included, the suite's named cases check each rule:
///
/// | wake | rows | checked on every backend with notifications by |
/// |---|---|---|
/// | one waiter | a release that frees an exclusive hold; a shared admission (the next in line may be a reader too, and wakes the next in turn) | `a_release_wakes_a_waiter_at_once`, `a_resignation_wakes_the_candidate_not_the_observer` |
/// | every waiter | a release of a share, or beside shares or a writer's marker; a writer giving up; a downgrade; a force-release | `the_last_share_beside_a_writer_wakes_every_waiter`, `a_downgrade_wakes_every_waiter`, `a_forced_release_wakes_every_waiter` |
/// | nobody | every other row: a busy obtain, a prolong, a decrement, an inspect, a call that finds nothing of its own | `what_frees_nothing_wakes_nobody` |
pub const WAKES: &[(&str, Wakes)] = &[
    ("release with a delay, expired", Wakes::One),
    ("release with a delay, live", Wakes::One),
    ("release, expired reentrant hold", Wakes::One),
    ("release, live", Wakes::One),
    ("shared obtain, beside a share", Wakes::One),
    ("shared obtain, beside one forgetting", Wakes::One),
    ("shared obtain, ending share fits", Wakes::One),
    ("shared obtain, ending share no room", Wakes::One),
    ("shared obtain, expired fits", Wakes::One),
    ("shared obtain, expired no room", Wakes::One),
    ("shared obtain, no record", Wakes::One),
    ("shared obtain, oldest expired kept", Wakes::One),
    ("shared obtain, own expired share", Wakes::One),
    ("shared obtain, own marker goes", Wakes::One),
    ("change down", Wakes::All),
    ("downgrade", Wakes::All),
    ("force, cooling", Wakes::All),
    ("force, expired", Wakes::All),
    ("force, live", Wakes::All),
    ("force, shares", Wakes::All),
    ("release with a delay, a share", Wakes::All),
    ("release with a delay, beside one ending", Wakes::All),
    ("release with a delay, last share", Wakes::All),
    ("release, a writer gives up", Wakes::All),
    ("release, beside a share forgetting", Wakes::All),
    ("release, beside an expired share", Wakes::All),
    ("release, own expired share", Wakes::All),
    ("release, own share", Wakes::All),
    ("release, own share ending", Wakes::All),
];

/// Whom the row named `name` wakes: `None` for nobody.
pub fn wakes(name: &str) -> Option<Wakes> {
    WAKES.iter().find(|(row, _)| *row == name).map(|(_, w)| *w)
}
