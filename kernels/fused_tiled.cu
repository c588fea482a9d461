// tiled fused chain: the built-in operators of a chain (the FusedProgram that
// src/gpu/fused.rs encodes) in one kernel per frame across many blocks, for
// frames whose samples do not fit in one block's shared memory
// (src/gpu/fused/tiled.rs launches it in the graph's IF body).
//
// The frame of n samples is cut into tiles of `tile` samples
// (ceil(n / gridDim.x) rounded up to 4, or less where the shared buffers
// hold less); block b produces the outputs of tiles b, b + gridDim.x, ...
// For each tile a block unpacks the tile plus `halo`
// samples either side straight from the slot into shared memory, then runs
// the steps there: each FIR (count / 2) and filter2d (width + 1) step
// narrows the range it still computes by its own reach, so after the last
// filter exactly the tile is left, computed from inputs no other block had
// to write. Nothing goes through global memory between steps.
//
// stats and threshold reduce the block's tile (each thread of the few
// warps the tile's length needs takes its samples in increasing index, then
// the fixed tree of fl_block_combine_warps) into the
// block's partial of that step (its tiles in order); after the last tile
// every block writes the partial of the chain's last stats and last
// threshold into
// its slot of the FlReduceScratch and takes a ticket, and the last block
// combines the slots in block-index order (src/gpu/operators/reduce.cuh). So the same
// frame gives the same bits on every run whatever order the blocks ran in.
#include "reduce.cuh"
#include "fir.cuh"
#include "filter2d.cuh"
#include "unpack.cuh"
#include "stream.cuh"
#include "ring_ready.cuh"

// Dynamic shared memory: two buffers of `span` floats.
extern __shared__ float4 fl_tiled_smem[];
// The chain's steps, copied as 16-byte words (aligned for them whatever
// else the kernel keeps in shared memory).
__shared__ __align__(16) FusedStep fl_tiled_steps[FL_FUSED_MAX_STEPS];

// Copies the first `count` steps at `from` into fl_tiled_steps, word w by
// thread `first` + w modulo `threads` (threads [first, first + threads) of the block).
FL_DEVICE void fl_tiled_copy_steps(const FusedStep* from, uint32_t count, uint32_t first, uint32_t threads) {
  const uint4* src = (const uint4*)from;
  uint4* to = (uint4*)fl_tiled_steps;
  const uint32_t words = count * (uint32_t)(sizeof(FusedStep) / 16);
  if (threadIdx.x < first) return;
  for (uint32_t w = threadIdx.x - first; w < words; w += threads) to[w] = src[w];
}

// Where this block works: sample g of the frame is local sample g - base.
// Sample indices are 32-bit: a slot holds at most 1 GiB (ring.slot_bytes),
// so a frame has fewer than 2^30 samples and a tile's halo is far shorter.
struct FlTile {
  int32_t base;  // t0 - the held halo (a multiple of 4; may be negative)
  int32_t t0;    // first output of the tile
  int32_t t1;    // one past its last (<= n)
  int32_t n;     // samples of the frame
};

// Where a tile reads the frame's bytes: the slot's payload, and for a
// streamed frame also a copy of its first `pulled` bytes in device memory
// (`staged`; pulled 0 when there is none).
struct FlTiledSource {
  const uint8_t* payload;
  const uint8_t* staged;
  uint64_t pulled;
};

// Samples [g0, g1) of the payload converted into `out` (local indices).
// A sample whose bytes all lie below `pulled` is read from the staged copy,
// any other from the slot (which holds the whole frame once it is
// published). A chunk whose bytes are whole in the frame and on one side
// of `pulled` takes one load from one of the two (the chunks at the ends
// of [g0, g1) then store only their samples inside it); only a chunk
// across `pulled`, past the frame's last whole chunk or of an unaligned
// payload is read sample by sample.
template <int FMT>
FL_DEVICE void fl_tiled_unpack(const FlTiledSource& src, bool vec_in, float* out, const FlTile& t, int32_t g0,
                               int32_t g1, float scale, float offset) {
  typedef UnpackChunk<FMT> C;
  const uint8_t* payload = src.payload;
  const int32_t c0 = g0 / C::samples, c1 = (g1 + C::samples - 1) / C::samples;
  for (int32_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
    const int32_t first = c * C::samples;
    const uint64_t at = (uint64_t)c * C::bytes;
    const bool across = at < src.pulled && at + C::bytes > src.pulled;
    if (vec_in && !across && first + (int32_t)C::samples <= t.n) {
      uint32_t words[4];
      fl_load_chunk<FMT>((at + C::bytes <= src.pulled ? src.staged : payload) + at, words);
      uint32_t s[C::samples];
      fl_decode_chunk<FMT>(words, s);
      float* y = out + (first - t.base);
      if (first >= g0 && first + (int32_t)C::samples <= g1) {
        // Four samples a store: a chunk's samples are 32 or 64 bytes apart
        // from the next thread's, which scalar stores would write into the
        // same banks of shared memory one after another.
#pragma unroll
        for (uint32_t k = 0; k < C::samples; k += 4)
          *(float4*)(y + k) = make_float4(fl_mul_add(__uint2float_rn(s[k]), scale, offset),
                                          fl_mul_add(__uint2float_rn(s[k + 1]), scale, offset),
                                          fl_mul_add(__uint2float_rn(s[k + 2]), scale, offset),
                                          fl_mul_add(__uint2float_rn(s[k + 3]), scale, offset));
      } else {
#pragma unroll
        for (uint32_t k = 0; k < C::samples; ++k)
          if (first + (int32_t)k >= g0 && first + (int32_t)k < g1) y[k] = fl_mul_add(__uint2float_rn(s[k]), scale, offset);
      }
    } else {
      const int32_t lo = first > g0 ? first : g0;
      const int32_t hi = first + C::samples < g1 ? first + C::samples : g1;
      for (int32_t i = lo; i < hi; ++i) {
        const uint8_t* from = fl_sample_end<FMT>(i) <= src.pulled ? src.staged : payload;
        out[i - t.base] = fl_mul_add(__uint2float_rn(fl_sample_at<FMT>(from, (uint32_t)i)), scale, offset);
      }
    }
  }
}

// The filter steps deal their outputs [g0, g1) out in quads: thread j of
// the block computes outputs 4q .. 4q + 3 (those inside [g0, g1)) for
// q = g0 / 4 + j, + blockDim.x, ...; a quad starts on a 16-byte boundary of
// the buffers (the tile's `base` is a multiple of 4), so it is read and
// written with float4s where its window allows.

// FIR outputs [g0, g1) of the `count` taps (fl_fir_at's sum in the same
// order) on local samples, dealt out in quads (above). A quad whose
// windows lie inside the frame and the buffer of `held` floats is read as
// three float4s with its taps in registers when COUNT (the tap count,
// known at compile time; 0 for any) is at most FL_FIR_QUAD_MAX_TAPS; other
// outputs away from the frame's ends sum their window without bounds
// tests, the first and last `half` take fl_fir_at.
template <uint32_t COUNT>
FL_DEVICE void fl_tiled_fir_n(const float* x, float* y, const FlTile& t, int32_t g0, int32_t g1,
                              uint32_t count, const float* taps, uint32_t held) {
  constexpr uint32_t HELD = COUNT ? COUNT : 1;
  constexpr bool QUADS = COUNT != 0 && COUNT <= FL_FIR_QUAD_MAX_TAPS;
  float tap[HELD];
#pragma unroll
  for (uint32_t k = 0; k < HELD; ++k) tap[k] = COUNT ? taps[k] : 0.0f;
  const uint32_t n_taps = COUNT ? COUNT : count;
  const int32_t half = n_taps / 2;
  for (int32_t q = g0 / 4 + threadIdx.x; 4 * q < g1; q += blockDim.x) {
    const int32_t first = 4 * q, l = first - t.base;
    if (QUADS && first >= g0 && first + 4 <= g1 && first >= half && first + 3 + half < t.n && l >= 4 &&
        l + 8 <= (int32_t)held) {
      const float4* x4 = (const float4*)(x + l);
      const float4 a = x4[-1], b = x4[0], c = x4[1];
      const float v[12] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w, c.x, c.y, c.z, c.w};
      const float4 r = fl_fir_quad<(QUADS ? HELD / 2 : 0)>(v, tap);
      *(float4*)(y + l) = r;
      continue;
    }
    for (int32_t g = first; g < first + 4; ++g) {
      if (g < g0 || g >= g1) continue;
      float acc = 0.0f;
      if (g >= half && g + half < t.n) {
        const float* window = x + (g - half - t.base);
        if (COUNT) {
#pragma unroll
          for (uint32_t k = 0; k < HELD; ++k) acc = fl_mul_add(tap[k], window[k], acc);
        } else {
#pragma unroll 4
          for (uint32_t k = 0; k < n_taps; ++k) acc = fl_mul_add(taps[k], window[k], acc);
        }
      } else {
        acc = fl_fir_at(x, t.base, t.n, n_taps, taps, g);
      }
      y[g - t.base] = acc;
    }
  }
}

// The FIR step: compiled for the short odd filters chains mostly use, the
// general loop for any other count.
FL_DEVICE void fl_tiled_fir(const float* x, float* y, const FlTile& t, int32_t g0, int32_t g1,
                            uint32_t count, const float* taps, uint32_t held) {
  switch (count) {
    case 3: fl_tiled_fir_n<3>(x, y, t, g0, g1, count, taps, held); break;
    case 5: fl_tiled_fir_n<5>(x, y, t, g0, g1, count, taps, held); break;
    case 7: fl_tiled_fir_n<7>(x, y, t, g0, g1, count, taps, held); break;
    case 9: fl_tiled_fir_n<9>(x, y, t, g0, g1, count, taps, held); break;
    case 11: fl_tiled_fir_n<11>(x, y, t, g0, g1, count, taps, held); break;
    case 13: fl_tiled_fir_n<13>(x, y, t, g0, g1, count, taps, held); break;
    case 15: fl_tiled_fir_n<15>(x, y, t, g0, g1, count, taps, held); break;
    default: fl_tiled_fir_n<0>(x, y, t, g0, g1, count, taps, held); break;
  }
}

// filter2d outputs [g0, g1) (fl_filter2d_at's sums) on local samples,
// dealt out in quads, the 3x3 weights in registers. When rows are a
// multiple of 4 samples long a quad lies in one row, and one inside whole
// rows reads its three rows as a float4 and two scalars each (9 loads for 4
// outputs, not 36), the neighbours outside the image taken as zero: with
// finite weights (the config's rule) a zero's term adds +0 or -0 to a sum
// that is never -0 (it starts at +0), which leaves it as it is, so the bits
// are fl_filter2d_at's, which skips those terms. A row outside the image
// is read at the quad's own row and zeroed, so every read stays in the
// rows the tile holds. Other quads take each output on its own: past the
// last whole row it passes through, on the border fl_filter2d_at, else
// fl_filter2d_interior.
FL_DEVICE void fl_tiled_filter2d(const float* x, float* y, const FlTile& t, int32_t g0, int32_t g1,
                                 uint32_t w, const float* weights) {
  const uint32_t n = (uint32_t)t.n;
  const uint32_t rows = w ? n / w : 0;
  const uint32_t full = rows * w;
  float k[9];
  bool finite = true;
#pragma unroll
  for (uint32_t j = 0; j < 9; ++j) k[j] = weights[j], finite = finite && isfinite(k[j]);
  const bool quads_in_rows = w % 4 == 0 && finite;
  for (int32_t q = g0 / 4 + threadIdx.x; 4 * q < g1; q += blockDim.x) {
    const int32_t first = 4 * q;
    const uint32_t i = (uint32_t)first;
    uint32_t r = w ? i / w : 0;
    uint32_t c = i - r * w;
    if (quads_in_rows && first >= g0 && first + 4 <= g1 && i + 4 <= full) {
      const bool left = c >= 1, right = c + 4 < w;
      const float* here = x + (first - t.base);
      // Row by row (each output's nine terms still in fl_filter2d_at's
      // order), so only one row's six samples are held at a time.
      float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (uint32_t dr = 0; dr < 3; ++dr) {
        const bool inside = dr == 1 || (dr == 0 ? r >= 1 : r + 1 < rows);
        const float* row = inside ? here + ((int32_t)dr - 1) * (int32_t)w : here;
        const float4 mid = *(const float4*)row;
        const float l = row[-1], h = row[4];
        // v[j]: column c + j - 1 of row r + dr - 1 (zero outside the image).
        const float v[6] = {inside && left ? l : 0.0f, inside ? mid.x : 0.0f, inside ? mid.y : 0.0f,
                            inside ? mid.z : 0.0f,     inside ? mid.w : 0.0f, inside && right ? h : 0.0f};
#pragma unroll
        for (uint32_t dc = 0; dc < 3; ++dc) {
#pragma unroll
          for (uint32_t m = 0; m < 4; ++m) o[m] = fl_mul_add(k[dr * 3 + dc], v[m + dc], o[m]);
        }
      }
      *(float4*)(y + (first - t.base)) = make_float4(o[0], o[1], o[2], o[3]);
      continue;
    }
    for (int32_t g = first; g < first + 4; ++g, ++c) {
      if (w && c >= w) c -= w, r += 1;
      if (g < g0 || g >= g1) continue;
      const uint32_t gi = (uint32_t)g;
      float* out = y + (g - t.base);
      if (gi >= full) *out = x[g - t.base];
      else if (r >= 1 && r + 1 < rows && c >= 1 && c + 1 < w) *out = fl_filter2d_interior(x + (g - (int32_t)w - 1 - t.base), w, k);
      else *out = fl_filter2d_at(x, t.base, r, c, rows, w, k);
    }
  }
}

// Samples each reducing thread takes of a tile at least: the tile's
// reduction runs on as few warps as that allows (fl_tiled_reduce_warps),
// so fewer warps take part in the combine's shuffles (measured on an H200:
// 8 warps accumulate a 4,003-sample tile in 0.8 µs and combine in 0.45).
#ifndef FL_TILED_REDUCE_SAMPLES_PER_THREAD
#define FL_TILED_REDUCE_SAMPLES_PER_THREAD 16u
#endif

// Warps that reduce a tile of `len` samples (1 to all of the block's).
FL_DEVICE uint32_t fl_tiled_reduce_warps(uint32_t len) {
  const uint32_t warps = (len + 32u * FL_TILED_REDUCE_SAMPLES_PER_THREAD - 1) / (32u * FL_TILED_REDUCE_SAMPLES_PER_THREAD);
  return warps < 1u ? 1u : (warps > blockDim.x / 32 ? blockDim.x / 32 : warps);
}

// This thread's share of the tile when `warps` warps reduce it: the
// tile's quads threadIdx.x, threadIdx.x + 32 * warps, ... (read as float4s,
// up to four in flight), then, in thread 0, the last len % 4 samples: each
// thread takes its samples in increasing index (threads past the warps
// take none). A tile starts on a 16-byte boundary of the buffer.
template <bool STATS, bool THRESHOLD>
FL_DEVICE FlPartial fl_tiled_accumulate(const float* x, const FlTile& t, float level, uint32_t warps) {
  FlPartial p = fl_partial_empty();
  const uint32_t len = (uint32_t)(t.t1 - t.t0);
  const float* tile = x + (t.t0 - t.base);
  const float4* quads = (const float4*)tile;
  const uint32_t first = (uint32_t)t.t0, threads = 32u * warps, whole = len / 4;
  if (threadIdx.x >= threads) return p;
  uint32_t q = threadIdx.x;
  for (; q + 3 * threads < whole; q += 4 * threads) {
    float4 v[4];
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k) v[k] = quads[q + k * threads];
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k) {
      const uint32_t i = first + 4 * (q + k * threads);
      fl_take<STATS, THRESHOLD>(p, v[k].x, i, level);
      fl_take<STATS, THRESHOLD>(p, v[k].y, i + 1, level);
      fl_take<STATS, THRESHOLD>(p, v[k].z, i + 2, level);
      fl_take<STATS, THRESHOLD>(p, v[k].w, i + 3, level);
    }
  }
  for (; q < whole; q += threads) {
    const float4 v = quads[q];
    const uint32_t i = first + 4 * q;
    fl_take<STATS, THRESHOLD>(p, v.x, i, level);
    fl_take<STATS, THRESHOLD>(p, v.y, i + 1, level);
    fl_take<STATS, THRESHOLD>(p, v.z, i + 2, level);
    fl_take<STATS, THRESHOLD>(p, v.w, i + 3, level);
  }
  if (threadIdx.x == 0)
    for (uint32_t j = 4 * whole; j < len; ++j) fl_take<STATS, THRESHOLD>(p, tile[j], first + j, level);
  return p;
}

// The block's tile reduced and added into `acc` (the partial of this step
// over the block's earlier tiles, in tile order).
template <bool STATS, bool THRESHOLD>
FL_DEVICE void fl_tiled_reduce(const float* x, const FlTile& t, float level, FlPartial* acc) {
  const uint32_t warps = fl_tiled_reduce_warps((uint32_t)(t.t1 - t.t0));
  const FlPartial p = fl_block_combine_warps(fl_tiled_accumulate<STATS, THRESHOLD>(x, t, level, warps), warps);
  if (threadIdx.x == 0) fl_combine(*acc, p);
}

// Samples a frame of `payload_len` bytes unpacks to under step kind `kind`
// into buffers of `capacity` floats (fl_unpack_range's count).
FL_DEVICE uint32_t fl_tiled_samples(uint32_t kind, uint32_t payload_len, uint32_t capacity) {
  uint32_t n = 0, cap = capacity;
  if (kind == FL_STEP_UNPACK_U8) n = fl_samples_in<FL_FMT_U8>(payload_len);
  if (kind == FL_STEP_UNPACK_U16) n = fl_samples_in<FL_FMT_U16>(payload_len);
  if (kind == FL_STEP_UNPACK_U12) n = fl_samples_in<FL_FMT_U12>(payload_len), cap = capacity & ~1u;
  return n < cap ? n : cap;
}

// One frame, blocks [0, `blocks`) of the grid (blockIdx.x < blocks): `frame`
// the claimed frame as this block read it (FlTiledFrame), `fd` its FrameDesc
// (n_samples is written by the last block), `unloaded_steps` the chain's
// steps to copy into shared memory, or null where they are there already,
// `out` the loop's ChainResult, `scratch` a zeroed
// FlReduceScratch kept between frames, `halo` the samples the filter steps
// reach in total on either side, `span` floats of each shared buffer (a tile
// takes at most span - 2 * halo of them, rounded down to 4; a frame with
// more tiles than blocks gives each block several, in a grid stride),
// `publish` null or the loop's parameters (the last block publishes the
// result), `samples` null or room for the frame's samples after the last
// filter (each block writes its tiles there; for tests against the CPU
// reference), `stream`/`staged` null, or for a frame that streams into
// device memory the pulls' state and their staging buffer: the kernel then
// reads the pulled part of the frame from there and the rest from the slot,
// so no tail copy runs before it; `pulling` null, or the round of a puller
// block that runs beside the tiles (fl_tiled_puller): each tile then looks
// at the pulled length when it starts, waiting for that round where it
// covers the tile. Blocks of FL_REDUCE_THREADS, blocks <= FL_REDUCE_MAX_BLOCKS,
// 2 * span * 4 bytes of dynamic shared memory.
//
// Built with FL_TILED_PHASES (FRAMELOOP_NVRTC_DEFINES, src/gpu/nvrtc.rs),
// the kernel records where the frame's GPU time goes in `marks` (the loop
// state's user result words, so each result carries its own): nanoseconds
// after detection, the latest block at each point (FL_MARK_*), and the
// bytes of the frame its tiles read from the slot over the bus rather than
// from the pulls' copy in device memory (FL_MARK_SLOT_BYTES). Null marks
// record nothing.
#define FL_MARK_STARTED 0      // the block left the claim wait
#define FL_MARK_PROLOGUE 1     // steps in shared memory, tiles planned
#define FL_MARK_FIRST_STEP 2   // the first step (unpack) of its last tile done
#define FL_MARK_TILES 3        // all its tiles done, before it counts in
#define FL_MARK_COMBINED 4     // the last block: partials combined, before publishing
#define FL_MARK_RELEASED 5     // block 0 released the other blocks (claim handshake done)
#define FL_MARK_SLOT_BYTES 6   // not a time: payload bytes above the lowest pulled length a tile read with
#define FL_MARK_BYTES_READY 7  // its last tile knows where its bytes are (after any wait for the puller)
#define FL_MARK_SECOND_STEP 8  // the second step of its last tile done
#define FL_MARK_THIRD_STEP 9   // the third step of its last tile done
#define FL_MARK_SM_CLOCK_MHZ 10  // not a time: block 0's SM clock from its start to its tiles' end, MHz
FL_DEVICE void fl_mark(uint32_t* marks, uint64_t detect_ns, uint32_t which) {
#ifdef FL_TILED_PHASES
  if (marks != nullptr && threadIdx.x == 0) atomicMax(&marks[which], (uint32_t)(fl_globaltimer() - detect_ns));
#else
  (void)marks, (void)detect_ns, (void)which;
#endif
}

// Block 0's SM cycles and global time at its start, for FL_MARK_SM_CLOCK_MHZ.
struct FlClockStart {
  uint64_t cycles, ns;
};
FL_DEVICE FlClockStart fl_clock_start() {
#ifdef FL_TILED_PHASES
  return FlClockStart{(uint64_t)clock64(), fl_globaltimer()};
#else
  return FlClockStart{0, 0};
#endif
}
FL_DEVICE void fl_mark_sm_clock(uint32_t* marks, FlClockStart from) {
#ifdef FL_TILED_PHASES
  const uint64_t cycles = (uint64_t)clock64() - from.cycles, ns = fl_globaltimer() - from.ns;
  if (marks != nullptr && threadIdx.x == 0 && blockIdx.x == 0 && ns != 0)
    marks[FL_MARK_SM_CLOCK_MHZ] = (uint32_t)(cycles * 1000u / ns);
#else
  (void)marks, (void)from;
#endif
}

// FL_MARK_SLOT_BYTES of a frame of `len` bytes of which a tile found the
// first `pulled` in device memory (the largest over the frame's tiles).
FL_DEVICE void fl_mark_slot_bytes(uint32_t* marks, uint32_t len, uint64_t pulled) {
#ifdef FL_TILED_PHASES
  if (marks != nullptr && threadIdx.x == 0 && (uint64_t)len > pulled)
    atomicMax(&marks[FL_MARK_SLOT_BYTES], (uint32_t)((uint64_t)len - pulled));
#else
  (void)marks, (void)len, (void)pulled;
#endif
}

// One past the last payload byte of samples [0, g1) under unpack step kind `kind`.
FL_DEVICE uint64_t fl_tiled_bytes_through(uint32_t kind, int64_t g1) {
  if (g1 <= 0) return 0;
  if (kind == FL_STEP_UNPACK_U8) return fl_sample_end<FL_FMT_U8>(g1 - 1);
  if (kind == FL_STEP_UNPACK_U16) return fl_sample_end<FL_FMT_U16>(g1 - 1);
  return fl_sample_end<FL_FMT_U12>(g1 - 1);
}

// The 16-byte words of ring sequence `seq` a puller round word
// (FlTiledClaim::pulling, ::pulled: sequence's low 32 bits << 32 | end
// word) covers; 0 for another frame's.
FL_DEVICE uint64_t fl_round_words_of(uint64_t round, uint64_t seq) {
  return (uint32_t)(round >> 32) == (uint32_t)seq ? (round & 0xffffffffull) : 0ull;
}

// Bytes of ring sequence `seq` the staging buffer holds (0 when it holds another frame's).
FL_DEVICE uint64_t fl_stream_pulled_of(const FlStreamState* s, uint64_t seq) {
  return fl_load_acquire_gpu64(&s->seq) == seq ? fl_load_acquire_gpu64(&s->pulled) : 0ull;
}

// How long a tile's wait for the puller's round sleeps between two looks.
#ifndef FL_TILED_PULL_SPIN_NS
#define FL_TILED_PULL_SPIN_NS 32u
#endif

// A waiting thread's pause between two looks: `ns` of sleep, or none.
FL_DEVICE void fl_tiled_pause(uint32_t ns) {
  if (ns != 0) __nanosleep(ns);
}

// How long a tile waits for the puller's round in flight before it reads
// the slot itself instead (a round of FL_PULL_ROUND_WORDS takes a few
// microseconds; this only bounds a round that went wrong).
#define FL_TILED_PULL_WAIT_NS 200000u

// One thread: the pulled length a tile that reads the frame's first `need`
// bytes uses. While the grid's puller block runs (`pulling`: its round in
// flight, FlTiledClaim), a round that will cover those bytes is waited
// for: it started before the tile's own read over the bus would, so it
// lands sooner. Otherwise what is pulled now; the tile reads the rest from
// the slot, which holds the whole frame once it is published.
FL_DEVICE uint64_t fl_tiled_pulled(const FlStreamState* s, const uint64_t* pulling, uint64_t seq,
                                   uint64_t need) {
  uint64_t pulled = fl_stream_pulled_of(s, seq);
  if (pulled >= need) return pulled;
  if (fl_round_words_of(fl_load_acquire_gpu64(pulling), seq) * 16u < need) return pulled;
  const uint64_t t0 = fl_globaltimer();
  while ((pulled = fl_stream_pulled_of(s, seq)) < need && fl_globaltimer() - t0 < FL_TILED_PULL_WAIT_NS)
    fl_tiled_pause(FL_TILED_PULL_SPIN_NS);
  return pulled;
}

// What a block needs of the frame, the chain and the pulls before its
// tiles: read by every thread where the frame was claimed before the kernel
// started (fl_fused_tiled), or unpacked by thread 0 from the claim block 0
// handed over (FlTiledClaim::handed, fl_fused_tiled_loop).
struct FlTiledFrame {
  uint64_t payload_dptr, ring_seq, detect_ns, params_dptr;
  uint64_t pulled_bytes;  // bytes of this frame in the staging buffer (0 without one)
  uint32_t payload_len;
  uint32_t prog_steps, capacity;      // the chain's (FusedProgram)
};

// The frame `fd`, the chain `prog` and what the pulls' state `stream`
// (null without one) holds of the frame, the loads in flight together.
FL_DEVICE FlTiledFrame fl_tiled_frame_of(const FrameDesc* fd, const FusedProgram* prog, const FlStreamState* stream) {
  FlTiledFrame f;
  f.payload_dptr = fd->payload_dptr;
  f.ring_seq = fd->ring_seq;
  f.detect_ns = fd->detect_ns;
  f.params_dptr = fd->params_dptr;
  f.payload_len = fd->payload_len;
  f.prog_steps = prog->step_count;
  f.capacity = prog->capacity;
  const uint64_t pulled_seq = stream != nullptr ? stream->seq : 0, pulled = stream != nullptr ? stream->pulled : 0;
  f.pulled_bytes = stream != nullptr && pulled_seq == f.ring_seq ? pulled : 0;
  return f;
}

FL_DEVICE void fl_tiled_frame(const FlTiledFrame& frame, FrameDesc* fd, const FusedStep* unloaded_steps,
                              ChainResult* out, FlReduceScratch* scratch, uint32_t halo, uint32_t span,
                              const LoopParams* publish, float* samples, const FlStreamState* stream,
                              const uint8_t* staged, uint32_t* marks, uint32_t blocks, const uint64_t* pulling) {
  const uint32_t prog_steps = frame.prog_steps, capacity = frame.capacity;
  const bool has_staged = stream != nullptr && staged != nullptr;
  fl_mark(marks, frame.detect_ns, FL_MARK_STARTED);
  const FlClockStart clock_start = fl_clock_start();
  const FusedStep* steps = fl_tiled_steps;
  // Each reduction step's partial over this block's tiles.
  __shared__ FlPartial acc[FL_FUSED_MAX_STEPS];
  __shared__ bool last;
  // The pulled length this block's tile may use (fl_tiled_pulled), from thread 0.
  __shared__ uint64_t tile_pulled;
  const uint32_t step_count = prog_steps < FL_FUSED_MAX_STEPS ? prog_steps : FL_FUSED_MAX_STEPS;
  // The steps' tunable values come from the frame's parameter bank, if the loop has banks.
  if (frame.params_dptr != 0)
    fl_tiled_copy_steps((const FusedStep*)frame.params_dptr, step_count, 0, blockDim.x);
  else if (unloaded_steps != nullptr)
    fl_tiled_copy_steps(unloaded_steps, step_count, 0, blockDim.x);
  if (threadIdx.x < FL_FUSED_MAX_STEPS) acc[threadIdx.x] = fl_partial_empty();
  __syncthreads();
  const uint8_t* payload = (const uint8_t*)frame.payload_dptr;
  const uint64_t pulled_at_start = has_staged ? frame.pulled_bytes : 0;
  FlTiledSource source = {payload, staged, pulled_at_start};
  const uint32_t n = step_count ? fl_tiled_samples(steps[0].kind, frame.payload_len, capacity) : 0;
  // Tiles of a multiple of four samples (every thread's groups start on the
  // same lanes): one per block when they fit in the buffers, else the most
  // that fit. The buffers hold the halo rounded up to 4 either side
  // (held_halo, src/gpu/fused/tiled.rs), so a tile starts 16-byte aligned.
  const uint32_t halo_held = (halo + 3u) & ~3u;
  const uint32_t room = span > 2u * halo_held ? (span - 2u * halo_held) & ~3u : 0u;
  uint32_t tile = ((n + blocks - 1) / blocks + 3u) & ~3u;
  tile = tile < room ? tile : room;
  const uint32_t tiles = tile ? (n + tile - 1) / tile : 0;
  float* b0 = (float*)fl_tiled_smem;
  float* b1 = b0 + span;
  fl_mark(marks, frame.detect_ns, FL_MARK_PROLOGUE);
  // Read in place, every byte crosses the bus after the claim.
  if (!has_staged) fl_mark_slot_bytes(marks, frame.payload_len, 0);
  for (uint32_t k = blockIdx.x; k < tiles; k += blocks) {
    FlTile t;
    t.n = (int32_t)n;
    t.t0 = (int32_t)(k * tile);
    t.t1 = t.t0 + (int32_t)tile < t.n ? t.t0 + (int32_t)tile : t.n;
    t.base = t.t0 - (int32_t)halo_held;
    if (has_staged) {
      // The frame's bytes the tile's unpack reads (its halos included), in
      // whole words the pulls can hold.
      const int32_t g1 = t.t1 + (int32_t)halo < t.n ? t.t1 + (int32_t)halo : t.n;
      uint64_t need = fl_tiled_bytes_through(steps[0].kind, g1);
      const uint64_t whole_words = (uint64_t)(frame.payload_len & ~15u);
      need = need < whole_words ? need : whole_words;
      // Only beside a puller can the pulled length grow while the tiles run.
      if (pulling != nullptr) {
        if (threadIdx.x == 0)
          tile_pulled = pulled_at_start < need ? fl_tiled_pulled(stream, pulling, frame.ring_seq, need) : pulled_at_start;
        __syncthreads();
        source.pulled = tile_pulled;
      }
      if (source.pulled < need) fl_mark_slot_bytes(marks, frame.payload_len, source.pulled);
    }
    fl_mark(marks, frame.detect_ns, FL_MARK_BYTES_READY);
    // Samples either side of the tile the current buffer still holds correctly.
    int32_t reach = (int32_t)halo;
    // The buffer holding the latest samples.
    uint32_t current = 0;
    for (uint32_t i = 0; i < step_count; ++i) {
      const FusedStep& s = steps[i];
      const float* in = (s.input & 1u) ? b1 : b0;
      float* o = (s.output & 1u) ? b1 : b0;
      const bool filter = s.kind == FL_STEP_FIR || s.kind == FL_STEP_FILTER2D;
      if (s.kind <= FL_STEP_UNPACK_U12) reach = (int32_t)halo;
      if (filter) reach -= s.kind == FL_STEP_FIR ? (int32_t)(s.count / 2) : (int32_t)s.count + 1;
      if (filter || s.kind <= FL_STEP_UNPACK_U12) current = s.output & 1u;
      const int32_t g0 = t.t0 - reach > 0 ? t.t0 - reach : 0;
      const int32_t g1 = t.t1 + reach < t.n ? t.t1 + reach : t.n;
      switch (s.kind) {
        case FL_STEP_UNPACK_U8:
          fl_tiled_unpack<FL_FMT_U8>(source, (uint64_t)payload % 16 == 0, o, t, g0, g1, s.a, s.b);
          break;
        case FL_STEP_UNPACK_U16:
          fl_tiled_unpack<FL_FMT_U16>(source, (uint64_t)payload % 16 == 0, o, t, g0, g1, s.a, s.b);
          break;
        case FL_STEP_UNPACK_U12:
          fl_tiled_unpack<FL_FMT_U12>(source, (uint64_t)payload % 4 == 0, o, t, g0, g1, s.a, s.b);
          break;
        case FL_STEP_FIR:
          fl_tiled_fir(in, o, t, g0, g1, s.count <= FL_MAX_FIR_TAPS ? s.count : FL_MAX_FIR_TAPS, s.coeffs, span);
          break;
        case FL_STEP_FILTER2D:
          fl_tiled_filter2d(in, o, t, g0, g1, s.count, s.coeffs);
          break;
        case FL_STEP_STATS:
          fl_tiled_reduce<true, false>(in, t, 0.0f, &acc[i]);
          break;
        case FL_STEP_THRESHOLD:
          fl_tiled_reduce<false, true>(in, t, s.a, &acc[i]);
          break;
        case FL_STEP_STATS_THRESHOLD:
          fl_tiled_reduce<true, true>(in, t, s.a, &acc[i]);
          break;
        default:  // delay and fault_at run once per frame, below
          break;
      }
      // The next step reads what this one wrote.
      __syncthreads();
      if (i < 3) fl_mark(marks, frame.detect_ns, i == 0 ? FL_MARK_FIRST_STEP : FL_MARK_SECOND_STEP + i - 1);
    }
    if (samples != nullptr) {
      const float* x = current ? b1 : b0;
      for (int32_t g = t.t0 + threadIdx.x; g < t.t1; g += blockDim.x) samples[g] = x[g - t.base];
    }
    // The next tile's unpack overwrites what the threads above still read.
    __syncthreads();
  }
  bool has_stats = false, has_detect = false;
  FlPartial mine = fl_partial_empty();
  // Only thread 0 writes the block's slot below (and, in the last block,
  // the result), so only it looks through the steps for what they give.
  if (threadIdx.x == 0) {
    for (uint32_t i = 0; i < step_count; ++i) {
      const FusedStep& s = steps[i];
      // The last stats and the last threshold of the chain give the result's fields, as on the CPU.
      if (s.kind == FL_STEP_STATS || s.kind == FL_STEP_STATS_THRESHOLD) {
        has_stats = true;
        mine.sum = acc[i].sum, mine.min = acc[i].min, mine.max = acc[i].max;
      }
      if (s.kind == FL_STEP_THRESHOLD || s.kind == FL_STEP_STATS_THRESHOLD) {
        has_detect = true;
        mine.count = acc[i].count, mine.first = acc[i].first;
      }
      if (blockIdx.x == 0 && s.kind == FL_STEP_DELAY) {
        const uint64_t start = fl_globaltimer();
        while (fl_globaltimer() - start < s.delay_ns) __nanosleep(256);
      }
      if (blockIdx.x == 0 && s.kind == FL_STEP_FAULT_AT && frame.ring_seq >= s.count) {
        volatile uint32_t* bad = (volatile uint32_t*)8ull;
        *bad = 0xdeadu;
      }
    }
  }
  fl_mark(marks, frame.detect_ns, FL_MARK_TILES);
  fl_mark_sm_clock(marks, clock_start);
  if (threadIdx.x == 0) {
    FlPartial* slot = &scratch->partial[blockIdx.x];
    __stcg(&slot->sum, mine.sum);
    __stcg(&slot->min, mine.min);
    __stcg(&slot->max, mine.max);
    __stcg(&slot->count, mine.count);
    __stcg(&slot->first, mine.first);
    last = fl_take_ticket(&scratch->ticket) == blocks - 1;
  }
  // Thread 0's acquire, then the barrier: every counted slot is visible to this block's reads below.
  __syncthreads();
  if (!last) return;
  FlPartial p = threadIdx.x < blocks ? fl_load_partial(&scratch->partial[threadIdx.x]) : fl_partial_empty();
  p = fl_block_combine_warps(p, (blocks + 31u) / 32u);
  if (threadIdx.x != 0) return;
  fl_mark(marks, frame.detect_ns, FL_MARK_COMBINED);
  fd->n_samples = n;
  if (has_stats) fl_write_result<true, false>(out, p, n);
  if (has_detect) fl_write_result<false, true>(out, p, n);
  scratch->ticket = 0;  // ready for the next frame: every block of this one has counted
  if (publish != nullptr) {
    __threadfence();  // n_samples and the result before the record that reads them
    fl_publish_result(*publish);
  }
}

// The tiled chain as a node after the data-ready handler (`handler ; IF {
// fl_fused_tiled }`): fl_tiled_frame on the frame the handler claimed.
extern "C" __global__ void __launch_bounds__(FL_REDUCE_THREADS)
    fl_fused_tiled(FrameDesc* fd, const FusedProgram* prog, ChainResult* out, FlReduceScratch* scratch,
                   uint32_t halo, uint32_t span, const LoopParams* publish, float* samples,
                   const FlStreamState* stream, const uint8_t* staged) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  const FlTiledFrame frame = fl_tiled_frame_of(fd, prog, stream != nullptr && staged != nullptr ? stream : nullptr);
  fl_tiled_frame(frame, fd, prog->steps, out, scratch, halo, span, publish, samples, stream, staged, nullptr,
                 gridDim.x, nullptr);
}

// The tiled chain claiming its own frames: the loop body is
// `WHILE { fl_fused_tiled_loop }`, with no handler node and no IF body to
// launch once a frame is there. Block 0's thread 0 does
// the built-in handler's work (fl_poll for the poll budget, the claim,
// fl_end_iteration); the other blocks, already resident, wait for its
// verdict in device memory and start on their tiles as soon as it says
// "ready". FlTiledClaim is the handshake: each block other than 0 reads
// `generation`, then counts itself in `arrived`; block 0 claims only once
// all of them have arrived, then hands the claim over in `handed` (below)
// tagged with generation + 1 and bumps `generation`, so every block sees
// exactly this launch's claim. That needs every block
// resident at once: the executor sizes the grid to what the GPU holds at
// once (src/gpu/fused/tiled.rs), and every wait also ends on tear-down, so
// a grid that did not fit cannot hang the loop's stop.
//
// `handed` is everything a block needs of the claim, in two words that
// block 0 writes with one release store as soon as the slot header has
// arrived (before the rest of the claim's bookkeeping) and the others read
// with one acquire load, so the tiles start one memory round trip after
// the claim. Each word carries the tag (the generation's low 8 bits), since
// only each word on its own is read whole:
//   handed[0]: tag << 56 | verdict << 54 | bank << 48 | detection time / 16 ns (16 bits) << 32 | payload length
//   handed[1]: tag << 56 | ring sequence (low 28 bits) << 28 | 16-byte words of it the puller had finished
// A block rebuilds the sequence from the loop state's last claimed one,
// read after it counted in (this claim's or the one before, fewer than
// 2^28 frames apart), and the payload's address from the loop's parameters.
//
// While frames stream into device memory the grid's last block is the
// puller (fl_tiled_puller): for as long as block 0 polls, it copies what
// the next frame's received mark says is final into the staging buffer,
// round after round, so the pulls never hold up the poll or the claim and
// a frame published while a round runs is claimed at once. The other
// blocks compute the tiles; a tile whose bytes the puller's round in
// flight covers waits for it rather than read them over the bus again.
struct FlTiledClaim {
  uint32_t arrived;            // blocks other than 0 waiting for this launch's verdict
  uint32_t generation;         // bumped once per launch by block 0, after `handed`
  uint64_t _pad0;
  unsigned long long pulling;  // the puller's round in flight: ring sequence's low 32 bits << 32 | end word
  unsigned long long pulled;   // its last finished round, the same way: one word, read as one
  alignas(16) unsigned long long handed[2];  // the claim, handed to the blocks (above), as one 16-byte access
  uint64_t _pad[2];
};
static_assert(sizeof(FlTiledClaim) <= 64, "FlTiledClaim outgrew CLAIM_BYTES (src/gpu/fused/tiled.rs)");

#define FL_HANDED_SEQ_BITS 28u
#define FL_HANDED_SEQ_MASK ((1ull << FL_HANDED_SEQ_BITS) - 1)
#define FL_HANDED_DETECT_UNIT_NS 16u

// The claim as handed over (FlTiledClaim::handed), unpacked. Plain bit
// arithmetic, usable in constant expressions (tests/gpu_kernels_compile.rs
// checks the packing with static_asserts).
struct FlHanded {
  uint64_t w0, w1;
  constexpr __host__ __device__ uint32_t tag0() const { return (uint32_t)(w0 >> 56); }
  constexpr __host__ __device__ uint32_t tag1() const { return (uint32_t)(w1 >> 56); }
  constexpr __host__ __device__ uint32_t verdict() const { return (uint32_t)(w0 >> 54) & 3u; }
  constexpr __host__ __device__ uint32_t bank() const { return (uint32_t)(w0 >> 48) & 63u; }
  constexpr __host__ __device__ uint32_t detect_units() const { return (uint32_t)(w0 >> 32) & 0xffffu; }
  constexpr __host__ __device__ uint32_t payload_len() const { return (uint32_t)w0; }
  constexpr __host__ __device__ uint64_t seq_low() const { return (w1 >> FL_HANDED_SEQ_BITS) & FL_HANDED_SEQ_MASK; }
  constexpr __host__ __device__ uint64_t pulled_words() const { return w1 & FL_HANDED_SEQ_MASK; }
};

constexpr __host__ __device__ FlHanded fl_handed_make(uint32_t tag, uint32_t verdict, uint32_t bank,
                                                      uint64_t detect_ns, uint32_t len, uint64_t seq,
                                                      uint64_t pulled_words) {
  return FlHanded{(uint64_t)(tag & 0xffu) << 56 | (uint64_t)(verdict & 3u) << 54 | (uint64_t)(bank & 63u) << 48 |
                      ((detect_ns / FL_HANDED_DETECT_UNIT_NS) & 0xffffu) << 32 | len,
                  (uint64_t)(tag & 0xffu) << 56 | (seq & FL_HANDED_SEQ_MASK) << FL_HANDED_SEQ_BITS |
                      (pulled_words & FL_HANDED_SEQ_MASK)};
}

// The ring sequence whose low bits `h` hands over, from `last`, one claimed
// at most 2^28 frames before it (or that sequence itself).
constexpr __host__ __device__ uint64_t fl_handed_seq(const FlHanded& h, uint64_t last) {
  return last + ((h.seq_low() - last) & FL_HANDED_SEQ_MASK);
}

FL_DEVICE FlHanded fl_handed_load(const unsigned long long* handed) {
  FlHanded h;
  asm volatile("ld.acquire.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(h.w0), "=l"(h.w1) : "l"(handed) : "memory");
  return h;
}

FL_DEVICE void fl_handed_store(unsigned long long* handed, const FlHanded& h) {
  asm volatile("st.release.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(handed), "l"(h.w0), "l"(h.w1) : "memory");
}

// Spins of a block's wait between two looks at the tear-down flag (a read
// over the bus): hundreds of microseconds, far longer than a poll budget
// (CLAIMING_POLL_BUDGET_NS, src/gpu/fused/tiled.rs), so only a wait that
// went wrong looks.
#define FL_TILED_SPINS_PER_STOP_CHECK 1024u
// How long a block's wait for the claim sleeps between two looks (block 0's
// wait for the others to count in: a quarter of it).
#ifndef FL_TILED_SPIN_NS
#define FL_TILED_SPIN_NS 20u
#endif

// The frame `h` hands over, into `f` (its chain fields untouched): `last`
// a ring sequence claimed at most 2^28 frames before it.
FL_DEVICE void fl_tiled_frame_from(const LoopParams& p, uint64_t last, const FlHanded& h, FlTiledFrame* f) {
  const uint64_t seq = fl_handed_seq(h, last);
  f->ring_seq = seq;
  f->payload_dptr = fl_slot_dptr(p, seq) + FL_SLOT_PAYLOAD_OFFSET;
  f->payload_len = h.payload_len();
  f->params_dptr = p.param_ctl != nullptr ? (uint64_t)p.banks + (uint64_t)h.bank() * p.bank_bytes : 0;
  f->pulled_bytes = h.pulled_words() * 16u;
#ifdef FL_TILED_PHASES
  // Only the phase marks use the detection time.
  const uint64_t now = fl_globaltimer();
  f->detect_ns = now - ((now / FL_HANDED_DETECT_UNIT_NS - h.detect_units()) & 0xffffu) * FL_HANDED_DETECT_UNIT_NS;
#else
  f->detect_ns = 0;
#endif
}

// This launch's verdict, in thread 0 of every block but the puller (see
// above); on FL_VERDICT_READY the claimed frame is in `frame` (its chain
// fields untouched). `streaming`: the grid has a puller.
FL_DEVICE uint32_t fl_tiled_claim(const LoopParams* params, FlTiledClaim* claim, bool streaming, FlTiledFrame* frame) {
  const uint32_t others = gridDim.x - 1;
  if (blockIdx.x == 0) {
    const LoopParams p = *params;
    const uint64_t t0 = fl_globaltimer();
    uint64_t head = 0;
    // No pull ends this poll: the puller block pulls beside it.
    const uint32_t verdict = fl_poll_watching(p, t0, &head, FlPollWatch{nullptr, 0ull});
    // Every block in before the claim: the puller took its frame from the
    // last claim before it counted in, so this claim cannot move it.
    for (uint32_t spin = 1; fl_load_acquire_gpu32(&claim->arrived) != others; ++spin) {
      if (spin % FL_TILED_SPINS_PER_STOP_CHECK == 0 && fl_load_relaxed_sys(&p.ctl->tear_down.v)) break;
      fl_tiled_pause(FL_TILED_SPIN_NS / 4);
    }
    const uint32_t tag = claim->generation + 1;
    if (verdict == FL_VERDICT_READY) {
      const uint64_t seq = fl_claim_seq(p, head);
      const FlClaimRead r = fl_claim_read(p, seq);
      // The puller's last finished round, read while the header crosses the bus.
      const uint64_t pulled = streaming ? fl_load_acquire_gpu64(&claim->pulled) : 0ull;
      const uint32_t len = fl_claim_len(p, r);
      const uint64_t detect = fl_globaltimer_after(len);
      // A new parameter bank's fence before the handover: the blocks read the bank after it.
      if (p.param_ctl != nullptr) fl_take_params(p, r.sel);
      const FlHanded h =
          fl_handed_make(tag, verdict, FL_SELECT_BANK(r.sel), detect, len, seq, fl_round_words_of(pulled, seq));
      fl_handed_store(claim->handed, h);
      fl_mark(p.st->user, detect, FL_MARK_RELEASED);
      fl_tiled_frame_from(p, seq, h, frame);
      // The rest of the claim (slot header copy, FrameDesc, ChainResult,
      // loop state) after the handover: the last block reads it once every
      // block, this one included, has counted in with the ticket.
      fl_claim_write(p, seq, r, detect, &p.st->slot, &p.st->desc, &p.st->chain);
    } else {
      fl_handed_store(claim->handed, fl_handed_make(tag, verdict, 0, 0, 0, 0, 0));
    }
    claim->arrived = 0;
    // The next launch's blocks and puller wait for the tag after this one.
    fl_store_release_gpu32(&claim->generation, tag);
    // The loop's counters (and on a stop, the WHILE value) once the other blocks are on their way.
    fl_end_iteration(p, verdict, t0, false);
    return verdict;
  }
  const uint32_t want = (fl_load_acquire_gpu32(&claim->generation) + 1) & 0xffu;
  atomicAdd(&claim->arrived, 1u);
  // Read while block 0 polls: the loop's parameters do not change while it
  // runs, and the last claim is this launch's or the one before (either
  // rebuilds the sequence).
  const LoopParams p = *params;
  const uint64_t last = p.st->last_claimed;
  FlHanded h;
  for (uint32_t spin = 1;; ++spin) {
    h = fl_handed_load(claim->handed);
    if (h.tag0() == want && h.tag1() == want) break;
    if (spin % FL_TILED_SPINS_PER_STOP_CHECK == 0 && fl_load_relaxed_sys(&p.ctl->tear_down.v)) return FL_VERDICT_STOP;
    fl_tiled_pause(FL_TILED_SPIN_NS);
  }
  if (h.verdict() == FL_VERDICT_READY) fl_tiled_frame_from(p, last, h, frame);
  return h.verdict();
}

// Words one puller round copies at most: four per thread, one load each,
// all in flight together (64 KiB). A tile that waits for a round waits at
// most that long.
#define FL_PULL_ROUND_WORDS (4u * FL_REDUCE_THREADS)
// Rounds of the puller between two looks at the tear-down flag.
#define FL_PULL_ROUNDS_PER_STOP_CHECK 256u

// The puller block, while frames stream: the frame after the last claimed
// one, copied into the staging buffer round by round as its received mark
// grows (at most FL_PULL_ROUND_WORDS a round; `end_guard` bytes short of
// the last claimed frame's length until the claim, loop.pull_end_guard_bytes),
// until block 0's verdict is out; then one last round, which finds the
// mark of a frame just published final. Each round is announced in
// `claim->pulling` before its copy and recorded in `stream` (pulled, then
// seq, released) after it. Bytes under the mark never change until the
// slot is reused, which needs this frame consumed first.
FL_DEVICE void fl_tiled_puller(const LoopParams* params, FlTiledClaim* claim, FlStreamState* stream, uint4* staged,
                               uint32_t staged_words) {
  __shared__ FlPullRange r;
  __shared__ bool last_round;
  uint32_t want = 0;
  uint64_t guard_words = 0;
  if (threadIdx.x == 0) {
    want = (fl_load_acquire_gpu32(&claim->generation) + 1) & 0xffu;
    const FlPullTarget t = fl_pull_target(*params, stream);
    r.seq = t.seq;
    r.slot = t.slot;
    r.from = (uint32_t)(t.pulled / 16u);
    guard_words = fl_pull_guard_end(*params, stream) / 16u;
    // The frame above taken before this block counts in (block 0 claims only after).
    __threadfence();
    atomicAdd(&claim->arrived, 1u);
  }
  for (uint32_t round = 1;; ++round) {
    if (threadIdx.x == 0) {
      bool last = fl_handed_load(claim->handed).tag0() == want;
      if (round % FL_PULL_ROUNDS_PER_STOP_CHECK == 0 && fl_load_relaxed_sys(&params->ctl->tear_down.v)) last = true;
      uint64_t words = fl_marked_words(r.slot, r.seq, staged_words);
      const uint64_t most = (uint64_t)r.from + FL_PULL_ROUND_WORDS;
      words = words < most ? words : most;
      if (!last && words > guard_words) words = guard_words;
      r.end = (uint32_t)(words > r.from ? words : r.from);
      last_round = last;
      if (r.end > r.from) fl_store_release_gpu64(&claim->pulling, ((r.seq & 0xffffffffull) << 32) | r.end);
    }
    __syncthreads();
    const uint32_t from = r.from, end = r.end;
    const bool last = last_round;
    if (end > from) {
      const uint4* src = (const uint4*)(r.slot + FL_SLOT_PAYLOAD_OFFSET);
      fl_copy_words(src + from, staged + from, end - from, threadIdx.x, blockDim.x);
      __syncthreads();
      if (threadIdx.x == 0) {
        // Every thread's copies before the length that covers them.
        __threadfence();
        stream->pulled = (uint64_t)end * 16u;
        fl_store_release_gpu64(&stream->seq, r.seq);
        fl_store_release_gpu64(&claim->pulled, ((r.seq & 0xffffffffull) << 32) | end);
        r.from = end;
      }
    }
    // Everyone has read this round's range before thread 0 plans the next.
    __syncthreads();
    if (last) return;
  }
}

// The loop body's one kernel (above): `params` the loop's parameters in
// device memory, `claim` a zeroed FlTiledClaim kept between launches,
// `stream`/`staged` null, or while frames stream the pulls' state and their
// staging buffer of `staged_words` 16-byte words (the grid then has one
// block more than the tiles use, at least two); the rest as fl_fused_tiled's,
// on the loop state's FrameDesc and ChainResult. The last tile block
// publishes the result.
extern "C" __global__ void __launch_bounds__(FL_REDUCE_THREADS)
    fl_fused_tiled_loop(const LoopParams* params, const FusedProgram* prog, FlReduceScratch* scratch,
                        FlTiledClaim* claim, uint32_t halo, uint32_t span, float* samples, FlStreamState* stream,
                        uint8_t* staged, uint32_t staged_words) {
  __shared__ uint32_t verdict;
  __shared__ FlTiledFrame frame;
  const bool streaming = stream != nullptr && staged != nullptr;
  const uint32_t blocks = streaming ? gridDim.x - 1 : gridDim.x;
  if (streaming && blockIdx.x == blocks) {
    fl_tiled_puller(params, claim, stream, (uint4*)staged, staged_words);
    return;
  }
  DeviceLoopState* st = params->st;
  // While thread 0 waits for the verdict (and with it the claimed frame,
  // FlTiledClaim::handed), the others copy the chain's steps into shared
  // memory (a frame with a parameter bank copies its own after) and read
  // the chain's length.
  if (threadIdx.x == 0) {
    verdict = fl_tiled_claim(params, claim, streaming, &frame);
  } else {
    const uint32_t count = prog->step_count;
    if (threadIdx.x == 1) frame.prog_steps = count, frame.capacity = prog->capacity;
    fl_tiled_copy_steps(prog->steps, count < FL_FUSED_MAX_STEPS ? count : FL_FUSED_MAX_STEPS, 1, blockDim.x - 1);
  }
  __syncthreads();
  if (verdict != FL_VERDICT_READY) return;
  fl_tiled_frame(frame, &st->desc, nullptr, &st->chain, scratch, halo, span, params, samples, stream, staged,
                 st->user, blocks, streaming ? &claim->pulling : nullptr);
}
