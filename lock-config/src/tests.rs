use super::*;

#[tokio::test]
async fn a_percent_encoded_option_is_decoded() {
    assert!(connect("memory:?grace=1%6D").await.is_ok(), "grace=1m");
}

#[cfg(feature = "file")]
#[tokio::test]
async fn memory_and_file_urls_give_backends() {
    assert_eq!(connect("memory:").await.unwrap().name(), "memory");
    let dir = std::env::temp_dir().join(format!("lock-config-{}", std::process::id()));
    let url = format!("file://{}?grace=1m", dir.display());
    assert_eq!(connect(&url).await.unwrap().name(), "file");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn bad_urls_say_what_is_wrong() {
    let mut cases = vec![
        ("nonsense", "not a lock URL"),
        ("zookeeper://db/x", "unknown lock URL scheme"),
        ("memory:?grace=soon", "not a duration"),
        ("memory:?colour=blue", "unknown option"),
    ];
    if cfg!(feature = "file") {
        cases.push(("file://", "without a directory"));
    }
    if cfg!(feature = "redis") {
        cases.push((
            "redis://127.0.0.1:1/0?variant=fast",
            "expected lua or watch",
        ));
        cases.push((
            "redis+sentinel://:secret@127.0.0.1:1/svc?wait_timeout=1s",
            "wait_timeout= without wait=N",
        ));
        cases.push((
            "redis+cluster://:secret@127.0.0.1:1/?wait=x",
            "not a number",
        ));
        cases.push(("redis+cluster://:secret@127.0.0.1:1/0", "one database"));
        cases.push(("redis+sentinel://:secret@127.0.0.1:1/", "service name"));
        // A misspelt option (prefix=) would run in the default namespace, apart from the
        // rest of the deployment: refused, naming the known options.
        cases.push((
            "redis://:secret@127.0.0.1:1/0?prefx=app:",
            "unknown option \"prefx\"",
        ));
        cases.push(("redis+watch://:secret@127.0.0.1:1/0?prefx=app:", "prefix"));
        cases.push((
            "redis+cluster://:secret@127.0.0.1:1/?timout=1s",
            "unknown option",
        ));
    }
    if cfg!(feature = "postgres") {
        cases.push(("postgres://u@h/d?notify=maybe", "expected true or false"));
        cases.push(("postgres://u@h/d?table=Bad-Name", "must match"));
        cases.push((
            "postgres://u:secret@h/d?tabel=locks",
            "unknown option \"tabel\"",
        ));
        cases.push(("postgres://u:secret@h/d?tabel=locks", "table"));
    }
    if cfg!(feature = "mysql") {
        cases.push((
            "mysql://u:secret@h/d?migrate=maybe",
            "expected true or false",
        ));
        cases.push(("mariadb://u:secret@h/d?table=Bad-Name", "must match"));
        cases.push((
            "mysql://u:secret@h/d?tabel=locks",
            "unknown option \"tabel\"",
        ));
        cases.push(("mariadb://u:secret@h/d?tabel=locks", "table"));
    }
    if cfg!(feature = "etcd") {
        cases.push(("etcd://u:secret@h:1/p?timeout=0s", "longer than zero"));
        cases.push(("etcd://u:secret@h:1/p?tls=yes", "unknown option"));
    }
    for (url, says) in cases {
        let err = connect(url).await.map(|_| ()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{url}: {err}");
        assert!(err.to_string().contains(says), "{url}: {err}");
        assert!(!err.to_string().contains("secret"), "{url}: {err}");
    }
}

/// Every scheme of a backend the build left out names the feature, `rediss+cluster://`
/// as well as `redis://` (lock-config once kept a copy of the list, 5 of the 8).
#[tokio::test]
async fn a_backend_left_out_of_the_build_names_its_feature() {
    use lock_core::backend::schemes;
    for (list, rest, feature, built) in [
        (schemes::FILE, "///tmp/x", "file", cfg!(feature = "file")),
        (
            schemes::REDIS,
            "//127.0.0.1:1/0",
            "redis",
            cfg!(feature = "redis"),
        ),
        (
            schemes::POSTGRES,
            "//u@127.0.0.1:1/d",
            "postgres",
            cfg!(feature = "postgres"),
        ),
        (
            schemes::MYSQL,
            "//u@127.0.0.1:1/d",
            "mysql",
            cfg!(feature = "mysql"),
        ),
        (
            schemes::ETCD,
            "//127.0.0.1:1/p",
            "etcd",
            cfg!(feature = "etcd"),
        ),
    ] {
        if built {
            continue;
        }
        for scheme in list {
            let url = format!("{scheme}:{rest}");
            let err = connect(&url).await.map(|_| ()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config);
            let said = err.to_string();
            assert!(
                said.contains(&format!("feature `{feature}`")),
                "{url}: {err}"
            );
            // Named for the crates a user adds, never for lock-config, which they did not.
            assert!(
                said.contains("distlock") && said.contains("lockrun"),
                "{url}: {err}"
            );
            assert!(!said.contains("lock-config"), "{url}: {err}");
        }
    }
}

#[test]
fn retry_strategies_parse() {
    for ok in [
        "none",
        "notified",
        "linear:100ms",
        "exponential:5ms..250ms+notified",
    ] {
        assert!(parse_retry(ok).is_ok(), "{ok}");
    }
    for bad in [
        "sometimes",
        "linear:x",
        "exponential:1s",
        "exponential:5s..1s",
    ] {
        assert!(parse_retry(bad).is_err(), "{bad}");
    }
}

#[test]
fn configured_options_replace_the_urls_and_passwords_are_redacted() {
    assert_eq!(
        with_param(
            "rediss://:pw@h:6379/0?grace=1s&pool=4#insecure",
            "grace",
            "1m"
        ),
        "rediss://:pw@h:6379/0?pool=4&grace=1m#insecure"
    );
    assert_eq!(with_param("memory:", "grace", "1m"), "memory:?grace=1m");
    assert_eq!(redact_url("redis://u:secret@h/0"), "redis://u:***@h/0");
    assert_eq!(redact_url("postgres://u@h/d"), "postgres://u@h/d");
}

#[tokio::test]
async fn a_config_file_makes_a_locker() {
    let config: LockConfig = serde_json::from_str(
        r#"{"url": "memory:", "prefix": "app:", "ttl": "5s", "wait": "0s", "retry": "none"}"#,
    )
    .unwrap();
    let locker = config.locker().await.unwrap();
    let guard = locker
        .lock("k")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    assert_eq!(guard.key().as_str(), "app:k");
    assert!(serde_json::from_str::<LockConfig>(r#"{"url": "memory:", "tll": "5s"}"#).is_err());
}

#[tokio::test]
async fn a_toml_section_makes_a_locker() {
    #[derive(Deserialize)]
    struct App {
        lock: LockConfig,
    }
    let app: App = toml::from_str(
        "[lock]\nurl = \"memory:?grace=10m\"\nttl = \"5m\"\nwait = \"30s\"\n\
         retry = \"exponential:10ms..1s+notified\"\n",
    )
    .unwrap();
    let locker = app.lock.locker().await.unwrap();
    assert_eq!(locker.backend().name(), "memory");
    let guard = locker
        .lock("k")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    assert!(
        guard.remaining() > std::time::Duration::from_secs(240),
        "ttl 5m applied"
    );
}

#[test]
fn debug_never_shows_the_password() {
    let config = LockConfig::from_url("redis://locker:s3cret-pw@cache:6379/0?password=s3cret-q");
    let shown = format!("{config:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(shown.contains("cache:6379"), "{shown}");
}

/// A password pasted with a `/` in it (not percent-encoded), on every scheme: the
/// configuration's `Debug` and the error of a connect to a port nobody listens on never
/// show any part of it. (An etcd URL split at the `/`: its password showed in errors and
/// `Debug`, and its first part was looked up as a host.)
#[tokio::test]
async fn a_password_with_a_slash_never_shows() {
    let mut urls = vec!["memory:"];
    if cfg!(feature = "redis") {
        urls.extend([
            "redis://app:pw1/s3cr@127.0.0.1:1/0?timeout=300ms",
            "redis+watch://app:pw1/s3cr@127.0.0.1:1/0?timeout=300ms",
        ]);
    }
    if cfg!(feature = "postgres") {
        urls.push("postgres://app:pw1/s3cr@127.0.0.1:1/db?timeout=300ms");
    }
    if cfg!(feature = "mysql") {
        urls.push("mysql://app:pw1/s3cr@127.0.0.1:1/db?timeout=300ms");
    }
    if cfg!(feature = "etcd") {
        urls.push("etcd://app:pw1/s3cr@127.0.0.1:1/p?timeout=300ms");
    }
    for url in urls.into_iter().skip(1) {
        let config = LockConfig::from_url(url);
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("s3cr") && !shown.contains("pw1"),
            "{url}: {shown}"
        );
        let err = match connect(url).await {
            Ok(_) => panic!("{url}: nothing listens on port 1"),
            Err(e) => e,
        };
        let text = format!("{err} {err:?}");
        assert!(
            !text.contains("s3cr") && !text.contains("pw1"),
            "{url}: {text}"
        );
    }
}
