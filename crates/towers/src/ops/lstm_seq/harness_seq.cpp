// The CUDA kernels of the whole-sequence LSTM op (src/fused_lstm_seq.cu), compiled for the host:
// a shim stands in for CUDA's qualifiers and thread indices, each launch runs every (block,
// thread) in turn, and the op's step loops run as fused_lstm_seq_cuda.rs runs them, with its
// three GEMMs written out on the row-major buffers (their cuBLAS mapping has its own test there).
// The hidden states and the gradients of gx and W_hh must match a double-precision recurrence and
// its central differences, with PADs at a sequence's start, middle and end. Exit code 0 on a match.
#include <cstdio>
#include <vector>

#include "host_shim.h"
#include CU_SOURCE

using V = std::vector<float>;
using W = std::vector<double>;
const int B = 3, T = 5, C = 3;

// The op: h from gx, W_hh and the mask; then dgx and dW_hh from dh.
void op(const V& gx, const V& w, const V& mask, const V& dh, V& h, V& dgx, V& dw) {
  V gates = gx, c(B * T * C, 0);
  h.assign(B * T * C, 0);
  for (int t = 0; t < T; t++) {
    if (t > 0)  // gates[:, t] += h[:, t-1] W_hh^T
      for (int b = 0; b < B; b++)
        for (int j = 0; j < 4 * C; j++) {
          float s = 0;
          for (int k = 0; k < C; k++) s += h[(b * T + t - 1) * C + k] * w[j * C + k];
          gates[(b * T + t) * 4 * C + j] += s;
        }
    launch(B * C, [&] {
      lstm_seq_step_forward(gates.data(), mask.data(), h.data(), c.data(), B, T, C, t);
    });
  }
  dgx.assign(B * T * 4 * C, 0);
  dw.assign(4 * C * C, 0);
  V dh_next(B * C, 0), dc_next(B * C, 0);
  for (int t = T - 1; t >= 0; t--) {
    launch(B * C, [&] {
      lstm_seq_step_backward(gates.data(), c.data(), mask.data(), dh.data(), dh_next.data(),
                             dc_next.data(), dgx.data(), B, T, C, t);
    });
    if (t > 0)  // dh_next = dgx[:, t] W_hh
      for (int b = 0; b < B; b++)
        for (int k = 0; k < C; k++) {
          float s = 0;
          for (int j = 0; j < 4 * C; j++) s += dgx[(b * T + t) * 4 * C + j] * w[j * C + k];
          dh_next[b * C + k] = s;
        }
  }
  V h_prev(B * T * C, 0);
  launch(B * T * C, [&] { lstm_seq_shift_steps(h.data(), h_prev.data(), B, T, C); });
  for (int j = 0; j < 4 * C; j++)  // dW_hh = dgx^T h_prev
    for (int k = 0; k < C; k++) {
      float s = 0;
      for (int r = 0; r < B * T; r++) s += dgx[r * 4 * C + j] * h_prev[r * C + k];
      dw[j * C + k] = s;
    }
}

// The loss sum(wh * h) of the masked recurrence, in double precision.
double loss(const W& gx, const W& w, const V& mask, const V& wh) {
  auto sigmoid = [](double x) { return 1 / (1 + std::exp(-x)); };
  double total = 0;
  for (int b = 0; b < B; b++) {
    W h(C, 0), c(C, 0), a(4 * C);
    for (int t = 0; t < T; t++) {
      for (int j = 0; j < 4 * C; j++) {
        a[j] = gx[(b * T + t) * 4 * C + j];
        for (int k = 0; k < C; k++) a[j] += w[j * C + k] * h[k];
      }
      double m = mask[b * T + t];
      for (int k = 0; k < C; k++) {
        double cn = sigmoid(a[C + k]) * c[k] + sigmoid(a[k]) * std::tanh(a[2 * C + k]);
        h[k] = m * sigmoid(a[3 * C + k]) * std::tanh(cn);
        c[k] = m * cn;
      }
      for (int k = 0; k < C; k++) total += wh[(b * T + t) * C + k] * h[k];
    }
  }
  return total;
}

int main() {
  V gx(B * T * 4 * C), w(4 * C * C), wh(B * T * C), mask(B * T, 1);
  for (size_t i = 0; i < gx.size(); i++) gx[i] = std::sin(i * 0.37f) * 1.5f;
  for (size_t i = 0; i < w.size(); i++) w[i] = std::cos(i * 0.11f) * 0.8f;
  for (size_t i = 0; i < wh.size(); i++) wh[i] = std::sin(i * 0.23f + 1);
  mask[0] = mask[T + 2] = mask[3 * T - 1] = 0;
  V h, dgx, dw;
  op(gx, w, mask, wh, h, dgx, dw);
  W gx64(gx.begin(), gx.end()), w64(w.begin(), w.end());
  double got = 0;
  for (size_t i = 0; i < h.size(); i++) got += h[i] * wh[i];
  double want = loss(gx64, w64, mask, wh);
  int nonzero = 0;
  auto at = [&] { return loss(gx64, w64, mask, wh); };
  double worst = worse(worst_fd_error(gx64, dgx, at, &nonzero),
                           worst_fd_error(w64, dw, at, &nonzero));
  int n = (int)(gx64.size() + w64.size());
  printf("loss %.9f (f64 %.9f); worst gradient error %.3e; %d of %d gradients non-zero\n", got,
         want, worst, nonzero, n);
  bool ok = std::fabs(got - want) < 1e-5 && worst < 2e-5 && nonzero > n / 2;
  return ok ? 0 : 1;
}
