//! Docs that cannot drift: every backend crate of the workspace is named wherever a reader
//! looks for the list (the map of the house, the README's layout and "Writing a backend",
//! the backend author's module docs), and the conformance crate cites only files it ships.
//! A new backend crate that is not added to them fails here.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The workspace's backend crates: `lock-*` members (other than lock-core, whose memory
/// backend is named as "memory") whose `src/lib.rs` re-exports a `…Backend` type.
fn backend_crates() -> Vec<String> {
    let manifest = read("Cargo.toml");
    let members = manifest
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .expect("the workspace lists its members")
        .0;
    let mut crates = Vec::new();
    for member in members.split(',').map(|m| m.trim().trim_matches('"')) {
        let lib = root().join(member).join("src/lib.rs");
        let Ok(text) = std::fs::read_to_string(&lib) else {
            continue;
        };
        let exports_a_backend = text.lines().any(|line| {
            let line = line.trim();
            line.starts_with("pub use ")
                && line
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .any(|word| word.ends_with("Backend") && word != "LockBackend")
        });
        if member.starts_with("lock-") && member != "lock-core" && exports_a_backend {
            crates.push(member.to_owned());
        }
    }
    crates
}

/// The text of the README's section under `heading`, up to the next `## `.
fn readme_section(readme: &str, heading: &str) -> String {
    let rest = readme
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("the README has no {heading:?}"))
        .1;
    rest.split("\n## ").next().unwrap_or(rest).to_owned()
}

/// The crates of `crates` that `text` does not name.
fn missing<'c>(text: &str, crates: &'c [String]) -> Vec<&'c str> {
    crates
        .iter()
        .filter(|c| !text.contains(c.as_str()))
        .map(String::as_str)
        .collect()
}

/// Where a reader looks for the list of backends, by name.
fn places() -> Vec<(&'static str, String)> {
    let readme = read("README.md");
    let module_docs: String = read("lock-core/src/backend.rs")
        .lines()
        .filter(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    vec![
        ("docs/MAP.md", read("docs/MAP.md")),
        ("README.md, ## Layout", readme_section(&readme, "## Layout")),
        (
            "README.md, ## Writing a backend",
            readme_section(&readme, "## Writing a backend"),
        ),
        ("lock-core/src/backend.rs (module docs)", module_docs),
    ]
}

#[test]
fn every_backend_crate_is_named_where_a_reader_looks() {
    let crates = backend_crates();
    assert!(
        crates.len() >= 5 && crates.iter().any(|c| c == "lock-etcd"),
        "the backend crates were not found: {crates:?}"
    );
    for (place, text) in places() {
        let left_out = missing(&text, &crates);
        assert!(
            left_out.is_empty(),
            "{place} does not name {left_out:?}: add each backend crate there"
        );
    }
}

/// The check itself fails when a crate is left out: the README's layout without
/// `lock-etcd` is caught.
#[test]
fn a_backend_left_out_is_caught() {
    let crates = backend_crates();
    let (_, layout) = places()
        .into_iter()
        .find(|(place, _)| place.ends_with("Layout"))
        .expect("the layout section");
    let without = layout.replace("lock-etcd", "lock-something");
    assert_eq!(missing(&without, &crates), vec!["lock-etcd"]);
}

/// The map names where the recipes above the lock live: fences, `lock_all`, elections.
#[test]
fn the_map_names_the_recipes_above_the_lock() {
    let map = read("docs/MAP.md");
    for file in [
        "lock-core/src/fence.rs",
        "lock-core/src/client/locker/all.rs",
        "lock-core/src/client/locker/elect.rs",
        "lock-core/src/backend/routine.rs",
        "lock-mysql/src/sql/procedure.sql",
    ] {
        assert!(map.contains(file), "docs/MAP.md does not name {file}");
        assert!(root().join(file).exists(), "{file} is gone: update the map");
    }
}

/// A file the conformance crate's docs cite as its own is in the crate (shipped with it).
#[test]
fn the_conformance_docs_cite_only_files_it_ships() {
    let docs = read("conformance/src/lib.rs");
    let cited: Vec<&str> = docs
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|q| q.ends_with(".md") && !q.contains(' ') && !q.contains('/'))
        .collect();
    assert!(cited.contains(&"ANCHOR-TESTS.md"), "{cited:?}");
    for file in cited {
        assert!(
            root().join("conformance").join(file).exists(),
            "conformance's docs cite {file}, which the crate does not hold"
        );
    }
}
