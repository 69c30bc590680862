//! Where a lock lives in etcd: the names of its keys and what each holds.
//!
//! Every key of one lock starts with its *base*, `<prefix>/<hex of the lock key>/`, so one
//! range read sees the whole lock and one range compare guards it. Under the base:
//!
//! | key | lease | value | says |
//! |---|---|---|---|
//! | `H/<token digest>` | the hold's ttl | [`HoldValue`] | the hold is live |
//! | `G/<token digest>` | the ttl plus the grace | [`HoldValue`] | the hold is live or within its grace: a late call is told apart from a lost one |
//! | `C` | the cooldown | [`CoolValue`] | the key is cooling (`delay_after`) |
//! | `W` | the writer's request ttl | [`WriterValue`] | a writer waits: new shared holds stay out |
//! | `F` | none | [`FenceValue`] | the last fencing token issued, and whom the last decision that wrote it wakes |
//!
//! `F` is also rewritten by every transaction whose decision wakes waiters (a release, a
//! downgrade, an admission that lets the next reader in), saying whom: each process's watch
//! of the lock wakes its own waiters as the rules decided, one or all, as the other
//! backends' notifications do.
//!
//! `F` is written by every transaction that admits a hold and never deleted: two
//! decisions read at the same revision can never both admit, even when the first hold was
//! taken and released (its keys deleted) before the second's transaction arrives, which a
//! range compare alone cannot see. It is the one key a lock leaves behind (about 60 bytes
//! per lock name ever taken; `etcdctl del --prefix '<prefix>/'` clears a retired prefix),
//! declared as `Capabilities::fence_per_key`.
//!
//! The lock key is hex-encoded, so it never holds a `/`, and the suffixes are upper case
//! where hex is lower case: no lock's keys ever fall under another lock's base, whatever
//! the lock keys and prefixes (`app` with key `x:y` and `appx:` with key `y` differ at
//! the `/` that ends the prefix).

use lock_core::HolderInfo;
use serde::{Deserialize, Serialize};

/// The keys of one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Base(String);

impl Base {
    /// The base of `key` under `prefix`.
    pub(crate) fn new(prefix: &str, key: &str) -> Self {
        let mut base = String::with_capacity(prefix.len() + 2 * key.len() + 2);
        base.push_str(prefix);
        base.push('/');
        for byte in key.as_bytes() {
            base.push(char::from(HEX[usize::from(byte >> 4)]));
            base.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        base.push('/');
        Base(base)
    }

    /// The prefix every key of the lock starts with.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The first key of the lock's range: its keys are `[first, end)`.
    pub(crate) fn first(&self) -> String {
        format!("{}C", self.0)
    }

    /// The end of the lock's range (exclusive). Its keys start with an upper-case letter
    /// from `C` to `W`; a lock under a longer prefix that happens to start with this base
    /// continues with a hex digit or a lower-case letter and stays out of the range (a
    /// prefix that continues with upper case would only cost spurious conflicts, never a
    /// wrong answer: keys that are no slot are ignored).
    pub(crate) fn end(&self) -> String {
        format!("{}X", self.0)
    }

    /// The key that says `token`'s hold is live.
    pub(crate) fn live(&self, token: &str) -> String {
        format!("{}H/{token}", self.0)
    }

    /// The key that remembers `token`'s hold through its grace.
    pub(crate) fn evidence(&self, token: &str) -> String {
        format!("{}G/{token}", self.0)
    }

    /// The cooldown's key.
    pub(crate) fn cooling(&self) -> String {
        format!("{}C", self.0)
    }

    /// The waiting writer's marker.
    pub(crate) fn writer(&self) -> String {
        format!("{}W", self.0)
    }

    /// The last fencing token issued.
    pub(crate) fn fence(&self) -> String {
        format!("{}F", self.0)
    }

    /// What a key under the base is.
    pub(crate) fn slot<'k>(&self, key: &'k str) -> Option<Slot<'k>> {
        let rest = key.strip_prefix(self.0.as_str())?;
        match rest {
            "C" => Some(Slot::Cooling),
            "W" => Some(Slot::Writer),
            "F" => Some(Slot::Fence),
            _ => {
                if let Some(token) = rest.strip_prefix("H/") {
                    Some(Slot::Live(token))
                } else {
                    rest.strip_prefix("G/").map(Slot::Evidence)
                }
            }
        }
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// What a key under a lock's base is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot<'k> {
    /// `H/<digest>`.
    Live(&'k str),
    /// `G/<digest>`.
    Evidence(&'k str),
    /// `C`.
    Cooling,
    /// `W`.
    Writer,
    /// `F`.
    Fence,
}

/// One hold, as both of its keys keep it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HoldValue {
    /// Who holds it.
    pub(crate) holder: HolderInfo,
    /// The reentrant hold count.
    pub(crate) holds: u32,
    /// The hold's fencing token.
    pub(crate) fencing: u64,
    /// A shared hold's permits; `None` for an exclusive hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) shared: Option<Permits>,
    /// The ttl it was last granted or renewed for, in ms.
    pub(crate) ttl_ms: u64,
    /// Its grace after the ttl, in ms.
    pub(crate) grace_ms: u64,
    /// The revision its ttl was last set at: the older of two expired holds is the one
    /// renewed first.
    pub(crate) renewed: u64,
}

/// A shared hold's place in its semaphore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Permits {
    /// The key's capacity, as its first holder fixed it.
    pub(crate) capacity: u32,
    /// The permits this hold takes.
    pub(crate) weight: u32,
}

/// The cooldown's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CoolValue {
    /// The fencing token of the hold whose release started it.
    pub(crate) fencing: u64,
    /// How long it was asked to last, in ms.
    pub(crate) ms: u64,
}

/// The waiting writer's marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WriterValue {
    /// The writer's token digest.
    pub(crate) token: String,
    /// How long it was asked to last after its last busy attempt, in ms.
    pub(crate) ms: u64,
}

/// The last fencing token issued for a lock, and whom the decision that last wrote it
/// wakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FenceValue {
    /// The token.
    pub(crate) fencing: u64,
    /// Whom the transaction that wrote this wakes in every process, as the rules decided
    /// (`lock_core::backend::rules::Wake`); absent: nobody. Each process's watch reads it
    /// from the put's event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) wake: Option<Wakes>,
}

/// Whom a decision wakes, as `F` announces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Wakes {
    /// The longest-waiting waiter of each process.
    One,
    /// Every waiter.
    All,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_of_prefixes_of_each_other_never_nest() {
        let a = Base::new("app", "x:y");
        let b = Base::new("appx:", "y");
        assert!(!a.as_str().starts_with(b.as_str()));
        assert!(!b.as_str().starts_with(a.as_str()));
        // A key that is the hex of another's suffix stays apart too.
        let outer = Base::new("p", "k");
        let inner = Base::new(&format!("p/{}", &outer.as_str()[2..4]), "k");
        assert_eq!(outer.slot(&inner.live("d")), None);
    }

    #[test]
    fn every_key_of_a_lock_is_read_back_as_its_slot() {
        let base = Base::new("locks", "a/b\0c");
        assert_eq!(base.slot(&base.live("ab12")), Some(Slot::Live("ab12")));
        assert_eq!(
            base.slot(&base.evidence("ab12")),
            Some(Slot::Evidence("ab12"))
        );
        assert_eq!(base.slot(&base.cooling()), Some(Slot::Cooling));
        assert_eq!(base.slot(&base.writer()), Some(Slot::Writer));
        assert_eq!(base.slot(&base.fence()), Some(Slot::Fence));
        assert_eq!(base.slot("locks/other"), None);
        assert!(base.as_str().ends_with("/612f620063/"));
    }
}
