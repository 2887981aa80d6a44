// Softmax over the last dimension on CUDA (fused_softmax.rs): exp(x - max) / sum, the
// composed graph's arithmetic, one thread per row of width n (attention rows are T wide).
// Compiled to PTX by nvcc at build time (build.rs), and for the host by tests/host_cuda.rs.

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int n) {
  long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* xr = x + r * n;
  float* yr = y + r * n;
  float mx = xr[0];  // n >= 1: no launch for empty rows
  for (int k = 1; k < n; k++) mx = fmaxf(mx, xr[k]);
  float s = 0.0f;
  for (int k = 0; k < n; k++) {
    float e = expf(xr[k] - mx);
    yr[k] = e;
    s += e;
  }
  for (int k = 0; k < n; k++) yr[k] = yr[k] / s;
}
