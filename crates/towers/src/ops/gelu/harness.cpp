// GELU's CUDA kernels (src/gelu.cu), compiled for the host with shim.h and launched over
// n = 1001 points in [-8, 8] (a ragged last block). f32: GELU(x) and dy GELU'(x) must match the
// same in double (erf, exp) to 1e-6 max(1, |x|), and GELU' its central difference. bf16: each
// output must be the f32 kernel's result on the same (bf16) inputs rounded to the nearest bf16,
// ties to even (shim.h's oracle, in double between the two neighbours), and the rounding must keep
// NaN, infinities and a tie. Exit code 0 on a match.
#include <cstdio>
#include <vector>

#include "host_shim.h"
#include CU_SOURCE

int main() {
  const long n = 1001;
  std::vector<float> x(n), dy(n), y(n, NAN), dx(n, NAN);
  for (long i = 0; i < n; i++) x[i] = -8.0f + 16.0f * i / (n - 1), dy[i] = std::cos(i * 0.3f);
  launch(n, [&] { gelu_erf_forward(x.data(), y.data(), n); });
  launch(n, [&] { gelu_erf_backward(x.data(), dy.data(), dx.data(), n); });
  auto gelu = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
  double worst = 0;
  for (long i = 0; i < n; i++) {
    double v = x[i], e = 1e-6;
    double fd = (gelu(v + e) - gelu(v - e)) / (2 * e);
    double scale = std::fmax(1.0, std::fabs(v));
    worst = worse(worst, std::fabs(y[i] - gelu(v)) / scale);
    worst = worse(worst, std::fabs(dx[i] - dy[i] * fd) / scale);
  }

  // bf16: the inputs rounded to bf16, the f32 kernels on those values as the reference.
  std::vector<unsigned short> xb(n), dyb(n), yb(n, 0xffff), dxb(n, 0xffff);
  std::vector<float> xr(n), dyr(n), yr(n), dxr(n);
  for (long i = 0; i < n; i++) {
    xb[i] = nearest_bf16(x[i]), dyb[i] = nearest_bf16(dy[i]);
    xr[i] = (float)bf16_value(xb[i]), dyr[i] = (float)bf16_value(dyb[i]);
  }
  launch(n, [&] { gelu_erf_forward_bf16(xb.data(), yb.data(), n); });
  launch(n, [&] { gelu_erf_backward_bf16(xb.data(), dyb.data(), dxb.data(), n); });
  launch(n, [&] { gelu_erf_forward(xr.data(), yr.data(), n); });
  launch(n, [&] { gelu_erf_backward(xr.data(), dyr.data(), dxr.data(), n); });
  int wrong = 0;
  for (long i = 0; i < n; i++)
    wrong += (yb[i] != nearest_bf16(yr[i])) + (dxb[i] != nearest_bf16(dxr[i]));
  // The rounding's edge cases: 1 + 2^-8 lies halfway between bf16 1 and 1 + 2^-7 (to 1, even);
  // 1 + 3 * 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6 (to the latter, even).
  float inf = INFINITY;
  bool edges = f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80 && f32_to_bf16(1.0f + 3.0f / 256) == 0x3f82 &&
               f32_to_bf16(inf) == 0x7f80 && f32_to_bf16(-inf) == 0xff80 &&
               std::isnan(bf16_value(f32_to_bf16(NAN)));
  printf("worst error %.3e over %ld points; bf16: %d of %ld outputs not the nearest; edges %s\n",
         worst, n, wrong, 2 * n, edges ? "ok" : "wrong");
  return worst < 1e-6 && wrong == 0 && edges ? 0 : 1;
}
