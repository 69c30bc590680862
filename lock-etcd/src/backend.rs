//! [`EtcdBackend`] and its settings ([`EtcdBuilder`]).

use std::fmt;
use std::time::Duration;

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
use lock_core::backend::{Expiry, Grace, Waiters};
use lock_core::{Error, ErrorKind, Operation, Result};

use crate::error::Deadline;
use crate::members::Members;
use crate::NAME;

/// The lock contract on etcd (3.4 and later): each hold is a key on a lease of its own,
/// every decision one transaction guarded by the revisions it read, decided by lock-core's
/// rules. Made by [`EtcdBackend::builder`]; use it as an `Arc<dyn LockBackend>`.
///
/// What etcd cannot do exactly, it says in its
/// [`Capabilities::expiry`](lock_core::backend::Capabilities::expiry): a lease is whole
/// seconds with a minimum, ended by a check every 500 ms, and a leader change restarts
/// every lease at its full ttl. So a dead holder's lock may be kept longer than its ttl;
/// the holder's own validity is the ttl it asked for, counted from when it sent the
/// request, so two holders never overlap.
pub struct EtcdBackend {
    pub(crate) members: std::sync::Arc<Members>,
    pub(crate) prefix: String,
    pub(crate) timeout: Duration,
    pub(crate) grace: Option<Grace>,
    pub(crate) expiry: Expiry,
    pub(crate) waiters: Waiters,
    pub(crate) watches: crate::notify::Watches,
}

impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("grace", &self.grace)
            .field("expiry", &self.expiry)
            .finish_non_exhaustive()
    }
}

/// How often the client pings each member's connection.
const KEEP_ALIVE: Duration = Duration::from_secs(1);

/// The settings of an [`EtcdBackend`], all known before it connects. Its `Debug` never
/// shows the password.
#[derive(Clone)]
#[must_use = "a builder does nothing until connect()"]
pub struct EtcdBuilder {
    endpoints: Vec<String>,
    prefix: String,
    pub(crate) user: Option<(String, String)>,
    tls: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
    timeout: Duration,
    grace: Option<Duration>,
}

impl fmt::Debug for EtcdBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBuilder")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("user", &self.user.as_ref().map(|(name, _)| name))
            .field("tls", &self.tls.is_some())
            .field("client_certificate", &self.identity.is_some())
            .field("timeout", &self.timeout)
            .field("grace", &self.grace)
            .finish()
    }
}

impl EtcdBackend {
    /// A builder for a backend on the members at `endpoints` (`http://host:port`, or
    /// `host:port`); the client spreads calls over them and moves on from one that fails.
    /// Nothing connects before [`EtcdBuilder::connect`].
    ///
    /// ```no_run
    /// # async fn run() -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// use lock_etcd::EtcdBackend;
    ///
    /// let backend = EtcdBackend::builder(["10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"])
    ///     .prefix("billing/locks")
    ///     .timeout(Duration::from_secs(1))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn builder<E: Into<String>>(endpoints: impl IntoIterator<Item = E>) -> EtcdBuilder {
        EtcdBuilder {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: "distlock".to_owned(),
            user: None,
            tls: None,
            identity: None,
            timeout: Duration::from_secs(2),
            grace: None,
        }
    }

    /// The prefix every key of this backend's locks starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

impl EtcdBuilder {
    /// Puts every lock under `prefix` instead of `distlock`: a lock's keys are
    /// `<prefix>/<hex of the lock key>/…`. Different prefixes never share a lock.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Authenticates as `name` with `password` (etcd's own users, `etcdctl user add`). The
    /// password is kept out of `Debug`, logs and errors.
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((name.into(), password.into()));
        self
    }

    /// Speaks TLS to the members (`https://`), trusting the certificate authority in
    /// `ca_pem` (PEM): the one that signed the members' certificates. An endpoint without
    /// a scheme is then `https://`.
    pub fn tls(mut self, ca_pem: impl Into<Vec<u8>>) -> Self {
        self.tls = Some(ca_pem.into());
        self
    }

    /// Presents a client certificate (`cert_pem`, with its private key `key_pem`, both PEM)
    /// to members that ask for one (`--client-cert-auth`); needs [`EtcdBuilder::tls`]. The
    /// key is kept out of `Debug`, logs and errors.
    pub fn client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// The deadline of every operation (default 2 s, longer than zero): its read, its
    /// lease grants and its transaction together. An operation that hits it returns a
    /// retry-safe [`ErrorKind::Unavailable`]; it may or may not have been applied (the
    /// contract's uncertain failure, which a retry resolves). Keep it well under your
    /// locks' ttl.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Keeps an expired hold's evidence for `grace` instead of the lock's ttl, for late
    /// detection (at most 365 days).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// Connects, and learns the shortest lease the cluster grants (etcd raises a shorter
    /// one to a minimum that grows with its election timeout): it grants a lease of one
    /// second, reads back what it got and revokes it. Calls on a member cut off from the
    /// quorum fail at once rather than wait (`require_leader`).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for no endpoint, a timeout of zero or over the longest a call
    /// may take, an endpoint that is not a URL, or a client certificate without TLS; [`ErrorKind::InvalidInput`] for a grace over 365 days;
    /// [`ErrorKind::Unavailable`] when no member answers within the timeout;
    /// [`ErrorKind::PermissionDenied`] for refused credentials.
    pub async fn connect(self) -> Result<EtcdBackend> {
        let op = Operation::Connect;
        let config = |message: String| Error::new(ErrorKind::Config, NAME, op, message);
        if self.endpoints.is_empty() {
            return Err(config("no etcd endpoint given".to_owned()));
        }
        lock_core::backend::check_call_timeout(self.timeout).map_err(config)?;
        let grace = self.grace.map(Grace::new).transpose()?;
        let mut options = ConnectOptions::new()
            .with_require_leader(true)
            .with_timeout(self.timeout)
            .with_connect_timeout(self.timeout)
            // A member that stops answering with its connection open (paused, or cut off
            // by a network that drops packets) would otherwise keep getting a share of the
            // calls until the operating system gives up on the connection: HTTP/2 pings
            // find it within a second and a timeout, and the client leaves it until it
            // answers again.
            .with_keep_alive(KEEP_ALIVE, self.timeout)
            .with_keep_alive_while_idle(true);
        if let Some((name, password)) = self.user {
            options = options.with_user(name, password);
        }
        match (self.tls, self.identity) {
            (Some(ca), identity) => {
                let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
                if let Some((cert, key)) = identity {
                    tls = tls.identity(Identity::from_pem(cert, key));
                }
                options = options.with_tls(tls);
            }
            (None, Some(_)) => {
                return Err(config(
                    "a client certificate needs TLS: set the members' certificate authority \
                     with tls(ca_pem) (ca= in an etcds:// URL)"
                        .to_owned(),
                ))
            }
            (None, None) => {}
        }
        let members = Members::new(self.endpoints, options);
        let deadline = Deadline::after(self.timeout);
        // The first call that reaches a member: a member that is down is passed over.
        let probe = members
            .retried(op, "the first call to etcd", deadline, |c| async move {
                c.lease_client().grant(1, None).await
            })
            .await?;
        let id = probe.id();
        let _ = members
            .once(op, "lease revoke", deadline, |c| async move {
                c.lease_client().revoke(id).await
            })
            .await;
        let minimum = Duration::from_secs(u64::try_from(probe.ttl()).unwrap_or(1).max(1));
        Ok(EtcdBackend {
            members: std::sync::Arc::new(members),
            prefix: self.prefix,
            timeout: self.timeout,
            grace,
            expiry: Expiry {
                granularity: Duration::from_secs(1),
                minimum,
                // The lessor ends expired leases in a check every 500 ms; measured up to
                // 530 ms late on a quiet machine. A leader change is not bounded here: it
                // restarts every lease (see the crate docs).
                lag: Duration::from_secs(1),
            },
            waiters: Waiters::default(),
            watches: crate::notify::Watches::default(),
        })
    }
}
