//! Listing the locks under the backend's prefix: `SCAN` with a `MATCH` pattern of the
//! record names (`keys.rs`), on the one server or on each primary of a cluster in turn.
//!
//! `SCAN` walks the server's table by its own cursor: every name there throughout the walk
//! comes back at least once, and one may come back twice when the server resizes its table
//! between two calls (`Listing::Scan`). `COUNT` is a hint: a page may hold somewhat more
//! names than asked. The cursor handed out is `<primary>:<scan cursor>`, the primary being
//! the index of a cluster's primaries ordered by their first slot (0 on one server).

use lock_core::backend::{Cursor, KeyPage, KeysRequest};
use lock_core::{Error, ErrorKind, Key, Operation, Result};
use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::Value;

use crate::conn::link::{Link, LinkKind};
use crate::conn::shards::slot_ranges;
use crate::conn::Pools;
use crate::error::map_error;
use crate::keys::LockKeys;

/// `SCAN` calls per page at most: a prefix that matches few of many names ends a page
/// early, empty but with a cursor, rather than walk the whole table in one call.
const SCANS_PER_PAGE: usize = 10;

/// The connections a listing goes through: the Lua variant's link, or the WATCH
/// variant's pools.
#[derive(Clone, Copy)]
pub(crate) enum Via<'a> {
    Link(&'a Link),
    Pools(&'a Pools),
}

/// One page of the lock keys under `req.prefix` (the caller bounds it by the deadline).
pub(crate) async fn keys(
    engine: Via<'_>,
    prefix: &str,
    req: KeysRequest<'_>,
    name: &'static str,
) -> Result<KeyPage> {
    let op = Operation::List;
    let (mut node, mut cursor) = match req.cursor {
        None => (0usize, 0u64),
        Some(c) => parse_cursor(c.as_str()).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidInput,
                name,
                op,
                "not a cursor of this backend's listing: start again without one",
            )
        })?,
    };
    let pattern = pattern(prefix, req.prefix);
    let count = req.limit.max(100);
    let cluster = cluster_of(engine);
    let firsts = match cluster {
        Some(c) => first_slots(c, name).await?,
        None => vec![0],
    };
    let mut keys = Vec::new();
    for _ in 0..SCANS_PER_PAGE {
        let Some(&slot) = firsts.get(node) else {
            return Ok(KeyPage { keys, next: None });
        };
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(count);
        let reply = match cluster {
            Some(c) => {
                let route = Route::new(slot, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                c.clone()
                    .route_command(cmd.clone(), routing)
                    .await
                    .map_err(|e| map_error(name, op, e))?
            }
            None => one(engine, &cmd, name).await?,
        };
        let (next, names) = parse_reply(reply).ok_or_else(|| {
            Error::new(
                ErrorKind::Protocol,
                name,
                op,
                "SCAN answered no (cursor, names)",
            )
        })?;
        keys.extend(names.iter().filter_map(|n| key_of(prefix, n)));
        if next == 0 {
            node += 1;
            cursor = 0;
            if node >= firsts.len() {
                return Ok(KeyPage { keys, next: None });
            }
        } else {
            cursor = next;
        }
        if keys.len() >= req.limit {
            break;
        }
    }
    Ok(KeyPage {
        keys,
        next: Some(Cursor::new(format!("{node}:{cursor}"))),
    })
}

/// The command on the one server (or the sentinels' primary), either variant.
async fn one(engine: Via<'_>, cmd: &redis::Cmd, name: &'static str) -> Result<Value> {
    let op = Operation::List;
    let fail = |e| map_error(name, op, e);
    match engine {
        Via::Link(link) => match &link.kind {
            LinkKind::Server { conn, .. } => query(cmd, &mut conn.clone()).await.map_err(fail),
            LinkKind::Sentinel(s) => {
                let mut conn = s.connection(name, op).await?;
                let reply = query(cmd, &mut conn).await;
                if let Err(e) = &reply {
                    s.failed(e);
                }
                reply.map_err(fail)
            }
            LinkKind::Cluster(_) => Err(Error::new(
                ErrorKind::Protocol,
                name,
                op,
                "a cluster is scanned primary by primary",
            )),
        },
        Via::Pools(pools) => match pools {
            Pools::Primary(pool) => {
                let mut lease = pool.get(op).await?;
                let reply = query(cmd, lease.conn()).await.map_err(fail)?;
                lease.done();
                Ok(reply)
            }
            Pools::Cluster(_) => Err(Error::new(
                ErrorKind::Protocol,
                name,
                op,
                "a cluster is scanned primary by primary",
            )),
        },
    }
}

async fn query(cmd: &redis::Cmd, conn: &mut impl ConnectionLike) -> redis::RedisResult<Value> {
    conn.req_packed_command(cmd).await
}

/// The cluster connection, on a cluster.
fn cluster_of(engine: Via<'_>) -> Option<&ClusterConnection> {
    match engine {
        Via::Link(link) => match &link.kind {
            LinkKind::Cluster(c) => Some(c),
            _ => None,
        },
        Via::Pools(pools) => match pools {
            Pools::Cluster(shards) => Some(shards.cluster()),
            Pools::Primary(_) => None,
        },
    }
}

/// The first slot of each primary's ranges, in order: one slot that routes to each primary.
async fn first_slots(conn: &ClusterConnection, name: &'static str) -> Result<Vec<u16>> {
    let mut firsts: Vec<(String, u16)> = Vec::new();
    for (first, _, host, port) in slot_ranges(conn, name, Operation::List).await? {
        let node = format!("{host}:{port}");
        match firsts.iter_mut().find(|(n, _)| *n == node) {
            Some((_, f)) => *f = (*f).min(first),
            None => firsts.push((node, first)),
        }
    }
    let mut slots: Vec<u16> = firsts.into_iter().map(|(_, f)| f).collect();
    slots.sort_unstable();
    Ok(slots)
}

fn parse_cursor(text: &str) -> Option<(usize, u64)> {
    let (node, cursor) = text.split_once(':')?;
    Some((node.parse().ok()?, cursor.parse().ok()?))
}

fn parse_reply(reply: Value) -> Option<(u64, Vec<String>)> {
    let Value::Array(mut parts) = reply else {
        return None;
    };
    if parts.len() != 2 {
        return None;
    }
    let names = parts.pop()?;
    let cursor = parts.pop()?;
    let cursor: String = redis::from_redis_value(cursor).ok()?;
    let names: Vec<String> = redis::from_redis_value(names).ok()?;
    Some((cursor.parse().ok()?, names))
}

/// The `MATCH` pattern of the record names under `prefix` (the backend's) of the lock keys
/// that start with `start`: the name's fixed parts and `start` escaped, the hash tag's 16
/// hex digits as `?`, then `*`.
fn pattern(prefix: &str, start: &str) -> String {
    let tag = format!("{{{}}}", "?".repeat(16));
    let mut p = String::new();
    if prefix.contains('{') {
        p.push_str(&tag);
        p.push_str(&escape(prefix));
    } else {
        p.push_str(&escape(prefix));
        p.push_str(&tag);
    }
    p.push_str(":rec:");
    p.push_str(&escape(start));
    p.push('*');
    p
}

/// `text` matched literally by a glob.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '^') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The lock key a record name stands for, when it is exactly that key's record name under
/// `prefix` (a name that merely matches the pattern is left out).
fn key_of(prefix: &str, name: &str) -> Option<Key> {
    // The prefix and the tag (`{` + 16 hex digits + `}`) in some order, then `:rec:`.
    let at = prefix.len() + 18 + ":rec:".len();
    let key = Key::new(name.get(at..)?).ok()?;
    (LockKeys::new(prefix, &key).record == name).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_names_read_back_as_their_keys() {
        for prefix in ["lock:", "app{x}", "", "a:rec:"] {
            for key in ["k", "jobs/*nightly?", "a:rec:b", "{t}"] {
                let k = Key::new(key).unwrap();
                let name = LockKeys::new(prefix, &k).record;
                assert_eq!(key_of(prefix, &name), Some(k), "{prefix} {key}");
            }
        }
        assert_eq!(
            key_of("lock:", "lock:{0000000000000000}:rec:k"),
            None,
            "a wrong tag"
        );
        assert_eq!(key_of("lock:", "other"), None);
    }

    #[test]
    fn patterns_escape_what_globs_read() {
        assert_eq!(
            pattern("lock:", "a*[b]"),
            "lock:{????????????????}:rec:a\\*\\[b\\]*"
        );
        assert_eq!(pattern("p{", ""), "{????????????????}p{:rec:*");
    }

    #[test]
    fn cursors_read_back() {
        assert_eq!(parse_cursor("2:1234"), Some((2, 1234)));
        assert_eq!(parse_cursor("x"), None);
        assert_eq!(parse_cursor("1:-3"), None);
    }
}
