//! The recorder the workload's clients write a history through, on one clock for every
//! process of the machine.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::record::{At, Call, Event, Fault, History, OpId, Return};

/// `CLOCK_MONOTONIC` now, in nanoseconds: one clock for every process of the machine.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
}

/// Records a history from many tasks at once: each event is stamped with the recorder's
/// clock when it is recorded. The clock is `CLOCK_MONOTONIC` from an epoch, so that
/// recorders in several processes of one machine ([`Recorder::since`]) share it.
#[derive(Debug)]
pub struct Recorder {
    epoch: u64,
    next: AtomicUsize,
    events: Mutex<Vec<Event>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// A recorder whose clock starts now.
    pub fn new() -> Self {
        Recorder::since(monotonic_ns(), 0)
    }

    /// A recorder whose clock started at `epoch` ([`monotonic_ns`], maybe read by another
    /// process) and whose calls are numbered from `first_op`.
    pub fn since(epoch: u64, first_op: OpId) -> Self {
        Recorder {
            epoch,
            next: AtomicUsize::new(first_op),
            events: Mutex::default(),
        }
    }

    /// The epoch of the recorder's clock.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The recorder's clock now.
    pub fn now(&self) -> At {
        At::from_nanos(monotonic_ns().saturating_sub(self.epoch))
    }

    fn push(&self, event: Event) {
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(event);
    }

    /// Runs `call` as operation of `client` on `key`: its invoke is recorded now, then
    /// its return (made by `result` from what the call gave), or its cancellation when the
    /// future is dropped before the call is done.
    ///
    /// # Cancel safety
    /// Dropping the future records the call as cancelled.
    pub async fn call<T, F>(
        &self,
        client: usize,
        key: &str,
        call: Call,
        future: F,
        result: impl FnOnce(&T) -> Return,
    ) -> (OpId, T)
    where
        F: Future<Output = T>,
    {
        let op = self.next.fetch_add(1, Ordering::Relaxed);
        self.push(Event::Invoke {
            op,
            client,
            key: key.to_owned(),
            call,
            at: self.now(),
        });
        let mut pending = Pending {
            recorder: self,
            op,
            done: false,
        };
        let value = future.await;
        let at = self.now();
        pending.done = true;
        self.push(Event::Return {
            op,
            result: result(&value),
            at,
        });
        (op, value)
    }

    /// Runs `call` as one operation of `client` on each of `keys` at once (a `lock_all`):
    /// one invoke per key now, then one return per key (made by `results`, in the keys'
    /// order), or a cancellation of each when the future is dropped before it is done.
    ///
    /// # Cancel safety
    /// Dropping the future records every key's call as cancelled.
    pub async fn call_many<T, F>(
        &self,
        client: usize,
        keys: &[&str],
        call: Call,
        future: F,
        results: impl FnOnce(&T) -> Vec<Return>,
    ) -> (Vec<OpId>, T)
    where
        F: Future<Output = T>,
    {
        let at = self.now();
        let ops: Vec<OpId> = keys
            .iter()
            .map(|key| {
                let op = self.next.fetch_add(1, Ordering::Relaxed);
                self.push(Event::Invoke {
                    op,
                    client,
                    key: (*key).to_owned(),
                    call: call.clone(),
                    at,
                });
                op
            })
            .collect();
        let mut pending: Vec<Pending<'_>> = ops
            .iter()
            .map(|op| Pending {
                recorder: self,
                op: *op,
                done: false,
            })
            .collect();
        let value = future.await;
        let at = self.now();
        for (p, result) in pending.iter_mut().zip(results(&value)) {
            p.done = true;
            self.push(Event::Return {
                op: p.op,
                result,
                at,
            });
        }
        // A key the results said nothing of counts as cancelled.
        drop(pending);
        (ops, value)
    }

    /// Records that the holder of `hold` relies on it now, if `valid` (called right after
    /// reading the clock) says it still is; returns what `valid` said.
    pub fn claim(&self, hold: OpId, valid: impl FnOnce() -> bool) -> bool {
        let at = self.now();
        let ok = valid();
        if ok {
            self.push(Event::Claim { hold, at });
        }
        ok
    }

    /// Records a write of `hold` through the resource's fence, made at `at`.
    pub fn write(&self, hold: OpId, at: At, accepted: bool) {
        self.push(Event::Write { hold, accepted, at });
    }

    /// Records that the lost signal of `hold` fired.
    pub fn lost(&self, hold: OpId) {
        let at = self.now();
        self.push(Event::Lost { hold, at });
    }

    /// Records an injected fault, injected now.
    pub fn fault(&self, fault: Fault) {
        self.fault_at(fault, self.now());
    }

    /// Records an injected fault, injected at `at`.
    pub fn fault_at(&self, fault: Fault, at: At) {
        self.push(Event::Fault { fault, at });
    }

    /// Adds events recorded elsewhere (by another process, on the same clock).
    pub fn extend(&self, events: Vec<Event>) {
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .extend(events);
    }

    /// The history recorded so far.
    pub fn history(&self) -> History {
        History {
            events: self
                .events
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clone(),
        }
    }
}

/// Records a call's cancellation if it is dropped before its return was recorded.
struct Pending<'a> {
    recorder: &'a Recorder,
    op: OpId,
    done: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.done {
            let at = self.recorder.now();
            self.recorder.push(Event::Cancel { op: self.op, at });
        }
    }
}
