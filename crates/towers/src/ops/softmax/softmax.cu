// Softmax over the last dimension on CUDA (fused_softmax.rs): exp(x - max) / sum, the
// composed graph's arithmetic, one warp per row of width n (attention rows are T wide): lane l
// reads entries l, l + 32, ... (coalesced) and the warp combines its maxima and sums
// (warp.cuh). f32, and bf16 read and written with f32 inside (bf16.cuh): each output is
// rounded once. Launched with a whole number of warps per block, so a warp past the last row
// leaves as one. Compiled to PTX by nvcc at build time (build.rs), and for the host by
// tests/host_cuda.rs.
#include "bf16.cuh"
#include "warp.cuh"

template <class T>
__device__ __forceinline__ void softmax_row(const T* x, T* y, int rows, int n) {
  long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long r = t / WARP_LANES;
  int lane = (int)(t % WARP_LANES);
  if (r >= rows) return;
  const T* xr = x + r * n;
  T* yr = y + r * n;
  float mx = -INFINITY;
  for (int k = lane; k < n; k += WARP_LANES) mx = fmaxf(mx, load(xr + k));
  mx = warp_max(mx);
  float s = 0.0f;
  for (int k = lane; k < n; k += WARP_LANES) s += expf(load(xr + k) - mx);
  s = warp_sum(s);
  for (int k = lane; k < n; k += WARP_LANES) store(yr + k, expf(load(xr + k) - mx) / s);
}

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int n) {
  softmax_row(x, y, rows, n);
}

extern "C" __global__ void softmax_rows_bf16(const unsigned short* x, unsigned short* y, int rows,
                                             int n) {
  softmax_row(x, y, rows, n);
}
