# Sourced before cargo test (README, .ci/run): puts the locally installed
# NVRTC on the loader path and makes the tests that need NVRTC or an external
# tool (tcpdump, tshark, GStreamer, systemd-analyze) fail instead of skipping.
# (On a GPU box the CUDA toolkit's own libnvrtc is found through ldconfig or
# /usr/local/cuda/lib64 instead.)
_fl_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -d "$_fl_root/.deps/nvrtc/nvidia/cu13/lib" ]; then
  export LD_LIBRARY_PATH="$_fl_root/.deps/nvrtc/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ -d /usr/local/cuda/lib64 ]; then
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64"
fi
# A toolchain that scripts/setup.sh just installed with rustup.
if ! command -v cargo >/dev/null && [ -f "$HOME/.cargo/env" ]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
export FRAMELOOP_REQUIRE_NVRTC="${FRAMELOOP_REQUIRE_NVRTC:-1}"
export FRAMELOOP_REQUIRE_TOOLS="${FRAMELOOP_REQUIRE_TOOLS:-1}"
unset _fl_root
