// Softmax's CUDA kernel (src/softmax.cu), compiled for the host with shim.h and launched over 6
// rows of width 41 (one warp per row, lanes striding past the width), with a key masked by
// -1e9 as attention's bias does and a row 60 above the rest: y must match softmax in double to
// 1e-6, and the masked entry must be exactly zero; in bf16, each output the f32 kernel's on the
// same inputs rounded to the nearest bf16. Exit code 0 on a match.
#include <cstdio>
#include <vector>

#include "host_shim.h"
#include CU_SOURCE

int main() {
  const int R = 6, N = 41;
  std::vector<float> x(R * N), y(R * N, NAN);
  for (int i = 0; i < R * N; i++) x[i] = std::sin(i * 0.77f) * 3.0f;
  x[4] = -1e9f;
  for (int k = 0; k < N; k++) x[N + k] += 60.0f;
  launch_warps(R, [&] { softmax_rows(x.data(), y.data(), R, N); });
  double worst = 0;
  for (int r = 0; r < R; r++) {
    double mx = x[r * N], s = 0;
    for (int k = 1; k < N; k++) mx = worse(mx, (double)x[r * N + k]);
    for (int k = 0; k < N; k++) s += std::exp(x[r * N + k] - mx);
    for (int k = 0; k < N; k++)
      worst = worse(worst, std::fabs(y[r * N + k] - std::exp(x[r * N + k] - mx) / s));
  }
  // bf16: the inputs rounded to bf16; each output must be the f32 kernel's on those inputs
  // rounded to the nearest bf16 (shim.h's oracle), the masked entry zero.
  std::vector<unsigned short> xb(R * N), yb(R * N, 0xffff);
  std::vector<float> xr(R * N), yr(R * N, NAN);
  for (int i = 0; i < R * N; i++) xb[i] = nearest_bf16(x[i]), xr[i] = (float)bf16_value(xb[i]);
  launch_warps(R, [&] { softmax_rows_bf16(xb.data(), yb.data(), R, N); });
  launch_warps(R, [&] { softmax_rows(xr.data(), yr.data(), R, N); });
  int wrong = 0;
  for (int i = 0; i < R * N; i++) wrong += yb[i] != nearest_bf16(yr[i]);
  printf("worst |y - softmax| %.3e; masked entry %g; bf16: %d of %d not the nearest, masked %g\n",
         worst, y[4], wrong, R * N, bf16_value(yb[4]));
  return worst < 1e-6 && y[4] == 0.0f && wrong == 0 && yb[4] == 0 ? 0 : 1;
}
