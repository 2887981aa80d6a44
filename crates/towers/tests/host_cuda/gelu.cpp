// GELU's CUDA kernels (src/gelu.cu), compiled for the host with shim.h and launched over
// n = 1001 points in [-8, 8] (a ragged last block): GELU(x) and dy GELU'(x) must match the same
// in double (erf, exp) to 1e-6 max(1, |x|), and GELU' its central difference. Exit code 0 on
// a match.
#include <cstdio>
#include <vector>

#include "shim.h"
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
    worst = std::fmax(worst, std::fabs(y[i] - gelu(v)) / scale);
    worst = std::fmax(worst, std::fabs(dx[i] - dy[i] * fd) / scale);
  }
  printf("worst error %.3e over %ld points\n", worst, n);
  return worst < 1e-6 ? 0 : 1;
}
