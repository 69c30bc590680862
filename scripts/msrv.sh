#!/usr/bin/env bash
# Keeps the declared MSRV (`rust-version` in Cargo.toml) true. Three checks hold it:
# 1. `test-servers/tests/msrv.rs` (in the test command): no package the workspace builds on
#    this platform (dependencies, dev- and build-dependencies) declares a `rust-version`
#    above it; such a dependency makes `cargo build --locked` refuse at the MSRV
#    (ordered-float 5.5.1 did, at 1.90);
# 2. clippy's `incompatible_msrv` lint (the test command's clippy step, warnings denied)
#    refuses a standard-library item stabilised after it;
# 3. this script: when a toolchain of that very version is installed
#    (`rustup toolchain install 1.90`), it builds the published crates with it. Where none
#    can be installed (this project's CI machine has one toolchain and cannot fetch
#    another), it says so, and checks 1 and 2 are what holds the MSRV.
set -euo pipefail
cd "$(dirname "$0")/.."

msrv=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -1)
[ -n "$msrv" ] || { echo "msrv: no rust-version in Cargo.toml" >&2; exit 1; }

published=(lock-core lock-conformance lock-file lock-redis lock-sql lock-postgres lock-mysql lock-etcd lock-config lockrun distlock)
# Only a toolchain already installed: `rustup run` may try to download a missing one.
if command -v rustup >/dev/null 2>&1 && rustup toolchain list 2>/dev/null | grep -q "^$msrv[.-]"; then
  args=()
  for p in "${published[@]}"; do args+=(-p "$p"); done
  rustup run "$msrv" cargo check --locked --all-features "${args[@]}"
  echo "msrv: the published crates build with Rust $msrv"
else
  echo "msrv: no Rust $msrv toolchain here to build with (rustup toolchain install $msrv);" \
    "the dependency check (test-servers/tests/msrv.rs) and clippy's incompatible_msrv hold it"
fi
