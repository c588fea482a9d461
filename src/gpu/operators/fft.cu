// fft kernels: the window before the cuFFT transform and the magnitude or
// power of its bins after it (src/ops/fft.rs defines the operator). The
// transform runs over a fixed batch (the rows of the largest frame); the
// frame's own row count goes from fl_fft_window to fl_fft_spectrum through
// `rows_seen`, and only fl_fft_spectrum rewrites FrameDesc::n_samples, so no
// kernel reads it while another writes it.
#include "ops_common.cuh"

// Window codes (ops::FftWindow::code).
#define FL_FFT_WINDOW_NONE 0
#define FL_FFT_WINDOW_HANN 1
#define FL_FFT_WINDOW_HAMMING 2
#define FL_FFT_WINDOW_BLACKMAN 3

// Mirrors gpu::operators::fft::FftParams.
struct FftParams {
  uint32_t n;         // samples per row, 2..=65536
  uint32_t bins;      // n / 2 + 1
  uint32_t max_rows;  // rows of the transform's batch
  uint32_t window;    // FL_FFT_WINDOW_*
  uint32_t power;     // 1: |scale X|^2, 0: |scale X|
  float scale;
};
static_assert(sizeof(FftParams) == 24, "FftParams must match gpu::operators::fft::FftParams");

struct FftComplex {
  float x, y;
};

// Weight of sample i of a row of n (periodic windows, as FftWindow::value:
// computed in double, then rounded once).
FL_DEVICE float fl_fft_window_value(uint32_t window, uint32_t i, uint32_t n) {
  const double t = 2.0 * (double)i / (double)n;
  switch (window) {
    case FL_FFT_WINDOW_HANN:
      return (float)(0.5 - 0.5 * cospi(t));
    case FL_FFT_WINDOW_HAMMING:
      return (float)(0.54 - 0.46 * cospi(t));
    case FL_FFT_WINDOW_BLACKMAN:
      return (float)(0.42 - 0.5 * cospi(t) + 0.08 * cospi(2.0 * t));
    default:
      return 1.0f;
  }
}

// Grid-stride over the whole batch (max_rows * n floats of `windowed`):
// the frame's whole rows windowed, every later row zero, so the transform
// of the rows past the frame's end is zero and never garbage. Block 0's
// thread 0 stores the frame's row count in `rows_seen` for fl_fft_spectrum.
extern "C" __global__ void __launch_bounds__(FL_OP_THREADS)
    fl_fft_window(const FrameDesc* fd, const float* x, uint32_t capacity, float* windowed, uint32_t* rows_seen,
                  FftParams p) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  uint32_t rows = fl_frame_samples(fd, capacity) / p.n;
  if (rows > p.max_rows) rows = p.max_rows;
  if (fl_grid_thread() == 0) *rows_seen = rows;
  const uint64_t used = (uint64_t)rows * p.n;
  const uint64_t total = (uint64_t)p.max_rows * p.n;
  for (uint64_t i = fl_grid_thread(); i < total; i += fl_grid_threads()) {
    windowed[i] = i < used ? x[i] * fl_fft_window_value(p.window, (uint32_t)(i % p.n), p.n) : 0.0f;
  }
}

// Grid-stride over the frame's bins (rows_seen * bins, at most `capacity`
// floats of `out`): magnitude or power of scale * X. Block 0's thread 0
// makes FrameDesc::n_samples the bin count, so the operators after this one
// see exactly the frame's spectrum.
extern "C" __global__ void __launch_bounds__(FL_OP_THREADS)
    fl_fft_spectrum(FrameDesc* fd, const FftComplex* bins, const uint32_t* rows_seen, float* out, uint32_t capacity,
                    FftParams p) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  uint32_t rows = *rows_seen;
  if (rows > p.max_rows) rows = p.max_rows;
  uint64_t count = (uint64_t)rows * p.bins;
  if (count > capacity) count = capacity;
  if (fl_grid_thread() == 0) fd->n_samples = (uint32_t)count;
  for (uint64_t i = fl_grid_thread(); i < count; i += fl_grid_threads()) {
    const FftComplex c = bins[i];
    const float re = c.x * p.scale, im = c.y * p.scale;
    const float power = re * re + im * im;
    out[i] = p.power ? power : sqrtf(power);
  }
}
