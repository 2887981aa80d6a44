// Exact-form GELU on CUDA (gelu_cuda.rs) and its derivative, elementwise, the counterparts of
// kernels::gelu_erf_inplace and kernels::gelu_erf_backward: GELU(x) = x Phi(x),
// GELU'(x) = Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2. In f32, and in bf16 (read
// and written as bf16, computed in f32, as candle's own bf16 kernels do). Compiled to PTX by
// nvcc at build time (build.rs), and for the host by tests/host_cuda.rs.

__device__ __forceinline__ float gelu_erf(float v) {
  return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__device__ __forceinline__ float gelu_erf_grad(float v) {
  float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
  float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
  return cdf + v * pdf;
}

// bf16 is the upper half of an f32's bits.
__device__ __forceinline__ float bf16_to_f32(unsigned short h) {
  return __uint_as_float((unsigned)h << 16);
}

// Round to nearest, ties to even (as __float2bfloat16 and half::bf16::from_f32); NaN stays a
// (quiet) NaN.
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
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
  y[i] = f32_to_bf16(gelu_erf(bf16_to_f32(x[i])));
}

extern "C" __global__ void gelu_erf_backward_bf16(const unsigned short* x,
                                                  const unsigned short* dy, unsigned short* dx,
                                                  long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  dx[i] = f32_to_bf16(bf16_to_f32(dy[i]) * gelu_erf_grad(bf16_to_f32(x[i])));
}
