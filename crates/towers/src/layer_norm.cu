// LayerNorm rows on CUDA (fused_layer_norm_cuda.rs), the counterparts of kernels::layer_norm_rows
// and kernels::layer_norm_backward_rows: biased variance as torch, mean and variance as sums
// times 1/H. One warp per row of width h: lane l reads entries l, l + 32, ... (coalesced) and
// the warp combines its partial sums (warp.cuh). Launched with a whole number of warps per
// block, so a warp past the last row leaves as one. Compiled to PTX by nvcc at build time
// (build.rs), and for the host by tests/host_cuda.rs.
#include "warp.cuh"

// The row of this thread's warp, and its lane.
__device__ __forceinline__ long long ln_row(int* lane) {
  long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  *lane = (int)(t % WARP_LANES);
  return t / WARP_LANES;
}

// The row's mean and 1/sqrt(var + eps), two passes, in every lane.
__device__ __forceinline__ void ln_row_stats(const float* xr, int h, int lane, float eps,
                                             float* mean, float* rstd) {
  float inv_h = 1.0f / (float)h, s = 0.0f, q = 0.0f;
  for (int k = lane; k < h; k += WARP_LANES) s += xr[k];
  float mu = warp_sum(s) * inv_h;
  for (int k = lane; k < h; k += WARP_LANES) {
    float c = xr[k] - mu;
    q += c * c;
  }
  *mean = mu;
  *rstd = 1.0f / sqrtf(warp_sum(q) * inv_h + eps);
}

// y = (x - mean) rstd gamma + beta, row by row over x [rows, h].
extern "C" __global__ void layer_norm_rows(const float* x, const float* gamma, const float* beta,
                                           float* y, int rows, int h, float eps) {
  int lane;
  long long r = ln_row(&lane);
  if (r >= rows) return;
  const float* xr = x + r * h;
  float* yr = y + r * h;
  float mean, rstd;
  ln_row_stats(xr, h, lane, eps, &mean, &rstd);
  for (int k = lane; k < h; k += WARP_LANES) yr[k] = (xr[k] - mean) * rstd * gamma[k] + beta[k];
}

// The backward pass row by row: with g = dy gamma and xhat the normalised row,
// dx = rstd (g - mean(g) - xhat mean(g xhat)); xhat is written too, for the gain's gradient
// sum(dy xhat) over rows (the shift's is sum(dy)), which the caller reduces.
extern "C" __global__ void layer_norm_backward_rows(const float* x, const float* dy,
                                                    const float* gamma, float* dx, float* xhat,
                                                    int rows, int h, float eps) {
  int lane;
  long long r = ln_row(&lane);
  if (r >= rows) return;
  const float* xr = x + r * h;
  const float* gr = dy + r * h;
  float* dr = dx + r * h;
  float* hr = xhat + r * h;
  float mean, rstd;
  ln_row_stats(xr, h, lane, eps, &mean, &rstd);
  float a = 0.0f, b = 0.0f;
  for (int k = lane; k < h; k += WARP_LANES) {
    float xh = (xr[k] - mean) * rstd;
    hr[k] = xh;
    float g = gr[k] * gamma[k];
    a += g;
    b += g * xh;
  }
  float inv_h = 1.0f / (float)h, ma = warp_sum(a) * inv_h, mb = warp_sum(b) * inv_h;
  for (int k = lane; k < h; k += WARP_LANES) dr[k] = rstd * (gr[k] * gamma[k] - ma - hr[k] * mb);
}
