// What the CPU pays to leave a received part in memory rather than in its
// cache (the GPU reads freshly written host memory slower: tail_read.cu):
// per part, a memcpy into a 256 MiB area (the receive copy), then writing
// those lines back (clwb) or flushing them (clflushopt), each with a store
// fence, against copying by non-temporal stores in the first place.
// Medians and p90 of 400 parts, µs.
//
//   gcc -O2 -mclwb -mclflushopt -o /tmp/host_write_back bench/zc/host_write_back.c
//   /tmp/host_write_back [PART_BYTES]   (65536)
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PARTS 400

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double quantile(double *v, double q) {
  qsort(v, PARTS, sizeof *v, by_value);
  return v[(int)(q * (PARTS - 1))] / 1e3;
}

int main(int argc, char **argv) {
  const size_t part = argc > 1 ? strtoull(argv[1], NULL, 0) : 65536, area_bytes = 256u << 20;
  if (part < 64 || part % 64 != 0 || part > area_bytes / 4) {
    fprintf(stderr, "PART_BYTES must be a multiple of 64, at least 64 and at most %zu\n", area_bytes / 4);
    return 2;
  }
  char *src = aligned_alloc(4096, part), *area = aligned_alloc(4096, area_bytes);
  memset(src, 7, part);
  memset(area, 1, area_bytes);
  static double copy[PARTS], clwb[PARTS], flush[PARTS], nt[PARTS];
  for (int mode = 0; mode < 4; mode++) {
    for (int i = 0; i < PARTS; i++) {
      char *p = area + ((size_t)i * 7919 % (area_bytes / part)) * part;
      src[i % part]++;
      const double t0 = now_ns();
      if (mode == 3) {
        for (size_t k = 0; k < part; k += 16)
          _mm_stream_si128((__m128i *)(p + k), _mm_load_si128((const __m128i *)(src + k)));
        _mm_sfence();
        nt[i] = now_ns() - t0;
        continue;
      }
      memcpy(p, src, part);
      const double t1 = now_ns();
      if (mode == 1)
        for (size_t k = 0; k < part; k += 64) _mm_clwb(p + k);
      if (mode == 2)
        for (size_t k = 0; k < part; k += 64) _mm_clflushopt(p + k);
      _mm_sfence();
      const double t2 = now_ns();
      if (mode == 0) copy[i] = t1 - t0;
      if (mode == 1) clwb[i] = t2 - t1;
      if (mode == 2) flush[i] = t2 - t1;
    }
  }
  printf("part %zu B: memcpy p50 %.2f; then clwb p50 %.2f (p90 %.2f); then clflushopt p50 %.2f (p90 %.2f); "
         "non-temporal copy p50 %.2f\n",
         part, quantile(copy, 0.5), quantile(clwb, 0.5), quantile(clwb, 0.9), quantile(flush, 0.5),
         quantile(flush, 0.9), quantile(nt, 0.5));
  return 0;
}
