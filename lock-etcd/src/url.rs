//! [`EtcdBuilder::from_url`]: a backend from an `etcd://` URL.

use lock_core::backend::UrlOptions;
use lock_core::{Error, ErrorKind, Operation, Result};
use percent_encoding::percent_decode_str;

use crate::{EtcdBackend, EtcdBuilder, NAME};

/// The URL schemes an [`EtcdBuilder::from_url`] takes.
pub const SCHEMES: &[&str] = lock_core::backend::schemes::ETCD;

fn config(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, NAME, Operation::Connect, message)
}

fn decoded(part: &str, what: &str) -> Result<String> {
    percent_decode_str(part)
        .decode_utf8()
        .map(|v| v.into_owned())
        .map_err(|_| {
            config(format!(
                "the URL's {what} is not UTF-8 once percent-decoded"
            ))
        })
}

impl EtcdBuilder {
    /// The settings an `etcd://` URL names:
    /// `etcd://[user:password@]host:port[,host:port…][/prefix][?timeout=2s&grace=1m]`.
    /// The hosts are the cluster's members (the client spreads calls over them); the path,
    /// percent-decoded, is the prefix of every key (`distlock` without one). `etcds://`
    /// speaks TLS: `ca=PATH` names the certificate authority to trust (required), and
    /// `cert=PATH&key=PATH` a client certificate, read from those files here. Nothing
    /// connects before [`EtcdBuilder::connect`].
    ///
    /// ```
    /// use lock_etcd::EtcdBuilder;
    ///
    /// let b = EtcdBuilder::from_url("etcd://app:s3cret@10.0.0.1:2379,10.0.0.2:2379/billing?timeout=1s")?;
    /// let shown = format!("{b:?}");
    /// assert!(shown.contains("10.0.0.2:2379") && shown.contains("billing") && shown.contains("app"));
    /// assert!(!shown.contains("s3cret"));
    /// # Ok::<(), lock_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for another scheme, no host, an unknown or malformed option
    /// (naming it, never the password).
    pub fn from_url(url: &str) -> Result<Self> {
        let mut options = UrlOptions::parse(NAME, url);
        if !SCHEMES.contains(&options.scheme()) {
            return Err(config(
                "not an etcd URL: expected etcd://host:port[,host:port…]/prefix",
            ));
        }
        let tls = options.scheme() == "etcds";
        let timeout = options.take_duration("timeout")?;
        let grace = options.take_duration("grace")?;
        let ca = options.take("ca")?;
        let identity = (options.take("cert")?, options.take("key")?);
        let base = options.finish()?;
        let rest = base
            .split_once("://")
            .map(|(_, rest)| rest)
            .ok_or_else(|| config("an etcd URL starts with etcd:// or etcds://"))?;
        // The user info ends at the last `@`, as `redact_url` reads it: a password pasted
        // with a `/` in it (not percent-encoded) stays whole, and never becomes a host.
        let (user, rest) = match rest.rsplit_once('@') {
            Some((userinfo, rest)) => {
                let (name, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                let name = decoded(name, "user name")?;
                (Some((name, decoded(password, "password")?)), rest)
            }
            None => (None, rest),
        };
        let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
        let endpoints: Vec<String> = hosts
            .split(',')
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
            .collect();
        if endpoints.is_empty() {
            return Err(config(
                "the etcd URL names no host: etcd://host:port[,host:port…]/prefix",
            ));
        }
        let mut b = EtcdBackend::builder(endpoints);
        if !path.is_empty() {
            b = b.prefix(decoded(path, "prefix")?);
        }
        if let Some((name, password)) = user {
            b = b.user(name, password);
        }
        if let Some(t) = timeout {
            b = b.timeout(t);
        }
        if let Some(g) = grace {
            b = b.grace(g);
        }
        match (tls, ca) {
            (true, Some(ca)) => b = b.tls(read_pem("ca", &ca)?),
            (true, None) => {
                return Err(config(
                    "an etcds:// URL needs ca=PATH: the certificate authority that signed the \
                     members' certificates",
                ))
            }
            (false, Some(_)) => {
                return Err(config("ca= is for TLS: write the URL as etcds://"));
            }
            (false, None) => {}
        }
        match identity {
            (Some(cert), Some(key)) if tls => {
                b = b.client_certificate(read_pem("cert", &cert)?, read_pem("key", &key)?);
            }
            (None, None) => {}
            _ if !tls => {
                return Err(config(
                    "cert= and key= are for TLS: write the URL as etcds://",
                ))
            }
            _ => {
                return Err(config(
                    "a client certificate needs both cert=PATH and key=PATH",
                ))
            }
        }
        Ok(b)
    }
}

/// The PEM file option `option` names. Errors name the option and the path, never the
/// file's contents.
fn read_pem(option: &str, path: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| config(format!("{option}={path}: cannot read it ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_prefix_and_options_are_read() {
        let b = EtcdBuilder::from_url("etcd://h1:2379,h2:2379/a%2Fb?timeout=1s&grace=1m").unwrap();
        let shown = format!("{b:?}");
        assert!(
            shown.contains(r#"endpoints: ["h1:2379", "h2:2379"]"#),
            "{shown}"
        );
        assert!(shown.contains(r#"prefix: "a/b""#), "{shown}");
        assert!(
            shown.contains("timeout: 1s") && shown.contains("60s"),
            "{shown}"
        );
        let plain = format!("{:?}", EtcdBuilder::from_url("etcd://h:2379").unwrap());
        assert!(plain.contains(r#"prefix: "distlock""#), "{plain}");
    }

    /// A password pasted with a `/` (or an `@`) in it, not percent-encoded: the user info
    /// ends at the last `@`, so the password stays whole and out of `Debug`, and the hosts
    /// and prefix are the ones after it.
    #[test]
    fn a_password_with_a_slash_stays_whole_and_hidden() {
        for (url, password) in [
            ("etcd://app:s3/cr@t@h1:2379,h2:2379/billing", "s3/cr@t"),
            ("etcd://app:a/b@h1:2379", "a/b"),
            ("etcd://app:%2Fx@h1:2379/billing", "/x"),
        ] {
            let b = EtcdBuilder::from_url(url).unwrap();
            let shown = format!("{b:?}");
            assert!(!shown.contains(password), "{url}: {shown}");
            assert!(!shown.contains("s3") && !shown.contains("cr@t"), "{shown}");
            assert!(shown.contains(r#"endpoints: ["h1:2379""#), "{url}: {shown}");
            let user = b.user.as_ref().map(|(n, p)| (n.as_str(), p.as_str()));
            assert_eq!(user, Some(("app", password)), "{url}");
        }
        let b = EtcdBuilder::from_url("etcd://app:s3/cr@t@h1:2379,h2:2379/billing").unwrap();
        assert!(format!("{b:?}").contains(r#"prefix: "billing""#), "{b:?}");
    }

    #[test]
    fn bad_urls_say_what_is_wrong_without_the_password() {
        for (url, says) in [
            ("redis://h:1", "not an etcd URL"),
            ("etcds://u:pw@h:1/p", "needs ca=PATH"),
            ("etcd://u:pw@h:1/p?ca=/x.pem", "write the URL as etcds://"),
            (
                "etcds://u:pw@h:1/p?ca=/nonexistent/ca.pem",
                "ca=/nonexistent/ca.pem: cannot read it",
            ),
            ("etcd:///p", "names no host"),
            ("etcd://u:pw@h:1/p?tls=1", "unknown option \"tls\""),
            ("etcd://u:pw@h:1/p?timeout=soon", "timeout"),
        ] {
            let err = EtcdBuilder::from_url(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config);
            let text = format!("{err} {err:?}");
            assert!(text.contains(says), "{url}: {text}");
            assert!(!text.contains("pw"), "{url}: {text}");
        }
    }
}
