//! The README's "Testing your own backend" harness is `tests/conformance.rs` of this crate,
//! byte for byte: what a backend author pastes is what runs here, the whole suite, green
//! (a method of `Harness` left out skips only the cases that need it).

/// The README's block under `heading`, fenced as `fence`.
fn readme_block(heading: &str, fence: &str) -> String {
    let readme = include_str!("../../README.md");
    let section = readme
        .split_once(heading)
        .unwrap_or_else(|| panic!("the README has no {heading:?}"))
        .1;
    let block = section
        .split_once(fence)
        .unwrap_or_else(|| panic!("no {fence:?} block under {heading:?}"))
        .1;
    block
        .split_once("```\n")
        .expect("the block ends")
        .0
        .to_owned()
}

#[test]
fn the_readme_harness_is_the_one_that_runs() {
    let readme = readme_block("## Testing your own backend\n", "```rust,ignore\n");
    assert_eq!(
        readme,
        include_str!("conformance.rs"),
        "the README's harness and examples/tests/conformance.rs differ: change both"
    );
}

/// crates.io shows the README of each crate without the repository around it: a relative
/// link or image there leads nowhere. Links are absolute, or none.
#[test]
fn the_readmes_have_no_relative_links() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let mut readmes = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root).expect("workspace").flatten() {
        let readme = entry.path().join("README.md");
        if readme.exists() {
            readmes.push(readme);
        }
    }
    for readme in readmes {
        let text = std::fs::read_to_string(&readme).expect("readable");
        for (i, _) in text.match_indices("](") {
            let target = &text[i + 2..];
            assert!(
                target.starts_with("https://") || target.starts_with("http://"),
                "{}: a relative link, which crates.io cannot follow: ...{}",
                readme.display(),
                &text[i.saturating_sub(40)..(i + 40).min(text.len())]
            );
        }
    }
}

/// Every file the README names by its path (`examples/examples/leader.rs`, `TESTING.md`,
/// `docs/wait-times.png`, ...) is there.
#[test]
fn the_files_the_readme_names_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let readme = include_str!("../../README.md");
    let named = readme.split('`').skip(1).step_by(2).filter(|quoted| {
        !quoted.contains(' ')
            && [".rs", ".md", ".sh", ".py", ".png", ".sql"]
                .iter()
                .any(|ext| quoted.ends_with(ext))
    });
    let mut checked = 0;
    for path in named {
        // `lockrun/tests/lockrun.rs`'s `case`: the file part.
        let path = path.split("::").next().unwrap_or(path);
        assert!(
            root.join(path).exists(),
            "the README names {path}, which is not there"
        );
        checked += 1;
    }
    assert!(
        checked >= 10,
        "only {checked} paths found: the pattern broke"
    );
}

/// CI runs the very test command the README gives a newcomer: `.ci/run` ends by running
/// the command of the README's "whole test suite" row, from the repository's root.
#[test]
fn ci_runs_the_readmes_test_command() {
    let readme = include_str!("../../README.md");
    let row = readme
        .lines()
        .find(|l| l.starts_with("| the whole test suite"))
        .expect("the README's test command row");
    let command = row
        .trim_end_matches('|')
        .rsplit('|')
        .next()
        .expect("a command cell")
        .trim()
        .trim_matches('`');
    let ci = include_str!("../../.ci/run");
    assert!(
        ci.contains("cd \"$(dirname \"$0\")/..\""),
        ".ci/run no longer runs from the repository's root:\n{ci}"
    );
    let last = ci
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .expect("a command");
    assert_eq!(
        last.trim().trim_start_matches("exec ").trim(),
        command,
        ".ci/run and the README's test command differ: change both"
    );
}
