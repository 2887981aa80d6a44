// Exact-form GELU on CUDA (gelu_cuda.rs) and its derivative, elementwise, the counterparts of
// kernels::gelu_erf_inplace and kernels::gelu_erf_backward: GELU(x) = x Phi(x),
// GELU'(x) = Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2. Compiled to PTX by nvcc at
// build time (build.rs), and for the host by tests/host_cuda.rs.

extern "C" __global__ void gelu_erf_forward(const float* x, float* y, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

extern "C" __global__ void gelu_erf_backward(const float* x, const float* dy, float* dx,
                                             long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
  float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
  dx[i] = dy[i] * (cdf + v * pdf);
}
