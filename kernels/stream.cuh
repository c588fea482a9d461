// Sub-frame streaming's state (src/gpu/streaming.rs): what the pulls have
// copied of the frame after the last claimed one into the staging buffer.
// Shared by the pull and tail kernels (stage.cu) and by the tiled fused
// kernel, which reads a streamed frame's pulled part from the staging
// buffer and the rest from the slot itself.
#pragma once
#include "ops_common.cuh"

// Device memory, zeroed at allocation. `seq`/`pulled`: the staging buffer
// holds bytes [0, pulled) of ring sequence `seq` (pulled a multiple of 16).
// `pending_not`/`ticket`: the running pull's agreement (fl_stream_pull, stage.cu).
struct FlStreamState {
  unsigned long long seq;
  unsigned long long pulled;
  unsigned long long pending_not;  // max over blocks of ~end (0: none yet)
  unsigned int ticket;             // blocks of the running pull that are done
  unsigned int _pad;
};

