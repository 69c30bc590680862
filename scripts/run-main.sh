#!/usr/bin/env bash
# The main job, on the file backend, no server needed: two "servers" race for the nightly
# report lock; one writes the report, the other skips the run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-toolchain.sh
exec cargo run --locked -q -p examples --example cron_report
