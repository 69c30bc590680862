//! A guard's mode changes: [`LockGuard::downgrade`] and [`LockGuard::upgrade`], each an
//! obtain in the other mode by the guard's own token (the contract's "Mode changes"),
//! taken in the token's turn.

use std::sync::Arc;

use tracing::Instrument;

use super::{LockGuard, Retime};
use crate::client::detached::GiveBack;
use crate::observe::LostCause;
use crate::{Attempt, Error, ErrorKind, Mode, ObtainOutcome, Operation, ProlongOutcome, Result};

impl LockGuard {
    /// Turns this exclusive hold into a read hold ([`Mode::READ`]) without letting go of
    /// the key: no writer can come in between, and readers may join at once (every waiter
    /// is woken). The fencing token stays; the ttl is reset as by a prolong.
    ///
    /// The backend changes this guard's own hold (the one with its fencing token) or
    /// nothing: if that hold had expired or is gone (force-released, the backend lost its
    /// data), the call fails with [`ErrorKind::Lost`] and the guard's lost signal fires,
    /// whoever holds the key now.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use lock_core::{Locker, MemoryBackend, Mode};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// # let locker = Locker::new(Arc::new(MemoryBackend::new()));
    /// let mut guard = locker.write("config").obtain().await?.obtained().unwrap();
    /// // ... write the new config ...
    /// guard.downgrade().await?;
    /// assert_eq!(guard.mode(), Mode::READ);
    /// // Other readers get in now; writers wait until this guard is released.
    /// let reader = locker.read("config").obtain().await?.obtained().unwrap();
    /// # reader.release().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`], before any I/O, when the guard holds its key shared
    /// already, has reentrant guards (release them first), is lost, or an earlier mode
    /// change of it failed or was cancelled; [`ErrorKind::Lost`] when the backend no longer
    /// has the hold; or the backend's error (the guard then counts as shared: the backend
    /// may have applied the change).
    ///
    /// # Cancel safety
    /// The change runs to its end in the background; the guard counts as shared from the
    /// moment it was sent, and refuses further mode changes and reentrant obtains if its
    /// answer was not read. Its release waits until the change landed.
    pub async fn downgrade(&mut self) -> Result<Attempt<()>> {
        self.change_mode(Mode::READ).await
    }

    /// Turns this shared hold into an exclusive one if nobody else holds the key: one
    /// attempt, no wait. Obtained: the guard holds the key alone, with a fresh fencing
    /// token (the hold never let go of the key in between). `Busy`: other holds live (the
    /// answer counts them), and this guard keeps its shared hold.
    ///
    /// The backend upgrades this guard's own share (the one with its fencing token) or
    /// nothing: if the share had expired or is gone (an operator force-released the key,
    /// the backend lost its data) while this guard's validity still ran, a writer may have
    /// held the key in between, so the call fails with [`ErrorKind::Lost`] and the guard's
    /// lost signal fires; it never grants the write lock afresh over a lost update.
    ///
    /// It does not wait, because two readers that both wait to upgrade wait for each other
    /// until one of them gives up. To wait for the write lock, release the read hold and
    /// obtain [`Locker::write`](crate::Locker::write) with a wait (a waiting writer keeps
    /// new readers out), or retry `upgrade` on your own terms.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use lock_core::{Attempt, Locker, MemoryBackend, Mode};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// # let locker = Locker::new(Arc::new(MemoryBackend::new()));
    /// let mut guard = locker.read("cache").obtain().await?.obtained().unwrap();
    /// // ... read, find the cache stale ...
    /// match guard.upgrade().await? {
    ///     Attempt::Obtained(()) => assert_eq!(guard.mode(), Mode::Exclusive),
    ///     Attempt::Busy(busy) => println!("{} other readers, try later", busy.holders),
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`], before any I/O, when the guard holds its key
    /// exclusively already, has reentrant guards, is lost, or an earlier mode change of it
    /// failed or was cancelled; [`ErrorKind::Lost`] when the backend no longer has the
    /// share; or the backend's error (the guard then keeps counting as shared and refuses
    /// further mode changes: release it).
    ///
    /// # Cancel safety
    /// The change runs to its end in the background; the guard keeps counting as shared and
    /// refuses further mode changes and reentrant obtains (the backend may have upgraded
    /// it). Its release waits until the change landed, and frees the key either way.
    pub async fn upgrade(&mut self) -> Result<Attempt<()>> {
        self.change_mode(Mode::Exclusive).await
    }

    /// A mode change: an obtain in mode `to` with the hold's own token (the contract's
    /// "Mode changes"), its answer taken into the hold.
    async fn change_mode(&mut self, to: Mode) -> Result<Attempt<()>> {
        let hold = Arc::clone(self.hold());
        let backend = hold.backend.name();
        // After every earlier call of the token that changes its holds: a reentrant obtain
        // its caller gave up on must not land after the change (`crate::client::turn`).
        let turn = hold.calls.turn().await;
        hold.begin_mode_change(to)
            .map_err(|why| Error::new(ErrorKind::InvalidInput, backend, Operation::Obtain, why))?;
        self.keep_watch();
        let span = tracing::debug_span!("lock.change_mode", backend, key = %hold.key, to = %to);
        let _retime = Retime::new(self);
        let ticket = hold.begin(hold.ttl());
        let mut call = hold.obtain_again(ticket.ttl, to, turn);
        // The backend changes this hold or nothing: a hold that is gone is `Lost`, never
        // granted afresh (a writer may have held the key in between).
        call.change = Some(hold.fencing());
        // The ticket travels with the obtain, as in `reenter`: the change resets the ttl.
        let (outcome, ticket, _turn) = call
            .run_keeping(GiveBack::Keep, ticket)
            .instrument(span)
            .await;
        match outcome {
            Ok(ObtainOutcome::Acquired { fencing, .. }) => {
                ticket.finish(Some(ProlongOutcome::Prolonged));
                let kept = hold.fencing();
                hold.settle(to, fencing);
                if to.is_shared() && fencing != kept {
                    // Only when the exclusive hold had expired at the backend, which the
                    // validity checked before sending rules out unless clocks drift.
                    hold.mark_lost(
                        LostCause::Expired,
                        "it had expired at the backend, and the downgrade obtained the key afresh",
                    );
                }
                Ok(Attempt::Obtained(()))
            }
            Ok(ObtainOutcome::Busy(busy)) => {
                ticket.finish(None);
                hold.settle(hold.mode(), hold.fencing());
                if to.is_shared() {
                    hold.mark_lost(
                        LostCause::Taken,
                        "a downgrade answered Busy: another token holds the key",
                    );
                }
                Ok(Attempt::Busy(busy))
            }
            Ok(ObtainOutcome::Lost) => {
                ticket.finish(None);
                hold.settle(hold.mode(), hold.fencing());
                hold.mark_lost(
                    LostCause::Taken,
                    "a mode change found its hold gone at the backend",
                );
                Err(Error::new(
                    ErrorKind::Lost,
                    backend,
                    Operation::Obtain,
                    format!(
                        "the change to {to} found this guard's hold gone at the backend (it \
                         expired, was force-released, or the backend lost it): the lock is \
                         lost; release the guard and obtain the lock anew"
                    ),
                ))
            }
            Ok(ObtainOutcome::Reacquired { .. }) => {
                ticket.finish(None);
                Err(Error::new(
                    ErrorKind::Protocol,
                    backend,
                    Operation::Obtain,
                    format!(
                        "a change to {to} answered Reacquired: the backend holds this token \
                         in that mode already; release the guard"
                    ),
                ))
            }
            Err(e) => {
                ticket.finish(None);
                hold.telemetry.call_failed(&hold.key, &e);
                Err(e)
            }
        }
    }
}
