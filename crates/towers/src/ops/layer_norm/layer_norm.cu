// LayerNorm rows on CUDA (fused_layer_norm_cuda.rs), the counterparts of kernels::layer_norm_rows
// and kernels::layer_norm_backward_rows: biased variance as torch, mean and variance as sums
// times 1/H. One warp per row of width h: lane l reads entries l, l + 32, ... (coalesced) and
// the warp combines its partial sums (warp.cuh). x, y, dy and dx in f32 or bf16 (read and
// written as bf16, f32 inside: bf16.cuh); the gain and shift are f32 (the master weights) in
// both, so bf16 gives the numbers of normalising x cast to f32 and casting y and dx back,
// without the casts. Launched with a whole number of warps per block, so a warp past the
// last row leaves as one. Compiled to PTX by nvcc at build time (build.rs), and for the host by
// tests/host_cuda.rs.
#include "bf16.cuh"
#include "warp.cuh"

// The row of this thread's warp, and its lane.
__device__ __forceinline__ long long ln_row(int* lane) {
  long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  *lane = (int)(t % WARP_LANES);
  return t / WARP_LANES;
}

// The row's mean and 1/sqrt(var + eps), two passes, in every lane.
template <class T>
__device__ __forceinline__ void ln_row_stats(const T* xr, int h, int lane, float eps, float* mean,
                                             float* rstd) {
  float inv_h = 1.0f / (float)h, s = 0.0f, q = 0.0f;
  for (int k = lane; k < h; k += WARP_LANES) s += load(xr + k);
  float mu = warp_sum(s) * inv_h;
  for (int k = lane; k < h; k += WARP_LANES) {
    float c = load(xr + k) - mu;
    q += c * c;
  }
  *mean = mu;
  *rstd = 1.0f / sqrtf(warp_sum(q) * inv_h + eps);
}

// y = (x - mean) rstd gamma + beta, row by row over x [rows, h].
template <class T>
__device__ __forceinline__ void ln_forward(const T* x, const float* gamma, const float* beta, T* y,
                                           int rows, int h, float eps) {
  int lane;
  long long r = ln_row(&lane);
  if (r >= rows) return;
  const T* xr = x + r * h;
  T* yr = y + r * h;
  float mean, rstd;
  ln_row_stats(xr, h, lane, eps, &mean, &rstd);
  for (int k = lane; k < h; k += WARP_LANES)
    store(yr + k, (load(xr + k) - mean) * rstd * gamma[k] + beta[k]);
}

// The backward pass row by row: with g = dy gamma and xhat the normalised row,
// dx = rstd (g - mean(g) - xhat mean(g xhat)); xhat is written too (in f32 whatever T), for the
// gain's gradient sum(dy xhat) over rows (the shift's is sum(dy)), which the caller reduces.
template <class T>
__device__ __forceinline__ void ln_backward(const T* x, const T* dy, const float* gamma, T* dx,
                                            float* xhat, int rows, int h, float eps) {
  int lane;
  long long r = ln_row(&lane);
  if (r >= rows) return;
  const T* xr = x + r * h;
  const T* gr = dy + r * h;
  T* dr = dx + r * h;
  float* hr = xhat + r * h;
  float mean, rstd;
  ln_row_stats(xr, h, lane, eps, &mean, &rstd);
  float a = 0.0f, b = 0.0f;
  for (int k = lane; k < h; k += WARP_LANES) {
    float xh = (load(xr + k) - mean) * rstd;
    hr[k] = xh;
    float g = load(gr + k) * gamma[k];
    a += g;
    b += g * xh;
  }
  float inv_h = 1.0f / (float)h, ma = warp_sum(a) * inv_h, mb = warp_sum(b) * inv_h;
  for (int k = lane; k < h; k += WARP_LANES)
    store(dr + k, rstd * (load(gr + k) * gamma[k] - ma - hr[k] * mb));
}

extern "C" __global__ void layer_norm_rows(const float* x, const float* gamma, const float* beta,
                                           float* y, int rows, int h, float eps) {
  ln_forward(x, gamma, beta, y, rows, h, eps);
}

extern "C" __global__ void layer_norm_rows_bf16(const unsigned short* x, const float* gamma,
                                                const float* beta, unsigned short* y, int rows,
                                                int h, float eps) {
  ln_forward(x, gamma, beta, y, rows, h, eps);
}

extern "C" __global__ void layer_norm_backward_rows(const float* x, const float* dy,
                                                    const float* gamma, float* dx, float* xhat,
                                                    int rows, int h, float eps) {
  ln_backward(x, dy, gamma, dx, xhat, rows, h, eps);
}

extern "C" __global__ void layer_norm_backward_rows_bf16(const unsigned short* x,
                                                         const unsigned short* dy,
                                                         const float* gamma, unsigned short* dx,
                                                         float* xhat, int rows, int h, float eps) {
  ln_backward(x, dy, gamma, dx, xhat, rows, h, eps);
}
