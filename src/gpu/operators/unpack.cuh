// unpack: raw payload samples (u8, u16 little-endian, packed u12) to f32,
// y = sample * scale + offset (src/ops/cpu.rs `unpack`). Reads the payload of
// the claimed slot through FrameDesc, writes FrameDesc::n_samples. Shared by
// the unpack kernels (unpack.cu) and the fused chain (fused.cu).
#pragma once
#include "ops_common.cuh"

#define FL_FMT_U8 0
#define FL_FMT_U16 1
#define FL_FMT_U12 2

// Samples per thread and chunk: one 16-byte load (u8, u16) or three 4-byte loads (u12).
template <int FMT> struct UnpackChunk;
template <> struct UnpackChunk<FL_FMT_U8> { static constexpr uint32_t samples = 16, bytes = 16, align = 16; };
template <> struct UnpackChunk<FL_FMT_U16> { static constexpr uint32_t samples = 8, bytes = 16, align = 16; };
template <> struct UnpackChunk<FL_FMT_U12> { static constexpr uint32_t samples = 8, bytes = 12, align = 4; };

template <int FMT> FL_DEVICE uint32_t fl_samples_in(uint32_t bytes) {
  if (FMT == FL_FMT_U8) return bytes;
  if (FMT == FL_FMT_U16) return bytes / 2;
  return bytes / 3 * 2;
}

// One past the last payload byte of sample `i`: the sample is whole in a
// prefix of at least that many bytes (what fl_samples_in counts).
template <int FMT> FL_DEVICE uint64_t fl_sample_end(int64_t i) {
  if (FMT == FL_FMT_U8) return (uint64_t)i + 1;
  if (FMT == FL_FMT_U16) return 2 * (uint64_t)i + 2;
  return (uint64_t)i / 2 * 3 + ((i & 1) ? 3 : 2);
}

// Sample `i` read byte by byte (the tail of a frame, or an unaligned payload).
template <int FMT> FL_DEVICE uint32_t fl_sample_at(const uint8_t* p, uint32_t i) {
  if (FMT == FL_FMT_U8) return p[i];
  if (FMT == FL_FMT_U16) return (uint32_t)p[2 * i] | ((uint32_t)p[2 * i + 1] << 8);
  const uint8_t* t = p + i / 2 * 3;
  return (i & 1) ? ((uint32_t)t[1] >> 4) | ((uint32_t)t[2] << 4) : (uint32_t)t[0] | (((uint32_t)t[1] & 0xfu) << 8);
}

// A whole aligned chunk: `words` holds its bytes little-endian.
template <int FMT> FL_DEVICE void fl_decode_chunk(const uint32_t* words, uint32_t* s) {
  if (FMT == FL_FMT_U8) {
#pragma unroll
    for (int k = 0; k < 16; ++k) s[k] = (words[k / 4] >> (8 * (k % 4))) & 0xffu;
  } else if (FMT == FL_FMT_U16) {
#pragma unroll
    for (int k = 0; k < 8; ++k) s[k] = (words[k / 2] >> (16 * (k % 2))) & 0xffffu;
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uint32_t b0 = (words[(3 * k) / 4] >> (8 * ((3 * k) % 4))) & 0xffu;
      uint32_t b1 = (words[(3 * k + 1) / 4] >> (8 * ((3 * k + 1) % 4))) & 0xffu;
      uint32_t b2 = (words[(3 * k + 2) / 4] >> (8 * ((3 * k + 2) % 4))) & 0xffu;
      s[2 * k] = b0 | ((b1 & 0xfu) << 8);
      s[2 * k + 1] = (b1 >> 4) | (b2 << 4);
    }
  }
}

// The bytes of one aligned chunk at `src` as little-endian words: one
// 16-byte load (u8, u16) or three 4-byte loads and a zero word (u12).
template <int FMT> FL_DEVICE void fl_load_chunk(const uint8_t* src, uint32_t* words) {
  typedef UnpackChunk<FMT> C;
  if (C::bytes == 16) {
    const uint4 v = *(const uint4*)src;
    words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
  } else {
#pragma unroll
    for (int w = 0; w < 3; ++w) words[w] = ((const uint32_t*)src)[w];
    words[3] = 0;
  }
}

// Worker `worker` of `workers` (any number: a stride over chunks). Worker 0
// stores the sample count. `capacity`: floats `out` holds.
template <int FMT>
FL_DEVICE void fl_unpack_range(FrameDesc* fd, float* out, uint32_t capacity, float scale, float offset,
                               uint64_t worker, uint64_t workers) {
  typedef UnpackChunk<FMT> C;
  const uint8_t* payload = (const uint8_t*)fd->payload_dptr;
  uint32_t cap = FMT == FL_FMT_U12 ? capacity & ~1u : capacity;
  uint32_t n = fl_samples_in<FMT>(fd->payload_len);
  if (n > cap) n = cap;
  if (worker == 0) fd->n_samples = n;
  bool vec_in = ((uint64_t)payload % C::align) == 0;
  bool vec_out = ((uint64_t)out % 16) == 0;
  for (uint64_t chunk = worker; chunk * C::samples < n; chunk += workers) {
    uint32_t first = (uint32_t)(chunk * C::samples);
    if (vec_in && first + C::samples <= n) {
      uint32_t words[4];
      fl_load_chunk<FMT>(payload + chunk * C::bytes, words);
      uint32_t s[C::samples];
      fl_decode_chunk<FMT>(words, s);
      float y[C::samples];
#pragma unroll
      for (uint32_t k = 0; k < C::samples; ++k) y[k] = fl_mul_add(__uint2float_rn(s[k]), scale, offset);
      if (vec_out) {
#pragma unroll
        for (uint32_t k = 0; k < C::samples; k += 4)
          *(float4*)(out + first + k) = make_float4(y[k], y[k + 1], y[k + 2], y[k + 3]);
      } else {
#pragma unroll
        for (uint32_t k = 0; k < C::samples; ++k) out[first + k] = y[k];
      }
    } else {
      uint32_t last = first + C::samples < n ? first + C::samples : n;
      for (uint32_t i = first; i < last; ++i) out[i] = fl_mul_add(__uint2float_rn(fl_sample_at<FMT>(payload, i)), scale, offset);
    }
  }
}

