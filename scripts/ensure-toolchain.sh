#!/usr/bin/env bash
# Makes sure cargo (with clippy and rustfmt) is on PATH, installing Debian's if it is missing.
# Sourced by the other scripts.
if [ -d "$HOME/.cargo/bin" ]; then PATH="$HOME/.cargo/bin:$PATH"; fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: installing Debian's Rust toolchain (needs root)" >&2
  apt-get update -qq && apt-get install -y -qq cargo rustc rustfmt rust-clippy >&2 || {
    echo "could not install cargo; install Rust 1.89 or newer (rustup.rs) and run again" >&2
    exit 1
  }
fi
