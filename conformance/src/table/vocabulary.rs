//! The table's words: what is stored before ([`Before`]), what is asked ([`Ask`]), what
//! the caller is told ([`Outcome`]) and what is stored after ([`After`]), and what a runner
//! reads back ([`Seen`], [`Answer`]).

use lock_core::{BusyReason, LockState, Mode, ObtainOutcome, ProlongOutcome, ReleaseOutcome};

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
    /// ([`ObtainRequest::change`](lock_core::backend::ObtainRequest::change)), for [`TTL_MS`], grace [`GRACE_MS`].
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

/// Whom a row's write wakes: the wake column of the table (`table::WAKES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wakes {
    /// One waiter.
    One,
    /// Every waiter.
    All,
}
