//! Owner tokens.

use std::fmt;

use crate::{Error, ErrorKind, Operation, Result};

/// The secret that proves ownership of a lock: 128 random bits from the operating system.
///
/// Only the holder of the token can prolong or release. It never appears in full in
/// `Debug` or `Display` output (only its first 4 hex digits), so logging a guard or an error
/// never leaks it. A backend on a server stores and sends [`Token::digest`] instead (so
/// that whoever can read the records, the server's logs or its traffic cannot prolong or
/// release someone else's lock); one whose records only their owner can read may store
/// [`Token::to_hex`].
///
/// ```
/// use lock_core::backend::Token;
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
        hex(&self.0)
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

    /// The SHA-256 of [`Token::to_hex`], in 64 lowercase hex digits: what a backend stores
    /// and sends instead of the token. Two tokens have two digests; the digest does not give
    /// the token back.
    ///
    /// ```
    /// use lock_core::backend::Token;
    ///
    /// let token = Token::generate()?;
    /// assert_eq!(token.digest().len(), 64);
    /// assert!(!token.digest().contains(&token.to_hex()));
    /// # Ok::<(), lock_core::Error>(())
    /// ```
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        // The hex on the stack: this runs on every call of most backends.
        let mut text = [0u8; 32];
        hex_into(&self.0, &mut text);
        hex(&Sha256::digest(text))
    }

    /// The first 4 hex digits: enough to tell tokens apart in a log, useless to an attacker.
    pub fn redacted(&self) -> String {
        let mut hex = self.to_hex();
        hex.truncate(4);
        hex
    }
}

/// `bytes` in lowercase hex.
fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    hex_into(bytes, &mut out);
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// `bytes` in lowercase hex, into `out` (twice as long).
fn hex_into(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, &b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
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
    fn the_digest_is_the_sha256_of_the_hex() {
        let token = Token::from_bytes(std::array::from_fn(|i| u8::try_from(i).unwrap()));
        assert_eq!(token.to_hex(), "000102030405060708090a0b0c0d0e0f");
        // Python: hashlib.sha256(b"000102030405060708090a0b0c0d0e0f").hexdigest()
        assert_eq!(
            token.digest(),
            "d65df89f702eec58ca3c7bf2001c9ffc7cd80553ae01d42a799ba26756142d96"
        );
    }

    #[test]
    fn debug_and_display_never_show_the_whole_token() {
        let token = Token::generate().unwrap();
        let hex = token.to_hex();
        for shown in [format!("{token:?}"), format!("{token}")] {
            assert!(!shown.contains(&hex[..5]), "{shown} leaks the token");
        }
    }

    /// The digest is a format backends store (lock-postgres since its first version): it
    /// must never change.
    #[test]
    fn the_digest_is_sha256_of_the_hex() {
        assert_eq!(
            Token::from_bytes([0; 16]).digest(),
            "84e0c0eafaa95a34c293f278ac52e45ce537bab5e752a00e6959a13ae103b65a"
        );
    }

    #[test]
    fn from_hex_refuses_garbage() {
        assert!(Token::from_hex("zz").is_err());
        assert!(Token::from_hex(&"g".repeat(32)).is_err());
    }
}
