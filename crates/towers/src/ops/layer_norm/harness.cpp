// LayerNorm's CUDA kernels (src/layer_norm.cu), compiled for the host with shim.h and launched
// over 5 rows of width 45 (one warp per row, a ragged last block, lanes striding past the
// width): y must match a double-precision LayerNorm, and dx, and the gain's and shift's
// gradients formed as the op forms them from the kernel's xhat
// (sum over rows of dy xhat, and of dy), must match central differences of sum(w y) in double;
// in bf16 (x and dy; the gain and shift f32), y and dx must be the f32 kernels' on the same
// inputs rounded to the nearest bf16, and xhat the f32 kernel's. Exit code 0 on a match.
#include <cstdio>
#include <vector>

#include "host_shim.h"
#include CU_SOURCE

const int R = 5, H = 45;
const float EPS = 1e-5f;
using W = std::vector<double>;

// sum(w y) of LayerNorm(x; gamma, beta) in double.
double loss(const W& x, const W& g, const W& b, const W& w) {
  double total = 0;
  for (int r = 0; r < R; r++) {
    double mean = 0, var = 0;
    for (int k = 0; k < H; k++) mean += x[r * H + k] / H;
    for (int k = 0; k < H; k++) var += (x[r * H + k] - mean) * (x[r * H + k] - mean) / H;
    for (int k = 0; k < H; k++)
      total += w[r * H + k] * ((x[r * H + k] - mean) / std::sqrt(var + EPS) * g[k] + b[k]);
  }
  return total;
}

int main() {
  std::vector<float> x(R * H), g(H), b(H), w(R * H), y(R * H), dx(R * H), xhat(R * H);
  for (int i = 0; i < R * H; i++) x[i] = std::sin(i * 0.61f) * 2.0f + (i % H == 3 ? 1.5f : 0.0f);
  for (int i = 0; i < R * H; i++) w[i] = std::cos(i * 0.29f);
  for (int k = 0; k < H; k++) g[k] = 1.0f + 0.1f * k, b[k] = 0.05f * k - 0.2f;
  launch_warps(R, [&] { layer_norm_rows(x.data(), g.data(), b.data(), y.data(), R, H, EPS); });
  launch_warps(R, [&] {
    layer_norm_backward_rows(x.data(), w.data(), g.data(), dx.data(), xhat.data(), R, H, EPS);
  });
  W x64(x.begin(), x.end()), g64(g.begin(), g.end()), b64(b.begin(), b.end());
  W w64(w.begin(), w.end());
  double got = 0;
  for (int i = 0; i < R * H; i++) got += w[i] * y[i];
  double want = loss(x64, g64, b64, w64);
  // The op's reductions of the gain's and shift's gradients.
  std::vector<float> dg(H, 0), db(H, 0);
  for (int r = 0; r < R; r++)
    for (int k = 0; k < H; k++) dg[k] += w[r * H + k] * xhat[r * H + k], db[k] += w[r * H + k];
  int nonzero = 0;
  auto at = [&] { return loss(x64, g64, b64, w64); };
  double worst = worse(worst_fd_error(x64, dx, at, &nonzero),
                           worse(worst_fd_error(g64, dg, at, &nonzero),
                                     worst_fd_error(b64, db, at, &nonzero)));
  // bf16: x and dy rounded to bf16 (gamma and beta stay f32, as the master weights). y and dx
  // must be the f32 kernels' on those values rounded to the nearest bf16 (shim.h's oracle), xhat
  // the f32 kernel's exactly.
  auto round_all = [](const std::vector<float>& v, std::vector<unsigned short>& b,
                      std::vector<float>& back) {
    for (size_t i = 0; i < v.size(); i++) b[i] = nearest_bf16(v[i]), back[i] = (float)bf16_value(b[i]);
  };
  std::vector<unsigned short> xb(R * H), wb(R * H), yb(R * H), dxb(R * H);
  std::vector<float> xr(R * H), wr(R * H), yr(R * H), dxr(R * H);
  std::vector<float> xhat_b(R * H, NAN), xhat_r(R * H, NAN);
  round_all(x, xb, xr), round_all(w, wb, wr);
  launch_warps(R, [&] { layer_norm_rows_bf16(xb.data(), g.data(), b.data(), yb.data(), R, H, EPS); });
  launch_warps(R, [&] {
    layer_norm_backward_rows_bf16(xb.data(), wb.data(), g.data(), dxb.data(), xhat_b.data(), R, H,
                                  EPS);
  });
  launch_warps(R, [&] { layer_norm_rows(xr.data(), g.data(), b.data(), yr.data(), R, H, EPS); });
  launch_warps(R, [&] {
    layer_norm_backward_rows(xr.data(), wr.data(), g.data(), dxr.data(), xhat_r.data(), R, H, EPS);
  });
  int wrong = 0;
  for (int i = 0; i < R * H; i++)
    wrong += (yb[i] != nearest_bf16(yr[i])) + (dxb[i] != nearest_bf16(dxr[i])) +
             (xhat_b[i] != xhat_r[i]);
  printf("loss %.9f (f64 %.9f); worst gradient error %.3e; bf16: %d of %d outputs off\n", got,
         want, worst, wrong, 3 * R * H);
  return std::fabs(got - want) < 1e-5 && worst < 2e-5 && nonzero > 0 && wrong == 0 ? 0 : 1;
}
