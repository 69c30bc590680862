//! Validated lock keys.

use std::fmt;

use crate::{Error, Result};

/// The name of the thing being locked: UTF-8, 1 to 1024 bytes, no NUL, not starting with
/// U+0001 (the library's own names: [`waiting::record_key`](crate::waiting::record_key)).
///
/// Backends prepend their own namespace; two different keys never share a record on any
/// backend. Validation happens here, before any I/O, so a backend never sees a bad key.
///
/// ```
/// use lock_core::Key;
///
/// let key = Key::new("reports/nightly")?;
/// assert_eq!(key.as_str(), "reports/nightly");
/// assert!(Key::new("").is_err());
/// assert!(Key::new("a\0b").is_err());
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

impl Key {
    /// The longest key, in bytes.
    pub const MAX_LEN: usize = 1024;

    /// Validates `key`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the key is empty,
    /// longer than [`Key::MAX_LEN`] bytes, or contains a NUL byte.
    pub fn new(key: impl Into<String>) -> Result<Self> {
        let key = key.into();
        if key.is_empty() {
            return Err(Error::invalid("a lock key must not be empty"));
        }
        if key.len() > Self::MAX_LEN {
            return Err(Error::invalid(format!(
                "a lock key is at most {} bytes, this one has {}",
                Self::MAX_LEN,
                key.len()
            )));
        }
        if key.contains('\0') {
            return Err(Error::invalid("a lock key must not contain a NUL byte"));
        }
        if key.starts_with('\u{1}') {
            return Err(Error::invalid(
                "a lock key must not start with U+0001: such names are the library's own \
                 (the records of waiters)",
            ));
        }
        Ok(Key(key))
    }

    /// A name of the library's own (it starts with U+0001, which [`Key::new`] refuses).
    pub(crate) fn reserved(name: String) -> Self {
        Key(name)
    }

    /// The key as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// As its string.
impl serde::Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl TryFrom<&str> for Key {
    type Error = Error;
    fn try_from(value: &str) -> Result<Self> {
        Key::new(value)
    }
}

impl TryFrom<String> for Key {
    type Error = Error;
    fn try_from(value: String) -> Result<Self> {
        Key::new(value)
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive() {
        assert!(Key::new("x".repeat(1024)).is_ok());
        assert!(Key::new("x".repeat(1025)).is_err());
        assert!(Key::new("é").is_ok());
    }

    #[test]
    fn refusals_are_invalid_input() {
        for bad in ["", "a\0", "\u{1}waiting/x"] {
            let err = Key::new(bad).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidInput, "{bad:?}");
        }
    }
}
