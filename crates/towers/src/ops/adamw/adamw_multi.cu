// Gradient-norm clipping and AdamW over all parameters in three launches (optim_cuda.rs), with
// no read of the norm by the host between them:
// 1. adamw_multi_sum_sq: Σ g² of every gradient, one partial sum per chunk;
// 2. adamw_multi_clip: one warp sums the partials into the norm and the clip factor, kept in
//    device memory;
// 3. adamw_multi_step: clipping and AdamW of every parameter in place, reading that factor.
// The parameters come as a table of 64-bit words, ADAMW_TABLE_WORDS per parameter, in the
// order the host wrote them:
//   [θ, g, m, v] device addresses, n (elements), first (the parameter's first chunk: the chunks
//   of the parameters before it), keep (1 − lr·λ, f32 bits in the low half).
// A chunk is `chunk` consecutive elements of one parameter (its last chunk short), and each
// chunk one warp, whose lanes stride through it (coalesced). The sums are in f64, each square
// exact (the square of an f32 has at most 48 significant bits, so a multiply-add that nvcc
// forms rounds as the sum alone), summed in a fixed order — a lane's elements in order, the
// lanes by butterfly, the partials by chunk — without atomics: the same norm every run. It
// differs from the CPU's Σ (optim.rs's sum_sq, another order) only by f64 rounding. The norm, sqrt, and the clip factor, min(1, max/(norm + 1e-6)) as
// optim.rs's clip_factor writes it, are computed in f64 and the factor rounded to f32 as the
// CPU's Coeffs rounds it. The update is adamw.cu's (optim.rs's adamw_elem): the same operation
// order, each product and sum rounded on its own (__fmul_rn, __fadd_rn), sqrtf and the
// division correctly rounded, so that with the same factor it equals the CPU's bit for bit.
// A norm that is not finite leaves every parameter and moment untouched (the host then
// reports it as the CPU path does, before any update). Compiled to PTX by nvcc at build time
// (build.rs), and for the host by tests/host_cuda.rs.
#include "warp.cuh"

#define ADAMW_TABLE_WORDS 7

// The table row of chunk c: the last parameter whose first chunk is at or before c (a
// parameter of no elements owns no chunk, and the row after it starts at the same chunk).
__device__ __forceinline__ int adamw_row_of(const unsigned long long* table, int count,
                                            long long c) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if ((long long)table[mid * ADAMW_TABLE_WORDS + 5] <= c)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ double warp_sum_f64(double v) {
  for (int o = WARP_LANES / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One warp per chunk: partial[c] = Σ g² over chunk c. A warp past the last chunk leaves as one.
extern "C" __global__ void adamw_multi_sum_sq(const unsigned long long* table, int count,
                                              long long chunks, long long chunk,
                                              double* partial) {
  long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long c = t / WARP_LANES;
  int lane = (int)(t % WARP_LANES);
  if (c >= chunks) return;
  const unsigned long long* row = table + adamw_row_of(table, count, c) * ADAMW_TABLE_WORDS;
  const float* g = (const float*)row[1];
  long long n = (long long)row[4], start = (c - (long long)row[5]) * chunk;
  long long end = start + chunk < n ? start + chunk : n;
  double s = 0.0;
  for (long long j = start + lane; j < end; j += WARP_LANES) {
    double x = g[j];
    s += x * x;
  }
  s = warp_sum_f64(s);
  if (lane == 0) partial[c] = s;
}

// One warp: out[0] = the norm √(Σ partial), out[1] = the clip factor (1 without clipping:
// max_norm ≤ 0, or the norm at or under it). Threads past the first warp leave.
extern "C" __global__ void adamw_multi_clip(const double* partial, long long chunks,
                                            double max_norm, double* out) {
  long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= WARP_LANES) return;
  double s = 0.0;
  for (long long c = t; c < chunks; c += WARP_LANES) s += partial[c];
  s = warp_sum_f64(s);
  if (t == 0) {
    double norm = sqrt(s);
    out[0] = norm;
    out[1] = max_norm > 0.0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
  }
}

// One warp per chunk: θ, m and v of chunk c updated in place from g scaled by the factor in
// norm_clip[1] (nothing written when the norm norm_clip[0] is not finite).
extern "C" __global__ void adamw_multi_step(const unsigned long long* table, int count,
                                            long long chunks, long long chunk,
                                            const double* norm_clip, float b1,
                                            float one_minus_b1, float b2, float one_minus_b2,
                                            float inv_bc1, float inv_bc2, float eps, float lr) {
  long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long c = t / WARP_LANES;
  int lane = (int)(t % WARP_LANES);
  if (c >= chunks || !(norm_clip[0] < INFINITY)) return;
  const float grad_scale = (float)norm_clip[1];
  const unsigned long long* row = table + adamw_row_of(table, count, c) * ADAMW_TABLE_WORDS;
  float* theta = (float*)row[0];
  const float* g = (const float*)row[1];
  float* m = (float*)row[2];
  float* v = (float*)row[3];
  long long n = (long long)row[4], start = (c - (long long)row[5]) * chunk;
  long long end = start + chunk < n ? start + chunk : n;
  const float keep = __uint_as_float((unsigned)row[6]);
  for (long long j = start + lane; j < end; j += WARP_LANES) {
    float gi = __fmul_rn(g[j], grad_scale);
    float mi = __fadd_rn(__fmul_rn(m[j], b1), __fmul_rn(gi, one_minus_b1));
    float vi = __fadd_rn(__fmul_rn(v[j], b2), __fmul_rn(__fmul_rn(gi, gi), one_minus_b2));
    float denom = __fadd_rn(sqrtf(__fmul_rn(vi, inv_bc2)), eps);
    float upd = __fmul_rn(mi, inv_bc1) / denom;
    theta[j] = __fadd_rn(__fmul_rn(theta[j], keep), -__fmul_rn(upd, lr));
    m[j] = mi;
    v[j] = vi;
  }
}
