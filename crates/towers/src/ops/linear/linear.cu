// The two small kernels of the fused Linear on CUDA (fused_linear_cuda.rs) around its cuBLAS
// GEMMs: the bias broadcast into y's rows before the forward GEMM adds x W^T onto it (beta = 1),
// and the bias gradient db = the column sums of dy, in f32, as two passes of one kernel (row
// chunks to partial sums, then the partials to db) with a fixed order of addition: the same
// sums on every run, no atomics. In f32, and with y and dy in bf16 (the bias and every sum in
// f32). Compiled to PTX by nvcc at build time (build.rs), and for the host by tests/host_cuda.rs.
#include "bf16.cuh"

// y [rows, cols] = b broadcast over the rows, one thread per element.
template <class T>
__device__ __forceinline__ void bias_rows(const float* b, T* y, long long rows, long long cols) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  store(y + i, b[i % cols]);
}

// out [parts, cols]: part p's entry in column c is the sum of x's rows p * chunk up to
// (p + 1) * chunk (fewer in the last part) in column c, in row order; one thread per (part,
// column), neighbouring threads on neighbouring columns (coalesced reads).
template <class T>
__device__ __forceinline__ void column_sums(const T* x, float* out, long long rows,
                                            long long cols, long long chunk) {
  long long parts = (rows + chunk - 1) / chunk;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= parts * cols) return;
  long long p = i / cols, c = i % cols;
  long long end = (p + 1) * chunk < rows ? (p + 1) * chunk : rows;
  float s = 0.0f;
  for (long long r = p * chunk; r < end; r++) s += load(x + r * cols + c);
  out[i] = s;
}

extern "C" __global__ void linear_bias_rows(const float* b, float* y, long long rows,
                                            long long cols) {
  bias_rows(b, y, rows, cols);
}

extern "C" __global__ void linear_bias_rows_bf16(const float* b, unsigned short* y,
                                                 long long rows, long long cols) {
  bias_rows(b, y, rows, cols);
}

extern "C" __global__ void linear_column_sums(const float* x, float* out, long long rows,
                                              long long cols, long long chunk) {
  column_sums(x, out, rows, cols, chunk);
}

extern "C" __global__ void linear_column_sums_bf16(const unsigned short* x, float* out,
                                                   long long rows, long long cols,
                                                   long long chunk) {
  column_sums(x, out, rows, cols, chunk);
}
