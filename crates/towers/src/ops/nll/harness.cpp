// The output layer's loss kernels (src/softmax_nll.cu), compiled for the host with shim.h, over
// 7 rows of width 45 (one warp per row, lanes striding past the width) with a bias, labels at
// both ends of the vocabulary, a row 60 above the rest and one masked entry (-1e9, as a padded
// vocabulary's bias has), the gradient in chunks of 3 rows (the last one short):
// - nll and lse against log-sum-exp in double (1e-5), dx and db against the gradient of
//   sum_r dnll_r nll_r by central differences in double of nll in double;
// - bf16: nll and lse equal the f32 kernel's on the inputs rounded to bf16 (the same f32
//   arithmetic), dx is its dx rounded to the nearest bf16 (shim.h's oracle), db_part equal.
// Exit code 0 on a match.
#include <cstdio>
#include <vector>

#include "host_shim.h"
#include CU_SOURCE

static const int R = 7, V = 45, CHUNK = 3, CHUNKS = (R + CHUNK - 1) / CHUNK;

// nll of row r in double, of logits x (as doubles) and bias b.
static double nll_f64(const std::vector<double>& x, const std::vector<double>& b,
                      const unsigned* y, int r) {
  double mx = -INFINITY, s = 0;
  for (int k = 0; k < V; k++) mx = worse(mx, x[r * V + k] + b[k]);
  for (int k = 0; k < V; k++) s += std::exp(x[r * V + k] + b[k] - mx);
  return mx + std::log(s) - (x[r * V + y[r]] + b[y[r]]);
}

int main() {
  std::vector<float> x(R * V), b(V), dnll(R);
  for (int i = 0; i < R * V; i++) x[i] = std::sin(i * 0.77f) * 3.0f;
  for (int k = 0; k < V; k++) b[k] = std::cos(k * 0.31f);
  for (int k = 0; k < V; k++) x[2 * V + k] += 60.0f;
  b[V - 2] = -1e9f;
  for (int r = 0; r < R; r++) dnll[r] = 0.5f + 0.25f * r;
  const unsigned y[R] = {0, 44, 7, 13, 0, 31, 44};

  std::vector<float> nll(R, NAN), lse(R, NAN), dx(R * V, NAN), part(CHUNKS * V, NAN);
  launch_warps(R, [&] { softmax_nll_rows(x.data(), b.data(), y, nll.data(), lse.data(), R, V); });
  launch((long)CHUNKS * V, [&] {
    softmax_nll_grad(x.data(), b.data(), y, lse.data(), dnll.data(), dx.data(), part.data(), R,
                     V, CHUNK);
  });

  std::vector<double> xd(x.begin(), x.end()), bd(b.begin(), b.end());
  double worst_nll = 0;
  for (int r = 0; r < R; r++) {
    double want = nll_f64(xd, bd, y, r);
    worst_nll = worse(worst_nll, std::fabs(nll[r] - want) / (1 + std::fabs(want)));
    double want_lse = want + xd[r * V + y[r]] + bd[y[r]];
    worst_nll = worse(worst_nll, std::fabs(lse[r] - want_lse) / (1 + std::fabs(want_lse)));
  }
  // The loss whose gradients dx and db are: sum_r dnll_r nll_r, in double.
  auto loss = [&] {
    double l = 0;
    for (int r = 0; r < R; r++) l += dnll[r] * nll_f64(xd, bd, y, r);
    return l;
  };
  std::vector<float> db(V, 0.0f);
  for (int c = 0; c < CHUNKS; c++)
    for (int k = 0; k < V; k++) db[k] += part[c * V + k];
  int nonzero = 0;
  double worst_dx = worst_fd_error(xd, dx, loss, &nonzero);
  double worst_db = worst_fd_error(bd, db, loss, &nonzero);

  // bf16: the inputs rounded to bf16, the f32 kernels run on the same values.
  std::vector<unsigned short> xb(R * V), dxb(R * V, 0xffff);
  std::vector<float> xr(R * V);
  for (int i = 0; i < R * V; i++) xb[i] = nearest_bf16(x[i]), xr[i] = (float)bf16_value(xb[i]);
  std::vector<float> nb(R, NAN), lb(R, NAN), pb(CHUNKS * V, NAN);
  std::vector<float> nr(R, NAN), lr(R, NAN), dxr(R * V, NAN), pr(CHUNKS * V, NAN);
  launch_warps(R, [&] { softmax_nll_rows_bf16(xb.data(), b.data(), y, nb.data(), lb.data(), R, V); });
  launch_warps(R, [&] { softmax_nll_rows(xr.data(), b.data(), y, nr.data(), lr.data(), R, V); });
  launch((long)CHUNKS * V, [&] {
    softmax_nll_grad_bf16(xb.data(), b.data(), y, lb.data(), dnll.data(), dxb.data(), pb.data(),
                          R, V, CHUNK);
  });
  launch((long)CHUNKS * V, [&] {
    softmax_nll_grad(xr.data(), b.data(), y, lr.data(), dnll.data(), dxr.data(), pr.data(), R, V,
                     CHUNK);
  });
  int wrong = 0;
  for (int r = 0; r < R; r++) wrong += nb[r] != nr[r] || lb[r] != lr[r];
  for (int i = 0; i < R * V; i++) wrong += dxb[i] != nearest_bf16(dxr[i]);
  for (int i = 0; i < CHUNKS * V; i++) wrong += pb[i] != pr[i];

  printf("worst nll/lse error %.3e; worst gradient error dx %.3e, db %.3e (%d entries non-zero); "
         "bf16: %d of %d values not the f32 kernel's\n",
         worst_nll, worst_dx, worst_db, nonzero, wrong, 2 * R + R * V + CHUNKS * V);
  bool ok = worst_nll < 1e-5 && worst_dx < 1e-4 && worst_db < 1e-4 && nonzero > R * V / 2 &&
            wrong == 0;
  return ok ? 0 : 1;
}
