// The chained LSTM op's CUDA kernels (lstm_chains_* in src/fused_lstm_seq.cu), compiled for the
// host: N = 4 chains (two towers x two directions; chains 1 and 3 read time reversed) of B
// sequences, the op's step loops run as fused_lstm_seq_cuda.rs runs them, its strided-batched
// GEMMs written out per chain on the row-major buffers with bf16 operands and f32 sums (their
// cuBLAS mapping has its own test there; cuBLAS itself runs only on a GPU). Every buffer the op
// allocates uninitialised starts as NaN here, so an entry left unwritten poisons the checks.
//  - float: the kernels' body with E = float must match a double-precision recurrence (each
//    chain in its own direction) and its central differences as tightly as the f32 op does.
//  - bf16 (the device's form): gx, W_hh and dh in bf16, gates, c and the carried gradients in
//    f32; h against the same double-precision recurrence on the bf16-rounded inputs, the
//    gradients against its central differences, within bounds set by bf16's rounding of h and
//    of the gate gradients at every step (relative 2^-9 each).
// PADs at a sequence's start, middle and end. Exit code 0 on a match.
#include <cstdio>
#include <vector>

#include "host_shim.h"
#include CU_SOURCE

using V = std::vector<float>;
using W = std::vector<double>;
using H = std::vector<unsigned short>;
const int N = 4, B = 3, T = 5, C = 3;
const unsigned REVERSED = 0b1010;
const long NBT = (long)N * B * T;
// bf16 bounds: h is stored rounded (2^-9 relative) and fed back through T steps; each gate
// gradient is rounded where it is stored and where the next GEMM reads it, h again in dW_hh.
// Measured 1.9e-3 and 3.9e-3 (one and two roundings); a wrong index or direction is off by 1e-1.
const double BF16_VALUE_BOUND = 4.0 / 512, BF16_GRAD_BOUND = 8.0 / 512;

template <class E>
float val(E x) {
  return load(&x);
}
template <class E>
E elem(float v) {
  E e;
  store(&e, v);
  return e;
}

// The op on E buffers: h from gx, W_hh and the mask; then dgx and dW_hh (f32) from dh.
template <class E>
void op(const std::vector<E>& gx, const std::vector<E>& w, const V& mask,
        const std::vector<E>& dh, std::vector<E>& h, std::vector<E>& dgx, V& dw) {
  const E nan = elem<E>(NAN);
  V gates(NBT * 4 * C, NAN), c(NBT * C, NAN), gs(N * B * 4 * C, NAN);
  std::vector<E> hs(N * B * C, nan);
  h.assign(NBT * C, nan);
  // One chain's row-major product, as each batch entry of the strided-batched GEMM computes it.
  auto product = [&](int n, const E* x, int inner, int outer, bool transposed, float* out) {
    for (int b = 0; b < B; b++)
      for (int j = 0; j < outer; j++) {
        float s = 0;
        for (int k = 0; k < inner; k++) {
          float wv = transposed ? val(w[(n * 4 * C + j) * C + k]) : val(w[(n * 4 * C + k) * C + j]);
          s += val(x[b * inner + k]) * wv;
        }
        out[b * outer + j] = s;
      }
  };
  for (int s = 0; s < T; s++) {
    if (s > 0)  // gs[n] = hs[n] W_hh[n]^T
      for (int n = 0; n < N; n++)
        product(n, &hs[n * B * C], C, 4 * C, true, &gs[n * B * 4 * C]);
    launch(N * B * C, [&] {
      chains_step_forward(gx.data(), gs.data(), mask.data(), gates.data(), c.data(), h.data(),
                          hs.data(), N, B, T, C, REVERSED, s);
    });
  }
  dgx.assign(NBT * 4 * C, nan);
  std::vector<E> dgs(N * B * 4 * C, nan);
  V dh_next(N * B * C, 0), dc_next(N * B * C, 0);
  for (int s = T - 1; s >= 0; s--) {
    launch(N * B * C, [&] {
      chains_step_backward(gates.data(), c.data(), mask.data(), dh.data(), dh_next.data(),
                           dc_next.data(), dgx.data(), dgs.data(), N, B, T, C, REVERSED, s);
    });
    if (s > 0)  // dh_next[n] = dgs[n] W_hh[n]
      for (int n = 0; n < N; n++)
        product(n, &dgs[n * B * 4 * C], 4 * C, C, false, &dh_next[n * B * C]);
  }
  std::vector<E> h_prev(NBT * C, nan);
  launch(NBT * C, [&] { chains_shift_steps(h.data(), h_prev.data(), N, B, T, C, REVERSED); });
  dw.assign(N * 4 * C * C, NAN);
  for (int n = 0; n < N; n++)  // dW_hh[n] = dgx[n]^T h_prev[n] over its B T rows
    for (int j = 0; j < 4 * C; j++)
      for (int k = 0; k < C; k++) {
        float s = 0;
        for (long r = n * B * T; r < (n + 1) * B * T; r++)
          s += val(dgx[r * 4 * C + j]) * val(h_prev[r * C + k]);
        dw[(n * 4 * C + j) * C + k] = s;
      }
}

// The masked recurrence of every chain in its own direction, in double precision: h, and the
// loss sum(wh * h).
double reference(const W& gx, const W& w, const V& mask, const W& wh, W* h_out) {
  auto sigmoid = [](double x) { return 1 / (1 + std::exp(-x)); };
  double total = 0;
  for (int n = 0; n < N; n++)
    for (int b = 0; b < B; b++) {
      W h(C, 0), c(C, 0), a(4 * C);
      for (int s = 0; s < T; s++) {
        int t = (REVERSED >> n) & 1 ? T - 1 - s : s;
        long row = (long)(n * B + b) * T + t;
        for (int j = 0; j < 4 * C; j++) {
          a[j] = gx[row * 4 * C + j];
          for (int k = 0; k < C; k++) a[j] += w[(n * 4 * C + j) * C + k] * h[k];
        }
        double m = mask[b * T + t];
        for (int k = 0; k < C; k++) {
          double cn = sigmoid(a[C + k]) * c[k] + sigmoid(a[k]) * std::tanh(a[2 * C + k]);
          h[k] = m * sigmoid(a[3 * C + k]) * std::tanh(cn);
          c[k] = m * cn;
        }
        for (int k = 0; k < C; k++) {
          total += wh[row * C + k] * h[k];
          if (h_out) (*h_out)[row * C + k] = h[k];
        }
      }
    }
  return total;
}

struct Errors {
  double value, grad;  // value: max |h - h64| / max |h64|; grad: the worst gradient's error
  int nonzero, n;
  int not_finite;  // entries of h, dgx, dW_hh that are NaN or infinite (fmax would skip a NaN)
};

// The op in element type E on gx, w, wh (rounded to E first) against the double-precision
// recurrence on the rounded values. `relative` measures each gradient against its largest
// central difference (as gpu_check does), else entry by entry (worst_fd_error).
template <class E>
Errors check(const V& gx, const V& w, const V& mask, const V& wh, bool relative) {
  std::vector<E> gxe, we, whe;
  for (float v : gx) gxe.push_back(elem<E>(v));
  for (float v : w) we.push_back(elem<E>(v));
  for (float v : wh) whe.push_back(elem<E>(v));
  std::vector<E> h, dgx;
  V dw;
  op(gxe, we, mask, whe, h, dgx, dw);
  W gx64, w64, wh64, h64(NBT * C);
  for (E v : gxe) gx64.push_back(val(v));
  for (E v : we) w64.push_back(val(v));
  for (E v : whe) wh64.push_back(val(v));
  reference(gx64, w64, mask, wh64, &h64);
  Errors e{0, 0, 0, (int)(gx64.size() + w64.size()), 0};
  for (E v : h) e.not_finite += !std::isfinite(val(v));
  for (E v : dgx) e.not_finite += !std::isfinite(val(v));
  for (float v : dw) e.not_finite += !std::isfinite(v);
  double hmax = 0;
  for (long i = 0; i < NBT * C; i++) {
    e.value = worse(e.value, std::fabs(val(h[i]) - h64[i]));
    hmax = worse(hmax, std::fabs(h64[i]));
  }
  e.value /= hmax;
  V dgx32;
  for (E v : dgx) dgx32.push_back(val(v));
  auto at = [&] { return reference(gx64, w64, mask, wh64, nullptr); };
  if (!relative) {
    e.grad = worse(worst_fd_error(gx64, dgx32, at, &e.nonzero),
                       worst_fd_error(w64, dw, at, &e.nonzero));
    return e;
  }
  // Central differences (step 1e-6 in double), each gradient's error relative to its largest.
  auto rel = [&](W& v, const V& grad) {
    double worst = 0, largest = 0;
    for (size_t j = 0; j < v.size(); j++) {
      double keep = v[j];
      v[j] = keep + 1e-6;
      double up = at();
      v[j] = keep - 1e-6;
      double fd = (up - at()) / 2e-6;
      v[j] = keep;
      worst = worse(worst, std::fabs(fd - grad[j]));
      largest = worse(largest, std::fabs(fd));
      e.nonzero += std::fabs(fd) > 1e-3;
    }
    return worst / largest;
  };
  e.grad = worse(rel(gx64, dgx32), rel(w64, dw));
  return e;
}

int main() {
  V gx(NBT * 4 * C), w(N * 4 * C * C), wh(NBT * C), mask(B * T, 1);
  for (size_t i = 0; i < gx.size(); i++) gx[i] = std::sin(i * 0.37f) * 1.5f;
  for (size_t i = 0; i < w.size(); i++) w[i] = std::cos(i * 0.11f) * 0.8f;
  for (size_t i = 0; i < wh.size(); i++) wh[i] = std::sin(i * 0.23f + 1);
  mask[0] = mask[T + 2] = mask[3 * T - 1] = 0;
  Errors f = check<float>(gx, w, mask, wh, false);
  Errors b = check<unsigned short>(gx, w, mask, wh, true);
  printf("float: h error %.3e, worst gradient error %.3e, %d of %d gradients non-zero; "
         "bf16: h error %.3e (bound %.1e), worst gradient error %.3e (bound %.1e); "
         "%d outputs not finite\n",
         f.value, f.grad, f.nonzero, f.n, b.value, BF16_VALUE_BOUND, b.grad, BF16_GRAD_BOUND,
         f.not_finite + b.not_finite);
  bool ok = f.not_finite + b.not_finite == 0 && f.value < 1e-5 && f.grad < 2e-5 &&
            f.nonzero > f.n / 2 && b.value < BF16_VALUE_BOUND && b.grad < BF16_GRAD_BOUND &&
            b.nonzero > b.n / 2;
  return ok ? 0 : 1;
}
