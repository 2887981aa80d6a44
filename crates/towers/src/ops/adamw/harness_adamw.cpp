// AdamW's CUDA kernel (src/adamw.cu), compiled for the host with shim.h and launched over
// n = 1001 elements (a ragged last block): θ', m', v' must equal, bit for bit, the update of
// optim.rs's adamw_elem written out here in the same f32 operation order, and lie within 1e-6
// (relative) of the same update in double precision. Exit code 0 on a match.
#include <cstdio>
#include <vector>

#include "host_shim.h"
#include CU_SOURCE

int main() {
  const long n = 1001;
  std::vector<float> theta(n), g(n), m(n), v(n), to(n, NAN), mo(n, NAN), vo(n, NAN);
  for (long i = 0; i < n; i++) {
    theta[i] = std::sin(i * 0.7f);
    g[i] = std::cos(i * 0.3f) * 0.4f;
    m[i] = std::sin(i * 1.3f) * 0.01f;
    v[i] = std::fabs(std::cos(i * 0.9f)) * 0.001f;
  }
  // Step 3 of AdamW with clipping by 0.7, lr 1e-3, weight decay 0.01.
  const float gs = 0.7f, b1 = 0.9f, b2 = 0.98f, eps = 1e-6f, lr = 1e-3f;
  const float omb1 = 0.1f, omb2 = 0.02f, keep = 1.0f - 1e-3f * 0.01f;
  const float ibc1 = 1.0f / (1.0f - std::pow(b1, 3.0f)), ibc2 = 1.0f / (1.0f - std::pow(b2, 3.0f));
  launch(n, [&] {
    adamw_step(theta.data(), g.data(), m.data(), v.data(), to.data(), mo.data(), vo.data(), n, gs,
               b1, omb1, b2, omb2, ibc1, ibc2, eps, keep, lr);
  });
  long unequal = 0;
  double worst = 0;
  for (long i = 0; i < n; i++) {
    // adamw_elem, in f32, one rounding per operation.
    float gi = g[i] * gs;
    float mi = m[i] * b1 + gi * omb1;
    float vi = v[i] * b2 + (gi * gi) * omb2;
    float denom = std::sqrt(vi * ibc2) + eps;
    float upd = (mi * ibc1) / denom;
    float ti = theta[i] * keep - upd * lr;
    unequal += (to[i] != ti) + (mo[i] != mi) + (vo[i] != vi);
    // The same in double.
    double gd = (double)g[i] * gs, md = m[i] * (double)b1 + gd * omb1;
    double vd = v[i] * (double)b2 + gd * gd * omb2;
    double td = theta[i] * (double)keep - md * ibc1 / (std::sqrt(vd * ibc2) + eps) * lr;
    worst = worse(worst, std::fabs(to[i] - td) / std::fmax(std::fabs(td), 1e-3));
  }
  printf("%ld of %ld values differ from adamw_elem; worst relative error against f64 %.3e\n",
         unequal, 3 * n, worst);
  return unequal == 0 && worst < 1e-6 ? 0 : 1;
}
