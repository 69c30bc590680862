//! The cluster's members as the backend reaches them: a client per member, each operation
//! sent to one member, and a member that does not answer left for the next.
//!
//! etcd's client spreads calls over its endpoints but keeps sending some to a member that
//! stopped answering with its connection still open (a paused process, a network that
//! drops packets) until the connection is found dead. So the backend keeps one client
//! per member and a current member: a call that finds it unavailable, or gets no answer
//! within its share of the deadline, moves the backend on to the next member. A call
//! whose repetition is harmless (a read, a lease grant) is then sent again to the next
//! member within the same deadline; a transaction never is: its first sending may have
//! been applied, and the caller decides what to do with that uncertainty.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use etcd_client::{Client, ConnectOptions, Error as EtcdError};
use lock_core::{Error, ErrorKind, Operation, Result};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::error::{within, Deadline};
use crate::NAME;

/// The members, each connected on first use.
pub(crate) struct Members {
    endpoints: Vec<String>,
    options: ConnectOptions,
    clients: Vec<OnceCell<Client>>,
    current: AtomicUsize,
}

impl Members {
    /// The members at `endpoints`; nothing connects yet.
    pub(crate) fn new(endpoints: Vec<String>, options: ConnectOptions) -> Self {
        Members {
            clients: endpoints.iter().map(|_| OnceCell::new()).collect(),
            endpoints,
            options,
            current: AtomicUsize::new(0),
        }
    }

    /// Member `i`'s client, connecting it first if needed, by `deadline`.
    async fn client(&self, op: Operation, i: usize, deadline: Deadline) -> Result<Client> {
        let endpoint = &self.endpoints[i];
        let client = self.clients[i]
            .get_or_try_init(|| async {
                let connect = Client::connect([endpoint.as_str()], Some(self.options.clone()));
                within(op, "connecting", deadline, connect).await
            })
            .await?;
        Ok(client.clone())
    }

    /// The current member's client when it is connected: for calls whose failure does
    /// not matter (revoking a lease no key uses).
    pub(crate) fn any_client(&self) -> Option<Client> {
        let i = self.current.load(Ordering::Relaxed) % self.endpoints.len();
        self.clients[i].get().cloned()
    }

    /// `error` of a call to member `i`, naming the member.
    fn at(&self, i: usize, op: Operation, error: Error) -> Error {
        Error::new(
            error.kind(),
            NAME,
            op,
            format!("{} (etcd at {})", error.message(), self.endpoints[i]),
        )
    }

    /// Leaves member `i` for the next one, unless another call already did.
    fn skip(&self, i: usize) {
        let next = (i + 1) % self.endpoints.len();
        let _ = self
            .current
            .compare_exchange(i, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Runs `call` on the current member once. When that member is unavailable or does not
    /// answer by the deadline, the next call goes to the next member.
    pub(crate) async fn once<T, F, Fut>(
        &self,
        op: Operation,
        what: &str,
        deadline: Deadline,
        call: F,
    ) -> Result<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, EtcdError>>,
    {
        let i = self.current.load(Ordering::Relaxed) % self.endpoints.len();
        let result = match self.client(op, i, deadline).await {
            Ok(client) => within(op, what, deadline, call(client)).await,
            Err(e) => Err(e),
        };
        result.map_err(|e| {
            if e.kind() == ErrorKind::Unavailable {
                self.skip(i);
            }
            self.at(i, op, e)
        })
    }

    /// Runs `call`, whose repetition is harmless, on the current member; when that member
    /// is unavailable or does not answer within half the time left, on the next one, and so
    /// on around the members until the deadline.
    pub(crate) async fn retried<T, F, Fut>(
        &self,
        op: Operation,
        what: &str,
        deadline: Deadline,
        mut call: F,
    ) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, EtcdError>>,
    {
        let n = self.endpoints.len();
        let mut tried = 0;
        loop {
            tried += 1;
            let last = tried >= n || Instant::now() >= deadline.at;
            // Half of what is left, so that the next member gets the other half; all of it
            // for the last member.
            let share = if last {
                deadline
            } else {
                Deadline {
                    at: Instant::now() + deadline.at.saturating_duration_since(Instant::now()) / 2,
                    timeout: deadline.timeout,
                }
            };
            let i = self.current.load(Ordering::Relaxed) % n;
            let result = match self.client(op, i, share).await {
                Ok(client) => within(op, what, share, call(client)).await,
                Err(e) => Err(e),
            };
            match result {
                Err(e) if e.kind() == ErrorKind::Unavailable => {
                    self.skip(i);
                    let e = self.at(i, op, e);
                    if last {
                        return Err(e);
                    }
                    tracing::debug!("etcd member unavailable, trying the next: {e}");
                }
                Err(e) => return Err(self.at(i, op, e)),
                Ok(value) => return Ok(value),
            }
        }
    }
}
