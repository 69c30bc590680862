//! `lockrun ls`, `top` and `serve` as a person meets them, on every backend: the table and
//! its JSON, the terminal view in a real terminal (tmux), the page in a real browser
//! (Debian's headless Chromium), each showing holders other lockrun processes took.
//!
//! tmux and chromium must be installed (scripts/test.sh installs both); a test whose tool
//! is missing fails saying so, it never skips.

#[macro_use]
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{unique, url};

const LOCKRUN: &str = env!("CARGO_BIN_EXE_lockrun");

/// One backend of this test alone, and the key prefix its locks go under.
struct Env {
    url: String,
    prefix: String,
    dir: Option<PathBuf>,
    holders: Vec<Child>,
}

impl Env {
    fn new(backend: &str) -> Self {
        let (url, dir) = url(backend);
        Env {
            url,
            prefix: format!("ls-{}/", unique()),
            dir,
            holders: Vec::new(),
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(LOCKRUN);
        c.env("LOCK_URL", &self.url).args(args);
        c
    }

    fn output(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("lockrun runs")
    }

    /// A lockrun that holds `name` (under the prefix) with `args` until the test ends.
    fn hold(&mut self, name: &str, args: &[&str]) {
        let key = format!("{}{name}", self.prefix);
        let child = self
            .cmd(&["--key", &key])
            .args(args)
            .args(["--", "sleep", "60"])
            .stderr(Stdio::null())
            .spawn()
            .expect("lockrun runs");
        self.holders.push(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.output(&["inspect", "--key", &key]);
            let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            if state["state"] == "held" || state["state"] == "shared" {
                return;
            }
            assert!(Instant::now() < deadline, "{key} never held: {state}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The four locks every test lists: exclusive with metadata, two of three permits, a
    /// read lock, a cooldown; and one lock outside the prefix.
    fn four_locks(&mut self) {
        self.hold("report", &["--metadata", "<i>nightly</i>, run 42"]);
        self.hold("export", &["--permits", "3", "--weight", "2"]);
        self.hold("cache", &["--shared"]);
        let cooled = format!("{}cooled", self.prefix);
        let out = self.output(&["--key", &cooled, "--delay-after", "60s", "--", "true"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let outside = format!("outside-{}", unique());
        let key = outside.trim_end_matches('/').to_owned();
        let out = self.output(&["--key", &key, "--delay-after", "60s", "--", "true"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        for child in &mut self.holders {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        for child in &mut self.holders {
            let _ = child.wait();
        }
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn ls_shows_every_holder_once(backend: &str) {
    let mut env = Env::new(backend);
    env.four_locks();
    let out = env.output(&["ls", "--prefix", &env.prefix]);
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("KEY"), "{table}");
    let row = |name: &str| {
        let key = format!("{}{name}", env.prefix);
        lines
            .iter()
            .find(|l| l.starts_with(&key))
            .unwrap_or_else(|| panic!("no row for {key} in:\n{table}"))
            .to_string()
    };
    let report = row("report");
    assert!(report.contains("exclusive"), "{report}");
    assert!(report.contains("\"<i>nightly</i>, run 42\""), "{report}");
    assert!(row("export").contains("2 of 3 permits"), "{table}");
    assert!(row("cache").contains("read"), "{table}");
    assert!(row("cooled").contains("cooling"), "{table}");
    assert!(!table.contains("outside-"), "{table}");
    assert_eq!(lines.len(), 5, "a title and a row per hold:\n{table}");

    let out = env.output(&["ls", "--prefix", &env.prefix, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let locks: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
    let mut keys: Vec<String> = locks
        .iter()
        .map(|l| l["key"].as_str().unwrap().to_owned())
        .collect();
    keys.sort();
    let p = &env.prefix;
    assert_eq!(
        keys,
        [
            format!("{p}cache"),
            format!("{p}cooled"),
            format!("{p}export"),
            format!("{p}report")
        ]
    );
    let report = locks
        .iter()
        .find(|l| l["key"] == format!("{p}report"))
        .unwrap();
    assert_eq!(report["state"], "held");
    assert_eq!(report["holder"]["metadata"], "<i>nightly</i>, run 42");
    assert!(report["fencing"].as_u64().unwrap() > 0);

    let none = format!("{}none/", env.prefix);
    let out = env.output(&["ls", "--prefix", &none]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("no locks under"),
        "{out:?}"
    );
    let out = env.output(&["ls", "--prefix", &none, "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}

/// tmux, or a failure that says how to install it.
fn tmux(socket: &str, args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(["-L", socket, "-f", "/dev/null"])
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("tmux cannot run ({e}): install it (apt-get install tmux); scripts/test.sh does")
        });
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn top_refreshes_in_a_real_terminal(backend: &str) {
    let mut env = Env::new(backend);
    env.hold("first", &[]);
    let socket = format!("lockrun-top-{}", unique());
    // A person's shell, in a terminal of 150 by 30.
    tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "150",
            "-y",
            "30",
            "env PS1='$ ' bash --norc --noprofile -i",
        ],
    );
    let command = format!(
        "LOCK_URL='{}' {LOCKRUN} top --prefix '{}' --interval 200ms",
        env.url, env.prefix
    );
    tmux(&socket, &["send-keys", "-t", "top", &command, "Enter"]);
    let screen = || tmux(&socket, &["capture-pane", "-p", "-t", "top"]);
    let until = |what: &str, shows: &dyn Fn(&str) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = screen();
            if shows(&s) {
                return s;
            }
            if Instant::now() > deadline {
                tmux(&socket, &["kill-server"]);
                panic!("the terminal never showed {what}:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let first = format!("{}first", env.prefix);
    let s = until("the first lock", &|s| s.contains(&first));
    assert!(s.starts_with("lockrun top"), "{s}");
    assert!(s.contains("1 locks"), "{s}");
    // Taken while top runs: shown at a later refresh, in place.
    env.hold("second", &["--metadata", "appeared later"]);
    let s = until("the second lock", &|s| s.contains("appeared later"));
    assert!(s.contains("2 locks"), "{s}");
    assert_eq!(
        s.matches("lockrun top").count(),
        1,
        "one screen, refreshed in place:\n{s}"
    );
    tmux(&socket, &["send-keys", "-t", "top", "C-c"]);
    tmux(
        &socket,
        &["send-keys", "-t", "top", "echo top-said-$?", "Enter"],
    );
    let said = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("top-said-"))
            .map(str::to_owned)
    };
    let after = until("the shell again", &|s| said(s).is_some());
    tmux(&socket, &["kill-server"]);
    assert_eq!(
        said(&after).as_deref(),
        Some("top-said-0"),
        "top's exit status after Ctrl-C:\n{after}"
    );
    assert!(
        !after.contains(&first),
        "the shell's screen came back:\n{after}"
    );
}

/// Debian's Chromium, or a failure that says how to install it.
fn chromium() -> &'static str {
    let found = Command::new("chromium").arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "no chromium to open lockrun serve's page with: install Debian's chromium \
         (apt-get install chromium); scripts/test.sh installs it"
    );
    "chromium"
}

fn headless(args: &[&str], page: &str) -> Output {
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .args(args)
        .arg(page)
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `lockrun serve` on a free port, and the port.
fn serve(env: &Env) -> (Child, u16) {
    let mut child = env
        .cmd(&["serve", "--http", "127.0.0.1:0", "--prefix", &env.prefix])
        .stderr(Stdio::piped())
        .spawn()
        .expect("lockrun runs");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let said = lines.next().expect("serve says where").expect("UTF-8");
    let port = said
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no address in {said:?}"));
    assert!(!said.contains("warning"), "{said}");
    (child, port)
}

/// One request, its status and body.
fn http(port: u16, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("serve listens");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn get(port: u16, path: &str) -> (u16, String) {
    http(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n"),
    )
}

fn serve_shows_the_holders_in_a_real_browser(backend: &str) {
    let mut env = Env::new(backend);
    env.four_locks();
    let (mut server, port) = serve(&env);
    let p = env.prefix.clone();

    let (status, body) = get(port, "/locks.json");
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(json["locks"].as_array().map(Vec::len), Some(4), "{body}");
    assert_eq!(json["truncated"], false);

    let (status, metrics) = get(port, "/metrics");
    assert_eq!(status, 200);
    assert!(metrics.contains("lockrun_listing_up 1"), "{metrics}");
    assert!(
        metrics.contains(&format!(
            "lockrun_lock_holds{{key=\"{p}report\",state=\"held\"}} 1"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("lockrun_locks{state=\"cooling\"} 1"),
        "{metrics}"
    );

    assert_eq!(get(port, "/nowhere").0, 404);
    let (status, _) = http(
        port,
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(status, 405, "nothing but GET and HEAD");

    let page = format!("http://127.0.0.1:{port}/");
    let dom = String::from_utf8_lossy(&headless(&["--dump-dom"], &page).stdout).into_owned();
    for name in ["report", "export", "cache", "cooled"] {
        assert!(
            dom.contains(&format!("<td>{p}{name}</td>")),
            "{name} not rendered:\n{dom}"
        );
    }
    assert!(dom.contains("2 of 3 permits"), "{dom}");
    // What a holder stored is text on the page, never markup.
    assert!(dom.contains("&lt;i&gt;nightly&lt;/i&gt;, run 42"), "{dom}");
    assert!(!dom.contains("<i>nightly"), "{dom}");
    assert!(dom.contains("<b id=\"count\">4</b>"), "{dom}");

    let shot =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("lockrun-serve-{backend}.png"));
    let _ = std::fs::remove_file(&shot);
    headless(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1100,420",
        ],
        &page,
    );
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 5_000,
        "{} bytes",
        png.len()
    );
    println!("the page's screenshot: {}", shot.display());

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(
        server.wait().unwrap().success(),
        "serve ends cleanly on SIGTERM"
    );
}

on_each_backend!(
    ls_shows_every_holder_once,
    top_refreshes_in_a_real_terminal,
    serve_shows_the_holders_in_a_real_browser,
);

/// An unreachable server: the same exit status and message as the other commands, and a
/// password in the URL never printed.
#[test]
fn an_unreachable_backend_is_said_without_the_password() {
    for args in [&["ls"][..], &["top"], &["serve", "--http", "127.0.0.1:0"]] {
        let out = Command::new(LOCKRUN)
            .env("LOCK_URL", "redis://:sekrit@127.0.0.1:1/0")
            .args(args)
            .output()
            .expect("lockrun runs");
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{args:?}: {said}");
        assert!(!said.contains("sekrit"), "{args:?}: {said}");
        assert!(said.contains("unreachable"), "{args:?}: {said}");
    }
}

/// `top` refreshes a terminal; in a pipe it says what to use instead.
#[test]
fn top_in_a_pipe_points_to_ls() {
    let dir = std::env::temp_dir().join(format!("lockrun-top-{}", unique()));
    let out = Command::new(LOCKRUN)
        .env("LOCK_URL", format!("file://{}", dir.display()))
        .arg("top")
        .output()
        .expect("lockrun runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lockrun ls"));
}
