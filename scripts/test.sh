#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, every crate's tests (the conformance suite on
# every backend included), and every example.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-toolchain.sh

step() { printf '\n== %s\n' "$*"; }

step "format"
cargo fmt --all -- --check
step "lints"
cargo clippy --locked --workspace --all-targets -- -D warnings
step "docs"
RUSTDOCFLAGS=-Dwarnings cargo doc --locked --workspace --no-deps -q
step "examples"
cargo run --locked -q -p examples --example cron_report
step "tests"
cargo test --locked --workspace
