#!/usr/bin/env bash
# Installs what building and testing Lazarus needs on a fresh Debian machine that has the
# Rust toolchain: the hwloc library (core discovery and pinning) and pkg-config; with
# --browser also headless Chromium and chromedriver (the dashboard's browser test); with
# --rdma the libibverbs and librdmacm development packages and libclang, which building
# the `rdma` feature (rdma-sys generates its bindings with bindgen) needs.
# Idempotent: installs only what is missing.
set -euo pipefail

command -v cargo >/dev/null || {
    echo "error: cargo not found; install the Rust toolchain (https://rustup.rs) first" >&2
    exit 1
}

missing=()
command -v pkg-config >/dev/null || missing+=(pkg-config)
pkg-config --exists 'hwloc >= 2.0' 2>/dev/null || missing+=(libhwloc-dev)
for option in "$@"; do
    case "$option" in
    --browser)
        [ -x /usr/bin/chromium ] || missing+=(chromium)
        [ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
        ;;
    --rdma)
        pkg-config --exists libibverbs 2>/dev/null || missing+=(libibverbs-dev)
        pkg-config --exists librdmacm 2>/dev/null || missing+=(librdmacm-dev)
        compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' >/dev/null || missing+=(libclang-dev)
        ;;
    *)
        echo "setup: unknown option $option (expected --browser, --rdma)" >&2
        exit 2
        ;;
    esac
done

if ((${#missing[@]})); then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "setup: installing ${missing[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
