//! The URL forms this crate takes, parsed into where the servers are.
//!
//! | URL | topology |
//! |---|---|
//! | `redis://[user:password@]host:port/db`, `rediss://…` | one server (TLS with `rediss`) |
//! | `redis+cluster://[user:password@]host:port[,host:port…]/`, `rediss+cluster://…` | a Redis Cluster; the hosts are seeds, the rest is discovered |
//! | `redis+sentinel://[user:password@]host:port[,host:port…]/service[/db]`, `rediss+sentinel://…` | the primary that these sentinels name for `service` |
//!
//! The user and password are the data nodes' (Cluster nodes, or the primary Sentinel
//! names); sentinels are asked without credentials. `#insecure` at the end of a `rediss`
//! URL accepts any certificate (test servers only). Nothing of a URL but host names and
//! ports ever reaches an error message.

use lock_core::{Error, ErrorKind, Operation, Result};
use redis::{ConnectionAddr, IntoConnectionInfo};

/// Where the servers are.
pub(crate) enum Topology {
    /// One server.
    Server(redis::Client),
    /// A Redis Cluster: its seed nodes.
    Cluster(Vec<redis::ConnectionInfo>),
    /// A Sentinel-managed primary.
    Sentinel(Sentinel),
}

/// The parts of a `redis+sentinel://` URL.
pub(crate) struct Sentinel {
    pub(crate) sentinels: Vec<ConnectionAddr>,
    pub(crate) service: String,
    pub(crate) db: i64,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) tls: Option<redis::TlsMode>,
}

impl Topology {
    /// Parses `url`; `name` is the backend's name for errors.
    pub(crate) fn parse(url: &str, name: &'static str) -> Result<Self> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| not_a_url(name, url))?;
        let (tls, kind) = match scheme {
            "redis" => (false, ""),
            "rediss" => (true, ""),
            "redis+cluster" => (false, "cluster"),
            "rediss+cluster" => (true, "cluster"),
            "redis+sentinel" => (false, "sentinel"),
            "rediss+sentinel" => (true, "sentinel"),
            _ => return Err(not_a_url(name, url)),
        };
        if tls && !cfg!(feature = "tls") {
            return Err(config(
                name,
                format!("{scheme}:// needs lock-redis built with its `tls` feature"),
            ));
        }
        if kind.is_empty() {
            return redis::Client::open(url)
                .map(Topology::Server)
                .map_err(|e| config(name, format!("not a Redis URL ({:?}): {HELP}", e.kind())));
        }
        let (rest, insecure) = match rest.split_once('#') {
            Some((r, "insecure")) => (r, true),
            Some(_) => return Err(config(name, "the only fragment a URL takes is #insecure")),
            None => (rest, false),
        };
        if rest.contains('?') {
            return Err(config(
                name,
                format!("{scheme}:// URLs take no query options here: {HELP}"),
            ));
        }
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((u, r)) => (Some(u), r),
            None => (None, rest),
        };
        let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
        let plain = ConnectionAddr::Tcp(String::new(), 0);
        let tls_addr = ConnectionAddr::TcpTls {
            host: String::new(),
            port: 0,
            insecure,
            tls_params: None,
        };
        let template = if tls { &tls_addr } else { &plain };
        let mut addrs = Vec::new();
        for host in hosts.split(',').filter(|h| !h.is_empty()) {
            let (host, port) = host_port(name, host)?;
            addrs.push(at(template, host, port));
        }
        if addrs.is_empty() {
            return Err(config(
                name,
                format!("{scheme}:// without any host:port: {HELP}"),
            ));
        }
        let (username, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                let (user, pass) = u.split_once(':').unwrap_or((u, ""));
                let decode = |s: &str| {
                    percent_encoding::percent_decode_str(s)
                        .decode_utf8()
                        .map(|s| s.into_owned())
                        .map_err(|_| config(name, "the user or password is not UTF-8 once decoded"))
                };
                let user = (!user.is_empty()).then(|| decode(user)).transpose()?;
                let pass = (!pass.is_empty()).then(|| decode(pass)).transpose()?;
                (user, pass)
            }
        };
        if kind == "cluster" {
            if !path.is_empty() {
                return Err(config(
                    name,
                    "a Redis Cluster has one database: end the URL with the last host:port/",
                ));
            }
            let mut redis = redis::RedisConnectionInfo::default();
            if let Some(u) = &username {
                redis = redis.set_username(u.clone());
            }
            if let Some(p) = &password {
                redis = redis.set_password(p.clone());
            }
            let mut nodes = Vec::new();
            for addr in addrs {
                let info = addr
                    .into_connection_info()
                    .map_err(|e| config(name, format!("{:?}: {HELP}", e.kind())))?
                    .set_redis_settings(redis.clone());
                nodes.push(info);
            }
            return Ok(Topology::Cluster(nodes));
        }
        let mut parts = path.split('/').filter(|p| !p.is_empty());
        let service = parts.next().ok_or_else(|| {
            config(
                name,
                format!("{scheme}:// needs the service name after the hosts: {HELP}"),
            )
        })?;
        let db = match parts.next() {
            None => 0,
            Some(db) => db
                .parse()
                .map_err(|_| config(name, format!("database {db:?} is not a number")))?,
        };
        if parts.next().is_some() {
            return Err(config(name, format!("too many path parts: {HELP}")));
        }
        Ok(Topology::Sentinel(Sentinel {
            sentinels: addrs,
            service: service.to_owned(),
            db,
            username,
            password,
            tls: tls.then_some(if insecure {
                redis::TlsMode::Insecure
            } else {
                redis::TlsMode::Secure
            }),
        }))
    }
}

/// Announced node addresses and where to reach them instead
/// ([`RedisBuilder::map_address`](crate::RedisBuilder::map_address)).
#[derive(Clone, Default)]
pub(crate) struct AddressMap(Vec<((String, u16), (String, u16))>);

impl AddressMap {
    pub(crate) fn parse(pairs: &[(String, String)], name: &'static str) -> Result<Self> {
        let mut map = Vec::new();
        for (from, to) in pairs {
            map.push((host_port(name, from)?, host_port(name, to)?));
        }
        Ok(AddressMap(map))
    }

    /// Where to reach the node announced as `host:port`.
    pub(crate) fn target(&self, host: &str, port: u16) -> (String, u16) {
        self.0
            .iter()
            .find(|((h, p), _)| h == host && *p == port)
            .map_or_else(|| (host.to_owned(), port), |(_, to)| to.clone())
    }

    /// [`AddressMap::target`] as an address with `template`'s TLS settings.
    pub(crate) fn reach(&self, template: &ConnectionAddr, host: &str, port: u16) -> ConnectionAddr {
        let (host, port) = self.target(host, port);
        at(template, host, port)
    }

    /// The map as redis-rs' cluster client takes it.
    pub(crate) fn for_cluster(
        &self,
    ) -> std::collections::HashMap<redis::cluster::NodeAddress, redis::cluster::NodeAddress> {
        self.0
            .iter()
            .map(|((h, p), (th, tp))| {
                (
                    redis::cluster::NodeAddress::new(h.clone(), *p),
                    redis::cluster::NodeAddress::new(th.clone(), *tp),
                )
            })
            .collect()
    }
}

const HELP: &str = "expected redis://[user:password@]host:port/db, \
                    redis+cluster://host:port[,host:port…]/ or \
                    redis+sentinel://host:port[,host:port…]/service[/db] (rediss… for TLS)";

/// `template` (plain TCP or TLS, with its TLS settings) at another `host:port`.
pub(crate) fn at(template: &ConnectionAddr, host: String, port: u16) -> ConnectionAddr {
    match template {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host, port),
    }
}

fn host_port(name: &'static str, text: &str) -> Result<(String, u16)> {
    let (host, port) = match text.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse()
                .map_err(|_| config(name, format!("{text:?}: the port is not a number")))?,
        ),
        None => (text, 6379),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(config(name, format!("{text:?}: no host name")));
    }
    Ok((host.to_owned(), port))
}

fn config(name: &'static str, msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, name, Operation::Connect, msg.into())
}

fn not_a_url(name: &'static str, url: &str) -> Error {
    // Only the scheme: the rest may hold a password.
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    config(name, format!("not a Redis URL (scheme {scheme:?}): {HELP}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Topology> {
        Topology::parse(url, "test")
    }

    #[test]
    fn cluster_urls_name_every_seed_with_the_credentials() {
        let Ok(Topology::Cluster(nodes)) =
            parse("redis+cluster://u:p%40ss@a:7000,b:7001,[::1]:7002/")
        else {
            panic!("a cluster URL")
        };
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[1].addr().to_string(), "b:7001");
        assert_eq!(nodes[2].addr().to_string(), "::1:7002");
        assert_eq!(nodes[0].redis_settings().username(), Some("u"));
        assert_eq!(nodes[0].redis_settings().password(), Some("p@ss"));
    }

    #[test]
    fn sentinel_urls_name_the_service_and_the_database() {
        let Ok(Topology::Sentinel(s)) = parse("redis+sentinel://:pw@s1:26379,s2/locks/3") else {
            panic!("a sentinel URL")
        };
        assert_eq!(s.sentinels.len(), 2);
        assert_eq!(s.service, "locks");
        assert_eq!(s.db, 3);
        assert_eq!(s.username, None);
        assert_eq!(s.password.as_deref(), Some("pw"));
        assert!(s.tls.is_none());
        let Ok(Topology::Sentinel(s)) = parse("rediss+sentinel://s1:26379/locks#insecure") else {
            panic!("a TLS sentinel URL")
        };
        assert_eq!(s.db, 0);
        assert!(matches!(s.tls, Some(redis::TlsMode::Insecure)));
    }

    #[test]
    fn malformed_urls_are_config_errors_without_the_password() {
        for url in [
            "redis+cluster://u:secret@/",
            "redis+cluster://u:secret@h:x/",
            "redis+cluster://u:secret@h:1/0",
            "redis+cluster://u:secret@h:1/?pool=3",
            "redis+sentinel://u:secret@h:1/",
            "redis+sentinel://u:secret@h:1/svc/x",
            "redis+sentinel://u:secret@h:1/svc/0/extra",
            "redis+sentinel://u:secret@h:1/svc#what",
            "memcached://u:secret@h:1/",
            "redis://u:secret@h:notaport/0",
        ] {
            let e = parse(url).err().unwrap_or_else(|| panic!("{url} parsed"));
            assert_eq!(e.kind(), ErrorKind::Config, "{url}");
            assert!(!e.to_string().contains("secret"), "{url}: {e}");
        }
    }
}
