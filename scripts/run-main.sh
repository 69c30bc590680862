#!/usr/bin/env bash
# The main job, on the file backend, no server needed: two "servers" race for the nightly
# report lock; one writes the report, the other skips the run.
set -euo pipefail
cd "$(dirname "$0")/.."
# The file backend alone is built (no etcd client, so no protoc; no database clients).
NEEDS_PROTOC=no
. scripts/ensure-toolchain.sh
cargo run --locked -q -p examples --no-default-features --example cron_report
# The same story with lockrun, the command-line tool: two runs of one job at once on the file
# lock; the second gives up with status 75 while the first holds the lock.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cargo build --locked -q -p lockrun --no-default-features
lockrun="${CARGO_TARGET_DIR:-target}/debug/lockrun"
echo
echo "lockrun: two runs of nightly-report at once (file lock in $dir)"
"$lockrun" --backend "file://$dir" --key nightly-report -- sh -c 'echo "  run 1: writing the report"; sleep 2; echo "  run 1: done"' &
first=$!
sleep 1
status=0
"$lockrun" --backend "file://$dir" --key nightly-report -- echo "  run 2: writing the report" || status=$?
case $status in
  75) meaning="the lock was busy: run 1 held it" ;;
  0) meaning="it ran: run 1 no longer held the lock" ;;
  *) meaning="see lockrun's message above" ;;
esac
echo "  run 2 exited with $status ($meaning)"
wait "$first"
[ "$status" -eq 75 ] || { echo "expected run 2 to find the lock busy (75)" >&2; exit 1; }
