//! The record kept in each lock file: one JSON line, versioned.
//!
//! ```text
//! {"v":1,"key":"jobs/nightly","fencing":1732200000123456,"state":"held","token":"<32 hex>",
//!  "holder":{"host":"web-1","pid":4242,"metadata":"run 17"},"holds":1,
//!  "expires_ms":1732200030123,"forget_ms":1732200060123}
//! ```
//!
//! Only the text up to the first newline counts. A write is one `pwrite` of the whole line,
//! padded with spaces to the old length when shorter (never a truncate), so a killed writer
//! leaves the old record or the new one, never a half record. A released lock keeps its file
//! (`"state":"free"`) so that the fencing sequence survives.

use lock_core::{HolderInfo, Token};
use serde::{Deserialize, Serialize};

/// The record format's version.
pub(crate) const VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) v: u32,
    pub(crate) key: String,
    pub(crate) fencing: u64,
    #[serde(flatten)]
    pub(crate) state: State,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
}

/// How a record reads at a given instant.
pub(crate) enum Phase {
    Free,
    Cooling { left_ms: u64 },
    Live { ours: bool },
    Expired { ours: bool },
}

impl Record {
    pub(crate) fn phase(&self, now_ms: u64, token: Option<&Token>) -> Phase {
        match &self.state {
            State::Free => Phase::Free,
            State::Cooling { until_ms } if *until_ms > now_ms => Phase::Cooling {
                left_ms: until_ms - now_ms,
            },
            State::Cooling { .. } => Phase::Free,
            State::Held { forget_ms, .. } if *forget_ms <= now_ms => Phase::Free,
            State::Held {
                token: held,
                expires_ms,
                ..
            } => {
                let ours = token.is_some_and(|t| Token::from_hex(held).ok() == Some(*t));
                if *expires_ms > now_ms {
                    Phase::Live { ours }
                } else {
                    Phase::Expired { ours }
                }
            }
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        // Serializing plain data with string keys cannot fail.
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Option<Record>, String> {
        let line = match bytes.iter().position(|&b| b == b'\n') {
            Some(end) => &bytes[..end],
            None if bytes.is_empty() => return Ok(None),
            None => return Err("the record has no terminating newline (torn write?)".into()),
        };
        let record: Record =
            serde_json::from_slice(line).map_err(|e| format!("not a lock record: {e}"))?;
        if record.v != VERSION {
            return Err(format!(
                "record version {} is not {VERSION}: written by another version of lock-file",
                record.v
            ));
        }
        Ok(Some(record))
    }
}
