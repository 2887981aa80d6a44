// The elementwise kernels of the whole-sequence LSTM op on CUDA (fused_lstm_seq_cuda.rs), the
// counterparts of kernels::lstm_cell_forward / lstm_cell_backward and their masked use in
// kernels::LstmSeq. Buffers are row-major [B, T, ·]: gates [B, T, 4C] (i, f, g, o blocks), h and
// c [B, T, C], mask [B, T]; dh_next and dc_next [B, C] carry the gradients between steps. One
// thread per (sequence, unit); the recurrent GEMMs between the steps run in cuBLAS. Compiled to
// PTX by nvcc at build time (build.rs), and for the host by tests/host_cuda.rs.

__device__ __forceinline__ float lstm_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Step t of the forward pass, after gates[:, t] = gx[:, t] + h[:, t-1] W_hh^T: writes
// c = m (f c_prev + i g) and h = m o tanh(f c_prev + i g) at step t (c_prev = 0 at t = 0).
extern "C" __global__ void lstm_seq_step_forward(const float* gates, const float* mask, float* h,
                                                 float* c, int batch, int steps, int cell, int t) {
  long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)batch * cell) return;
  long long b = idx / cell, k = idx - b * cell;
  long long row = b * steps + t;
  const float* a = gates + row * 4 * cell;
  float cp = t > 0 ? c[(row - 1) * cell + k] : 0.0f;
  float i = lstm_sigmoid(a[k]), f = lstm_sigmoid(a[cell + k]);
  float g = tanhf(a[2 * cell + k]), o = lstm_sigmoid(a[3 * cell + k]);
  float cn = f * cp + i * g;
  float m = mask[row];
  c[row * cell + k] = m * cn;
  h[row * cell + k] = m * o * tanhf(cn);
}

// Step t of the backward pass: from the output gradient dh[:, t], the gradient dh_next reaching
// h_t through step t+1's GEMM and dc_next reaching c_t, writes the gradient of the gate
// pre-activations dgx[:, t] and, in place, dc_next := the gradient reaching c_{t-1}.
extern "C" __global__ void lstm_seq_step_backward(const float* gates, const float* c,
                                                  const float* mask, const float* dh,
                                                  const float* dh_next, float* dc_next, float* dgx,
                                                  int batch, int steps, int cell, int t) {
  long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)batch * cell) return;
  long long b = idx / cell, k = idx - b * cell;
  long long row = b * steps + t;
  float m = mask[row];
  // Through h_t = m h'_t and c_t = m c'_t.
  float dh2 = (dh[row * cell + k] + dh_next[idx]) * m;
  float dc2 = dc_next[idx] * m;
  float cp = t > 0 ? c[(row - 1) * cell + k] : 0.0f;
  const float* a = gates + row * 4 * cell;
  float i = lstm_sigmoid(a[k]), f = lstm_sigmoid(a[cell + k]);
  float g = tanhf(a[2 * cell + k]), o = lstm_sigmoid(a[3 * cell + k]);
  float tc = tanhf(f * cp + i * g);
  // The cell state's total gradient: its own plus the path through h = o tanh(c).
  float dct = dc2 + dh2 * o * (1.0f - tc * tc);
  float* da = dgx + row * 4 * cell;
  da[k] = dct * g * i * (1.0f - i);
  da[cell + k] = dct * cp * f * (1.0f - f);
  da[2 * cell + k] = dct * i * (1.0f - g * g);
  da[3 * cell + k] = dh2 * tc * o * (1.0f - o);
  dc_next[idx] = dct * f;
}

// h_prev[:, t] = h[:, t-1], zeros at t = 0: the right operand of dW_hh = sum_t dgates_t^T h_{t-1}.
extern "C" __global__ void lstm_seq_shift_steps(const float* h, float* h_prev, int batch,
                                                int steps, int cell) {
  long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)batch * steps * cell) return;
  long long t = (idx / cell) % steps;
  h_prev[idx] = t > 0 ? h[idx - cell] : 0.0f;
}
