//! The declared MSRV (`rust-version` in the workspace's Cargo.toml) holds for every package
//! the workspace builds on this platform: a dependency, dev-dependency or build-dependency
//! that declares a newer `rust-version` makes `cargo build --locked` refuse at the MSRV
//! (ordered-float 5.5.1, through metrics-util, needed 1.90 while 1.89 was declared).
//! `scripts/msrv.sh` builds with the MSRV's own toolchain where one is installed.

use std::path::Path;
use std::process::Command;

/// `1.90` as `(1, 90, 0)`.
fn version(text: &str) -> (u64, u64, u64) {
    let mut parts = text.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

#[test]
fn no_dependency_needs_a_newer_rust_than_the_declared_msrv() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let msrv = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("the workspace declares rust-version");
    let host = String::from_utf8(
        Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
            .arg("-vV")
            .output()
            .expect("rustc runs")
            .stdout,
    )
    .unwrap()
    .lines()
    .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
    .expect("rustc -vV names the host");
    let out = Command::new(env!("CARGO"))
        .current_dir(&root)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--offline",
            "--filter-platform",
            &host,
        ])
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let needs = |id: &str| {
        let p = packages.iter().find(|p| p["id"] == id).unwrap();
        let need = p["rust_version"].as_str()?;
        (version(need) > version(msrv)).then(|| {
            format!(
                "{} {} needs Rust {need}",
                p["name"].as_str().unwrap_or("?"),
                p["version"].as_str().unwrap_or("?")
            )
        })
    };
    let too_new: Vec<String> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| needs(n["id"].as_str().unwrap()))
        .collect();
    assert!(
        too_new.is_empty(),
        "Cargo.toml declares rust-version {msrv}, but: {}; raise rust-version, or pin an \
         older version (cargo update -p NAME --precise VERSION)",
        too_new.join("; ")
    );
}
