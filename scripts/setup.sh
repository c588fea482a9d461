#!/usr/bin/env bash
# Installs what frameloop needs to build and test on a fresh Debian/Ubuntu
# machine: system packages, and NVIDIA's NVRTC from PyPI (so every CUDA
# kernel can be compiled and checked even on a machine without a GPU).
# Safe to run again; everything goes to the system or to ./.deps.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if command -v apt-get >/dev/null; then
  echo "frameloop setup: installing system packages" >&2
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    build-essential pkg-config python3 python3-pip python3-venv ca-certificates curl systemd \
    tcpdump tshark nats-server gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good \
    cmake libclang-dev chromium >/dev/null
fi

if ! command -v cargo >/dev/null; then
  echo "frameloop setup: installing the Rust toolchain (rustup)" >&2
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi

# CI checks formatting and lints (.ci/run); a minimal rustup profile lacks both.
if command -v rustup >/dev/null; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || echo "frameloop setup: cannot add rustfmt/clippy with rustup" >&2
fi

NVRTC_DIR=.deps/nvrtc
if [ ! -e "$NVRTC_DIR/nvidia/cu13/lib/libnvrtc.so.13" ]; then
  echo "frameloop setup: installing NVRTC 13.0 (pip wheel nvidia-cuda-nvrtc) into $NVRTC_DIR" >&2
  python3 -m pip install -q --disable-pip-version-check --no-deps \
    --target "$NVRTC_DIR" nvidia-cuda-nvrtc==13.0.88
fi
echo "frameloop setup: done" >&2
