# Sourced by the scripts: puts the locally installed NVRTC on the loader path.
# (On a GPU box the CUDA toolkit's own libnvrtc is found through ldconfig or
# /usr/local/cuda/lib64 instead.)
_fl_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -d "$_fl_root/.deps/nvrtc/nvidia/cu13/lib" ]; then
  export LD_LIBRARY_PATH="$_fl_root/.deps/nvrtc/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ -d /usr/local/cuda/lib64 ]; then
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64"
fi
unset _fl_root
