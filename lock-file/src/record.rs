//! The record kept in each lock file: one JSON line with a checksum, in one of two slots.
//!
//! ```text
//! {"v":2,"seq":7,"key":"jobs/nightly","fencing":1732200000123456,
//!  "clock":{"boot":"<boot id>","boot_ms":86400123,"ms":1732200000123},"state":"held",
//!  "token":"<32 hex>","holder":{"host":"web-1","pid":4242,"metadata":"run 17"},"holds":1,
//!  "expires_ms":1732200030123,"forget_ms":1732200060123} 9f2c4e01aa37b6d2
//! ```
//!
//! The line ends with a space and the 64-bit FNV-1a hash of the JSON, in hex.
//!
//! # Crash atomicity
//! A write that a SIGKILL interrupts can stop at any page boundary, and a record with 4 KiB
//! of metadata spans pages; the torn half-record would then block its key until an operator
//! broke it. So the file has two slots, at offset 0 and at [`SLOT`], and a write never
//! touches the slot that holds the current record: it writes the other one with `seq` one
//! higher, in one `pwrite`. A reader takes the valid slot with the highest `seq`; a torn
//! slot fails its checksum and is ignored, so the previous record stands. A file's first
//! write goes to slot 1: a torn slot 1 over an empty slot 0 is a first write that never
//! finished (no record), while garbage at offset 0 stays `Corrupt`. Every read and write
//! happens under the file's `flock`, so no reader sees a write in progress.
//!
//! Shared holds (a semaphore's permits, read holds) are `"state":"shared"` with
//! `"capacity"` and `"shares"`, one object per hold with its own `"fencing"` and `"weight"`;
//! such a record is version 3, so that a lock-file that knows no shared holds refuses it
//! (`Corrupt`) instead of misreading it. Every other record stays version 2, so a rolling
//! upgrade on one host is safe while nobody uses shared holds. A waiting writer's marker is
//! `"writer":{"token","until_ms"}` beside any state (version 3 too).
//!
//! A released lock's record is `"state":"free"` until a sweep removes its file (the `sweep`
//! module): fencing keeps growing through the wall-clock floor.
//! Version 1 records (one padded line at offset 0, no checksum) are still read, as `seq` 0.

use lock_core::backend::rules;
use lock_core::HolderInfo;
use serde::{Deserialize, Serialize};

use crate::clock::Anchor;

/// The record format's version for exclusive records.
pub(crate) const VERSION: u32 = 2;

/// The version of a record with shared holds or a writer's marker.
pub(crate) const VERSION_SHARED: u32 = 3;

/// The offset of the second slot, and the longest line a slot holds. A record's JSON is at
/// most about 33 KiB (a 1 KiB key and 4 KiB of metadata, every byte escaped as `\u00XX`).
pub(crate) const SLOT: usize = 64 * 1024;

/// The most shared holds one lock file is sure to keep (`Capabilities::holds_per_key`):
/// every hold in one record, and a record in one [`SLOT`], for holders whose host name and
/// metadata are at most 64 printable ASCII bytes each, under a key of 1 KiB (a byte JSON
/// escapes takes six); shorter holders fit more. Checked by a test below.
pub(crate) const HOLDS_PER_KEY: usize = 150;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Flat")]
pub(crate) struct Record {
    pub(crate) v: u32,
    /// Which write this is: the slot with the highest valid `seq` is the record.
    #[serde(default)]
    pub(crate) seq: u64,
    pub(crate) key: String,
    pub(crate) fencing: u64,
    /// What the clocks read at this write; the record's times are on the clock it anchors
    /// (see the `clock` module). Absent in records of older versions: their times are on
    /// the wall clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) clock: Option<Anchor>,
    /// A waiting writer's marker: new shared holds stay out until `until_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) writer: Option<Writer>,
    #[serde(flatten)]
    pub(crate) state: State,
}

/// A waiting writer's marker in a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Writer {
    pub(crate) token: String,
    pub(crate) until_ms: u64,
}

/// One shared hold in a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Share {
    pub(crate) token: String,
    pub(crate) holder: HolderInfo,
    pub(crate) holds: u32,
    pub(crate) expires_ms: u64,
    pub(crate) forget_ms: u64,
    pub(crate) fencing: u64,
    pub(crate) weight: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(crate) enum State {
    Free,
    Held {
        token: String,
        holder: HolderInfo,
        holds: u32,
        expires_ms: u64,
        /// End of the grace period: until then a late call is told apart from a lost one.
        forget_ms: u64,
    },
    Cooling {
        until_ms: u64,
    },
    Shared {
        capacity: u32,
        shares: Vec<Share>,
    },
}

/// A record line as it is read: every field at the top level, as written. serde's `flatten`
/// of an internally tagged enum buffers the whole object before parsing it; reading into
/// this and then into [`Record`] does not, and a call reads two slots (a lock cycle on the
/// file backend went from 14.3 to 13.7 µs with this alone).
#[derive(Deserialize)]
struct Flat {
    v: u32,
    #[serde(default)]
    seq: u64,
    key: String,
    fencing: u64,
    clock: Option<Anchor>,
    state: Tag,
    token: Option<String>,
    holder: Option<HolderInfo>,
    holds: Option<u32>,
    expires_ms: Option<u64>,
    forget_ms: Option<u64>,
    until_ms: Option<u64>,
    capacity: Option<u32>,
    shares: Option<Vec<Share>>,
    writer: Option<Writer>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Tag {
    Free,
    Held,
    Cooling,
    Shared,
}

impl TryFrom<Flat> for Record {
    type Error = String;

    fn try_from(flat: Flat) -> Result<Self, String> {
        fn needs<T>(field: Option<T>, name: &str) -> Result<T, String> {
            field.ok_or_else(|| format!("missing field `{name}`"))
        }
        let state = match flat.state {
            Tag::Free => State::Free,
            Tag::Cooling => State::Cooling {
                until_ms: needs(flat.until_ms, "until_ms")?,
            },
            Tag::Held => State::Held {
                token: needs(flat.token, "token")?,
                holder: needs(flat.holder, "holder")?,
                holds: needs(flat.holds, "holds")?,
                expires_ms: needs(flat.expires_ms, "expires_ms")?,
                forget_ms: needs(flat.forget_ms, "forget_ms")?,
            },
            Tag::Shared => State::Shared {
                capacity: needs(flat.capacity, "capacity")?,
                shares: needs(flat.shares, "shares")?,
            },
        };
        Ok(Record {
            v: flat.v,
            seq: flat.seq,
            key: flat.key,
            fencing: flat.fencing,
            clock: flat.clock,
            writer: flat.writer,
            state,
        })
    }
}

/// A record as the contract's rules see it: the token in hex, times in milliseconds of the
/// record's clock.
pub(crate) type Stored = rules::Record<String, HolderInfo>;

impl Record {
    /// The record as the rules see it.
    pub(crate) fn into_stored(self) -> Stored {
        let state = match self.state {
            State::Free => rules::State::Free,
            State::Cooling { until_ms } => rules::State::Cooling { until: until_ms },
            State::Held {
                token,
                holder,
                holds,
                expires_ms,
                forget_ms,
            } => rules::State::Held(rules::Hold {
                token,
                holder,
                holds,
                expires: expires_ms,
                forget: forget_ms,
            }),
            State::Shared { capacity, shares } => rules::State::Shared(rules::Shared {
                capacity,
                holds: shares
                    .into_iter()
                    .map(|sh| rules::Share {
                        hold: rules::Hold {
                            token: sh.token,
                            holder: sh.holder,
                            holds: sh.holds,
                            expires: sh.expires_ms,
                            forget: sh.forget_ms,
                        },
                        fencing: sh.fencing,
                        weight: sh.weight,
                    })
                    .collect(),
            }),
        };
        rules::Record {
            fencing: self.fencing,
            state,
            writer: self.writer.map(|w| rules::Writer {
                token: w.token,
                until: w.until_ms,
            }),
        }
    }

    /// The version this record is written as: 3 with shared holds or a writer's marker,
    /// else 2.
    pub(crate) fn version(&self) -> u32 {
        match (&self.state, &self.writer) {
            (State::Shared { .. }, _) | (_, Some(_)) => VERSION_SHARED,
            _ => VERSION,
        }
    }

    /// The record of `key` the rules decided on, its times on the clock `anchor` anchors
    /// (`v` and `seq` are set when it is written).
    pub(crate) fn from_stored(key: &str, stored: Stored, anchor: Option<Anchor>) -> Self {
        let state = match stored.state {
            rules::State::Free => State::Free,
            rules::State::Cooling { until } => State::Cooling { until_ms: until },
            rules::State::Held(h) => State::Held {
                token: h.token,
                holder: h.holder,
                holds: h.holds,
                expires_ms: h.expires,
                forget_ms: h.forget,
            },
            rules::State::Shared(s) => State::Shared {
                capacity: s.capacity,
                shares: s
                    .holds
                    .into_iter()
                    .map(|sh| Share {
                        token: sh.hold.token,
                        holder: sh.hold.holder,
                        holds: sh.hold.holds,
                        expires_ms: sh.hold.expires,
                        forget_ms: sh.hold.forget,
                        fencing: sh.fencing,
                        weight: sh.weight,
                    })
                    .collect(),
            },
        };
        Record {
            // Set by the write, with `seq`: 2, or 3 with shared holds or a marker.
            v: VERSION,
            seq: 0,
            key: key.to_owned(),
            fencing: stored.fencing,
            clock: anchor,
            writer: stored.writer.map(|w| Writer {
                token: w.token,
                until_ms: w.until,
            }),
            state,
        }
    }

    /// The slot's line: JSON, a space, the checksum, a newline.
    pub(crate) fn encode(&self) -> Vec<u8> {
        // Serializing plain data with string keys cannot fail.
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        let sum = checksum(&line);
        line.push(b' ');
        line.extend_from_slice(sum.as_bytes());
        line.push(b'\n');
        line
    }

    /// Decodes one slot: `Ok(None)` for a slot never written (empty, or a hole of zeros).
    pub(crate) fn decode(bytes: &[u8]) -> Result<Option<Record>, String> {
        if bytes.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
            return Err("the record has no terminating newline (torn write?)".into());
        };
        let line = &bytes[..end];
        let trimmed = line.trim_ascii_end();
        // Version 1: padded JSON, no checksum.
        if trimmed.ends_with(b"}") {
            let record: Record =
                serde_json::from_slice(trimmed).map_err(|e| format!("not a lock record: {e}"))?;
            return match record.v {
                1 => Ok(Some(Record { seq: 0, ..record })),
                v => Err(format!("a version {v} record without a checksum")),
            };
        }
        let Some(split) = line.iter().rposition(|&b| b == b' ') else {
            return Err("not a lock record: no checksum".into());
        };
        let (json, sum) = (&line[..split], &line[split + 1..]);
        if checksum(json).as_bytes() != sum {
            return Err("the record's checksum does not match (torn write?)".into());
        }
        let record: Record =
            serde_json::from_slice(json).map_err(|e| format!("not a lock record: {e}"))?;
        if record.v != VERSION && record.v != VERSION_SHARED {
            return Err(format!(
                "record version {} is neither {VERSION} nor {VERSION_SHARED}: written by another \
                 version of lock-file",
                record.v
            ));
        }
        Ok(Some(record))
    }
}

/// 64-bit FNV-1a of the JSON, in hex. It detects torn writes, not forgery (whoever can
/// write the file can write any record): a stable, dependency-free hash is enough.
fn checksum(json: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in json {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(json: &str) -> Vec<u8> {
        format!("{json} {}\n", checksum(json.as_bytes())).into_bytes()
    }

    /// [`HOLDS_PER_KEY`] holds of the longest promised holders fit one slot, with the
    /// writer's marker beside them.
    #[test]
    fn the_declared_number_of_holds_fits_a_slot() {
        let holder = HolderInfo {
            host: "h".repeat(64),
            pid: u32::MAX,
            metadata: Some("m".repeat(64)),
        };
        let share = |i: u64| Share {
            token: "ab".repeat(32),
            holder: holder.clone(),
            holds: u32::MAX,
            expires_ms: u64::MAX - i,
            forget_ms: u64::MAX,
            fencing: u64::MAX - i,
            weight: u32::MAX,
        };
        let record = Record {
            v: VERSION_SHARED,
            seq: u64::MAX,
            key: "k".repeat(lock_core::Key::MAX_LEN),
            fencing: u64::MAX,
            clock: Some(Anchor {
                boot: "0b3c1e2a-5f1d-4a7e-9c3b-2d4e6f8a0b1c".into(),
                boot_ms: u64::MAX,
                ms: u64::MAX,
            }),
            writer: Some(Writer {
                token: "ef".repeat(32),
                until_ms: u64::MAX,
            }),
            state: State::Shared {
                capacity: u32::MAX,
                shares: (0..HOLDS_PER_KEY as u64).map(share).collect(),
            },
        };
        let len = record.encode().len();
        assert!(
            len <= SLOT,
            "{HOLDS_PER_KEY} holds take {len} bytes of {SLOT}"
        );
    }

    #[test]
    fn every_state_reads_back_as_written() {
        let holder = HolderInfo::current().with_metadata("run 17").unwrap();
        for state in [
            State::Free,
            State::Cooling { until_ms: 42 },
            State::Held {
                token: "ab".repeat(16),
                holder,
                holds: 2,
                expires_ms: 7,
                forget_ms: 9,
            },
            State::Shared {
                capacity: 3,
                shares: vec![Share {
                    token: "cd".repeat(16),
                    holder: HolderInfo::current(),
                    holds: 1,
                    expires_ms: 7,
                    forget_ms: 9,
                    fencing: 12,
                    weight: 2,
                }],
            },
        ] {
            let record = Record {
                v: VERSION,
                writer: None,
                seq: 3,
                key: "jobs/\"nightly\"".into(),
                fencing: 1_732_200_000_123_456,
                clock: Some(Anchor {
                    boot: "0b3c1e2a-5f1d-4a7e-9c3b-2d4e6f8a0b1c".into(),
                    boot_ms: 86_400_123,
                    ms: 1_732_200_000_123,
                }),
                state,
            };
            assert_eq!(Record::decode(&record.encode()), Ok(Some(record.clone())));
            let marked = Record {
                v: VERSION_SHARED,
                writer: Some(Writer {
                    token: "ef".repeat(16),
                    until_ms: 11,
                }),
                ..record
            };
            assert_eq!(Record::decode(&marked.encode()), Ok(Some(marked)));
        }
    }

    #[test]
    fn a_state_without_its_fields_is_not_a_record() {
        for (json, missing) in [
            (
                r#"{"v":2,"seq":1,"key":"k","fencing":1,"state":"cooling"}"#,
                "until_ms",
            ),
            (
                r#"{"v":2,"seq":1,"key":"k","fencing":1,"state":"held","holds":1,"expires_ms":1,"forget_ms":2}"#,
                "token",
            ),
        ] {
            let err = Record::decode(&line(json)).unwrap_err();
            assert!(err.contains(missing), "{json}: {err}");
        }
        let err = Record::decode(&line(
            r#"{"v":2,"seq":1,"key":"k","fencing":1,"state":"taken"}"#,
        ))
        .unwrap_err();
        assert!(err.starts_with("not a lock record"), "{err}");
    }
}
