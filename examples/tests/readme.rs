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
