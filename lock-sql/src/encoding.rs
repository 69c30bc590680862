//! How the SQL backends store what identifies a holder: the owner token as the hex of its
//! SHA-256 (the token itself never reaches the server, its logs or the table), the holder
//! info as JSON; and the storage items of lock-core's adapter that say so
//! ([`storage_encoding!`](crate::storage_encoding)).

use lock_core::{Error, ErrorKind, HolderInfo, Operation, Result};

/// The holder info as JSON, as the row's `holder` column keeps it.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] when it cannot be encoded.
pub fn holder_json(backend: &'static str, holder: &HolderInfo, op: Operation) -> Result<String> {
    serde_json::to_string(holder).map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            backend,
            op,
            format!("holder info: {e}"),
        )
    })
}

/// The holder info a row's `holder` column keeps, decoded.
///
/// # Errors
/// [`ErrorKind::Corrupt`] when it is not holder info, saying what to do.
pub fn holder_from_json(backend: &'static str, json: &str, op: Operation) -> Result<HolderInfo> {
    serde_json::from_str(json).map_err(|e| {
        Error::new(
            ErrorKind::Corrupt,
            backend,
            op,
            format!("the row's holder is not holder info ({e}); force-release the lock"),
        )
    })
}

/// The items of `lock_core::backend::storage::Storage` every SQL backend writes alike, for
/// a type with a field `grace: Option<Grace>`, named `$name` (the backend's name): the
/// token's digest and the holder's JSON (see [the module](crate::encoding)), the
/// capabilities of a shared database (across processes and hosts, shared holds, and
/// `$batch` prolongs per transaction: above 1 the storage implements `transact_many`),
/// and the grace.
#[macro_export]
macro_rules! storage_encoding {
    ($name:expr, batch = $batch:expr) => {
        /// The SHA-256 of the token, in hex.
        type Token = ::std::string::String;
        /// The holder info as JSON.
        type Holder = ::std::string::String;
        const NAME: &'static str = $name;

        fn storage_capabilities(&self) -> $crate::__lock_core::backend::Capabilities {
            $crate::__lock_core::backend::Capabilities::none()
                .cross_process(true)
                .cross_host(true)
                .shared(true)
                .prolong_batch($batch)
        }

        fn token<'t>(
            &self,
            token: &'t $crate::__lock_core::backend::Token,
        ) -> ::std::borrow::Cow<'t, ::std::string::String> {
            ::std::borrow::Cow::Owned(token.digest())
        }

        fn holder<'h>(
            &self,
            holder: &'h $crate::__lock_core::HolderInfo,
            op: $crate::__lock_core::Operation,
        ) -> $crate::__lock_core::Result<::std::borrow::Cow<'h, ::std::string::String>> {
            $crate::holder_json($name, holder, op).map(::std::borrow::Cow::Owned)
        }

        fn decode_holder(
            &self,
            stored: &::std::string::String,
            op: $crate::__lock_core::Operation,
        ) -> $crate::__lock_core::Result<$crate::__lock_core::HolderInfo> {
            $crate::holder_from_json($name, stored, op)
        }

        fn grace(&self, ttl: $crate::__lock_core::Ttl) -> $crate::__lock_core::backend::Grace {
            $crate::__lock_core::backend::Grace::or_ttl(self.grace, ttl)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_info_round_trips_and_garbage_is_corrupt() {
        let holder = HolderInfo::current();
        let json = holder_json("mysql", &holder, Operation::Obtain).unwrap();
        assert_eq!(
            holder_from_json("mysql", &json, Operation::Inspect).unwrap(),
            holder
        );
        let err = holder_from_json("mysql", "{", Operation::Inspect).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        assert!(err.to_string().contains("force-release"), "{err}");
    }
}
