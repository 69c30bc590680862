#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, every crate's tests (the conformance suite on
# every backend included), and every example.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-toolchain.sh

step() { printf '\n== %s\n' "$*"; }

step "servers"
# The conformance suites use REDIS_URL / DATABASE_URL / MYSQL_URL when set, else the servers
# on 127.0.0.1:6379 / :5432 / :3306 when they answer, else start private ones; the fault tests always
# start private servers (to restart, pause or kill them). So the binaries must be here:
# redis-server, Postgres (initdb, postgres), pgbouncer, MariaDB (mariadbd,
# mariadb-install-db, the mariadb client), etcd and etcdctl (private members for the etcd
# tests), openssl for a test certificate, and valgrind (the client must run under it:
# tests/valgrind.rs), and Debian's chromium (a history failure's timeline page is opened in it:
# conformance/tests/timeline_page.rs, and `lockrun serve`'s page: lockrun/tests/listing.rs), and
# tmux (`lockrun top` is checked in a real terminal). (protoc, which lock-etcd's build needs, comes with the toolchain:
# scripts/ensure-toolchain.sh.)
# Runs a command as root: directly, or through sudo; says what to do when neither works.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else
    echo "this needs root to run: $*; run the script as root, or install sudo, or install that yourself" >&2
    return 1
  fi
}
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
{ [ -x /usr/sbin/mariadbd ] || command -v mariadbd >/dev/null 2>&1; } && command -v mariadb-install-db >/dev/null 2>&1 \
  && command -v mariadb >/dev/null 2>&1 || missing+=(mariadb-server)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian's ${missing[*]}" >&2
  as_root apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
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

# Ten candidate ports from $1 on, below Linux's ephemeral range (32768 and up by default),
# so that no client socket holds one as its local port; a port something listens on is
# skipped, and a server that still cannot bind tries the next.
free_ports() {
  local port=$1 n=0
  while [ $n -lt 10 ]; do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "$port"; n=$((n + 1)); fi
    port=$((port + 1))
  done
}
if [ -z "${REDIS_URL:-}" ] && ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
  echo "no Redis on 127.0.0.1:6379: starting one" >&2
  redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no --daemonize yes >&2
  started+=(redis)
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null && break; sleep 0.1; done
fi
if [ -z "${DATABASE_URL:-}" ] && ! psql -w -q -tA -c 'SELECT 1' postgres://postgres@127.0.0.1:5432/postgres >/dev/null 2>&1; then
  # No Postgres that lets `postgres` in without a password: our own, on the first free port
  # from 25432.
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  pg_dir=/tmp/distlock-ci-postgres
  # As the postgres user when root (Postgres refuses to run as root), from / so that it
  # can change into its working directory.
  run_pg() { if [ "$(id -u)" -eq 0 ]; then (cd / && setpriv --reuid=postgres --regid=postgres --clear-groups -- "$@"); else "$@"; fi; }
  echo "no Postgres to log in to on 127.0.0.1:5432: starting one (log: $pg_dir/log)" >&2
  # A private Postgres an interrupted run left behind.
  [ -f "$pg_dir/data/postmaster.pid" ] && run_pg "$pg_bin/pg_ctl" -D "$pg_dir/data" -m fast stop >/dev/null 2>&1 || true
  rm -rf "$pg_dir" && mkdir -p "$pg_dir"
  [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$pg_dir"
  run_pg "$pg_bin/initdb" -U postgres --auth=trust -D "$pg_dir/data" >/dev/null
  pg_port=""
  for port in $(free_ports 25432); do
    if run_pg "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/log" -w \
      -o "-p $port -c listen_addresses=127.0.0.1 -k $pg_dir -c max_connections=300 -c fsync=off" start >/dev/null 2>&1; then
      pg_port=$port; break
    fi
  done
  if [ -z "$pg_port" ]; then
    echo "Postgres did not start; its log, $pg_dir/log, ends with:" >&2
    tail -n 20 "$pg_dir/log" >&2 || true
    exit 1
  fi
  echo "started Postgres on 127.0.0.1:$pg_port" >&2
  started+=(postgres)
  export DATABASE_URL=postgres://postgres@127.0.0.1:$pg_port/postgres
fi
if [ -z "${MYSQL_URL:-}" ] && ! mariadb -h127.0.0.1 -P3306 -uroot -e 'SELECT 1' test >/dev/null 2>&1; then
  # No MariaDB that lets root in without a password to database `test`: our own, on the
  # first free port from 23306.
  my_dir=/tmp/distlock-ci-mariadb
  echo "no MariaDB to log in to on 127.0.0.1:3306: starting one (log: $my_dir/log)" >&2
  # A private MariaDB an interrupted run left behind.
  [ -f "$my_dir/pid" ] && kill "$(cat "$my_dir/pid")" >/dev/null 2>&1 || true
  rm -rf "$my_dir" && mkdir -p "$my_dir/tmp"
  as_root_user=(); [ "$(id -u)" -eq 0 ] && as_root_user=(--user=root)
  mariadb-install-db --no-defaults --datadir="$my_dir/data" --tmpdir="$my_dir/tmp" --auth-root-authentication-method=normal \
    --skip-test-db "${as_root_user[@]}" >/dev/null
  my_port=""
  for port in $(free_ports 23306); do
    mariadbd --no-defaults --datadir="$my_dir/data" --tmpdir="$my_dir/tmp" --socket="$my_dir/sock" --pid-file="$my_dir/pid" \
      --port="$port" --bind-address=127.0.0.1 --skip-log-bin --max-connections=300 "${as_root_user[@]}" \
      >"$my_dir/log" 2>&1 &
    my_pid=$!
    for _ in $(seq 300); do
      kill -0 "$my_pid" 2>/dev/null || break
      mariadb --socket="$my_dir/sock" -uroot -e 'SELECT 1' >/dev/null 2>&1 && { my_port=$port; break; }
      sleep 0.1
    done
    [ -n "$my_port" ] && break
    kill "$my_pid" >/dev/null 2>&1 || true
    wait "$my_pid" 2>/dev/null || true
  done
  if [ -z "$my_port" ]; then
    echo "MariaDB did not start; its log, $my_dir/log, ends with:" >&2
    tail -n 20 "$my_dir/log" >&2 || true
    exit 1
  fi
  echo "started MariaDB on 127.0.0.1:$my_port" >&2
  started+=(mariadb)
  mariadb --socket="$my_dir/sock" -uroot -e "CREATE DATABASE IF NOT EXISTS test;
    CREATE USER IF NOT EXISTS root@'127.0.0.1'; GRANT ALL ON *.* TO root@'127.0.0.1' WITH GRANT OPTION;"
  export MYSQL_URL=mysql://root@127.0.0.1:$my_port/test
fi
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
MYSQL_URL=${MYSQL_URL:-mysql://root@127.0.0.1:3306/test}
export REDIS_URL DATABASE_URL MYSQL_URL

# rustfmt and clippy come with rustup's toolchain, not with Debian's cargo-web: CI must
# have them; elsewhere their steps are skipped, saying how to get them.
tool_or_skip() {
  if cargo "$1" --version >/dev/null 2>&1; then return 0; fi
  # Debian's cargo-web has them as packages of their own, at the same version.
  if [ "$(command -v cargo)" = /usr/bin/cargo ] && command -v apt-get >/dev/null 2>&1 \
    && apt-cache show "$3" >/dev/null 2>&1; then
    echo "installing Debian's $3 for cargo $1" >&2
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$3" >&2 || true
    hash -r
    if cargo "$1" --version >/dev/null 2>&1; then return 0; fi
  fi
  if [ "${CI:-}" = "true" ]; then
    echo "cargo $1 is missing, and CI must run it: rustup component add $2" >&2
    exit 1
  fi
  echo "cargo $1 is not installed: step skipped (rustup component add $2)" >&2
  return 1
}
step "format"
if tool_or_skip fmt rustfmt rustfmt-web; then cargo fmt --all -- --check; fi
step "lints"
if tool_or_skip clippy clippy rust-web-clippy; then cargo clippy --locked --workspace --all-targets -- -D warnings; fi
step "docs"
RUSTDOCFLAGS=-Dwarnings cargo doc --locked --workspace --no-deps -q
step "examples"
cargo run --locked -q -p examples --example cron_report
cargo run --locked -q -p examples --example custom_backend
cargo run --locked -q -p examples --example storage_backend
cargo run --locked -q -p examples --example dev_prod_swap
# The recipes above the lock: a leader killed and succeeded, transfers under two locks, a
# frozen holder's late write refused by the fence.
cargo run --locked -q -p examples --example leader
LOCK_URL=$REDIS_URL cargo run --locked -q -p examples --example leader
cargo run --locked -q -p examples --example transfer
LOCK_URL=$DATABASE_URL cargo run --locked -q -p examples --example transfer
cargo run --locked -q -p examples --example fenced_write
LOCK_URL=$MYSQL_URL cargo run --locked -q -p examples --example fenced_write
LOCK_URL=$REDIS_URL cargo run --locked -q -p examples --example dev_prod_swap
LOCK_URL=$DATABASE_URL cargo run --locked -q -p examples --example dev_prod_swap
LOCK_URL=$MYSQL_URL cargo run --locked -q -p examples --example dev_prod_swap
# A service that serves its lock metrics: it scrapes its own /metrics and fails unless they
# moved as locks were taken and lost.
cargo run --locked -q -p examples --example metrics_service -- --seconds 2
LOCK_URL=$REDIS_URL cargo run --locked -q -p examples --example metrics_service -- --seconds 2
# The same program on a private Redis Cluster and Sentinel set, and on private etcd
# clusters of one member and of three (LOCK_URL set by run_on).
cargo build --locked -q -p examples --example dev_prod_swap
cargo run --locked -q -p test-servers --example run_on -- cluster target/debug/examples/dev_prod_swap
cargo run --locked -q -p test-servers --example run_on -- sentinel target/debug/examples/dev_prod_swap
cargo run --locked -q -p test-servers --example run_on -- etcd target/debug/examples/dev_prod_swap
cargo run --locked -q -p test-servers --example run_on -- etcd3 target/debug/examples/dev_prod_swap
step "tests"
cargo test --locked --workspace --exclude lock-etcd
# etcd's leases are whole seconds, so each timed case of the suite runs its timeline 20
# times slower on it (lock_conformance's Pace): the cases mostly sleep, so they run many
# at once (7 minutes two at a time, about 80 s sixteen at a time).
cargo test --locked -p lock-etcd -- --test-threads 16
step "the README's snippets"
# Each Rust block of the README, compiled and run as a doctest of `distlock` with every
# feature the blocks use.
cargo test --locked -q -p distlock --all-features --doc
step "MSRV"
bash scripts/msrv.sh
step "lock-config without its backends"
# A URL whose backend the build left out must say which cargo feature to enable.
cargo test --locked -q -p lock-config --no-default-features
step "packages"
# Every published crate packaged and built from its package against the others, as
# `cargo publish` would (nothing is uploaded; see RELEASING.md). Cargo treats the packages
# of its temporary registry as it treats crates.io's, as never changing: it reuses their
# sources unpacked under $CARGO_HOME/registry/src/-HASH/NAME-VERSION and what it compiled
# of them, so with the version unchanged an earlier run's code of our crates would be
# built instead of today's. Both go first: those directories (only our crates', at our
# version), and the check's own target directory (about 3 minutes to build again).
version=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml | head -1)
for crate in lock-core lock-conformance lock-file lock-redis lock-sql lock-postgres lock-mysql lock-etcd lock-config lockrun distlock; do
  rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/"$crate-$version"
done
rm -rf target/publish-check
CARGO_TARGET_DIR=target/publish-check cargo publish --workspace --dry-run --locked --allow-dirty -q
# The check's target directory is a whole second build: it goes, so the disk it took is free
# again (the next run removes and rebuilds it anyway).
rm -rf target/publish-check
