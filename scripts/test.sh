#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, every crate's tests (the conformance suite on
# every backend included), and every example.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-toolchain.sh

step() { printf '\n== %s\n' "$*"; }

step "servers"
# The conformance suites use REDIS_URL / DATABASE_URL when set, else the servers on
# 127.0.0.1:6379 / :5432 when they answer, else start private ones; the fault tests always
# start private servers (to restart, pause or kill them). So the binaries must be here:
# redis-server, Postgres (initdb, postgres), pgbouncer, and openssl for a test certificate.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian's ${missing[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
fi
export PATH="$PATH:/usr/sbin"

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
