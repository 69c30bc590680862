//! What a history holds, and the recorder that the workload's clients write it through.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// An instant of a history: the time since the history began, on one monotonic clock.
pub type At = Duration;

/// Names one call of a history (its invoke and its return); a hold is named by the obtain
/// that made it.
pub type OpId = usize;

/// How an obtain asks for its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ask {
    /// An exclusive hold.
    Exclusive,
    /// `weight` of the key's `capacity` permits (a read hold is 1 of `u32::MAX`).
    Shared {
        /// The key's permits.
        capacity: u32,
        /// The permits this hold takes.
        weight: u32,
    },
    /// A leadership (an exclusive hold renewed by its watchdog; its fencing token is the
    /// term).
    Leader,
}

/// A call a client made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Call {
    /// An obtain of the event's key; with `wait`, one that waits for the key.
    Obtain {
        /// How it asks.
        ask: Ask,
        /// Whether it waits while the key is busy.
        wait: bool,
    },
    /// An obtain that waits for the key with its fallback poll set long (longer than
    /// [`PROGRESS_BOUND`](super::PROGRESS_BOUND)), so that only a release's wake-up ends its
    /// wait sooner: the calls the progress rule watches.
    AwaitWake {
        /// How it asks.
        ask: Ask,
    },
    /// One key's part of a `lock_all` (one such call per key, invoked and answered
    /// together), exclusive. Answered `Busy`, it may still have held the key for a while
    /// in flight: a set gives back what it took when a later key is busy.
    ObtainAll {
        /// Whether it waits while a key is busy.
        wait: bool,
    },
    /// A mode change of the hold `from` made (an upgrade to `ask` exclusive, a downgrade
    /// to a read hold): when it returns `Obtained`, the hold goes on as this call's, in
    /// the new mode (a downgrade keeps the fencing token, an upgrade gets a fresh one).
    Change {
        /// The hold changed.
        from: OpId,
        /// The mode it asks for.
        ask: Ask,
    },
    /// An inspection of the key.
    Inspect,
    /// A prolong of the hold `hold` made, explicit (the watchdog's are not recorded).
    Prolong {
        /// The hold prolonged.
        hold: OpId,
    },
    /// The release of the hold `hold` made.
    Release {
        /// The obtain whose hold this gives back.
        hold: OpId,
    },
}

impl Call {
    /// Whether the call may hold its key for a while in flight even when it ends `Busy`:
    /// one that waits (a grant that arrived past its ttl, or whose reply was lost, is
    /// given back and the wait goes on), and a set (it gives back what it took when a later
    /// key is busy). One attempt answered `Busy` held nothing.
    pub fn holds_in_flight(&self) -> bool {
        match self {
            Call::Obtain { wait, .. } => *wait,
            Call::AwaitWake { .. } | Call::ObtainAll { .. } => true,
            Call::Change { .. } | Call::Inspect | Call::Prolong { .. } | Call::Release { .. } => {
                false
            }
        }
    }

    /// How the call asks for its key, if it is one that can make a hold (an obtain, a
    /// wait for wake-ups, a mode change).
    pub fn asks(&self) -> Option<Ask> {
        match self {
            Call::Obtain { ask, .. } | Call::AwaitWake { ask } | Call::Change { ask, .. } => {
                Some(*ask)
            }
            Call::ObtainAll { .. } => Some(Ask::Exclusive),
            Call::Inspect | Call::Prolong { .. } | Call::Release { .. } => None,
        }
    }
}

/// How a call returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Return {
    /// The obtain got the key, with this fencing token.
    Obtained {
        /// The hold's fencing token (a leadership's term).
        fencing: u64,
    },
    /// The obtain did not get it; the client it names as the holder, if any.
    Busy {
        /// The holder the answer named, by client number (`None`: none named, one the
        /// workload does not know, or a `lock_all`'s, which does not say of which key).
        holder: Option<usize>,
    },
    /// The release returned this outcome (`Released`, `ReleasedLate`, `Lost`).
    Released(String),
    /// The prolong returned this outcome (`Prolonged`, `ProlongedLate`, `Lost`).
    Prolonged(String),
    /// The inspection saw these live holds (none: free, or cooling down): each its holder
    /// (by client number, as for `Busy`) and its fencing token.
    Inspected {
        /// The live holds.
        holds: Vec<(Option<usize>, u64)>,
    },
    /// The call failed with this error.
    Failed {
        /// Its kind (`lock_core::ErrorKind`, as `Debug` prints it).
        kind: String,
        /// What it said.
        message: String,
    },
}

/// A fault the workload injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fault {
    /// The network to the server froze (replies and requests held back).
    Freeze,
    /// Every connection to the server was cut.
    Cut,
    /// Every reply from the server is delayed by this long.
    Latency(Duration),
    /// The network is back to normal.
    Heal,
    /// A worker process was stopped (SIGSTOP) until `done`, its clients with it.
    ProcessPaused {
        /// When it was let go (SIGCONT).
        done: At,
    },
    /// The server lost every record (a restart without persistence), at some instant
    /// between the event's and `done`.
    DataLoss {
        /// When the loss was surely over.
        done: At,
    },
}

/// One event of a history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A client invoked a call on a key.
    Invoke {
        /// The call's name in the history.
        op: OpId,
        /// The client that made it.
        client: usize,
        /// The key.
        key: String,
        /// What it asked.
        call: Call,
        /// When.
        at: At,
    },
    /// A call returned.
    Return {
        /// The call.
        op: OpId,
        /// How.
        result: Return,
        /// When.
        at: At,
    },
    /// A call was cancelled (its future dropped) before it returned: it may or may not
    /// have been applied.
    Cancel {
        /// The call.
        op: OpId,
        /// When.
        at: At,
    },
    /// The holder of `hold` checked, at `at` (read before the check), that its hold was
    /// still valid (not lost, time left): it relies on holding the key at that instant.
    Claim {
        /// The obtain that made the hold.
        hold: OpId,
        /// When.
        at: At,
    },
    /// The holder of `hold` wrote to the key's resource with the hold's fencing token,
    /// right after a claim; the resource's fence accepted or refused it.
    Write {
        /// The obtain that made the hold.
        hold: OpId,
        /// Whether the fence let it through.
        accepted: bool,
        /// When.
        at: At,
    },
    /// The hold's lost signal fired (observed at `at`).
    Lost {
        /// The obtain that made the hold.
        hold: OpId,
        /// When.
        at: At,
    },
    /// The workload injected a fault.
    Fault {
        /// Which.
        fault: Fault,
        /// When.
        at: At,
    },
}

impl Event {
    /// When it happened.
    pub fn at(&self) -> At {
        match self {
            Event::Invoke { at, .. }
            | Event::Return { at, .. }
            | Event::Cancel { at, .. }
            | Event::Claim { at, .. }
            | Event::Write { at, .. }
            | Event::Lost { at, .. }
            | Event::Fault { at, .. } => *at,
        }
    }
}

/// A recorded history: its events in the order they were recorded (which, for events of
/// different clients a few microseconds apart, need not be the order of their instants).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The events.
    pub events: Vec<Event>,
}

impl fmt::Display for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.events {
            writeln!(f, "{}", line(e))?;
        }
        Ok(())
    }
}

/// One event as a line of text: its instant in milliseconds, then what happened.
pub(crate) fn line(e: &Event) -> String {
    let ms = |at: &At| format!("{:>10.3} ms", at.as_secs_f64() * 1000.0);
    match e {
        Event::Invoke {
            op,
            client,
            key,
            call,
            at,
        } => format!("{} c{client} #{op} invoke {call:?} on {key:?}", ms(at)),
        Event::Return { op, result, at } => format!("{} #{op} return {result:?}", ms(at)),
        Event::Cancel { op, at } => format!("{} #{op} cancelled", ms(at)),
        Event::Claim { hold, at } => format!("{} #{hold} holds (claim)", ms(at)),
        Event::Write { hold, accepted, at } => format!(
            "{} #{hold} write {}",
            ms(at),
            if *accepted { "accepted" } else { "refused" }
        ),
        Event::Lost { hold, at } => format!("{} #{hold} lost", ms(at)),
        Event::Fault { fault, at } => format!("{} fault {fault:?}", ms(at)),
    }
}
