// The elementwise kernels of the whole-sequence LSTM op on CUDA (fused_lstm_seq_cuda.rs), the
// counterparts of kernels::lstm_cell_forward / lstm_cell_backward and their masked use in
// kernels::LstmSeq. Buffers are row-major [B, T, ·]: gates [B, T, 4C] (i, f, g, o blocks), h and
// c [B, T, C], mask [B, T]; dh_next and dc_next [B, C] carry the gradients between steps. One
// thread per (sequence, unit); the recurrent GEMMs between the steps run in cuBLAS. Compiled to
// PTX by nvcc at build time (build.rs), and for the host by tests/host_cuda.rs.
//
// Below them, the kernels of the chained op (lstm_chains_*): a layer's independent recurrences
// (towers x directions) stepped together in bf16, for the batched GEMMs between the steps.
#include "bf16.cuh"

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

// The chained op (fused_lstm_seq_cuda.rs, chains_forward / chains_backward): N independent
// chains of one shape stepped together, gx, gates [N, B, T, 4C], h, c [N, B, T, C], mask
// [B, T] shared by the chains. Chain n reads time reversed when bit n of `reversed` is set: its
// step s is time T-1-s and its previous step is t+1, so a backward direction reads its input
// and writes its output in the input's own time order (no reversed copies). gx, h and the
// gradients dh, dgx are bf16 (E, as bf16.cuh stores it; the host harness also runs E = float);
// the gate pre-activations, the cell state c and the gradients carried between the steps
// (dh_next, dc_next) stay f32. Between the steps, one strided-batched cuBLAS GEMM over the
// chains (bf16 operands, f32 accumulation) reads and writes the per-step buffers [N, B, ·]:
// hs (h of the step just taken, bf16), gs (its product with W_hh^T, f32) forward; dgs (the
// step's gate gradients, bf16) into dh_next backward. One thread per (chain, sequence, unit).

// The index of one thread: its (chain, sequence) row nb = n B + b, unit k, chain n and sequence
// b, the chain's time t at step s and its row of [N, B, T, .].
struct ChainAt {
  long long nb, k, b, t, row;
  bool rev;
};

__device__ __forceinline__ ChainAt chain_at(long long idx, int batch, int steps, int cell,
                                            unsigned reversed, int s) {
  ChainAt at;
  at.nb = idx / cell;
  at.k = idx - at.nb * cell;
  long long n = at.nb / batch;
  at.b = at.nb - n * batch;
  at.rev = (reversed >> n) & 1u;
  at.t = at.rev ? steps - 1 - s : s;
  at.row = at.nb * steps + at.t;
  return at;
}

// Step s of the forward pass: gates = gx + gs (gs = h_prev W_hh^T from the GEMM before this
// step; none at s = 0), saved in f32; then c = m (f c_prev + i g) in f32 and
// h = m o tanh(f c_prev + i g), written to h at the chain's time and to hs for the next GEMM.
template <class E>
__device__ __forceinline__ void chains_step_forward(const E* gx, const float* gs,
                                                    const float* mask, float* gates, float* c,
                                                    E* h, E* hs, int chains, int batch,
                                                    int steps, int cell, unsigned reversed,
                                                    int s) {
  long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)chains * batch * cell) return;
  ChainAt at = chain_at(idx, batch, steps, cell, reversed, s);
  long long k = at.k;
  const E* x = gx + at.row * 4 * cell;
  float* a = gates + at.row * 4 * cell;
  const float* p = gs + at.nb * 4 * cell;
  float pre[4];
  for (int j = 0; j < 4; j++) {
    pre[j] = load(x + j * cell + k) + (s > 0 ? p[j * cell + k] : 0.0f);
    a[j * cell + k] = pre[j];
  }
  float cp = s > 0 ? c[(at.rev ? at.row + 1 : at.row - 1) * cell + k] : 0.0f;
  float i = lstm_sigmoid(pre[0]), f = lstm_sigmoid(pre[1]);
  float g = tanhf(pre[2]), o = lstm_sigmoid(pre[3]);
  float cn = f * cp + i * g;
  float m = mask[at.b * steps + at.t];
  float hv = m * o * tanhf(cn);
  c[at.row * cell + k] = m * cn;
  store(h + at.row * cell + k, hv);
  store(hs + idx, hv);
}

// Step s of the backward pass (s from T-1 down): from the output gradient dh at the chain's
// time, dh_next (the gradient reaching h through step s+1's GEMM; zeros before the first) and
// dc_next (reaching c), writes the gate gradients to dgx at the chain's time and to dgs for
// this step's GEMM (dh_next := dgs W_hh), and, in place, dc_next := the gradient reaching the
// previous step's c.
template <class E>
__device__ __forceinline__ void chains_step_backward(const float* gates, const float* c,
                                                     const float* mask, const E* dh,
                                                     const float* dh_next, float* dc_next,
                                                     E* dgx, E* dgs, int chains, int batch,
                                                     int steps, int cell, unsigned reversed,
                                                     int s) {
  long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)chains * batch * cell) return;
  ChainAt at = chain_at(idx, batch, steps, cell, reversed, s);
  long long k = at.k;
  float m = mask[at.b * steps + at.t];
  // Through h_t = m h'_t and c_t = m c'_t.
  float dh2 = (load(dh + at.row * cell + k) + dh_next[idx]) * m;
  float dc2 = dc_next[idx] * m;
  float cp = s > 0 ? c[(at.rev ? at.row + 1 : at.row - 1) * cell + k] : 0.0f;
  const float* a = gates + at.row * 4 * cell;
  float i = lstm_sigmoid(a[k]), f = lstm_sigmoid(a[cell + k]);
  float g = tanhf(a[2 * cell + k]), o = lstm_sigmoid(a[3 * cell + k]);
  float tc = tanhf(f * cp + i * g);
  float dct = dc2 + dh2 * o * (1.0f - tc * tc);
  float da[4] = {dct * g * i * (1.0f - i), dct * cp * f * (1.0f - f), dct * i * (1.0f - g * g),
                 dh2 * tc * o * (1.0f - o)};
  E* out = dgx + at.row * 4 * cell;
  E* step = dgs + at.nb * 4 * cell;
  for (int j = 0; j < 4; j++) {
    store(out + j * cell + k, da[j]);
    store(step + j * cell + k, da[j]);
  }
  dc_next[idx] = dct * f;
}

// h_prev[n, b, t] = h[n, b, the chain's previous time] (t-1, or t+1 reversed; zeros where the
// chain starts): the right operand of dW_hh[n] = sum over (b, t) of dgates^T h_prev.
template <class E>
__device__ __forceinline__ void chains_shift_steps(const E* h, E* h_prev, int chains, int batch,
                                                   int steps, int cell, unsigned reversed) {
  long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)chains * batch * steps * cell) return;
  long long t = (idx / cell) % steps, n = idx / ((long long)batch * steps * cell);
  bool rev = (reversed >> n) & 1u;
  bool first = rev ? t == steps - 1 : t == 0;
  store(h_prev + idx, first ? 0.0f : load(h + (rev ? idx + cell : idx - cell)));
}

extern "C" __global__ void lstm_chains_step_forward_bf16(
    const unsigned short* gx, const float* gs, const float* mask, float* gates, float* c,
    unsigned short* h, unsigned short* hs, int chains, int batch, int steps, int cell,
    unsigned reversed, int s) {
  chains_step_forward(gx, gs, mask, gates, c, h, hs, chains, batch, steps, cell, reversed, s);
}

extern "C" __global__ void lstm_chains_step_backward_bf16(
    const float* gates, const float* c, const float* mask, const unsigned short* dh,
    const float* dh_next, float* dc_next, unsigned short* dgx, unsigned short* dgs, int chains,
    int batch, int steps, int cell, unsigned reversed, int s) {
  chains_step_backward(gates, c, mask, dh, dh_next, dc_next, dgx, dgs, chains, batch, steps, cell,
                       reversed, s);
}

extern "C" __global__ void lstm_chains_shift_steps_bf16(const unsigned short* h,
                                                        unsigned short* h_prev, int chains,
                                                        int batch, int steps, int cell,
                                                        unsigned reversed) {
  chains_shift_steps(h, h_prev, chains, batch, steps, cell, reversed);
}
