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
# redis-server, Postgres (initdb, postgres), pgbouncer, MariaDB (mariadbd,
# mariadb-install-db, the mariadb client), and openssl for a test certificate.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
{ [ -x /usr/sbin/mariadbd ] || command -v mariadbd >/dev/null 2>&1; } && command -v mariadb-install-db >/dev/null 2>&1 \
  && command -v mariadb >/dev/null 2>&1 || missing+=(mariadb-server)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian's ${missing[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
fi
export PATH="$PATH:/usr/sbin"

# Shared servers for the conformance suites, lockrun's tests and the examples: the ones
# configured (REDIS_URL, DATABASE_URL) or on the default ports, else started here.
# Servers this script starts are stopped when it ends, however it ends.
started=()
stop_started() {
  for what in "${started[@]}"; do
    case $what in
      redis) redis-cli -p 6379 shutdown nosave >/dev/null 2>&1 || true ;;
      postgres) run_pg "$pg_bin/pg_ctl" -D "$pg_dir/data" -m fast stop >/dev/null 2>&1 || true ;;
      mariadb) kill "$(cat "$my_dir/pid" 2>/dev/null)" >/dev/null 2>&1 || true ;;
    esac
  done
}
trap stop_started EXIT

if [ -z "${REDIS_URL:-}" ] && ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
  echo "no Redis on 127.0.0.1:6379: starting one" >&2
  redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no --daemonize yes >&2
  started+=(redis)
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null && break; sleep 0.1; done
fi
if [ -z "${DATABASE_URL:-}" ] && ! psql -w -q -tA -c 'SELECT 1' postgres://postgres@127.0.0.1:5432/postgres >/dev/null 2>&1; then
  # No Postgres that lets `postgres` in without a password: our own on port 55432.
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  pg_dir=/tmp/distlock-ci-postgres
  run_pg() { if [ "$(id -u)" -eq 0 ]; then setpriv --reuid=postgres --regid=postgres --clear-groups -- "$@"; else "$@"; fi; }
  if ! (exec 3<>/dev/tcp/127.0.0.1/55432) 2>/dev/null; then
    echo "no Postgres to log in to on 127.0.0.1:5432: starting one on port 55432" >&2
    rm -rf "$pg_dir" && mkdir -p "$pg_dir"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$pg_dir"
    run_pg "$pg_bin/initdb" -U postgres --auth=trust -D "$pg_dir/data" >/dev/null
    run_pg "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/log" -w \
      -o "-p 55432 -c listen_addresses=127.0.0.1 -k $pg_dir -c max_connections=300 -c fsync=off" start >&2
    started+=(postgres)
  fi
  export DATABASE_URL=postgres://postgres@127.0.0.1:55432/postgres
fi
if [ -z "${MYSQL_URL:-}" ] && ! mariadb -h127.0.0.1 -P3306 -uroot -e 'SELECT 1' test >/dev/null 2>&1; then
  # No MariaDB that lets root in without a password to database `test`: our own on 53306.
  my_dir=/tmp/distlock-ci-mariadb
  if ! (exec 3<>/dev/tcp/127.0.0.1/53306) 2>/dev/null; then
    echo "no MariaDB to log in to on 127.0.0.1:3306: starting one on port 53306" >&2
    rm -rf "$my_dir" && mkdir -p "$my_dir/tmp"
    as_root=(); [ "$(id -u)" -eq 0 ] && as_root=(--user=root)
    mariadb-install-db --no-defaults --datadir="$my_dir/data" --tmpdir="$my_dir/tmp" --auth-root-authentication-method=normal \
      --skip-test-db "${as_root[@]}" >/dev/null
    mariadbd --no-defaults --datadir="$my_dir/data" --tmpdir="$my_dir/tmp" --socket="$my_dir/sock" --pid-file="$my_dir/pid" \
      --port=53306 --bind-address=127.0.0.1 --skip-log-bin --max-connections=300 "${as_root[@]}" \
      >"$my_dir/log" 2>&1 &
    started+=(mariadb)
    for _ in $(seq 300); do mariadb --socket="$my_dir/sock" -uroot -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
    mariadb --socket="$my_dir/sock" -uroot -e "CREATE DATABASE IF NOT EXISTS test;
      CREATE USER IF NOT EXISTS root@'127.0.0.1'; GRANT ALL ON *.* TO root@'127.0.0.1' WITH GRANT OPTION;"
  fi
  export MYSQL_URL=mysql://root@127.0.0.1:53306/test
fi
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
MYSQL_URL=${MYSQL_URL:-mysql://root@127.0.0.1:3306/test}
export REDIS_URL DATABASE_URL MYSQL_URL

# rustfmt and clippy come with rustup's toolchain, not with Debian's cargo-web: CI must
# have them; elsewhere their steps are skipped, saying how to get them.
tool_or_skip() {
  if cargo "$1" --version >/dev/null 2>&1; then return 0; fi
  if [ "${CI:-}" = "true" ]; then
    echo "cargo $1 is missing, and CI must run it: rustup component add $2" >&2
    exit 1
  fi
  echo "cargo $1 is not installed: step skipped (rustup component add $2)" >&2
  return 1
}
step "format"
if tool_or_skip fmt rustfmt; then cargo fmt --all -- --check; fi
step "lints"
if tool_or_skip clippy clippy; then cargo clippy --locked --workspace --all-targets -- -D warnings; fi
step "docs"
RUSTDOCFLAGS=-Dwarnings cargo doc --locked --workspace --no-deps -q
step "examples"
cargo run --locked -q -p examples --example cron_report
cargo run --locked -q -p examples --example custom_backend
cargo run --locked -q -p examples --example dev_prod_swap
LOCK_URL=$REDIS_URL cargo run --locked -q -p examples --example dev_prod_swap
LOCK_URL=$DATABASE_URL cargo run --locked -q -p examples --example dev_prod_swap
LOCK_URL=$MYSQL_URL cargo run --locked -q -p examples --example dev_prod_swap
# A service that serves its lock metrics: it scrapes its own /metrics and fails unless they
# moved as locks were taken and lost.
cargo run --locked -q -p examples --example metrics_service -- --seconds 2
LOCK_URL=$REDIS_URL cargo run --locked -q -p examples --example metrics_service -- --seconds 2
# The same program on a private Redis Cluster and Sentinel set (LOCK_URL set by run_on).
cargo build --locked -q -p examples --example dev_prod_swap
cargo run --locked -q -p test-servers --example run_on -- cluster target/debug/examples/dev_prod_swap
cargo run --locked -q -p test-servers --example run_on -- sentinel target/debug/examples/dev_prod_swap
step "tests"
cargo test --locked --workspace
step "lock-config without its backends"
# A URL whose backend the build left out must say which cargo feature to enable.
cargo test --locked -q -p lock-config --no-default-features
