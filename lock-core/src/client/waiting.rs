//! Waiter records: who waits for a key, visible to every process that lists the backend's
//! locks ([`crate::listing`]), on every backend that takes shared holds.
//!
//! An obtain that has waited [`ANNOUNCE_AFTER`] takes a read hold of its own on the key's
//! waiting record ([`record_key`]: a name of the library's own, derived from the key), with
//! the waiter's holder info and a ttl of [`RECORD_TTL`], renewed every third of it while the
//! wait goes on and released when the wait ends, however it ends (obtained, given up,
//! cancelled). A process that dies stops renewing: its records end with their ttl. The
//! listing counts a key's waiters from its record's holds: one per waiting task, their
//! processes told apart by host and pid.
//!
//! The record is a key of its own, so it changes nothing of the lock: nobody waits for the
//! record's releases, and whom a release of the lock wakes is decided as before. Its calls
//! run in a task beside the wait, never in its way; one that fails (a partition, a full
//! record) is given up, and the waiter goes uncounted.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

use super::detached::{counted, Running};
use crate::backend::{ObtainRequest, ProlongRequest, ReleaseRequest};
use crate::{HolderInfo, Key, LockBackend, Mode, ObtainOutcome, ProlongOutcome, Token, Ttl};

/// How long an obtain waits before it is recorded: a short wait costs no record.
pub const ANNOUNCE_AFTER: Duration = Duration::from_millis(250);

/// The ttl of a waiter's record hold, renewed every third of it while the wait goes on:
/// how long a waiter that died stays counted at most.
pub const RECORD_TTL: Duration = Duration::from_secs(10);

/// What every waiting record's name starts with: a character [`Key::new`] refuses at the
/// start of a key, so that no lock of a user's is ever named so.
pub const RECORD_PREFIX: &str = "\u{1}waiting/";

/// The name of `key`'s waiting record: [`RECORD_PREFIX`] and the first 128 bits of the
/// SHA-256 of the key, in hex (so any key, up to its longest, has a record name of 41
/// bytes).
pub fn record_key(key: &Key) -> Key {
    let digest = Sha256::digest(key.as_str().as_bytes());
    let mut name = String::with_capacity(RECORD_PREFIX.len() + 32);
    name.push_str(RECORD_PREFIX);
    for b in &digest[..16] {
        name.push_str(&format!("{b:02x}"));
    }
    Key::reserved(name)
}

/// A waiter's record while it lives: dropped, the record hold is given back.
pub(crate) struct Announced {
    stop: Option<oneshot::Sender<Running>>,
}

impl Announced {
    /// Records a wait for `key` once it has lasted [`ANNOUNCE_AFTER`], on a backend that
    /// takes shared holds; nothing on one that does not, or outside a runtime.
    pub(crate) fn start(
        backend: &Arc<dyn LockBackend>,
        key: &Key,
        holder: &Arc<HolderInfo>,
    ) -> Self {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Announced { stop: None };
        };
        if !backend.capabilities().shared {
            return Announced { stop: None };
        }
        let (stop, stopped) = oneshot::channel();
        let (backend, record, holder) = (Arc::clone(backend), record_key(key), Arc::clone(holder));
        runtime.spawn(announce(backend, record, holder, stopped));
        Announced { stop: Some(stop) }
    }
}

impl Drop for Announced {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // Running until the record is given back, so that `settle` waits for it.
            let _ = stop.send(counted());
        }
    }
}

/// The record's life: after [`ANNOUNCE_AFTER`], a read hold on `record`, renewed until
/// `stopped` fires (or its sender drops), then released.
async fn announce(
    backend: Arc<dyn LockBackend>,
    record: Key,
    holder: Arc<HolderInfo>,
    mut stopped: oneshot::Receiver<Running>,
) {
    tokio::select! {
        _ = &mut stopped => return,
        () = tokio::time::sleep(ANNOUNCE_AFTER) => {}
    }
    let (Ok(token), Ok(ttl)) = (Token::generate(), Ttl::new(RECORD_TTL)) else {
        return;
    };
    let take = || async {
        let req = ObtainRequest::new(&record, &token, ttl, &holder).with_mode(Mode::READ);
        backend.obtain(req).await
    };
    let release = || async {
        let req = ReleaseRequest {
            key: &record,
            token: &token,
            delay_after: None,
        };
        if let Err(e) = backend.release(req).await {
            tracing::debug!(key = %record, "a waiter's record was not given back (it ends with its ttl): {e}");
        }
    };
    match take().await {
        Ok(ObtainOutcome::Acquired { .. }) => {}
        Ok(_) => {
            tracing::debug!(key = %record, "the wait goes unrecorded: its record was refused");
            return;
        }
        Err(e) => {
            // It may have been applied all the same (a reply lost): given back.
            tracing::debug!(key = %record, "the wait goes unrecorded: {e}");
            release().await;
            return;
        }
    }
    let _counted = loop {
        tokio::select! {
            counted = &mut stopped => break counted.ok(),
            () = tokio::time::sleep(RECORD_TTL / 3) => {
                let req = ProlongRequest { key: &record, token: &token, ttl };
                if let Ok(ProlongOutcome::Lost) = backend.prolongate(req).await {
                    // The record was lost (expired in a partition, a server that lost its
                    // data): taken anew.
                    let _ = take().await;
                }
            }
        }
    };
    release().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_names_are_short_reserved_and_distinct() {
        let a = record_key(&Key::new("a").unwrap());
        let b = record_key(&Key::new("b").unwrap());
        assert_ne!(a, b);
        assert!(a.as_str().starts_with(RECORD_PREFIX));
        assert_eq!(
            record_key(&Key::new("x".repeat(1024)).unwrap())
                .as_str()
                .len(),
            41
        );
        assert!(
            Key::new(a.as_str()).is_err(),
            "no user key is named as a record"
        );
    }
}
