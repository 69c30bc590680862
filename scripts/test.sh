#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, every crate's tests (the conformance suite on
# every backend included), and every example.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-toolchain.sh

step() { printf '\n== %s\n' "$*"; }

step "servers"
# lock-redis's tests use REDIS_URL, else a Redis on 127.0.0.1:6379, else start a private
# redis-server themselves: make sure the binary is there for that last case.
if [ -z "${REDIS_URL:-}" ] && ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null && ! command -v redis-server >/dev/null 2>&1; then
  echo "no Redis reachable and no redis-server: installing Debian's redis-server" >&2
  apt-get update -qq && apt-get install -y -qq redis-server >&2
fi
command -v redis-server >/dev/null 2>&1 || echo "note: no redis-server binary; the fault tests that need a private server will fail" >&2

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
