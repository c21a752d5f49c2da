#!/usr/bin/env bash
# Soak test (loopback only, bounded): a release modelshim in front of a
# faulty mock upstream under mixed streamed / non-streamed traffic.
# Asserts flat RSS, zero panics, zero lost responses, clean SIGTERM exit.
#   scripts/soak.sh                 # 10 minutes, 32 clients
#   SOAK_SECS=60 SOAK_CLIENTS=8 scripts/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${SOAK_SECS:-600}"
clients="${SOAK_CLIENTS:-32}"
cargo build --release --bin modelshim --example soak
target="${CARGO_TARGET_DIR:-target}"
exec "$target/release/examples/soak" --bin "$target/release/modelshim" --secs "$secs" --concurrency "$clients"
