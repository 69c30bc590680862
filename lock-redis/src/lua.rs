//! The Lua variant: every operation is one `EVALSHA` of `scripts/lock.lua`, with
//! `scripts/shared.lua` (shared holds, a writer's marker) spliced into it.

use std::time::Duration;

use lock_core::backend::rules::Refusal;
use lock_core::{
    Busy, BusyReason, Fencing, LockState, Mode, ObtainOutcome, Operation, ProlongOutcome,
    ReleaseOutcome, Result, SharedHold, Ttl,
};
use redis::Script;

use crate::conn::link::Link;
use crate::error::protocol;
use crate::keys::LockKeys;
use crate::record::FREE_KEEP_MS;
use crate::request::parse_holder;
use crate::request::{Reply, Request};

const SCRIPT: &str = include_str!("scripts/lock.lua");
/// The script's second half: shared holds and a waiting writer's marker.
const SHARED: &str = include_str!("scripts/shared.lua");

/// The backend name of this variant.
pub(crate) const NAME: &str = crate::RedisBackend::LUA_NAME;

/// The script, loaded once per server and called by its SHA-1; redis-rs reloads it on
/// `NOSCRIPT` (after `SCRIPT FLUSH` or a restart) and retries, transparently. On a cluster
/// the script publishes with `SPUBLISH` (the same text otherwise): see `notify.rs`.
pub(crate) struct Lua {
    pub(crate) link: Link,
    script: Script,
    /// The script's text, for the `SCRIPT LOAD` that opens a batch.
    script_text: String,
}

/// The script's text, with the publish command the topology needs.
pub(crate) fn script_text(sharded: bool) -> String {
    // How long a free record is kept is written once, in record.rs.
    let text = SCRIPT
        .replace("--{shared.lua}", SHARED)
        .replace("{free_keep_ms}", &FREE_KEEP_MS.to_string());
    if sharded {
        text.replace("redis.call('PUBLISH',", "redis.call('SPUBLISH',")
    } else {
        text
    }
}

impl Lua {
    pub(crate) fn new(link: Link) -> Self {
        let text = script_text(link.is_cluster());
        Lua {
            link,
            script: Script::new(&text),
            script_text: text,
        }
    }

    /// The `EVALSHA` of one request, written straight into one buffer sized for it (no
    /// intermediate argument vectors: this runs on every call).
    fn command(&self, keys: &LockKeys, req: &Request<'_>) -> redis::Cmd {
        let holder = match req {
            Request::Obtain { holder_json, .. } => holder_json.len(),
            _ => 0,
        };
        let size = 160 + keys.record.len() + keys.channel.len() + holder;
        let mut cmd = redis::Cmd::with_capacity(13, size);
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
                mode,
                queue,
                change,
            } => {
                cmd.arg("obtain")
                    .arg(token.digest())
                    .arg(ttl.as_millis())
                    .arg(grace.as_millis())
                    .arg(*holder_json);
                match (mode, change) {
                    (Mode::Shared { capacity, weight }, None) => {
                        cmd.arg("shared").arg(*capacity).arg(*weight)
                    }
                    (Mode::Shared { capacity, weight }, Some(of)) => {
                        cmd.arg("shared").arg(*capacity).arg(*weight).arg(*of)
                    }
                    (_, Some(of)) => cmd.arg("upgrade").arg(*of),
                    _ if *queue => cmd.arg("queue"),
                    _ => cmd.arg("exclusive"),
                }
            }
            Request::Prolong { token, ttl, grace } => cmd
                .arg("prolong")
                .arg(token.digest())
                .arg(ttl.as_millis())
                .arg(grace.as_millis()),
            Request::Release { token, delay } => cmd
                .arg("release")
                .arg(token.digest())
                .arg(delay.map_or(0, Ttl::as_millis)),
            Request::Inspect => cmd.arg("inspect"),
            Request::Force => cmd.arg("force"),
        };
        cmd
    }

    pub(crate) async fn run(&self, keys: &LockKeys, req: &Request<'_>) -> Result<Reply> {
        let op = req.operation();
        let call = self.command(keys, req);
        let (reply, acked) = self
            .link
            .invoke(&call, &self.script, keys, NAME, op)
            .await?;
        if wrote(req, &reply) {
            self.link.check_acks(acked, NAME, op)?;
        }
        decode(req, &reply)
    }

    /// Prolongs every lock of `batch` with one pipeline on the server's connection:
    /// `SCRIPT LOAD` first, so that no `EVALSHA` behind it meets `NOSCRIPT`, then one
    /// `EVALSHA` per lock, then one `WAIT` for them all when replicas are asked for. One
    /// round trip however many locks (redis-rs writes the pipeline at once and reads the
    /// replies in order). Not on a cluster, whose locks live on many servers.
    pub(crate) async fn prolong_many(
        &self,
        batch: &[(LockKeys, Request<'_>)],
    ) -> Result<Vec<Result<ProlongOutcome>>> {
        let op = Operation::Prolongate;
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("SCRIPT")
            .arg("LOAD")
            .arg(self.script_text.as_str())
            .ignore();
        for (keys, req) in batch {
            pipe.add_command(self.command(keys, req));
        }
        let replies = self.link.pipeline(&mut pipe, NAME, op).await?;
        let mut answers = Vec::with_capacity(batch.len());
        for ((_, req), reply) in batch.iter().zip(replies) {
            let words = reply
                .and_then(|value| Ok(redis::from_redis_value::<Vec<String>>(value)?))
                .map_err(|e| crate::error::map_error(NAME, op, e));
            let answer = words.and_then(|words| match decode(req, &words)? {
                Reply::Prolong(outcome) => Ok(outcome),
                other => Err(protocol(NAME, op, format!("{other:?}"))),
            });
            answers.push(answer);
        }
        while answers.len() < batch.len() {
            answers.push(Err(protocol(NAME, op, "the pipeline ended early")));
        }
        Ok(answers)
    }
}

/// Whether the script changed a hold (then a `WAIT` for replicas follows, if asked). A
/// writer's marker left by a busy obtain, or taken away by a release that answers `lost`,
/// is not waited for: losing it in a failover only lets readers in once more before the
/// writer marks again.
fn wrote(req: &Request<'_>, reply: &[String]) -> bool {
    let word = reply.first().map_or("", String::as_str);
    matches!(
        word,
        "acquired"
            | "reacquired"
            | "prolonged"
            | "prolonged_late"
            | "released"
            | "released_late"
            | "decremented"
    ) || (matches!(req, Request::Force) && word != "free")
}

/// The script's reply to `req`, in the outcome vocabulary.
fn decode(req: &Request<'_>, reply: &[String]) -> Result<Reply> {
    let op = req.operation();
    let r = Parsed { op, reply };
    Ok(match req {
        Request::Obtain { ttl, .. } => Reply::Obtain(match r.word() {
            "acquired" => ObtainOutcome::Acquired {
                fencing: Fencing(r.number(1)?),
                ttl: *ttl,
            },
            "reacquired" => ObtainOutcome::Reacquired { holds: r.holds(1)? },
            "busy" => ObtainOutcome::Busy(r.busy()?),
            "lost" => ObtainOutcome::Lost,
            "refused" => return Err(r.refusal()?.into_error(NAME)),
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
            "shared" => r.shared()?,
            _ => return Err(r.unexpected()),
        }),
    })
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

    fn text(&self, i: usize) -> Result<&str> {
        self.reply
            .get(i)
            .map(String::as_str)
            .ok_or_else(|| self.unexpected())
    }

    /// `busy remaining holder [reason holders]`: the mutex path (lock.lua) leaves out the
    /// reason (an empty holder: cooling, else held); shared.lua gives it.
    fn busy(&self) -> Result<Busy> {
        let remaining = Duration::from_millis(self.number(1)?);
        let holder = match self.reply.get(2).map(String::as_str) {
            None | Some("") => None,
            Some(json) => Some(parse_holder(NAME, self.op, json)?),
        };
        if self.reply.len() < 5 {
            return Ok(match holder {
                None => Busy::cooling(remaining),
                Some(holder) => Busy::held(holder, remaining),
            });
        }
        let reason = match self.text(3)? {
            "held" => BusyReason::Held,
            "shared" => BusyReason::Shared,
            "full" => BusyReason::Full,
            "writer_waiting" => BusyReason::WriterWaiting,
            "cooling" => BusyReason::Cooling,
            _ => return Err(self.unexpected()),
        };
        Ok(Busy {
            holder,
            remaining,
            reason,
            holders: self.holds(4)?,
        })
    }

    /// `refused capacity|weight stored asked`, `refused mode exclusive` or
    /// `refused mode capacity weight`.
    fn refusal(&self) -> Result<Refusal> {
        Ok(
            match (self.text(1)?, self.reply.get(2).map(String::as_str)) {
                ("capacity", _) => Refusal::Capacity {
                    stored: self.holds(2)?,
                    asked: self.holds(3)?,
                },
                ("weight", _) => Refusal::Weight {
                    stored: self.holds(2)?,
                    asked: self.holds(3)?,
                },
                ("mode", Some("exclusive")) => Refusal::Mode {
                    held: Mode::Exclusive,
                },
                ("mode", _) => Refusal::Mode {
                    held: Mode::Shared {
                        capacity: self.holds(2)?,
                        weight: self.holds(3)?,
                    },
                },
                _ => return Err(self.unexpected()),
            },
        )
    }

    /// `shared capacity writer_remaining` then five words per live hold.
    fn shared(&self) -> Result<LockState> {
        let holds = self.reply.get(3..).unwrap_or_default();
        if holds.len() % 5 != 0 {
            return Err(self.unexpected());
        }
        let writer_waiting = match self.text(2)? {
            "" => None,
            _ => Some(Duration::from_millis(self.number(2)?)),
        };
        let holds = (0..holds.len() / 5)
            .map(|i| {
                let at = 3 + 5 * i;
                Ok(SharedHold {
                    holder: parse_holder(NAME, self.op, self.text(at)?)?,
                    fencing: Fencing(self.number(at + 1)?),
                    remaining: Duration::from_millis(self.number(at + 2)?),
                    holds: self.holds(at + 3)?,
                    weight: self.holds(at + 4)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(LockState::Shared {
            capacity: self.holds(1)?,
            holds,
            writer_waiting,
        })
    }
}
