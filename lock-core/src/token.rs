//! Owner tokens.

use std::fmt;

use crate::{Error, ErrorKind, Operation, Result};

/// The secret that proves ownership of a lock: 128 random bits from the operating system.
///
/// Only the holder of the token can prolong or release. It never appears in full in
/// `Debug` or `Display` output (only its first 4 hex digits), so logging a guard or an error
/// never leaks it; backends that must store it use [`Token::to_hex`].
///
/// ```
/// use lock_core::Token;
///
/// let a = Token::generate()?;
/// let b = Token::generate()?;
/// assert_ne!(a, b);
/// assert_eq!(format!("{a:?}").len(), "Token(0000…)".len());
/// assert_eq!(Token::from_hex(&a.to_hex())?, a);
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token([u8; 16]);

impl Token {
    /// A fresh token from the operating system's random generator.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`] if the OS generator fails (it does not on a working Linux).
    pub fn generate() -> Result<Self> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                "lock-core",
                Operation::Validate,
                format!("the OS random generator failed: {e}"),
            )
        })?;
        Ok(Token(bytes))
    }

    /// The raw bits, for backends that store them in binary form.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// A token from raw bits (a backend reading back what it stored).
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Token(bytes)
    }

    /// The full token as 32 lowercase hex digits, for storage. Keep it out of logs.
    pub fn to_hex(&self) -> String {
        let mut out = String::with_capacity(32);
        for b in self.0 {
            out.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
            out.push(char::from_digit(u32::from(b & 0xf), 16).unwrap_or('0'));
        }
        out
    }

    /// Parses 32 hex digits written by [`Token::to_hex`].
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when `hex` is not 32 hex digits.
    pub fn from_hex(hex: &str) -> Result<Self> {
        let bytes = hex.as_bytes();
        if bytes.len() != 32 {
            return Err(Error::invalid("an owner token is 32 hex digits"));
        }
        let mut out = [0u8; 16];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16);
            let lo = (pair[1] as char).to_digit(16);
            match (hi, lo) {
                (Some(hi), Some(lo)) => out[i] = (hi * 16 + lo) as u8,
                _ => return Err(Error::invalid("an owner token is 32 hex digits")),
            }
        }
        Ok(Token(out))
    }

    /// The first 4 hex digits: enough to tell tokens apart in a log, useless to an attacker.
    pub fn redacted(&self) -> String {
        let mut hex = self.to_hex();
        hex.truncate(4);
        hex
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({}…)", self.redacted())
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}…", self.redacted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_whole_token() {
        let token = Token::generate().unwrap();
        let hex = token.to_hex();
        for shown in [format!("{token:?}"), format!("{token}")] {
            assert!(!shown.contains(&hex[..5]), "{shown} leaks the token");
        }
    }

    #[test]
    fn from_hex_refuses_garbage() {
        assert!(Token::from_hex("zz").is_err());
        assert!(Token::from_hex(&"g".repeat(32)).is_err());
    }
}
