// The output layer's loss on CUDA (softmax_nll.rs): per row r of logits x [rows, v] with an
// f32 bias b [v] and a label y_r, nll_r = logsumexp(x_r + b) - (x_r,y + b_y), and its gradient
// dx_rk = dnll_r (softmax(x_r + b)_k - [k = y_r]), db_k = sum_r dx_rk. The composed graph spends
// some ten full [rows, v] passes on this (a cast to f32, the bias, max, subtract, exp, sum, log,
// subtract, gather, and as many back); here the forward reads x once per reduction and the
// backward reads it once and writes dx once. f32, and bf16 x and dx with f32 inside
// (bf16.cuh). Compiled to PTX by nvcc at build time (build.rs), and for the host by
// tests/host_cuda.rs.
#include "bf16.cuh"
#include "warp.cuh"

// One warp per row (lanes at stride 32, coalesced; warp.cuh combines them): nll and the
// log-sum-exp that the backward pass reads. A warp past the last row leaves as one.
template <class T>
__device__ __forceinline__ void nll_row(const T* x, const float* b, const unsigned* labels,
                                        float* nll, float* lse, int rows, int v) {
  long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long r = t / WARP_LANES;
  int lane = (int)(t % WARP_LANES);
  if (r >= rows) return;
  const T* xr = x + r * v;
  float mx = -INFINITY;
  for (int k = lane; k < v; k += WARP_LANES) mx = fmaxf(mx, load(xr + k) + b[k]);
  mx = warp_max(mx);
  float s = 0.0f;
  for (int k = lane; k < v; k += WARP_LANES) s += expf(load(xr + k) + b[k] - mx);
  s = warp_sum(s);
  if (lane == 0) {
    unsigned y = labels[r];
    float l = mx + logf(s);
    lse[r] = l;
    nll[r] = l - (load(xr + y) + b[y]);
  }
}

extern "C" __global__ void softmax_nll_rows(const float* x, const float* b,
                                            const unsigned* labels, float* nll, float* lse,
                                            int rows, int v) {
  nll_row(x, b, labels, nll, lse, rows, v);
}

extern "C" __global__ void softmax_nll_rows_bf16(const unsigned short* x, const float* b,
                                                 const unsigned* labels, float* nll, float* lse,
                                                 int rows, int v) {
  nll_row(x, b, labels, nll, lse, rows, v);
}

// One thread per column k and chunk of `chunk` rows: dx over the chunk's rows (neighbouring
// threads hold neighbouring columns, so every row is read and written coalesced) and the
// chunk's partial sum of the column into db_part [chunks, v], summed over chunks by the op (no
// atomics: the same sum every run).
template <class T>
__device__ __forceinline__ void nll_grad(const T* x, const float* b, const unsigned* labels,
                                         const float* lse, const float* dnll, T* dx,
                                         float* db_part, int rows, int v, int chunk) {
  long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long chunks = ((long long)rows + chunk - 1) / chunk;
  if (t >= chunks * v) return;
  int k = (int)(t % v);
  long long c = t / v;
  long long r0 = c * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
  float bk = b[k], acc = 0.0f;
  for (long long r = r0; r < r1; r++) {
    long long i = r * v + k;
    float p = expf(load(x + i) + bk - lse[r]);
    float g = dnll[r] * (labels[r] == (unsigned)k ? p - 1.0f : p);
    store(dx + i, g);
    acc += g;
  }
  db_part[c * v + k] = acc;
}

extern "C" __global__ void softmax_nll_grad(const float* x, const float* b,
                                            const unsigned* labels, const float* lse,
                                            const float* dnll, float* dx, float* db_part,
                                            int rows, int v, int chunk) {
  nll_grad(x, b, labels, lse, dnll, dx, db_part, rows, v, chunk);
}

extern "C" __global__ void softmax_nll_grad_bf16(const unsigned short* x, const float* b,
                                                 const unsigned* labels, const float* lse,
                                                 const float* dnll, unsigned short* dx,
                                                 float* db_part, int rows, int v, int chunk) {
  nll_grad(x, b, labels, lse, dnll, dx, db_part, rows, v, chunk);
}
