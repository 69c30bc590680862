//! A TCP proxy on loopback that injects network faults between a client and its server:
//! freeze (connections stay open, nothing is delivered, nothing is reset: a partition as a
//! client sees it), latency on replies (a slow server), cut (every connection closed at
//! once), and heal.
//!
//! Plain threads, two per connection, so that it works under any test runtime; bytes that
//! arrive while frozen wait in the kernel's buffers and are delivered on heal, as after a
//! real partition.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// How often a pump looks at the fault settings while it waits.
const TICK: Duration = Duration::from_millis(2);

#[derive(Default)]
struct Faults {
    frozen: AtomicBool,
    /// Milliseconds each chunk from the server waits before it is passed on.
    reply_latency_ms: AtomicU64,
    /// Bumped by `cut`: connections of an older generation close.
    generation: AtomicU64,
    stopped: AtomicBool,
}

/// A proxy from a free loopback port to `127.0.0.1:upstream`; stopped on drop.
pub struct FaultProxy {
    port: u16,
    faults: Arc<Faults>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port for the proxy");
        let port = listener.local_addr().expect("the proxy's address").port();
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let faults = Arc::new(Faults::default());
        let shared = Arc::clone(&faults);
        thread::spawn(move || accept_loop(listener, upstream, shared));
        FaultProxy { port, faults }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops delivering bytes either way; connections stay open, nothing is reset.
    pub fn freeze(&self) {
        self.faults.frozen.store(true, Ordering::SeqCst);
    }

    /// Delays every chunk the server sends by `latency` (zero: none).
    pub fn delay_replies(&self, latency: Duration) {
        let ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
        self.faults.reply_latency_ms.store(ms, Ordering::SeqCst);
    }

    /// Closes every open connection at once; new ones are accepted as before.
    pub fn cut(&self) {
        self.faults.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Delivers again, without latency; what waited while frozen goes through.
    pub fn heal(&self) {
        self.faults.reply_latency_ms.store(0, Ordering::SeqCst);
        self.faults.frozen.store(false, Ordering::SeqCst);
    }
}

impl lock_conformance::NetworkFaults for FaultProxy {
    fn freeze(&self) {
        FaultProxy::freeze(self);
    }
    fn delay_replies(&self, latency: Duration) {
        FaultProxy::delay_replies(self, latency);
    }
    fn cut(&self) {
        FaultProxy::cut(self);
    }
    fn heal(&self) {
        FaultProxy::heal(self);
    }
}

/// Proxies in front of several servers (a cluster's nodes, a Sentinel-managed primary),
/// faulted together.
pub struct ProxySet {
    /// `(upstream port, proxy)` pairs.
    pub proxies: Vec<(u16, FaultProxy)>,
}

impl ProxySet {
    /// A proxy for each of `upstreams` (ports on 127.0.0.1).
    pub fn start(upstreams: &[u16]) -> Self {
        ProxySet {
            proxies: upstreams
                .iter()
                .map(|&p| (p, FaultProxy::start(p)))
                .collect(),
        }
    }
}

impl lock_conformance::NetworkFaults for ProxySet {
    fn freeze(&self) {
        self.proxies.iter().for_each(|(_, p)| p.freeze());
    }
    fn delay_replies(&self, latency: Duration) {
        self.proxies
            .iter()
            .for_each(|(_, p)| p.delay_replies(latency));
    }
    fn cut(&self) {
        self.proxies.iter().for_each(|(_, p)| p.cut());
    }
    fn heal(&self) {
        self.proxies.iter().for_each(|(_, p)| p.heal());
    }
}

/// A proxy in front of the server `url` names (which must be on 127.0.0.1), and `url`
/// rewritten to go through it: `scheme://[user@]127.0.0.1:PROXY/rest`.
pub fn in_front_of(url: &str) -> (FaultProxy, String) {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    let (host, port) = hostport
        .rsplit_once(':')
        .expect("a URL with an explicit port");
    assert!(
        host == "127.0.0.1" || host == "localhost",
        "the fault proxy forwards to 127.0.0.1 only, and {host} is not it"
    );
    let proxy = FaultProxy::start(port.parse().expect("a numeric port"));
    let url = format!("{scheme}://{userinfo}127.0.0.1:{}{tail}", proxy.port());
    (proxy, url)
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.faults.stopped.store(true, Ordering::SeqCst);
        self.cut();
    }
}

fn accept_loop(listener: TcpListener, upstream: u16, faults: Arc<Faults>) {
    while !faults.stopped.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                // Each chunk goes on at once: with Nagle's algorithm on the proxy's sockets
                // a protocol of small frames (gRPC's HTTP/2) waits for delayed ACKs, 40 ms
                // a round trip.
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let generation = faults.generation.load(Ordering::SeqCst);
                for (from, to, replies) in [
                    (client.try_clone(), server.try_clone(), false),
                    (server.try_clone(), client.try_clone(), true),
                ] {
                    let (Ok(from), Ok(to)) = (from, to) else {
                        continue;
                    };
                    let faults = Arc::clone(&faults);
                    thread::spawn(move || pump(from, to, replies, generation, &faults));
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(TICK),
            Err(_) => thread::sleep(TICK),
        }
    }
}

/// Copies `from` to `to` under the faults until either side closes or a cut ends it.
/// Replies go through a second thread, so that every chunk is delivered `latency` after it
/// arrived (a slow link), not after the chunk before it was delivered.
fn pump(mut from: TcpStream, to: TcpStream, replies: bool, generation: u64, faults: &Arc<Faults>) {
    let _ = from.set_nonblocking(false);
    let _ = from.set_read_timeout(Some(TICK * 5));
    let alive = move |faults: &Faults| {
        faults.generation.load(Ordering::SeqCst) == generation
            && !faults.stopped.load(Ordering::SeqCst)
    };
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = {
        let faults = Arc::clone(faults);
        let mut to = to.try_clone();
        thread::spawn(move || {
            let Ok(to) = to.as_mut() else { return };
            while let Ok((arrived, chunk)) = rx.recv() {
                if replies {
                    let latency =
                        Duration::from_millis(faults.reply_latency_ms.load(Ordering::SeqCst));
                    let due = arrived + latency;
                    let now = Instant::now();
                    if due > now {
                        thread::sleep(due - now);
                    }
                }
                // A chunk read just before a freeze waits for the heal too.
                while faults.frozen.load(Ordering::SeqCst) && alive(&faults) {
                    thread::sleep(TICK);
                }
                if !alive(&faults) || to.write_all(&chunk).is_err() {
                    return;
                }
            }
        })
    };
    let mut buf = vec![0u8; 64 * 1024];
    while alive(faults) {
        if faults.frozen.load(Ordering::SeqCst) {
            thread::sleep(TICK);
            continue;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(tx);
    let _ = writer.join();
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that echoes every byte.
    fn echo_server() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 || conn.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    fn round_trip(conn: &mut TcpStream) -> std::io::Result<Duration> {
        let started = Instant::now();
        conn.write_all(b"ping")?;
        let mut buf = [0u8; 4];
        conn.read_exact(&mut buf)?;
        assert_eq!(&buf, b"ping");
        Ok(started.elapsed())
    }

    #[test]
    fn urls_are_rewritten_to_the_proxy() {
        let (proxy, url) = in_front_of("redis://:pw@127.0.0.1:6379/0");
        assert_eq!(url, format!("redis://:pw@127.0.0.1:{}/0", proxy.port()));
        let (proxy, url) = in_front_of("postgres://u@localhost:5432/db?x=1");
        assert_eq!(
            url,
            format!("postgres://u@127.0.0.1:{}/db?x=1", proxy.port())
        );
    }

    #[test]
    fn passes_freezes_delays_cuts_and_heals() {
        let proxy = FaultProxy::start(echo_server());
        let mut conn = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        conn.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(round_trip(&mut conn).unwrap() < Duration::from_millis(200));

        proxy.freeze();
        assert!(
            round_trip(&mut conn).is_err(),
            "nothing comes back while frozen"
        );
        proxy.heal();
        // The frozen ping is delivered on heal, then a new one goes through.
        let mut late = [0u8; 4];
        conn.read_exact(&mut late).unwrap();
        assert_eq!(&late, b"ping");
        assert!(round_trip(&mut conn).is_ok());

        proxy.delay_replies(Duration::from_millis(150));
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(round_trip(&mut conn).unwrap() >= Duration::from_millis(150));
        proxy.heal();

        proxy.cut();
        let mut buf = [0u8; 4];
        let closed = conn.write_all(b"ping").and_then(|()| conn.read(&mut buf));
        assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
        let mut fresh = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        fresh
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert!(
            round_trip(&mut fresh).is_ok(),
            "new connections after a cut"
        );
    }
}
