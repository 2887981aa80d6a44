// The fused Linear's CUDA kernels (src/linear.cu), compiled for the host with shim.h: the bias
// broadcast into 203 rows of 37 columns must equal b in every row (bf16: b rounded to the
// nearest bf16, shim.h's oracle), and the bias gradient, the op's two passes of the column sums
// (chunks of 16 rows, a ragged last chunk, then the 13 partials in one chunk), must match the
// column sums of dy in double to 1e-6 relative to the sum of |dy| (bf16: of dy's bf16 values),
// and a second run must give the same bits. Exit code 0 on a match.
#include <cstdio>
#include <vector>

#include "host_shim.h"
#include CU_SOURCE

const long long ROWS = 203, COLS = 37, CHUNK = 16, PARTS = (ROWS + CHUNK - 1) / CHUNK;

// db by the op's two passes over dy (f32 or bf16 bits), into a buffer of exactly COLS.
template <class T, class F>
std::vector<float> bias_grad(const std::vector<T>& dy, F first) {
  std::vector<float> part(PARTS * COLS, NAN), db(COLS, NAN);
  launch(PARTS * COLS, [&] { first(dy.data(), part.data(), ROWS, COLS, CHUNK); });
  launch(COLS, [&] { linear_column_sums(part.data(), db.data(), PARTS, COLS, PARTS); });
  return db;
}

int main() {
  std::vector<float> b(COLS), dy(ROWS * COLS), y(ROWS * COLS, NAN);
  std::vector<unsigned short> yb(ROWS * COLS, 0xffff), dyb(ROWS * COLS);
  for (int c = 0; c < COLS; c++) b[c] = std::sin(c * 0.77f) * 3.0f;
  for (long long i = 0; i < ROWS * COLS; i++)
    dy[i] = std::cos(i * 0.13f) + 0.25f, dyb[i] = nearest_bf16(dy[i]);
  launch(ROWS * COLS, [&] { linear_bias_rows(b.data(), y.data(), ROWS, COLS); });
  launch(ROWS * COLS, [&] { linear_bias_rows_bf16(b.data(), yb.data(), ROWS, COLS); });
  int wrong = 0;
  for (long long i = 0; i < ROWS * COLS; i++)
    wrong += (y[i] != b[i % COLS]) + (yb[i] != nearest_bf16(b[i % COLS]));

  auto db = bias_grad(dy, [](auto... a) { linear_column_sums(a...); });
  auto dbb = bias_grad(dyb, [](auto... a) { linear_column_sums_bf16(a...); });
  auto again = bias_grad(dyb, [](auto... a) { linear_column_sums_bf16(a...); });
  double worst = 0;
  for (int c = 0; c < COLS; c++) {
    double want = 0, want_b = 0, mass = 0;
    for (long long r = 0; r < ROWS; r++) {
      want += dy[r * COLS + c], want_b += bf16_value(dyb[r * COLS + c]);
      mass += std::fabs(dy[r * COLS + c]);
    }
    worst = worse(worst, std::fabs(db[c] - want) / mass);
    worst = worse(worst, std::fabs(dbb[c] - want_b) / mass);
    wrong += std::memcmp(&dbb[c], &again[c], sizeof(float)) != 0;
  }
  printf("bias rows and repeated sums: %d of %lld entries off; worst column-sum error %.3e\n",
         wrong, 2 * ROWS * COLS + COLS, worst);
  return wrong == 0 && worst < 1e-6 ? 0 : 1;
}
