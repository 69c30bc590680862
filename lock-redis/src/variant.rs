//! What the two variants of the backend share: which one runs ([`Variant`]), the settings
//! and notifications each runs with ([`Setup`]), and what the public type asks of either
//! ([`VariantBackend`]). The variants are `scripted.rs` (Lua) and `watch.rs` (WATCH).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use lock_core::backend::{Grace, ReleaseSubscription};
use lock_core::{Error, ErrorKind, Key, LockBackend, Operation, Result, Ttl};

use crate::keys::LockKeys;
use crate::notify::Notifier;

/// Which of the two implementations of the contract a [`RedisBackend`](crate::RedisBackend) runs.
///
/// Both keep the same records under the same names, so backends of either variant on one
/// server exclude each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Variant {
    /// Each operation is one `EVALSHA` of one Lua script: one round trip. The default.
    #[default]
    Lua,
    /// Optimistic transactions (`WATCH`, read, decide, `MULTI`/`EXEC`) on dedicated
    /// connections, for servers where scripting is disabled: two round trips per operation
    /// that writes, one for one that does not.
    Watch,
}

/// What either variant runs with beside its engine: the builder's settings and the release
/// notifications.
pub(crate) struct Setup {
    pub(crate) prefix: Arc<str>,
    pub(crate) grace: Option<Grace>,
    /// The deadline of one call.
    pub(crate) timeout: Duration,
    pub(crate) notifier: Notifier,
}

impl Setup {
    /// The Redis names of `key`'s record and release channel.
    pub(crate) fn keys(&self, key: &Key) -> LockKeys {
        LockKeys::new(&self.prefix, key)
    }

    pub(crate) fn grace_for(&self, ttl: Ttl) -> Grace {
        Grace::or_ttl(self.grace, ttl)
    }

    /// A subscription to `key`'s releases, by the deadline.
    pub(crate) async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        let keys = self.keys(key);
        self.notifier
            .subscribe(&keys.channel, self.timeout)
            .await
            .map(Some)
    }

    /// The error of a call of `op` on `backend` that reached the deadline.
    pub(crate) fn deadline_error(&self, backend: &'static str, op: Operation) -> Error {
        Error::new(
            ErrorKind::Unavailable,
            backend,
            op,
            format!(
                "no answer within the deadline of {:?} (RedisBuilder::timeout / timeout=); it is \
                 safe to retry",
                self.timeout
            ),
        )
    }
}

/// A variant as the public type holds it: a backend, and what an operator asks of it.
pub(crate) trait VariantBackend: LockBackend {
    fn setup(&self) -> &Setup;
    fn variant(&self) -> Variant;
    /// `CLIENT ID`s of the command connections, with their node (see
    /// `RedisBackend::client_ids`).
    fn client_ids(&self) -> BoxFuture<'_, Result<Vec<(String, i64)>>>;
}
