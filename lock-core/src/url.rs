//! The options of a lock URL: each backend crate parses its own URLs with [`UrlOptions`],
//! so that every option is read, decoded and refused the same way.
//!
//! ```
//! use std::time::Duration;
//! use lock_core::backend::UrlOptions;
//!
//! let mut url = UrlOptions::parse("my-backend", "mine://host/db?grace=1m&prefix=a%3Ab&sslmode=require");
//! assert_eq!(url.scheme(), "mine");
//! assert_eq!(url.take_duration("grace")?, Some(Duration::from_secs(60)));
//! assert_eq!(url.take("prefix")?.as_deref(), Some("a:b"));
//! // What the backend does not read goes to its own client, still encoded.
//! assert_eq!(url.into_client_url(), "mine://host/db?sslmode=require");
//! # Ok::<(), lock_core::Error>(())
//! ```

use std::str::FromStr;
use std::time::Duration;

use crate::{parse_duration, Error, ErrorKind, Operation, Result};

/// A lock URL split into its base (scheme, authority, path, fragment) and the options of its
/// query string. Errors name the option, never the URL (which may hold a password).
#[derive(Clone)]
pub struct UrlOptions {
    backend: &'static str,
    /// Scheme, authority and path.
    base: String,
    /// `#…` (`#insecure` for rediss), or empty.
    fragment: String,
    /// The query's pairs, still percent-encoded.
    params: Vec<(String, String)>,
    /// The options the backend asked for, in order: the ones an error lists as known.
    asked: Vec<String>,
}

impl std::fmt::Debug for UrlOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlOptions")
            .field("backend", &self.backend)
            .field("base", &crate::redact_url(&self.base))
            .field("fragment", &self.fragment)
            .field(
                "options",
                &self.params.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl UrlOptions {
    /// Splits `url`; `backend` names the backend in errors. A fragment (`#insecure`) stays
    /// with the base.
    ///
    /// The query starts at the first `?` after the last `@`, as [`redact_url`](crate::redact_url)
    /// reads it: a password written with a raw `?` or `#` stays in the base (where `Debug`
    /// masks it) instead of turning its tail into an option name that a message would
    /// show. An option value with an `@` is written `%40`.
    pub fn parse(backend: &'static str, url: &str) -> Self {
        let userinfo_end = url.rfind('@').map_or(0, |at| at + 1);
        let (head, tail) = url.split_at(userinfo_end);
        let (tail, fragment) = match tail.split_once('#') {
            Some((u, f)) => (u, format!("#{f}")),
            None => (tail, String::new()),
        };
        let (base_tail, query) = tail.split_once('?').unwrap_or((tail, ""));
        let base = format!("{head}{base_tail}");
        let params = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect();
        UrlOptions {
            backend,
            base: base.to_owned(),
            fragment,
            params,
            asked: Vec::new(),
        }
    }

    /// The scheme: what comes before the first `:` (empty when there is none).
    pub fn scheme(&self) -> &str {
        self.base.split_once(':').map_or("", |(s, _)| s)
    }

    /// Sets option `key` to `value` (percent-encoded as it stands in a URL), replacing any
    /// value the URL gave it.
    pub fn set(&mut self, key: &str, value: &str) {
        self.params.retain(|(k, _)| k != key);
        self.params.push((key.to_owned(), value.to_owned()));
    }

    fn error(&self, message: String) -> Error {
        Error::new(ErrorKind::Config, self.backend, Operation::Connect, message)
    }

    /// Removes option `key` and returns its value, percent-decoded (`%3A` is `:`; `+` stays
    /// a plus).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] when the decoded value is not UTF-8.
    pub fn take(&mut self, key: &str) -> Result<Option<String>> {
        if !self.asked.iter().any(|k| k == key) {
            self.asked.push(key.to_owned());
        }
        let Some(i) = self.params.iter().position(|(k, _)| k == key) else {
            return Ok(None);
        };
        let raw = self.params.remove(i).1;
        percent_encoding::percent_decode_str(&raw)
            .decode_utf8()
            .map(|v| Some(v.into_owned()))
            .map_err(|_| self.error(format!("{key}=…: the percent-decoded value is not UTF-8")))
    }

    /// Option `key` as a duration (`250ms`, `30s`, `5m`, `1h`, `2d`; see
    /// [`parse_duration`](crate::parse_duration)).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] naming the option when it is not one.
    pub fn take_duration(&mut self, key: &str) -> Result<Option<Duration>> {
        self.take(key)?
            .map(|v| {
                parse_duration(&v).ok_or_else(|| {
                    self.error(format!(
                        "{key}={v:?} is not a duration: write e.g. 250ms, 30s, 5m, 1h"
                    ))
                })
            })
            .transpose()
    }

    /// Option `key` as a flag: `true`/`on`/`1` or `false`/`off`/`0`.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] naming the option for anything else.
    pub fn take_flag(&mut self, key: &str) -> Result<Option<bool>> {
        self.take(key)?
            .map(|v| match v.as_str() {
                "true" | "on" | "1" => Ok(true),
                "false" | "off" | "0" => Ok(false),
                _ => Err(self.error(format!("{key}={v:?}: expected true or false"))),
            })
            .transpose()
    }

    /// Option `key` parsed as a `T`; `what` says what it must be in the error.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] naming the option when it does not parse.
    pub fn take_parsed<T: FromStr>(&mut self, key: &str, what: &str) -> Result<Option<T>> {
        self.take(key)?
            .map(|v| {
                v.parse()
                    .map_err(|_| self.error(format!("{key}={v:?} is not {what}")))
            })
            .transpose()
    }

    /// The URL without its query, when every option was read.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] naming the first option nobody read, and the known ones.
    pub fn finish(self) -> Result<String> {
        self.into_client_url_with(&[])
    }

    /// The URL with the options nobody read, still encoded: for the backend's own client
    /// (`sslmode=require` for Postgres, `protocol=resp3` for Redis).
    pub fn into_client_url(self) -> String {
        let query: Vec<String> = self
            .params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let sep = if query.is_empty() { "" } else { "?" };
        format!("{}{sep}{}{}", self.base, query.join("&"), self.fragment)
    }

    /// [`UrlOptions::into_client_url`], when every option nobody read is one the backend's
    /// client takes (`client`; an entry that ends in `[` takes every option that starts
    /// with it, as `options[` takes Postgres' `options[search_path]`): a typo (`prefx=`, `tabel=`) would otherwise reach a client
    /// that ignores it, and the backend would run with its default (another namespace,
    /// whose locks exclude nobody else's).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] naming the first unknown option, and every known one.
    pub fn into_client_url_with(self, client: &[&str]) -> Result<String> {
        let unknown = self.params.iter().find(|(k, _)| {
            !client
                .iter()
                .any(|c| c == k || (c.ends_with('[') && k.starts_with(c)))
        });
        if let Some((k, _)) = unknown {
            let mut known: Vec<&str> = self.asked.iter().map(String::as_str).collect();
            known.extend(client.iter().copied());
            let known = if known.is_empty() {
                "it takes none".to_owned()
            } else {
                format!("it takes {}", known.join(", "))
            };
            return Err(self.error(format!(
                "unknown option {k:?} for a {}: URL ({known}); a misspelt option is \
                 refused rather than ignored, which would run with the default instead",
                self.scheme()
            )));
        }
        Ok(self.into_client_url())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_decoded_and_the_rest_passed_on_encoded() {
        let mut url = UrlOptions::parse("t", "redis://h:1/0?prefix=a%3Ab%2F+c&user=x%40y#frag");
        assert_eq!(url.take("prefix").unwrap().as_deref(), Some("a:b/+c"));
        assert_eq!(
            url.clone().into_client_url(),
            "redis://h:1/0?user=x%40y#frag"
        );
        assert!(url
            .clone()
            .finish()
            .unwrap_err()
            .to_string()
            .contains("\"user\""));
        url.set("grace", "1m");
        assert_eq!(
            url.into_client_url(),
            "redis://h:1/0?user=x%40y&grace=1m#frag"
        );
        let mut bad = UrlOptions::parse("t", "memory:?prefix=%FF");
        assert_eq!(bad.take("prefix").unwrap_err().kind(), ErrorKind::Config);
    }

    /// A misspelt option is refused, naming the known ones, whether the backend or its
    /// client would have read the right one; the client's own options pass on.
    #[test]
    fn an_option_neither_the_backend_nor_its_client_takes_is_refused() {
        let mut url = UrlOptions::parse("t", "redis://h/0?prefx=app%3A&protocol=resp3");
        assert_eq!(url.take("prefix").unwrap(), None);
        assert_eq!(url.take_duration("timeout").unwrap(), None);
        let e = url.clone().into_client_url_with(&["protocol"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        let text = e.to_string();
        assert!(text.contains("\"prefx\""), "{text}");
        assert!(text.contains("prefix, timeout, protocol"), "{text}");
        url.params.retain(|(k, _)| k != "prefx");
        assert_eq!(
            url.into_client_url_with(&["protocol"]).unwrap(),
            "redis://h/0?protocol=resp3"
        );
        let e = UrlOptions::parse("t", "memory:?grace=1s")
            .finish()
            .unwrap_err();
        assert!(e.to_string().contains("it takes none"), "{e}");
    }

    #[test]
    fn errors_name_the_option_and_never_the_password() {
        let mut url =
            UrlOptions::parse("t", "redis://:secret@h/0?grace=soon&pool=many&notify=maybe");
        for e in [
            url.take_duration("grace").unwrap_err(),
            url.take_parsed::<usize>("pool", "a number").unwrap_err(),
            url.take_flag("notify").unwrap_err(),
        ] {
            assert_eq!(e.kind(), ErrorKind::Config);
            assert!(!e.to_string().contains("secret"), "{e}");
        }
        assert!(!format!("{url:?}").contains("secret"));
    }

    #[test]
    fn a_password_with_a_raw_question_mark_or_hash_is_never_shown() {
        for raw in [
            "redis://u:se?cret@h/0?pool=2",
            "redis://u:se#cret@h/0?pool=2",
            "postgres://u:s?e#cr&et=@h/db?table=t",
        ] {
            let mut url = UrlOptions::parse("t", raw);
            let shown = format!("{url:?}");
            for part in ["se", "cret", "cr&et"] {
                assert!(
                    !shown.contains(&format!(":{part}")) && !shown.contains(&format!("{part}@")),
                    "{raw}: {shown}"
                );
            }
            assert!(!shown.contains("cret"), "{raw}: {shown}");
            // The real options are still read.
            assert!(url.take("pool").is_ok());
            let unknown = url.finish();
            if let Err(e) = unknown {
                assert!(!e.to_string().contains("cret"), "{e}");
            }
        }
    }
}
