//! Nothing forgotten: every backend (and variant) declared in the workspace runs the suite.
//!
//! A backend declares each name it reports as `const ..NAME: &'static str = "...";` in a
//! source file (or an example) that implements `LockBackend`, `Storage` or `Layer`, above
//! any `#[cfg(test)]` item (what follows is unit-test code) and outside a unit-test module
//! of its own file (`tests.rs`, `tests_*.rs`); a test file (or the example's tests) wires it
//! with `suite!("...", ..)`.
//! The suite's own `backend_reports_its_name` case checks that the wired name is the one the
//! backend reports, so the two cannot drift apart.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn quoted_after<'a>(text: &'a str, marker: &str) -> Vec<&'a str> {
    text.match_indices(marker)
        .filter_map(|(i, _)| {
            let rest = &text[i + marker.len()..];
            rest.split('"').next()
        })
        .collect()
}

#[test]
fn every_backend_in_the_workspace_runs_the_suite() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let (mut declared, mut wired) = (BTreeSet::new(), BTreeSet::new());
    for member in std::fs::read_dir(root).expect("workspace").flatten() {
        let crate_dir = member.path();
        if !crate_dir.join("Cargo.toml").exists() {
            continue;
        }
        let (mut sources, mut tests) = (Vec::new(), Vec::new());
        rust_files(&crate_dir.join("src"), &mut sources);
        rust_files(&crate_dir.join("examples"), &mut sources);
        rust_files(&crate_dir.join("tests"), &mut tests);
        rust_files(&crate_dir.join("examples"), &mut tests);
        // A unit-test module in a file of its own (`storage/tests.rs`, `rules/tests_*.rs`)
        // holds fixtures of those tests, as a `#[cfg(test)]` module at a file's end does.
        sources.retain(|file| {
            let name = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            name != "tests" && !name.starts_with("tests_")
        });
        for file in sources {
            let text = std::fs::read_to_string(&file).expect("source");
            // Code only: a backend in a doc comment is an illustration (its doctest runs it),
            // and one in a unit-test module (`#[cfg(test)] mod tests`, the end of a file) is
            // a fixture of that module's own tests (a storage that always conflicts, say).
            let text: String = text
                .lines()
                .take_while(|line| line.trim() != "#[cfg(test)]")
                .filter(|line| !line.trim_start().starts_with("//"))
                .map(|line| format!("{line}\n"))
                .collect();
            // A backend of its own, a storage that the adapter makes one, or a layer.
            if ["LockBackend for", "Storage for", "Layer for"]
                .iter()
                .any(|implemented| text.contains(implemented))
            {
                declared.extend(
                    quoted_after(&text, "NAME: &'static str = \"")
                        .into_iter()
                        .map(String::from),
                );
            }
        }
        for file in tests {
            let text = std::fs::read_to_string(&file).expect("test source");
            wired.extend(
                quoted_after(&text, "suite!(\"")
                    .into_iter()
                    .map(String::from),
            );
        }
    }
    assert!(
        ["memory", "file", "versioned", "audited"]
            .iter()
            .all(|name| declared.contains(*name)),
        "the scan found {declared:?}"
    );
    let missing: Vec<_> = declared.difference(&wired).collect();
    assert!(
        missing.is_empty(),
        "backends not wired into the conformance suite: {missing:?} (wired: {wired:?})"
    );
}

/// Every test the contract (`lock-core/src/contract.md`) names as "Checked by" exists: a
/// case of the suite, or a test function somewhere in the workspace.
#[test]
fn every_case_the_contract_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let contract = std::fs::read_to_string(root.join("lock-core/src/contract.md")).unwrap();
    let mut sources = Vec::new();
    rust_files(root, &mut sources);
    let code: String = sources
        .iter()
        .filter(|p| !p.components().any(|c| c.as_os_str() == "target"))
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect();
    let suite = std::fs::read_to_string(root.join("conformance/src/lib.rs")).unwrap();
    let mut named = 0;
    for sentence in contract.split("Checked by").skip(1) {
        let sentence = sentence.split('.').next().unwrap_or("");
        for name in sentence.split('`').skip(1).step_by(2) {
            named += 1;
            let in_suite = suite.contains(&format!("            {name},"));
            let a_test = code.contains(&format!("fn {name}("));
            assert!(
                in_suite || a_test,
                "the contract names `{name}`, which is neither a suite case nor a test"
            );
        }
    }
    assert!(
        named > 40,
        "only {named} names found: is the contract's format changed?"
    );
}

/// Every public case of the suite (`pub async fn name(suite: &Suite) -> CaseResult` in the
/// crate's sources) is in `for_each_case!`'s list, so `suite!` runs it.
#[test]
fn every_public_case_is_in_the_list() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut missing = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for name in quoted_fn_names(&text) {
            // The worker is the multi-process cases' child side, not a case.
            if name != "run_worker" && !lock_conformance::CASE_NAMES.contains(&name) {
                missing.push(format!("{name} ({})", file.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "public cases missing from for_each_case!: {missing:?}"
    );
    assert!(lock_conformance::CASE_NAMES.len() > 40);
}

/// The names of `pub async fn NAME(suite: &Suite) -> CaseResult` in `text`.
fn quoted_fn_names(text: &str) -> Vec<&str> {
    text.match_indices("pub async fn ")
        .filter_map(|(i, m)| {
            let rest = &text[i + m.len()..];
            let (name, sig) = rest.split_once('(')?;
            sig.starts_with("suite: &Suite) -> CaseResult")
                .then_some(name)
        })
        .collect()
}
