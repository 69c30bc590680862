//! Who holds a lock.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Stored with every lock so that anyone can see who holds it: host name, process id and an
/// optional free-form metadata string (up to 4 KiB).
///
/// ```
/// use lock_core::HolderInfo;
///
/// let me = HolderInfo::current().with_metadata("nightly report, run 42")?;
/// assert_eq!(me.pid, std::process::id());
/// assert!(HolderInfo::current().with_metadata("x".repeat(5000)).is_err());
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HolderInfo {
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// What the holder chose to say about itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
}

impl HolderInfo {
    /// The longest metadata, in bytes.
    pub const MAX_METADATA: usize = 4096;
    /// The longest host name, in bytes.
    pub const MAX_HOST: usize = 255;

    /// This process on this host, without metadata.
    pub fn current() -> Self {
        let mut host = gethostname::gethostname().to_string_lossy().into_owned();
        truncate_at_char(&mut host, Self::MAX_HOST);
        HolderInfo {
            host,
            pid: std::process::id(),
            metadata: None,
        }
    }

    /// The same holder with `metadata` attached.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) over 4 KiB.
    pub fn with_metadata(mut self, metadata: impl Into<String>) -> Result<Self> {
        self.metadata = Some(metadata.into());
        self.validate()?;
        Ok(self)
    }

    /// Checks the size limits; backends may rely on them having been checked.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the host is over 255
    /// bytes or the metadata over 4 KiB.
    pub fn validate(&self) -> Result<()> {
        if self.host.len() > Self::MAX_HOST {
            return Err(Error::invalid(format!(
                "a holder's host name is at most {} bytes, got {}",
                Self::MAX_HOST,
                self.host.len()
            )));
        }
        match &self.metadata {
            Some(m) if m.len() > Self::MAX_METADATA => Err(Error::invalid(format!(
                "holder metadata is at most {} bytes, got {}",
                Self::MAX_METADATA,
                m.len()
            ))),
            _ => Ok(()),
        }
    }
}

fn truncate_at_char(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}
