#!/usr/bin/env bash
# Makes sure a cargo new enough for this workspace is on PATH. Sourced by the other scripts
# from the repository's root.
#
# The minimum Rust version is stated once, as `rust-version` in Cargo.toml. When cargo is
# missing or older (Debian 12's own `cargo` is 1.63), Debian 12's newer toolchain packages
# (`cargo-web`, `rustc-web`: Rust 1.96) are installed; anywhere else the script says what
# to do. rustfmt and clippy are not part of those packages: see scripts/test.sh.

if [ -d "$HOME/.cargo/bin" ]; then PATH="$HOME/.cargo/bin:$PATH"; fi

rust_min=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1)

# The version of the rustc that cargo runs, e.g. 1.95.0; empty when there is none.
rust_version() {
  command -v cargo >/dev/null 2>&1 || return 0
  rustc --version 2>/dev/null | sed -n 's/^rustc \([0-9][0-9.]*\).*/\1/p'
}

# Whether version $1 is at least $2.
at_least() {
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]
}

have=$(rust_version)
if [ -z "$have" ] || ! at_least "$have" "$rust_min"; then
  echo "this workspace needs Rust $rust_min or newer; found: ${have:-no cargo}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"
    else echo "not root and no sudo: Debian's packages cannot be installed from here" >&2; fi
  fi
  if command -v apt-get >/dev/null 2>&1 \
    && $sudo apt-get update -qq >&2 \
    && apt-cache show cargo-web >/dev/null 2>&1; then
    echo "installing Debian's cargo-web and rustc-web" >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends cargo-web rustc-web >&2
    hash -r
    have=$(rust_version)
  fi
  if [ -z "$have" ] || ! at_least "$have" "$rust_min"; then
    web=$(apt-cache policy rustc-web 2>/dev/null | sed -n 's/^ *Candidate: //p')
    cat >&2 <<MSG
could not install Rust $rust_min or newer (found: ${have:-no cargo}; Debian's rustc-web: ${web:-none}).
On Debian 12, rustc-web 1.96 comes from bookworm-security: add
  deb http://deb.debian.org/debian-security bookworm-security main
to /etc/apt/sources.list and run this script again. Or install Rust with rustup (https://rustup.rs):
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --component rustfmt clippy
then open a new shell (or run: . "\$HOME/.cargo/env") and run this script again.
MSG
    exit 1
  fi
  echo "using Rust $have" >&2
fi

# Installs Debian packages $@ quietly, as root or through sudo; fails where there is no apt-get.
apt_install() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
  command -v apt-get >/dev/null 2>&1 \
    && $sudo apt-get update -qq >&2 \
    && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >&2
}

# The CA certificates that cargo checks crates.io's with: a minimal Debian (debootstrap's
# minbase, many container images) has none, and cargo then fails with "Problem with the
# SSL CA cert". Only where dpkg can say they are missing.
if command -v dpkg >/dev/null 2>&1 && ! dpkg -s ca-certificates >/dev/null 2>&1; then
  echo "the CA certificates cargo needs to download crates are missing: installing Debian's ca-certificates" >&2
  if ! apt_install ca-certificates; then
    echo "could not install ca-certificates: install them and run this script again" >&2
    exit 1
  fi
fi

# protoc and the well-known types it imports (google/protobuf/descriptor.proto: Debian's
# libprotobuf-dev, which apt installs with protobuf-compiler only as a recommendation):
# etcd-client (lock-etcd) compiles etcd's API at build time, and the workspace's examples
# build every backend. A script that builds no etcd (the main job: the file backend alone)
# sets NEEDS_PROTOC=no before sourcing this.
if [ "${NEEDS_PROTOC:-yes}" != no ] \
  && { ! command -v protoc >/dev/null 2>&1 || ! [ -f /usr/include/google/protobuf/descriptor.proto ]; }; then
  echo "protoc or its well-known types are missing (lock-etcd's etcd client compiles etcd's API with them): installing Debian's protobuf-compiler and libprotobuf-dev" >&2
  if ! apt_install protobuf-compiler libprotobuf-dev; then
    echo "could not install protobuf-compiler and libprotobuf-dev: install protoc with its include files (https://protobuf.dev/installation/) and run this script again" >&2
    exit 1
  fi
  hash -r
fi
