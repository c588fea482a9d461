#!/usr/bin/env bash
# Runs every test that needs no GPU: unit and property tests, loopback
# integration tests, and NVRTC compilation of every CUDA source.
# GPU tests are marked #[ignore = "needs a GPU"]; run them on a GPU box with
#   scripts/test.sh -- --include-ignored
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. scripts/env.sh
# Fail (rather than skip) the NVRTC compile checks when NVRTC is missing.
export FRAMELOOP_REQUIRE_NVRTC="${FRAMELOOP_REQUIRE_NVRTC:-1}"
# Fail (rather than skip) the tests that drive tcpdump, tshark, GStreamer and systemd-analyze.
export FRAMELOOP_REQUIRE_TOOLS="${FRAMELOOP_REQUIRE_TOOLS:-1}"
cargo test --all-targets "$@"
