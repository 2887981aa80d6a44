// Exact-form GELU on CUDA (gelu_cuda.rs) and its derivative, elementwise, the counterparts of
// kernels::gelu_erf_inplace and kernels::gelu_erf_backward: GELU(x) = x Phi(x),
// GELU'(x) = Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2. In f32, and in bf16 (read
// and written as bf16, computed in f32, as candle's own bf16 kernels do). Compiled to PTX by
// nvcc at build time (build.rs), and for the host by tests/host_cuda.rs.
#include "bf16.cuh"

__device__ __forceinline__ float gelu_erf(float v) {
  return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__device__ __forceinline__ float gelu_erf_grad(float v) {
  float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
  float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
  return cdf + v * pdf;
}

extern "C" __global__ void gelu_erf_forward(const float* x, float* y, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = gelu_erf(x[i]);
}

extern "C" __global__ void gelu_erf_backward(const float* x, const float* dy, float* dx,
                                             long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  dx[i] = dy[i] * gelu_erf_grad(x[i]);
}

extern "C" __global__ void gelu_erf_forward_bf16(const unsigned short* x, unsigned short* y,
                                                 long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  store(y + i, gelu_erf(load(x + i)));
}

extern "C" __global__ void gelu_erf_backward_bf16(const unsigned short* x,
                                                  const unsigned short* dy, unsigned short* dx,
                                                  long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  store(dx + i, load(dy + i) * gelu_erf_grad(load(x + i)));
}
