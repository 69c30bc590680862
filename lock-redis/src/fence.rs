//! Fenced writes to Redis (see `lock_core::fence`): [`set`] writes a key only if the
//! writer's fencing token is not below the highest one that wrote to it, in one script
//! (`scripts/fence.lua`), so no newer write can come between the check and the write. The
//! highest token lives in a fence key beside the data key, in the same hash slot (see
//! [`fence_key`]), so it works on a Redis Cluster too.
//!
//! Every writer of the key must go through [`set`]: a plain `SET` is not fenced. Readers
//! just `GET` it.

use lock_core::fence::stale;
use lock_core::{Error, ErrorKind, Fencing, Operation, Result};
use redis::aio::ConnectionLike;
use redis::Script;

use crate::keys::slot;

/// The store's name in errors.
const NAME: &str = "redis fence";

const SCRIPT: &str = include_str!("scripts/fence.lua");

/// The script, hashed once for `EVALSHA` (not on every write).
static FENCED_SET: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| Script::new(SCRIPT));

/// How every fence key [`fence_key`] names ends.
const FENCE_SUFFIX: &str = ":fence";

/// The fence key of `key`: in the same hash slot, so that one script reaches both on a
/// cluster. `key:fence` when `key` has a hash tag (`{user:1}:balance` →
/// `{user:1}:balance:fence`), else `{key}:fence`.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] for a key with braces but no hash tag (such as `a}b`),
/// whose slot no fence name can share: pass a fence key of your own to [`set_with`]; and
/// for a key that ends in `:fence`, as fence keys do (a fenced write there could overwrite
/// another key's fence: `{x}:fence` is the fence of `x`).
pub fn fence_key(key: &str) -> Result<String> {
    if key.ends_with(FENCE_SUFFIX) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            NAME,
            Operation::Fence,
            format!(
                "{key:?} ends in {FENCE_SUFFIX:?}, as the fence keys beside fenced keys do: a \
                 fenced write there would overwrite another key's fence; choose another name"
            ),
        ));
    }
    let candidates = [format!("{key}:fence"), format!("{{{key}}}:fence")];
    candidates
        .into_iter()
        .find(|c| slot(c) == slot(key))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidInput,
                NAME,
                Operation::Fence,
                format!(
                    "no fence name shares the hash slot of {key:?}: give it a hash tag, or pass \
                     a fence key of your own to lock_redis::fence::set_with"
                ),
            )
        })
}

/// `SET key value` if `token` is not stale for `key` (its fence: [`fence_key`]), on the
/// caller's connection (a `MultiplexedConnection`, a `ConnectionManager`, a cluster
/// connection).
///
/// ```no_run
/// use lock_core::{ErrorKind, Fencing};
///
/// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> lock_core::Result<()> {
/// lock_redis::fence::set(&mut conn, "report:today", "v2", Fencing(41)).await?;
/// let late = lock_redis::fence::set(&mut conn, "report:today", "v1", Fencing(40)).await;
/// assert_eq!(late.unwrap_err().kind(), ErrorKind::StaleToken);
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`ErrorKind::StaleToken`] when a higher token wrote to `key` (nothing was written);
/// [`ErrorKind::InvalidInput`] as for [`fence_key`]; [`ErrorKind::Corrupt`] when the fence
/// key holds something else; the connection's error.
///
/// # Cancel safety
/// Dropping the future may or may not have written: call again with the same token (an
/// equal token passes).
pub async fn set<C, V>(conn: &mut C, key: &str, value: V, token: Fencing) -> Result<()>
where
    C: ConnectionLike + Send,
    V: redis::ToRedisArgs + Send + Sync,
{
    set_with(conn, &fence_key(key)?, key, value, token).await
}

/// As [`set`], with the fence kept at `fence` (which must share `key`'s hash slot on a
/// cluster).
///
/// # Errors
/// As for [`set`].
///
/// # Cancel safety
/// As for [`set`].
pub async fn set_with<C, V>(
    conn: &mut C,
    fence: &str,
    key: &str,
    value: V,
    token: Fencing,
) -> Result<()>
where
    C: ConnectionLike + Send,
    V: redis::ToRedisArgs + Send + Sync,
{
    let reply: Vec<String> = FENCED_SET
        .key(fence)
        .key(key)
        .arg(token.0)
        .arg(value)
        .invoke_async(conn)
        .await
        // As the backend's calls are: an ACL that denies the script is PermissionDenied
        // (retrying cannot help), a dropped connection Unavailable, a fence key of another
        // type Corrupt.
        .map_err(|e| crate::error::map_error(NAME, Operation::Fence, e))?;
    match reply.as_slice() {
        [ok] if ok == "ok" => Ok(()),
        [word, highest] if word == "stale" => {
            let highest = highest.parse().map(Fencing).unwrap_or(token);
            Err(stale(NAME, key, token, highest))
        }
        other => Err(Error::new(
            ErrorKind::Protocol,
            NAME,
            Operation::Fence,
            format!("unexpected reply {other:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_key_shares_its_key_s_slot() {
        for key in ["plain", "{tag}:x", "x{y", "a:b:c"] {
            let fence = fence_key(key).unwrap();
            assert_eq!(slot(&fence), slot(key), "{key} -> {fence}");
        }
        for key in ["a{}b", "a}b"] {
            match fence_key(key) {
                Ok(fence) => assert_eq!(slot(&fence), slot(key), "{key} -> {fence}"),
                Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidInput),
            }
        }
        assert_eq!(
            fence_key("{user:1}:balance").unwrap(),
            "{user:1}:balance:fence"
        );
        assert_eq!(fence_key("report").unwrap(), "{report}:fence");
    }
}
