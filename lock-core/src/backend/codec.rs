//! How a storage keeps what identifies a holder: the owner token and the holder info, as
//! stored in its records ([`Codec`]), so that a `Storage` names one codec
//! (`type Codec = AsIs;`) instead of writing the three conversions again.
//!
//! | codec | token stored as | holder info stored as | for |
//! |---|---|---|---|
//! | [`AsIs`] | the [`Token`] | the [`HolderInfo`] | a storage in this process (memory) |
//! | [`Hex`] | its hex | the [`HolderInfo`] | a storage that writes its own encoding (files) |
//! | [`Digest`] | its SHA-256, in hex | the [`HolderInfo`] | a server that must never see the token |
//! | [`DigestJson`] | its SHA-256, in hex | JSON text | a server that keeps text (SQL, Redis) |
//!
//! A token that crosses a network is stored as its digest: the token itself never reaches
//! the server, its logs or its backups, and the digest cannot be turned back into it.

use std::borrow::Cow;
use std::fmt;

use super::Token;
use crate::{Error, ErrorKind, HolderInfo, Operation, Result};

/// What a storage stores for the owner token and the holder info, and how it reads the
/// holder back. Stateless: the functions take the backend's name for their errors.
pub trait Codec: fmt::Debug + Send + Sync + 'static {
    /// The owner token as stored.
    type Token: Clone + PartialEq + Send + Sync;
    /// The holder info as stored.
    type Holder: Clone + Send + Sync;

    /// The owner token as stored.
    fn token(token: &Token) -> Cow<'_, Self::Token>;

    /// The holder info as stored.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when it cannot be encoded.
    fn holder<'h>(
        backend: &'static str,
        holder: &'h HolderInfo,
        op: Operation,
    ) -> Result<Cow<'h, Self::Holder>>;

    /// The stored holder info, decoded.
    ///
    /// # Errors
    /// [`ErrorKind::Corrupt`] when it cannot be read, saying what to do.
    fn decode_holder(
        backend: &'static str,
        stored: &Self::Holder,
        op: Operation,
    ) -> Result<HolderInfo>;
}

/// Both as they are.
#[derive(Debug, Clone, Copy, Default)]
pub struct AsIs;

/// The token as its hex; the holder info as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hex;

/// The token as its SHA-256 ([`Token::digest`]); the holder info as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct Digest;

/// The token as its SHA-256 ([`Token::digest`]); the holder info as JSON.
#[derive(Debug, Clone, Copy, Default)]
pub struct DigestJson;

/// The holder info kept as it is, by the codecs that keep it so.
macro_rules! holder_as_is {
    () => {
        type Holder = HolderInfo;

        fn holder<'h>(
            _: &'static str,
            holder: &'h HolderInfo,
            _: Operation,
        ) -> Result<Cow<'h, HolderInfo>> {
            Ok(Cow::Borrowed(holder))
        }

        fn decode_holder(_: &'static str, stored: &HolderInfo, _: Operation) -> Result<HolderInfo> {
            Ok(stored.clone())
        }
    };
}

impl Codec for AsIs {
    type Token = Token;
    holder_as_is!();

    fn token(token: &Token) -> Cow<'_, Token> {
        Cow::Borrowed(token)
    }
}

impl Codec for Hex {
    type Token = String;
    holder_as_is!();

    fn token(token: &Token) -> Cow<'_, String> {
        Cow::Owned(token.to_hex())
    }
}

impl Codec for Digest {
    type Token = String;
    holder_as_is!();

    fn token(token: &Token) -> Cow<'_, String> {
        Cow::Owned(token.digest())
    }
}

impl Codec for DigestJson {
    type Token = String;
    type Holder = String;

    fn token(token: &Token) -> Cow<'_, String> {
        Cow::Owned(token.digest())
    }

    fn holder<'h>(
        backend: &'static str,
        holder: &'h HolderInfo,
        op: Operation,
    ) -> Result<Cow<'h, String>> {
        DigestJson::encode(backend, holder, op).map(Cow::Owned)
    }

    fn decode_holder(backend: &'static str, stored: &String, op: Operation) -> Result<HolderInfo> {
        DigestJson::decode(backend, stored, op)
    }
}

impl DigestJson {
    /// The holder info as JSON.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when it cannot be encoded.
    pub fn encode(backend: &'static str, holder: &HolderInfo, op: Operation) -> Result<String> {
        serde_json::to_string(holder).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                backend,
                op,
                format!("holder info does not serialize: {e}"),
            )
        })
    }

    /// The holder info a record keeps as JSON.
    ///
    /// # Errors
    /// [`ErrorKind::Corrupt`] when it is not holder info, saying what to do.
    pub fn decode(backend: &'static str, json: &str, op: Operation) -> Result<HolderInfo> {
        serde_json::from_str(json).map_err(|e| {
            Error::new(
                ErrorKind::Corrupt,
                backend,
                op,
                format!("the stored holder is not holder info ({e}); force-release the lock"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_stored_as_the_codec_says_and_holders_round_trip() {
        let token = Token::generate().unwrap();
        let holder = HolderInfo::current();
        assert_eq!(*AsIs::token(&token), token);
        assert_eq!(*Hex::token(&token), token.to_hex());
        assert_eq!(*Digest::token(&token), token.digest());
        assert_ne!(
            *Digest::token(&token),
            token.to_hex(),
            "never the token itself"
        );
        assert_eq!(*DigestJson::token(&token), token.digest());
        let op = Operation::Obtain;
        let json = DigestJson::holder("b", &holder, op).unwrap();
        assert_eq!(DigestJson::decode_holder("b", &json, op).unwrap(), holder);
        let stored = Hex::holder("b", &holder, op).unwrap();
        assert_eq!(Hex::decode_holder("b", &stored, op).unwrap(), holder);
    }

    #[test]
    fn a_holder_that_is_not_json_is_corrupt_and_says_what_to_do() {
        let err = DigestJson::decode_holder("b", &"{".to_owned(), Operation::Inspect).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        assert!(err.to_string().contains("force-release"), "{err}");
    }
}
