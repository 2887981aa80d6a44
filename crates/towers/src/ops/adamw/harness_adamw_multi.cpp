// The one-pass clipping and AdamW kernels (src/adamw_multi.cu), compiled for the host with
// shim.h, over 12 parameters of 0 to 2,049 elements (1, a warp's 32 and one either side, a
// chunk's 100 and one either side, several chunks with a short last one), each in a buffer of
// exactly its size, in chunks of 100 (not a multiple of the 32 lanes), with the table written
// as optim.rs's multi_table writes it:
// - the norm within 1e-13 (relative) of Σ g² summed in long double, every partial and the norm
//   equal bit for bit on a second run, the clip factor clip_factor's on that norm, and equal in
//   f32 to the factor of the reference norm;
// - with clipping active (max_norm half the norm) and inactive (twice the norm), θ', m', v' of
//   every element equal, bit for bit, to optim.rs's adamw_elem written out here in f32 with
//   that factor, and θ' within 1e-6 (relative) of the update in double;
// - a gradient holding infinity: the norm not finite and nothing written;
// - the checks themselves fail on planted defects: a norm summed in f32, one θ' off by an ulp,
//   the last element of a short chunk not updated.
// Exit code 0 on a match.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_shim.h"

// The shim's shuffle carries floats; the norm's reductions shuffle doubles (CUDA has both).
// launch_warps runs two warps a block, one block at a time: a row of slots each.
inline double __shfl_xor_sync(unsigned, double v, int m) {
  static double slot[2][32];
  int warp = threadIdx.x / 32 % 2, lane = threadIdx.x % 32;
  slot[warp][lane] = v;
  this_warp->meet.arrive_and_wait();
  double got = slot[warp][lane ^ m];
  this_warp->meet.arrive_and_wait();
  return got;
}

#include CU_SOURCE

static const long CHUNK = 100;
static const std::vector<long> SIZES = {1, 31, 32, 33, 99, 100, 0, 101, 257, 1000, 2049, 7};
static const int P = (int)SIZES.size();

// One parameter's buffers.
struct Param {
  std::vector<float> theta, g, m, v;
  float keep;
};

// Step 3 of AdamW, lr 1e-3, weight decay 0.01 on every other parameter.
static const float B1 = 0.9f, B2 = 0.98f, EPS = 1e-6f, LR = 1e-3f, OMB1 = 0.1f, OMB2 = 0.02f;
static const float IBC1 = 1.0f / (1.0f - std::pow(B1, 3.0f));
static const float IBC2 = 1.0f / (1.0f - std::pow(B2, 3.0f));

static std::vector<Param> make_params() {
  std::vector<Param> ps(P);
  for (int k = 0; k < P; k++) {
    long n = SIZES[k];
    Param& p = ps[k];
    p.theta.resize(n), p.g.resize(n), p.m.resize(n), p.v.resize(n);
    float scale = 0.05f * (k + 1) * (k % 3 == 0 ? 10.0f : 1.0f);
    for (long i = 0; i < n; i++) {
      p.theta[i] = std::sin(i * 0.7f + k);
      p.g[i] = std::cos(i * 0.37f + 0.5f * k) * scale;
      p.m[i] = std::sin(i * 1.3f + k) * 0.01f;
      p.v[i] = std::fabs(std::cos(i * 0.9f + k)) * 0.001f;
    }
    p.keep = k % 2 ? 1.0f : 1.0f - LR * 0.01f;
  }
  return ps;
}

// The values of `from` copied into ps's buffers (the table's addresses stay valid).
static void reset(std::vector<Param>& ps, const std::vector<Param>& from) {
  for (int k = 0; k < P; k++) {
    std::copy(from[k].theta.begin(), from[k].theta.end(), ps[k].theta.begin());
    std::copy(from[k].g.begin(), from[k].g.end(), ps[k].g.begin());
    std::copy(from[k].m.begin(), from[k].m.end(), ps[k].m.begin());
    std::copy(from[k].v.begin(), from[k].v.end(), ps[k].v.begin());
  }
}

// multi_table (optim.rs): per parameter θ, g, m, v, n, its first chunk, keep's bits.
static std::vector<unsigned long long> table_of(std::vector<Param>& ps, long long* chunks) {
  std::vector<unsigned long long> t;
  unsigned long long first = 0;
  for (int k = 0; k < P; k++) {
    Param& p = ps[k];
    for (float* a : {p.theta.data(), p.g.data(), p.m.data(), p.v.data()})
      t.push_back((unsigned long long)(uintptr_t)a);
    unsigned long long n = SIZES[k];
    t.push_back(n);
    t.push_back(first);
    t.push_back(__float_as_uint(p.keep));
    first += (n + CHUNK - 1) / CHUNK;
  }
  *chunks = (long long)first;
  return t;
}

// The norm and clip factor by the kernels, with every partial.
struct Norm {
  std::vector<double> partial;
  double norm, factor;
};

static Norm run_norm(const std::vector<unsigned long long>& t, long long chunks, double max_norm) {
  Norm r{std::vector<double>(chunks, NAN), NAN, NAN};
  double out[2] = {NAN, NAN};
  launch_warps(chunks, [&] { adamw_multi_sum_sq(t.data(), P, chunks, CHUNK, r.partial.data()); });
  launch_warps(1, [&] { adamw_multi_clip(r.partial.data(), chunks, max_norm, out); });
  r.norm = out[0], r.factor = out[1];
  return r;
}

// optim.rs's clip_factor.
static double clip_factor(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

// The elements whose θ', m' or v' differ from adamw_elem (f32, one rounding per operation) on
// the initial values `init` with factor gs; and the worst relative error of θ' against double.
static long unequal_to_cpu(const std::vector<Param>& got, const std::vector<Param>& init, float gs,
                           double* worst) {
  long unequal = 0;
  for (int k = 0; k < P; k++)
    for (long i = 0; i < SIZES[k]; i++) {
      const Param& p = init[k];
      float gi = p.g[i] * gs;
      float mi = p.m[i] * B1 + gi * OMB1;
      float vi = p.v[i] * B2 + (gi * gi) * OMB2;
      float denom = std::sqrt(vi * IBC2) + EPS;
      float upd = (mi * IBC1) / denom;
      float ti = p.theta[i] * p.keep - upd * LR;
      unequal += got[k].theta[i] != ti || got[k].m[i] != mi || got[k].v[i] != vi;
      double gd = (double)p.g[i] * gs, md = p.m[i] * (double)B1 + gd * OMB1;
      double vd = p.v[i] * (double)B2 + gd * gd * OMB2;
      double td = p.theta[i] * (double)p.keep - md * IBC1 / (std::sqrt(vd * IBC2) + EPS) * LR;
      *worst = worse(*worst, std::fabs(got[k].theta[i] - td) / std::fmax(std::fabs(td), 1e-3));
    }
  return unequal;
}

int main() {
  std::vector<Param> ps = make_params();
  const std::vector<Param> init = ps;
  long long chunks = 0;
  std::vector<unsigned long long> table = table_of(ps, &chunks);
  long double sq = 0;
  float sq_f32 = 0;  // the planted defect: the sum in f32
  for (const Param& p : init)
    for (float x : p.g) sq += (long double)x * x, sq_f32 += x * x;
  const double want = std::sqrt((double)sq);
  auto norm_error = [&](double norm) { return std::fabs(norm - want) / want; };

  long total = 0;
  for (long n : SIZES) total += n;
  bool ok = true;
  int caught = 0;
  // Clipping active, inactive, and off (max_norm 0).
  for (double max_norm : {0.5 * want, 2.0 * want, 0.0}) {
    Norm a = run_norm(table, chunks, max_norm), b = run_norm(table, chunks, max_norm);
    bool same = std::memcmp(&a.norm, &b.norm, sizeof a.norm) == 0 &&
                std::memcmp(a.partial.data(), b.partial.data(), chunks * sizeof(double)) == 0;
    bool factor_ok = a.factor == clip_factor(a.norm, max_norm) &&
                     (float)a.factor == (float)clip_factor(want, max_norm);
    reset(ps, init);
    double out[2] = {a.norm, a.factor};
    launch_warps(chunks, [&] {
      adamw_multi_step(table.data(), P, chunks, CHUNK, out, B1, OMB1, B2, OMB2, IBC1, IBC2, EPS,
                       LR);
    });
    double worst = 0;
    long unequal = unequal_to_cpu(ps, init, (float)a.factor, &worst);
    printf("max_norm %.4g: norm %.17g (error %.2e), factor %.9g, %ld of %ld elements differ from "
           "adamw_elem, worst relative error against f64 %.3e%s%s\n",
           max_norm, a.norm, norm_error(a.norm), a.factor, unequal, total, worst,
           same ? "" : ", NOT the same on a second run", factor_ok ? "" : ", factor WRONG");
    ok = ok && same && factor_ok && norm_error(a.norm) <= 1e-13 && unequal == 0 && worst < 1e-6;
    if (max_norm == 0.5 * want) {
      ok = ok && a.factor < 0.51;
      // Planted defects, each of which the checks above must catch.
      caught += norm_error(std::sqrt((double)sq_f32)) > 1e-13;
      std::vector<Param> off = ps;
      off[10].theta[777] = std::nextafter(off[10].theta[777], INFINITY);
      double w = 0;
      caught += unequal_to_cpu(off, init, (float)a.factor, &w) == 1;
      off = ps;
      off[8].theta[256] = init[8].theta[256], off[8].m[256] = init[8].m[256];
      caught += unequal_to_cpu(off, init, (float)a.factor, &w) == 1;
    } else {
      ok = ok && a.factor == 1.0;
    }
  }
  // A gradient with infinity in it: the norm not finite, nothing written.
  reset(ps, init);
  ps[3].g[17] = INFINITY;
  Norm bad = run_norm(table, chunks, 1.0);
  double out[2] = {bad.norm, bad.factor};
  launch_warps(chunks, [&] {
    adamw_multi_step(table.data(), P, chunks, CHUNK, out, B1, OMB1, B2, OMB2, IBC1, IBC2, EPS, LR);
  });
  long written = 0;
  for (int k = 0; k < P; k++)
    for (long i = 0; i < SIZES[k]; i++)
      written += ps[k].theta[i] != init[k].theta[i] || ps[k].m[i] != init[k].m[i] ||
                 ps[k].v[i] != init[k].v[i];
  printf("a gradient with infinity: norm %g, %ld elements written\n", bad.norm, written);
  ok = ok && !(bad.norm < INFINITY) && written == 0;
  printf("planted defects caught: %d of 3\n", caught);
  return ok && caught == 3 ? 0 : 1;
}
