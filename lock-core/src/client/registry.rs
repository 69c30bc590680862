//! The locks a [`Locker`](crate::Locker) and its clones hold: one claim per guard, for
//! `held_count` and `release_all`, and the watchdog that renews them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::client::hold::Hold;
use crate::client::renew::Renewals;
use crate::{ReleaseOutcome, Result, Ttl};

/// What a locker holds.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    slab: Mutex<Slab>,
    /// When each watched hold renews next.
    pub(crate) renewals: Arc<Renewals>,
}

/// A slab rather than a map: a claim's id is its slot, so registering and deregistering on
/// every obtain and release cost no hashing.
#[derive(Debug, Default)]
struct Slab {
    slots: Vec<Option<Arc<Claim>>>,
    free: Vec<usize>,
    len: usize,
}

/// One guard's share of a hold: one hold on the backend, given back once.
#[derive(Debug)]
pub(crate) struct Claim {
    id: usize,
    pub(crate) hold: Arc<Hold>,
    given_back: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    /// Registers a guard of `hold` (counted in the hold by the caller).
    pub(crate) fn insert(&self, hold: Arc<Hold>) -> Arc<Claim> {
        let mut slab = lock(&self.slab);
        let id = match slab.free.pop() {
            Some(id) => id,
            None => {
                slab.slots.push(None);
                slab.slots.len() - 1
            }
        };
        let claim = Arc::new(Claim {
            id,
            hold,
            given_back: AtomicBool::new(false),
        });
        slab.slots[id] = Some(Arc::clone(&claim));
        slab.len += 1;
        claim
    }

    /// Takes `claim` out, if its slot still holds that very claim (a slot is reused once
    /// freed, so an id alone could name the next guard's claim).
    fn remove(&self, claim: &Arc<Claim>) {
        let mut slab = lock(&self.slab);
        let Some(slot) = slab.slots.get_mut(claim.id) else {
            return;
        };
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, claim)) {
            *slot = None;
            slab.free.push(claim.id);
            slab.len -= 1;
        }
    }

    /// Takes every claim on `hold` out: a detached hold holds nothing any more. Its guards
    /// still count themselves out of the hold when they are given back.
    pub(crate) fn forget(&self, hold: &Arc<Hold>) {
        let mut slab = lock(&self.slab);
        let Slab { slots, free, len } = &mut *slab;
        for (id, slot) in slots.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|c| Arc::ptr_eq(&c.hold, hold)) {
                *slot = None;
                free.push(id);
                *len -= 1;
            }
        }
    }

    /// How many guards hold a claim.
    pub(crate) fn len(&self) -> usize {
        lock(&self.slab).len
    }

    /// Gives back `claim` on the client side: out of the registry, counted out of its
    /// hold, the hold off the watchdog's queue if that was its last guard. False when it
    /// was already given back (by its own release, its drop or `release_all`).
    pub(crate) fn give_back(&self, claim: &Arc<Claim>) -> Option<GivenBack> {
        if claim.given_back.swap(true, Ordering::AcqRel) {
            return None;
        }
        self.remove(claim);
        let last = claim.hold.remove_guard();
        if last && claim.hold.watchdog.is_some() {
            self.renewals.remove(&claim.hold);
        }
        Some(GivenBack {
            hold: Arc::clone(&claim.hold),
            last,
        })
    }

    /// Gives back every claim still registered, on the client side; the caller releases
    /// each on the backend.
    pub(crate) fn drain(&self) -> Vec<GivenBack> {
        let all: Vec<Arc<Claim>> = {
            let slab = lock(&self.slab);
            slab.slots.iter().flatten().cloned().collect()
        };
        all.iter().filter_map(|c| self.give_back(c)).collect()
    }
}

/// A claim given back on the client side, whose hold the backend still counts.
#[derive(Debug)]
pub(crate) struct GivenBack {
    hold: Arc<Hold>,
    /// It was its hold's last guard.
    last: bool,
}

impl GivenBack {
    /// Releases the hold on the backend. A detached hold is not the backend's any more
    /// (the token holds a fresh acquisition): nothing is sent, and the answer is `Lost`.
    ///
    /// # Errors
    /// The backend's error.
    pub(crate) async fn release(&self, delay_after: Option<Ttl>) -> Result<ReleaseOutcome> {
        self.hold.release(delay_after, self.last).await
    }

    /// The hold.
    pub(crate) fn hold(&self) -> &Arc<Hold> {
        &self.hold
    }

    /// Whether it was its hold's last guard.
    pub(crate) fn is_last(&self) -> bool {
        self.last
    }
}
