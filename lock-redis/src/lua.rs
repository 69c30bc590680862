//! The Lua variant: every operation is one `EVALSHA` of `scripts/lock.lua`.

use std::time::Duration;

use lock_core::LockState;
use lock_core::{
    Busy, Fencing, ObtainOutcome, Operation, ProlongOutcome, ReleaseOutcome, Result, Ttl,
};
use redis::Script;

use crate::error::protocol;
use crate::keys::LockKeys;
use crate::link::Link;
use crate::record::{parse_holder, FREE_KEEP_MS};
use crate::request::{Reply, Request};

const SCRIPT: &str = include_str!("scripts/lock.lua");

/// The backend name of this variant.
pub(crate) const NAME: &str = crate::RedisBackend::LUA_NAME;

/// The script, loaded once per server and called by its SHA-1; redis-rs reloads it on
/// `NOSCRIPT` (after `SCRIPT FLUSH` or a restart) and retries, transparently. On a cluster
/// the script publishes with `SPUBLISH` (the same text otherwise): see `notify.rs`.
pub(crate) struct Lua {
    pub(crate) link: Link,
    script: Script,
}

/// The script's text, with the publish command the topology needs.
pub(crate) fn script_text(sharded: bool) -> String {
    // How long a free record is kept is written once, in record.rs.
    let text = SCRIPT.replace("{free_keep_ms}", &FREE_KEEP_MS.to_string());
    if sharded {
        text.replace("redis.call('PUBLISH',", "redis.call('SPUBLISH',")
    } else {
        text
    }
}

impl Lua {
    pub(crate) fn new(link: Link) -> Self {
        let script = Script::new(&script_text(link.is_cluster()));
        Lua { link, script }
    }

    /// The `EVALSHA` of one request, written straight into one buffer sized for it (no
    /// intermediate argument vectors: this runs on every call).
    fn command(&self, keys: &LockKeys, req: &Request<'_>) -> redis::Cmd {
        let holder = match req {
            Request::Obtain { holder_json, .. } => holder_json.len(),
            _ => 0,
        };
        let size = 128 + keys.record.len() + keys.channel.len() + holder;
        let mut cmd = redis::Cmd::with_capacity(10, size);
        cmd.arg("EVALSHA")
            .arg(self.script.get_hash())
            .arg(2)
            .arg(&keys.record)
            .arg(&keys.channel);
        match req {
            Request::Obtain {
                token,
                ttl,
                grace,
                holder_json,
            } => cmd
                .arg("obtain")
                .arg(token.to_hex())
                .arg(ttl.as_millis())
                .arg(grace.as_millis())
                .arg(*holder_json),
            Request::Prolong { token, ttl, grace } => cmd
                .arg("prolong")
                .arg(token.to_hex())
                .arg(ttl.as_millis())
                .arg(grace.as_millis()),
            Request::Release { token, delay } => cmd
                .arg("release")
                .arg(token.to_hex())
                .arg(delay.map_or(0, Ttl::as_millis)),
            Request::Inspect => cmd.arg("inspect"),
            Request::Force => cmd.arg("force"),
        };
        cmd
    }

    pub(crate) async fn run(&self, keys: &LockKeys, req: &Request<'_>) -> Result<Reply> {
        let op = req.operation();
        let call = self.command(keys, req);
        let reply: Vec<String> = self.link.invoke(&call, &self.script, NAME, op).await?;
        let r = Parsed { op, reply: &reply };
        if matches!(
            r.word(),
            "acquired"
                | "reacquired"
                | "prolonged"
                | "prolonged_late"
                | "released"
                | "released_late"
                | "decremented"
        ) || (matches!(req, Request::Force) && r.word() != "free")
        {
            self.link.await_replicas(keys, NAME, op).await?;
        }
        Ok(match req {
            Request::Obtain { ttl, .. } => Reply::Obtain(match r.word() {
                "acquired" => ObtainOutcome::Acquired {
                    fencing: Fencing(r.number(1)?),
                    ttl: *ttl,
                },
                "reacquired" => ObtainOutcome::Reacquired { holds: r.holds(1)? },
                "busy" => ObtainOutcome::Busy(Busy {
                    remaining: Duration::from_millis(r.number(1)?),
                    holder: match reply.get(2).map(String::as_str) {
                        None | Some("") => None,
                        Some(json) => Some(parse_holder(NAME, op, json)?),
                    },
                }),
                _ => return Err(r.unexpected()),
            }),
            Request::Prolong { .. } => Reply::Prolong(match r.word() {
                "prolonged" => ProlongOutcome::Prolonged,
                "prolonged_late" => ProlongOutcome::ProlongedLate,
                "lost" => ProlongOutcome::Lost,
                _ => return Err(r.unexpected()),
            }),
            Request::Release { .. } => Reply::Release(match r.word() {
                "released" => ReleaseOutcome::Released,
                "released_late" => ReleaseOutcome::ReleasedLate,
                "decremented" => ReleaseOutcome::Decremented { holds: r.holds(1)? },
                "lost" => ReleaseOutcome::Lost,
                _ => return Err(r.unexpected()),
            }),
            Request::Inspect | Request::Force => Reply::State(match r.word() {
                "free" => LockState::Free,
                "cooling" => LockState::Cooling {
                    remaining: Duration::from_millis(r.number(1)?),
                },
                "held" => LockState::Held {
                    remaining: Duration::from_millis(r.number(1)?),
                    holder: parse_holder(NAME, op, reply.get(2).map_or("", String::as_str))?,
                    fencing: Fencing(r.number(3)?),
                    holds: r.holds(4)?,
                },
                _ => return Err(r.unexpected()),
            }),
        })
    }
}

/// A script reply: a word and its numbers.
struct Parsed<'a> {
    op: Operation,
    reply: &'a [String],
}

impl Parsed<'_> {
    fn word(&self) -> &str {
        self.reply.first().map_or("", String::as_str)
    }

    fn unexpected(&self) -> lock_core::Error {
        protocol(
            NAME,
            self.op,
            format!("script answered {:?}", self.reply.first()),
        )
    }

    fn number(&self, i: usize) -> Result<u64> {
        self.reply
            .get(i)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| self.unexpected())
    }

    fn holds(&self, i: usize) -> Result<u32> {
        u32::try_from(self.number(i)?).map_err(|_| self.unexpected())
    }
}
