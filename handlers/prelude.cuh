// frameloop device prelude: fixed-width integer types, the CUDA device-runtime
// declarations the loop needs, and small memory-ordering helpers. Every kernel
// source is compiled by NVRTC without CUDA toolkit headers, so what would
// normally come from <cstdint> and cuda_device_runtime_api.h is declared here.
#pragma once

typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;

// Declared like cuda_device_runtime_api.h (CUDA 12.4 and later, 13.x): the
// handle is a 64-bit integer and cudaGraphSetConditional is a device-runtime
// builtin that needs no relocatable device code.
typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(cudaGraphConditionalHandle handle,
                                                                      unsigned int value);

#define FL_DEVICE __device__ __forceinline__

// Nanoseconds of the GPU's global timer.
FL_DEVICE uint64_t fl_globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// System-scope acquire load: pairs with a release store by the host (or another device).
FL_DEVICE uint64_t fl_load_acquire_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// System-scope relaxed load (a volatile read that is never cached).
FL_DEVICE uint64_t fl_load_relaxed_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// System-scope release store: every earlier write is visible before this one.
FL_DEVICE void fl_store_release_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// System-scope release fence: stores before it are visible to the host
// before any store after it.
FL_DEVICE void fl_fence_release_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

// System-scope relaxed store.
FL_DEVICE void fl_store_relaxed_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Device-scope acquire loads and release stores, between blocks of one grid.
FL_DEVICE uint32_t fl_load_acquire_gpu32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

FL_DEVICE void fl_store_release_gpu32(uint32_t* p, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

FL_DEVICE uint64_t fl_load_acquire_gpu64(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

FL_DEVICE void fl_store_release_gpu64(uint64_t* p, uint64_t v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Atomically takes a flag set by the host (returns its old value, leaves 0).
FL_DEVICE uint64_t fl_take_flag_sys(uint64_t* p) {
  uint64_t v;
  asm volatile("atom.acq_rel.sys.global.exch.b64 %0, [%1], 0;" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Programmatic dependent launch (sm_90 and later; no-ops before). A kernel
// that calls fl_wait_for_prior_kernels() before touching memory may be
// launched early, behind a programmatic graph edge: it then waits here until
// the kernels before it finished and their writes are visible.
// fl_let_dependents_launch() lets the kernel behind such an edge start
// (its blocks take their place and wait) while this one still runs.
FL_DEVICE void fl_wait_for_prior_kernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
FL_DEVICE void fl_let_dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

FL_DEVICE float fl_pos_inf() { return __int_as_float(0x7f800000); }
FL_DEVICE float fl_neg_inf() { return __int_as_float(0xff800000); }
