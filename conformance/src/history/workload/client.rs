//! One client of the workload: what it takes, how it holds (claiming and writing through
//! the fence), and how it gives back; and how a call's result is written down.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lock_core::fence::MemoryFence;
use lock_core::{Attempt, Busy, Fencing, LockBackend, Locker, Result as LockResult, Retry};
use tokio::time::Instant;

use super::{Rng, LEADER, MUTEX, PERMITS, READ_WRITE, SEMAPHORE};
use crate::harness::ms;
use crate::history::record::{Ask, Call, OpId, Return};
use crate::history::recorder::Recorder;

/// The client a `Busy` names.
pub(super) fn named(busy: &Busy) -> Option<usize> {
    client_of(busy.holder.as_ref()?)
}

/// What an inspection saw, as the history keeps it.
fn inspected(r: &LockResult<lock_core::LockState>) -> Return {
    let holder = client_of;
    match r {
        Ok(lock_core::LockState::Held {
            holder: h, fencing, ..
        }) => Return::Inspected {
            holds: vec![(holder(h), fencing.0)],
        },
        Ok(lock_core::LockState::Shared { holds, .. }) => Return::Inspected {
            holds: holds
                .iter()
                .map(|s| (holder(&s.holder), s.fencing.0))
                .collect(),
        },
        Ok(_) => Return::Inspected { holds: Vec::new() },
        Err(e) => failed(e),
    }
}

/// The client a holder info names, by the metadata each client's locker sets (`c<n>`).
fn client_of(holder: &lock_core::HolderInfo) -> Option<usize> {
    holder.metadata.as_deref()?.strip_prefix('c')?.parse().ok()
}

pub(super) fn failed(e: &lock_core::Error) -> Return {
    Return::Failed {
        kind: format!("{:?}", e.kind()),
        message: e.to_string(),
    }
}

pub(super) fn obtained<T>(r: &LockResult<Attempt<T>>, fencing: impl Fn(&T) -> Fencing) -> Return {
    match r {
        Ok(Attempt::Obtained(g)) => Return::Obtained {
            fencing: fencing(g).0,
        },
        Ok(Attempt::Busy(b)) => Return::Busy { holder: named(b) },
        Err(e) => failed(e),
    }
}

/// What a client holds while it works: a guard or a leadership.
pub(super) enum Held {
    Guard(lock_core::LockGuard),
    Leader(lock_core::Leadership),
}

impl Held {
    pub(super) fn valid(&self) -> bool {
        match self {
            Held::Guard(g) => !g.is_lost() && !g.remaining().is_zero(),
            Held::Leader(l) => !l.is_lost() && !l.remaining().is_zero(),
        }
    }

    fn fencing(&self) -> Fencing {
        match self {
            Held::Guard(g) => g.fencing(),
            Held::Leader(l) => l.term(),
        }
    }

    /// Resolves when the lost signal fires.
    fn lost(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let token = match self {
            Held::Guard(g) => g.lost_token(),
            Held::Leader(l) => l.lost_token(),
        };
        Box::pin(token.cancelled_owned())
    }

    pub(super) async fn release(self) -> LockResult<lock_core::ReleaseOutcome> {
        match self {
            Held::Guard(g) => g.release().await,
            Held::Leader(l) => l.resign().await,
        }
    }
}

/// What a client records through: its number, the recorder, the fence its writes go
/// through (none for the clients of several processes: each process would have a fence
/// of its own), and the label its keys are recorded under (the keys of another namespace
/// are other locks).
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) n: usize,
    pub(crate) recorder: Arc<Recorder>,
    pub(crate) fence: Option<Arc<MemoryFence>>,
    pub(crate) label: &'static str,
}

impl Ctx {
    /// `key` as the history names it.
    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.label)
    }

    /// A write with `fencing` through the fence, if the client has one, recorded.
    fn write(&self, op: OpId, key: &str, fencing: Fencing) {
        let Some(fence) = &self.fence else {
            return;
        };
        match fence.write(&self.key(key), fencing, || self.recorder.now()) {
            Ok(at) => self.recorder.write(op, at, true),
            Err(_) => self.recorder.write(op, self.recorder.now(), false),
        }
    }
}

/// One client's run: obtain, hold (claiming and writing), give back, until `end`.
pub(crate) async fn client(
    ctx: Ctx,
    backend: Arc<dyn LockBackend>,
    shared: bool,
    end: Instant,
    seed: u64,
) -> LockResult<()> {
    let n = ctx.n;
    let recorder = &ctx.recorder;
    let mut rng = Rng::new(seed.wrapping_add(n as u64 + 1));
    let locker = Locker::new(backend)
        .with_metadata(format!("c{n}"))?
        .with_retry(Retry::exponential(ms(2), ms(40)).notified());
    while Instant::now() < end {
        if rng.one_in(7) {
            both(&ctx, &locker, &mut rng).await;
            continue;
        }
        if rng.one_in(6) {
            let key = [MUTEX, SEMAPHORE, READ_WRITE, LEADER][rng.below(4) as usize];
            let _ = recorder
                .call(
                    n,
                    &ctx.key(key),
                    Call::Inspect,
                    locker.inspect(key),
                    inspected,
                )
                .await;
            continue;
        }
        let kind = if shared {
            rng.below(5)
        } else {
            rng.below(2) * 4
        };
        let wait = rng.one_in(2);
        let ttl = rng.millis(150, 600);
        let patience = if wait { rng.millis(50, 600) } else { ms(0) };
        let (key, ask) = match kind {
            0 => (MUTEX, Ask::Exclusive),
            1 => (
                SEMAPHORE,
                Ask::Shared {
                    capacity: PERMITS,
                    weight: 1 + rng.below(2) as u32,
                },
            ),
            2 => (
                READ_WRITE,
                Ask::Shared {
                    capacity: lock_core::Mode::UNBOUNDED,
                    weight: 1,
                },
            ),
            3 => (READ_WRITE, Ask::Exclusive),
            _ => (LEADER, Ask::Leader),
        };
        let watchdog = ask == Ask::Leader || rng.one_in(3);
        // One call in eight is cancelled after a few milliseconds.
        let cancel = rng.one_in(8).then(|| rng.millis(0, 30));
        let call = Call::Obtain { ask, wait };
        let obtain = async {
            match ask {
                Ask::Leader => {
                    let campaign = locker
                        .elect(key)
                        .ttl(ttl)
                        .wait(patience)
                        .identity(format!("c{n}"));
                    let r = recorder
                        .call(n, &ctx.key(key), call, campaign.lead(), |r| {
                            obtained(r, |l: &lock_core::Leadership| l.term())
                        })
                        .await;
                    (r.0, r.1.map(|a| a.obtained().map(Held::Leader)))
                }
                _ => {
                    let builder = match ask {
                        Ask::Shared {
                            capacity: lock_core::Mode::UNBOUNDED,
                            ..
                        } => locker.read(key),
                        Ask::Shared { weight, .. } => locker.semaphore(key, PERMITS).weight(weight),
                        _ if key == READ_WRITE => locker.write(key),
                        _ => locker.lock(key),
                    };
                    let builder = builder.ttl(ttl).wait(patience);
                    let builder = if watchdog {
                        builder.watchdog()
                    } else {
                        builder
                    };
                    let r = recorder
                        .call(n, &ctx.key(key), call, builder.obtain(), |r| {
                            obtained(r, lock_core::LockGuard::fencing)
                        })
                        .await;
                    (r.0, r.1.map(|a| a.obtained().map(Held::Guard)))
                }
            }
        };
        let got = match cancel {
            Some(after) => match tokio::time::timeout(after, obtain).await {
                Ok(r) => r,
                Err(_) => continue,
            },
            None => obtain.await,
        };
        let (op, held) = match got {
            (op, Ok(Some(held))) => (op, held),
            (_, Ok(None) | Err(_)) => {
                tokio::time::sleep(rng.millis(0, 20)).await;
                continue;
            }
        };
        hold(op, held, &mut rng, &ctx, key, ttl).await;
    }
    Ok(())
}

/// Works under a hold for a while (now and then past its ttl), then gives it back: by a
/// release, a cancelled release, or by dropping it.
pub(super) async fn hold(
    mut op: OpId,
    mut held: Held,
    rng: &mut Rng,
    ctx: &Ctx,
    key: &str,
    ttl: Duration,
) {
    let (n, recorder) = (ctx.n, &ctx.recorder);
    let lost = held.lost();
    let watcher = {
        let recorder = Arc::clone(recorder);
        tokio::spawn(async move {
            lost.await;
            recorder.lost(op);
        })
    };
    let work = ttl.mul_f64(0.2 + rng.below(130) as f64 / 100.0);
    let until = Instant::now() + work;
    // Halfway, one hold in three changes its mode (a read-write key's) or prolongs.
    let mut midway = rng.one_in(3).then(|| Instant::now() + work / 2);
    while Instant::now() < until {
        if midway.is_some_and(|at| Instant::now() >= at) {
            midway = None;
            if let Some(changed) = midway_call(op, &mut held, ctx, key, ttl).await {
                op = changed;
            }
        }
        if !recorder.claim(op, || held.valid()) {
            break;
        }
        ctx.write(op, key, held.fencing());
        tokio::time::sleep(rng.millis(3, 25)).await;
    }
    recorder.claim(op, || held.valid());
    let release = Call::Release { hold: op };
    match rng.below(10) {
        0 => drop(held),
        1 => {
            let after = rng.millis(0, 5);
            let _ = tokio::time::timeout(
                after,
                recorder.call(n, &ctx.key(key), release, held.release(), released),
            )
            .await;
        }
        _ => {
            // Its outcome is in the history; an error is one more outcome there.
            let _ = recorder
                .call(n, &ctx.key(key), release, held.release(), released)
                .await;
        }
    }
    watcher.abort();
}

/// A `lock_all` of the mutex and the read-write lock (both exclusive): obtained, each key
/// held and written as one hold of its own, then each released.
pub(super) async fn both(ctx: &Ctx, locker: &Locker, rng: &mut Rng) {
    let (n, recorder) = (ctx.n, &ctx.recorder);
    let keys = [MUTEX, READ_WRITE];
    let wait = rng.one_in(2);
    let ttl = rng.millis(150, 600);
    let patience = rng.millis(50, 600);
    let builder = locker.lock_all(keys).ttl(ttl);
    let builder = if rng.one_in(3) {
        builder.watchdog()
    } else {
        builder
    };
    let call = Call::ObtainAll { wait };
    let obtain = async {
        if wait {
            builder.wait(patience).obtain().await
        } else {
            builder.try_obtain().await
        }
    };
    let labelled = keys.map(|k| ctx.key(k));
    let labelled = [labelled[0].as_str(), labelled[1].as_str()];
    let (ops, got) = recorder
        .call_many(n, &labelled, call, obtain, |r| match r {
            Ok(Attempt::Obtained(all)) => keys
                .iter()
                .map(|key| Return::Obtained {
                    fencing: all
                        .fencing()
                        .find(|(k, _)| k.as_str() == *key)
                        .map_or(0, |(_, f)| f.0),
                })
                .collect(),
            // A set's Busy does not say which key was busy: its holder is named on none.
            Ok(Attempt::Busy(_)) => vec![Return::Busy { holder: None }; keys.len()],
            Err(e) => vec![failed(e); keys.len()],
        })
        .await;
    let Ok(Attempt::Obtained(all)) = got else {
        tokio::time::sleep(rng.millis(0, 20)).await;
        return;
    };
    let guards: Vec<(OpId, &str, lock_core::LockGuard)> = all
        .into_guards()
        .into_iter()
        .filter_map(|g| {
            let i = keys.iter().position(|k| *k == g.key().as_str())?;
            Some((ops[i], keys[i], g))
        })
        .collect();
    let until = Instant::now() + ttl.mul_f64(0.2 + rng.below(130) as f64 / 100.0);
    'work: while Instant::now() < until {
        for (op, key, g) in &guards {
            if !recorder.claim(*op, || !g.is_lost() && !g.remaining().is_zero()) {
                break 'work;
            }
            ctx.write(*op, key, g.fencing());
        }
        tokio::time::sleep(rng.millis(3, 25)).await;
    }
    for (op, key, g) in guards {
        recorder.claim(op, || !g.is_lost() && !g.remaining().is_zero());
        let _ = recorder
            .call(
                n,
                &ctx.key(key),
                Call::Release { hold: op },
                g.release(),
                released,
            )
            .await;
    }
}

/// A call in the middle of a hold: on the read-write key a mode change (an upgrade of a
/// read hold, a downgrade of the write lock), else an explicit prolong. Returns the hold's
/// new name when a mode change went through.
pub(super) async fn midway_call(
    op: OpId,
    held: &mut Held,
    ctx: &Ctx,
    key: &str,
    ttl: Duration,
) -> Option<OpId> {
    let (n, recorder) = (ctx.n, &ctx.recorder);
    let labelled = ctx.key(key);
    let Held::Guard(guard) = held else {
        return None;
    };
    if key != READ_WRITE {
        let prolong = guard.prolongate(ttl);
        let _ = recorder
            .call(
                n,
                &labelled,
                Call::Prolong { hold: op },
                prolong,
                |r| match r {
                    Ok(outcome) => Return::Prolonged(format!("{outcome:?}")),
                    Err(e) => failed(e),
                },
            )
            .await;
        return None;
    }
    let shared = guard.mode().is_shared();
    let ask = if shared {
        Ask::Exclusive
    } else {
        Ask::Shared {
            capacity: lock_core::Mode::UNBOUNDED,
            weight: 1,
        }
    };
    let change = async {
        let r = if shared {
            guard.upgrade().await
        } else {
            guard.downgrade().await
        };
        (r, guard.fencing())
    };
    let (changed, (r, _)) = recorder
        .call(
            n,
            &labelled,
            Call::Change { from: op, ask },
            change,
            |(r, f)| match r {
                Ok(Attempt::Obtained(())) => Return::Obtained { fencing: f.0 },
                Ok(Attempt::Busy(b)) => Return::Busy { holder: named(b) },
                Err(e) => failed(e),
            },
        )
        .await;
    matches!(r, Ok(Attempt::Obtained(()))).then_some(changed)
}

pub(super) fn released(r: &LockResult<lock_core::ReleaseOutcome>) -> Return {
    match r {
        Ok(outcome) => Return::Released(format!("{outcome:?}")),
        Err(e) => failed(e),
    }
}
