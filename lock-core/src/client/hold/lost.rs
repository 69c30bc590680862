//! What keeps a hold's lost signal: the signal itself, made only when someone listens, and
//! the timer that fires it when the validity runs out.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{lock, Hold};
use crate::client::clock;
use crate::observe::LostCause;

/// The lost signal, made only when someone listens: most guards are released without
/// anyone asking, and a cancellation token is an allocation.
#[derive(Debug, Default)]
pub(super) struct LostSignal {
    lost: bool,
    /// The loss was claimed for reporting: whoever set it counts the loss and tells the
    /// observer, then fires the signal, so that whoever wakes on it finds the loss counted.
    pub(super) claimed: bool,
    pub(super) token: Option<CancellationToken>,
}

impl LostSignal {
    pub(super) fn token(&mut self) -> CancellationToken {
        let lost = self.lost;
        self.token
            .get_or_insert_with(|| {
                let token = CancellationToken::new();
                if lost {
                    token.cancel();
                }
                token
            })
            .clone()
    }

    /// Claims the loss for reporting; true the first time.
    pub(super) fn claim(&mut self) -> bool {
        !std::mem::replace(&mut self.claimed, true)
    }

    /// Marks it lost and wakes whoever waits on it.
    pub(super) fn fire(&mut self) {
        self.lost = true;
        if let Some(token) = &self.token {
            token.cancel();
        }
    }
}

/// A running expiry timer's mark in its hold, made before the task is spawned and owned by
/// it: dropped with the task however it ends, even unpolled (its runtime ended first), so
/// that the next use of the guard starts a new timer.
pub(super) struct TimerMark(pub(super) Arc<Hold>);

impl Drop for TimerMark {
    fn drop(&mut self) {
        lock(&self.0.state).timer = false;
    }
}

/// Fires the lost signal when the validity runs out; follows every move of the validity;
/// ends when the hold is over or lost.
pub(super) async fn expiry_timer(mark: TimerMark) {
    let hold = &mark.0;
    loop {
        let changed = hold.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let until = {
            let state = lock(&hold.state);
            if state.over || state.lost.claimed {
                return;
            }
            state.until
        };
        if until <= clock::now() {
            hold.mark_lost(
                LostCause::Expired,
                "its validity ran out before it was prolonged",
            );
            return;
        }
        tokio::select! {
            () = clock::sleep_until(until) => {}
            () = changed => {}
        }
    }
}
