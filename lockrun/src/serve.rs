//! `lockrun serve --http ADDR`: a read-only page of the listing that refreshes itself, its
//! JSON and Prometheus metrics, over plain HTTP/1.1. Nothing it answers changes a lock:
//! it knows `GET` and `HEAD` only, and asks the backend for listings only.
//!
//! | path | what |
//! |---|---|
//! | `/` | the table, as `lockrun ls` prints it, refreshed every 2 s |
//! | `/locks.json` | `{"backend", "prefix", "truncated", "locks": [...]}` |
//! | `/metrics` | gauges per lock and per state, Prometheus' text format |
//!
//! A bare port (`9977`, `:9977`) binds 127.0.0.1: the page shows every key, holder host,
//! pid and metadata, so binding anything else is said at start, as a warning.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_core::listing::Listed;
use lock_core::{Error, ErrorKind, LockBackend, LockState, Operation};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::view;

/// The address without `--http`.
pub(crate) const DEFAULT_ADDR: &str = "127.0.0.1:9977";
/// The most locks one answer shows.
const MOST: usize = 10_000;
/// The longest request head read.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client has to send its request.
const READ_WITHIN: Duration = Duration::from_secs(10);
/// Requests answered at once; more wait for their turn.
const AT_ONCE: usize = 16;
/// How often the page reloads itself, in seconds.
const REFRESH_SECS: u32 = 2;

/// What the server shows, shared by every request.
struct Shown {
    backend: Arc<dyn LockBackend>,
    /// The backend's URL with its password hidden.
    label: String,
    prefix: String,
}

/// `ADDR` as a socket address: a bare port (`9977`, `:9977`) is 127.0.0.1's.
pub(crate) fn address(text: &str) -> Result<SocketAddr, String> {
    let port = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    text.parse().map_err(|_| {
        format!(
            "{text:?} is not an address to serve on: write e.g. 127.0.0.1:9977, [::1]:9977 or 9977"
        )
    })
}

/// Serves until Ctrl-C or SIGTERM.
pub(crate) async fn serve(
    backend: Arc<dyn LockBackend>,
    label: String,
    prefix: String,
    addr: SocketAddr,
) -> ExitCode {
    let listener = match TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            return crate::fail(&Error::new(
                ErrorKind::Config,
                "lockrun",
                Operation::Connect,
                format!("cannot serve on {addr}: {e}"),
            ))
        }
    };
    let bound = listener.local_addr().unwrap_or(addr);
    if !bound.ip().is_loopback() {
        eprintln!(
            "lockrun: warning: serving on {bound}, beyond this machine: whoever reaches it reads \
             every lock's key, holder host, pid and metadata. Bind 127.0.0.1 (the default) \
             unless that is what you want."
        );
    }
    eprintln!(
        "lockrun: the locks of {label} at http://{bound}/ (JSON at /locks.json, metrics at \
         /metrics); Ctrl-C stops"
    );
    let mut stop = match crate::Stop::watch() {
        Ok(stop) => stop,
        Err(status) => return status,
    };
    let shown = Arc::new(Shown {
        backend,
        label,
        prefix,
    });
    let turns = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let (shown, turns) = (Arc::clone(&shown), Arc::clone(&turns));
                tokio::spawn(async move {
                    let Ok(_turn) = turns.acquire().await else { return };
                    answer(stream, &shown).await;
                });
            }
            () = stop.stopped() => return ExitCode::SUCCESS,
        }
    }
}

/// Reads one request and answers it; a client that sends nothing within
/// [`READ_WITHIN`], or a head over [`MAX_HEAD`], is dropped.
async fn answer(mut stream: TcpStream, shown: &Shown) {
    let Ok(Some(head)) = tokio::time::timeout(READ_WITHIN, read_head(&mut stream)).await else {
        return;
    };
    let mut words = head.split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let response = match (method, path) {
        ("GET" | "HEAD", "/") => page(shown).await,
        ("GET" | "HEAD", "/locks.json") => json(shown).await,
        ("GET" | "HEAD", "/metrics") => metrics(shown).await,
        ("GET" | "HEAD", _) => {
            Response::text(404, "no such page: try /, /locks.json or /metrics\n")
        }
        _ => Response::text(405, "read-only: GET and HEAD only\n"),
    };
    let _ = stream.write_all(&response.bytes(method == "HEAD")).await;
    let _ = stream.shutdown().await;
}

/// The request line, once the whole head has arrived; `None` for a head too long or a
/// connection closed before its end.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 || head.len() + n > MAX_HEAD {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next()?;
    Some(String::from_utf8_lossy(line).into_owned())
}

struct Response {
    status: u16,
    kind: &'static str,
    body: String,
}

impl Response {
    fn text(status: u16, body: impl Into<String>) -> Self {
        Response {
            status,
            kind: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }

    fn bytes(&self, head_only: bool) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            404 => "Not Found",
            405 => "Method Not Allowed",
            _ => "Service Unavailable",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
             Connection: close\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n\
             Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'\r\n",
            self.status,
            self.kind,
            self.body.len()
        );
        if self.status == 405 {
            out.push_str("Allow: GET, HEAD\r\n");
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        if !head_only {
            bytes.extend_from_slice(self.body.as_bytes());
        }
        bytes
    }
}

async fn page(shown: &Shown) -> Response {
    let listed = view::first(&*shown.backend, &shown.prefix, MOST).await;
    let mut body = String::new();
    let _ = write!(
        body,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>Locks · lockrun</title><style>{STYLE}</style></head><body>\
         <h1>Locks</h1><p class=\"meta\">backend <code>{}</code>",
        html(&shown.label)
    );
    if !shown.prefix.is_empty() {
        let _ = write!(body, " · prefix <code>{}</code>", html(&shown.prefix));
    }
    let status = match &listed {
        Ok((locks, cut)) => {
            let more = if *cut { "+" } else { "" };
            let _ = write!(body, " · <b id=\"count\">{}{more}</b> locks", locks.len());
            let _ = write!(body, " · read at {}</p>", now_utc());
            if locks.is_empty() {
                body.push_str("<p class=\"none\">No locks are held.</p>");
            } else {
                table(&mut body, locks);
            }
            200
        }
        Err(e) => {
            let _ = write!(
                body,
                " · read at {}</p><p class=\"error\">The listing failed: {}</p>",
                now_utc(),
                html(&e.to_string())
            );
            503
        }
    };
    let _ = writeln!(
        body,
        "<p class=\"foot\"><a href=\"/locks.json\">JSON</a> · <a href=\"/metrics\">metrics</a> · \
         refreshes every {REFRESH_SECS} s · read-only</p></body></html>"
    );
    Response {
        status,
        kind: "text/html; charset=utf-8",
        body,
    }
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}\
h1{font-size:1.4em;margin:0 0 .2em}.meta,.foot{color:#666}\
table{border-collapse:collapse;margin:1em 0}th,td{padding:.3em .8em;text-align:left;\
border-bottom:1px solid #ddd;white-space:nowrap}th{background:#f4f4f4}\
td.n{text-align:right;font-variant-numeric:tabular-nums}tr.first td{border-top:2px solid #bbb}\
.error{color:#a00;font-weight:bold}code{background:#f4f4f4;padding:0 .3em}";

fn table(body: &mut String, locks: &[Listed]) {
    body.push_str("<table><thead><tr>");
    for title in view::TITLES {
        let _ = write!(body, "<th>{}</th>", html(&title.to_lowercase()));
    }
    body.push_str("</tr></thead><tbody>");
    for listed in locks {
        for (i, row) in view::rows(listed).iter().enumerate() {
            let class = if i == 0 { " class=\"first\"" } else { "" };
            let _ = write!(body, "<tr{class}>");
            for (j, cell) in row.cells().iter().enumerate() {
                let numeric = if (3..6).contains(&j) {
                    " class=\"n\""
                } else {
                    ""
                };
                let _ = write!(body, "<td{numeric}>{}</td>", html(cell));
            }
            body.push_str("</tr>");
        }
    }
    body.push_str("</tbody></table>");
}

async fn json(shown: &Shown) -> Response {
    match view::first(&*shown.backend, &shown.prefix, MOST).await {
        Ok((locks, cut)) => Response {
            status: 200,
            kind: "application/json",
            body: serde_json::json!({
                "backend": shown.label,
                "prefix": shown.prefix,
                "truncated": cut,
                "locks": locks,
            })
            .to_string(),
        },
        Err(e) => Response {
            status: 503,
            kind: "application/json",
            body: serde_json::json!({ "error": e.to_string() }).to_string(),
        },
    }
}

async fn metrics(shown: &Shown) -> Response {
    let listed = view::first(&*shown.backend, &shown.prefix, MOST).await;
    let mut out = String::new();
    let help = |out: &mut String, name: &str, text: &str| {
        let _ = write!(out, "# HELP {name} {text}\n# TYPE {name} gauge\n");
    };
    help(
        &mut out,
        "lockrun_listing_up",
        "1 when the last listing of the backend succeeded.",
    );
    let Ok((locks, cut)) = listed else {
        out.push_str("lockrun_listing_up 0\n");
        return Response::text(200, out);
    };
    out.push_str("lockrun_listing_up 1\n");
    help(
        &mut out,
        "lockrun_listing_truncated",
        "1 when more locks exist than one listing shows (10,000).",
    );
    let _ = writeln!(out, "lockrun_listing_truncated {}", u8::from(cut));
    help(
        &mut out,
        "lockrun_locks",
        "Locks with something live, by state.",
    );
    for state in ["held", "shared", "cooling"] {
        let n = locks.iter().filter(|l| state_of(&l.state) == state).count();
        let _ = writeln!(out, "lockrun_locks{{state=\"{state}\"}} {n}");
    }
    let per_lock: [PerLock; 5] = [
        ("lockrun_lock_holds", "Live holds of each lock.", |l| {
            holds(&l.state).to_string()
        }),
        (
            "lockrun_lock_remaining_seconds",
            "How long each lock stays unavailable: its longest hold, cooldown or writer's marker.",
            |l| format!("{:.3}", view::longest(l).as_secs_f64()),
        ),
        (
            "lockrun_lock_fencing",
            "The highest fencing token of each lock's holds (0 while cooling).",
            |l| fencing(&l.state).to_string(),
        ),
        (
            "lockrun_lock_writer_waiting",
            "1 when a writer waits for the lock.",
            |l| u8::from(view::writer_waits(l)).to_string(),
        ),
        (
            "lockrun_lock_waiting_tasks",
            "Obtains waiting for each lock (those that have waited 250 ms or more), in every process.",
            |l| view::waiters(l).to_string(),
        ),
    ];
    for (name, text, value) in per_lock {
        help(&mut out, name, text);
        for l in &locks {
            let _ = writeln!(
                out,
                "{name}{{key=\"{}\",state=\"{}\"}} {}",
                label_value(l.key.as_str()),
                state_of(&l.state),
                value(l)
            );
        }
    }
    Response {
        status: 200,
        kind: "text/plain; version=0.0.4; charset=utf-8",
        body: out,
    }
}

/// A gauge with a series per lock: its name, its help, its value.
type PerLock = (&'static str, &'static str, fn(&Listed) -> String);

fn state_of(state: &LockState) -> &'static str {
    match state {
        LockState::Free => "free",
        LockState::Held { .. } => "held",
        LockState::Shared { .. } => "shared",
        LockState::Cooling { .. } => "cooling",
    }
}

fn holds(state: &LockState) -> usize {
    match state {
        LockState::Held { .. } => 1,
        LockState::Shared { holds, .. } => holds.len(),
        LockState::Free | LockState::Cooling { .. } => 0,
    }
}

fn fencing(state: &LockState) -> u64 {
    match state {
        LockState::Held { fencing, .. } => fencing.0,
        LockState::Shared { holds, .. } => holds.iter().map(|h| h.fencing.0).max().unwrap_or(0),
        LockState::Free | LockState::Cooling { .. } => 0,
    }
}

/// A Prometheus label value: `\`, `"` and line feeds escaped.
fn label_value(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Text safe inside HTML elements and attribute values.
fn html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Now, UTC, as `2026-11-29 03:04:05 UTC`.
fn now_utc() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_port_is_loopback_s() {
        assert_eq!(address("9977").unwrap().to_string(), "127.0.0.1:9977");
        assert_eq!(address(":80").unwrap().to_string(), "127.0.0.1:80");
        assert_eq!(address("0.0.0.0:1").unwrap().to_string(), "0.0.0.0:1");
        assert!(address("somewhere").unwrap_err().contains("127.0.0.1:9977"));
    }

    #[test]
    fn what_a_holder_stored_stays_text_in_the_page_and_the_metrics() {
        assert_eq!(html("<script>'&\""), "&lt;script&gt;&#39;&amp;&quot;");
        assert_eq!(label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn dates_are_civil() {
        let now = now_utc();
        assert!(now.starts_with("20"), "{now}");
        assert_eq!(now.len(), "2026-11-29 03:04:05 UTC".len(), "{now}");
    }
}
