// Fused attention's CUDA kernels (src/attention.cu), compiled for the host with shim.h plus what
// these kernels need beyond it (a block barrier, __syncwarp, the block's shared memory as a
// buffer of exactly the bytes the op asks for, filled with NaN), launched one block per
// (sequence, head) and one block past the end, two warps each (so a warp takes several rows):
// - case A, B 3, T 37 (keys past the first 32 in every lane, an odd T), 2 heads of width 8
//   (lanes past the head width), causal, with the model's bias (attention.rs: -1e9 on PAD keys
//   and future keys, a query keeps itself): sequence 0 padded at the end, sequence 1 at the
//   start, and in sequence 2 one row of -inf (a fully masked row) and a few -inf keys. O and the
//   log-sum-exp against double precision (1e-5), dqkv against central differences of
//   sum(w O) in double (1e-4), and dq, dk, dv each against the gradient written out in double;
//   the masked row's output and gradient exactly 0, nothing NaN;
// - case B, B 1, T 128 (four keys a lane), 2 heads of width 40 (two columns a lane past 32),
//   not causal, 9 PAD keys at the end: O, the log-sum-exp and dq, dk, dv against double;
// - bf16 (case A): O and dqkv the f32 kernels' on the inputs rounded to bf16, rounded to the
//   nearest bf16 (shim.h's oracle), the log-sum-exp equal;
// - the op's shared-memory sizes at T 128, head width 32, 8 warps (printed; the Rust side holds
//   the same numbers).
// Exit code 0 on a match (1 at the first case that does not).
#include <cstdio>
#include <vector>

#include "host_shim.h"

// The block barrier of the current block, and CUDA's warp barrier (every lane calls it).
static thread_local std::barrier<>* this_block = nullptr;
inline void __syncthreads() { this_block->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { this_warp->meet.arrive_and_wait(); }

// The kernels' `extern __shared__ float attn_smem[]` becomes a pointer to the launch's buffer.
#define __shared__
#define attn_smem (*attn_smem_host)
#include CU_SOURCE
#undef attn_smem
float (*attn_smem_host)[] = nullptr;

// The op's shared-memory bytes (fused_attention_cuda.rs): the warps' f32 rows, then the staged
// matrices of element size `elt`.
static int pitch(int t, int elt) {
  int per = 4 / elt;
  return (((t + per - 1) / per) | 1) * per;
}
static size_t fwd_bytes(int t, int hd, int warps, int elt) {
  return 4 * (size_t)warps * (hd + t) + (size_t)elt * (hd * pitch(t, elt) + t * hd);
}
static size_t bwd_bytes(int t, int hd, int warps, int elt) {
  return 4 * ((size_t)t + (size_t)warps * (2 * hd + 2 * t)) + (size_t)elt * 2 * hd * pitch(t, elt);
}

// `blocks` blocks (and one past the end) of `warps` warps, each lane a host thread, the block's
// shared memory a fresh buffer of `bytes` bytes of NaN.
template <class F>
void launch_blocks(int blocks, int warps, size_t bytes, F kernel) {
  for (int block = 0; block <= blocks; block++) {
    std::unique_ptr<unsigned char[]> smem(new unsigned char[bytes]);
    std::memset(smem.get(), 0xff, bytes);
    attn_smem_host = reinterpret_cast<float (*)[]>(smem.get());
    std::barrier<> meet(warps * 32);
    std::vector<std::unique_ptr<Warp>> ws;
    for (int w = 0; w < warps; w++) ws.push_back(std::make_unique<Warp>());
    std::vector<std::thread> threads;
    for (int th = 0; th < warps * 32; th++)
      threads.emplace_back([&, th] {
        blockIdx.x = block;
        blockDim.x = warps * 32;
        threadIdx.x = th;
        this_warp = ws[th / 32].get();
        this_block = &meet;
        kernel();
      });
    for (auto& th : threads) th.join();
  }
}

struct Case {
  int b, t, nh, hd;
  int h() const { return nh * hd; }
  size_t n_qkv() const { return (size_t)b * t * 3 * h(); }
  size_t n_out() const { return (size_t)b * t * h(); }
  float scale() const { return 1.0f / std::sqrt((float)hd); }
};

// Attention in double: O [B, T, H] and the log-sum-exp [B, nh, T] of qkv under bias [B, T, T];
// with dout, the gradient of sum(dout O) with respect to qkv written out (dV = P^T dO,
// dP = dO V^T, dS = P (dP - rowsum(P dP)), dQ = dS K s, dK = dS^T Q s).
struct Ref {
  std::vector<double> out, lse, dqkv;
};
static Ref reference(const Case& c, const std::vector<double>& qkv, const std::vector<float>& bias,
                     const std::vector<float>* dout) {
  const int t = c.t, hd = c.hd, h = c.h(), row = 3 * h;
  const double scale = 1.0 / std::sqrt((double)hd);
  Ref r{std::vector<double>(c.n_out(), 0.0), std::vector<double>((size_t)c.b * c.nh * t),
        std::vector<double>(c.n_qkv(), 0.0)};
  std::vector<double> p(t * t), ds(t * t);
  for (int b = 0; b < c.b; b++)
    for (int hh = 0; hh < c.nh; hh++) {
      auto at = [&](int i, int part, int d) {
        return qkv[((size_t)b * t + i) * row + part * h + hh * hd + d];
      };
      for (int i = 0; i < t; i++) {
        double mx = -INFINITY;
        for (int j = 0; j < t; j++) {
          double s = 0;
          for (int d = 0; d < hd; d++) s += at(i, 0, d) * at(j, 1, d);
          p[i * t + j] = s * scale + bias[((size_t)b * t + i) * t + j];
          mx = worse(mx, p[i * t + j]);
        }
        double sum = 0;
        for (int j = 0; j < t; j++)
          sum += p[i * t + j] = mx == -INFINITY ? 0 : std::exp(p[i * t + j] - mx);
        for (int j = 0; j < t; j++) p[i * t + j] = mx == -INFINITY ? 0 : p[i * t + j] / sum;
        r.lse[((size_t)b * c.nh + hh) * t + i] = mx == -INFINITY ? -INFINITY : mx + std::log(sum);
        for (int d = 0; d < hd; d++) {
          double o = 0;
          for (int j = 0; j < t; j++) o += p[i * t + j] * at(j, 2, d);
          r.out[((size_t)b * t + i) * h + hh * hd + d] = o;
        }
      }
      if (!dout) continue;
      auto go = [&](int i, int d) {
        return (double)(*dout)[((size_t)b * t + i) * h + hh * hd + d];
      };
      auto g = [&](int i, int part, int d) -> double& {
        return r.dqkv[((size_t)b * t + i) * row + part * h + hh * hd + d];
      };
      for (int i = 0; i < t; i++) {
        double dsum = 0;
        for (int j = 0; j < t; j++) {
          double dp = 0;
          for (int d = 0; d < hd; d++) dp += go(i, d) * at(j, 2, d);
          ds[i * t + j] = dp;
          dsum += p[i * t + j] * dp;
        }
        for (int j = 0; j < t; j++) ds[i * t + j] = p[i * t + j] * (ds[i * t + j] - dsum);
      }
      for (int i = 0; i < t; i++)
        for (int j = 0; j < t; j++)
          for (int d = 0; d < hd; d++) {
            g(i, 0, d) += ds[i * t + j] * at(j, 1, d) * scale;
            g(j, 1, d) += ds[i * t + j] * at(i, 0, d) * scale;
            g(j, 2, d) += p[i * t + j] * go(i, d);
          }
    }
  return r;
}

// The kernels' outputs.
template <class T>
struct Got {
  std::vector<T> out, dqkv;
  std::vector<float> lse;
};
template <class T, class Fwd, class Bwd>
static Got<T> run(const Case& c, const std::vector<T>& qkv, const std::vector<float>& bias,
                  const std::vector<T>& dout, T nan, Fwd fwd, Bwd bwd) {
  const int warps = 2, elt = sizeof(T);
  Got<T> g{std::vector<T>(c.n_out(), nan), std::vector<T>(c.n_qkv(), nan),
           std::vector<float>((size_t)c.b * c.nh * c.t, NAN)};
  launch_blocks(c.b * c.nh, warps, fwd_bytes(c.t, c.hd, warps, elt), [&] {
    fwd(qkv.data(), bias.data(), g.out.data(), g.lse.data(), c.b, c.nh, c.t, c.hd, c.scale());
  });
  launch_blocks(c.b * c.nh, warps, bwd_bytes(c.t, c.hd, warps, elt), [&] {
    bwd(qkv.data(), bias.data(), g.lse.data(), dout.data(), g.dqkv.data(), c.b, c.nh, c.t, c.hd,
        c.scale());
  });
  return g;
}

static double worst_abs(const std::vector<float>& got, const std::vector<double>& want) {
  double w = 0;
  for (size_t i = 0; i < got.size(); i++) {
    double d = std::fabs(got[i] - want[i]);
    if (!(d <= w)) w = std::isnan(d) ? INFINITY : d;  // NaN never passes
  }
  return w;
}

// The largest |got - want| over one part (0 Q, 1 K, 2 V) of the rows of dqkv.
static double worst_part(const Case& c, const std::vector<float>& got,
                         const std::vector<double>& want, int part) {
  double w = 0;
  for (size_t r = 0; r < (size_t)c.b * c.t; r++)
    for (int k = 0; k < c.h(); k++) {
      size_t i = r * 3 * c.h() + part * c.h() + k;
      double d = std::fabs(got[i] - want[i]);
      if (!(d <= w)) w = std::isnan(d) ? INFINITY : d;
    }
  return w;
}

static std::vector<float> wave(size_t n, float f, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = std::sin(i * f + 0.3f) * scale;
  return v;
}

// The model's bias (attention.rs attention_bias): -1e9 where key j is PAD (unless j = i) or,
// causal, j > i.
static std::vector<float> model_bias(const Case& c, const std::vector<int>& mask, bool causal) {
  std::vector<float> bias((size_t)c.b * c.t * c.t, 0.0f);
  for (int b = 0; b < c.b; b++)
    for (int i = 0; i < c.t; i++)
      for (int j = 0; j < c.t; j++)
        if ((mask[b * c.t + j] == 0 && i != j) || (causal && j > i))
          bias[((size_t)b * c.t + i) * c.t + j] = -1e9f;
  return bias;
}

int main() {
  bool ok = true;
  // Case A.
  const Case a{3, 37, 2, 8};
  const int masked_row = 11;  // of sequence 2
  std::vector<int> mask(a.b * a.t, 1);
  for (int j = a.t - 5; j < a.t; j++) mask[j] = 0;        // sequence 0: PAD at the end
  for (int j = 0; j < 4; j++) mask[a.t + j] = 0;          // sequence 1: PAD at the start
  std::vector<float> bias = model_bias(a, mask, true);
  for (int j = 0; j < a.t; j++) bias[((size_t)2 * a.t + masked_row) * a.t + j] = -INFINITY;
  for (int i = 20; i < a.t; i++) bias[((size_t)2 * a.t + i) * a.t + 3] = -INFINITY;
  std::vector<float> qkv = wave(a.n_qkv(), 0.77f, 1.5f), dout = wave(a.n_out(), 0.29f, 1.0f);
  Got<float> g = run(a, qkv, bias, dout, NAN, attention_forward, attention_backward);
  std::vector<double> q64(qkv.begin(), qkv.end());
  Ref r = reference(a, q64, bias, &dout);
  double worst_out = worst_abs(g.out, r.out);
  double worst_lse = 0;
  int finite = 0;
  for (size_t i = 0; i < r.lse.size(); i++) {
    if (r.lse[i] == -INFINITY) {
      worst_lse = g.lse[i] == -INFINITY ? worst_lse : INFINITY;
      continue;
    }
    finite++;
    double d = std::fabs(g.lse[i] - r.lse[i]);
    worst_lse = d <= worst_lse ? worst_lse : (std::isnan(d) ? INFINITY : d);
  }
  double parts[3];
  for (int p = 0; p < 3; p++) parts[p] = worst_part(a, g.dqkv, r.dqkv, p);
  // The masked row: O exactly 0 in both heads, its Q's gradient exactly 0.
  bool masked_zero = finite == (int)r.lse.size() - 2;
  for (int k = 0; k < a.h(); k++) {
    size_t row = (size_t)2 * a.t + masked_row;
    masked_zero = masked_zero && g.out[row * a.h() + k] == 0.0f &&
                  g.dqkv[row * 3 * a.h() + k] == 0.0f;
  }
  auto loss = [&] {
    Ref l = reference(a, q64, bias, nullptr);
    double s = 0;
    for (size_t i = 0; i < l.out.size(); i++) s += dout[i] * l.out[i];
    return s;
  };
  int nonzero = 0;
  double worst_fd = worst_fd_error(q64, g.dqkv, loss, &nonzero);
  printf("case A (B 3, T 37, 2 heads of 8, causal, PAD at the end and the start, a row of -inf): "
         "worst |O - f64| %.3e, |lse - f64| %.3e; worst gradient error by central differences "
         "%.3e (%d of %zu entries non-zero); against f64 dq %.3e, dk %.3e, dv %.3e; masked row "
         "%s\n",
         worst_out, worst_lse, worst_fd, nonzero, a.n_qkv(), parts[0], parts[1], parts[2],
         masked_zero ? "0" : "NOT 0");
  ok = ok && worst_out < 1e-5 && worst_lse < 1e-5 && worst_fd < 1e-4 &&
       nonzero > (int)a.n_qkv() / 2 && parts[0] < 1e-5 && parts[1] < 1e-5 && parts[2] < 1e-5 &&
       masked_zero;
  if (!ok) return 1;  // the later cases would take as long to say no more

  // Case B.
  const Case bc{1, 128, 2, 40};
  std::vector<int> mask_b(bc.t, 1);
  for (int j = bc.t - 9; j < bc.t; j++) mask_b[j] = 0;
  std::vector<float> bias_b = model_bias(bc, mask_b, false);
  std::vector<float> qkv_b = wave(bc.n_qkv(), 0.37f, 1.2f), dout_b = wave(bc.n_out(), 0.53f, 1.0f);
  Got<float> gb = run(bc, qkv_b, bias_b, dout_b, NAN, attention_forward, attention_backward);
  Ref rb = reference(bc, std::vector<double>(qkv_b.begin(), qkv_b.end()), bias_b, &dout_b);
  double b_out = worst_abs(gb.out, rb.out), b_lse = worst_abs(gb.lse, rb.lse), b_parts[3];
  for (int p = 0; p < 3; p++) b_parts[p] = worst_part(bc, gb.dqkv, rb.dqkv, p);
  printf("case B (B 1, T 128, 2 heads of 40, 9 PAD at the end): worst |O - f64| %.3e, |lse - f64| "
         "%.3e; dq %.3e, dk %.3e, dv %.3e\n",
         b_out, b_lse, b_parts[0], b_parts[1], b_parts[2]);
  ok = ok && b_out < 1e-5 && b_lse < 1e-5 && b_parts[0] < 1e-5 && b_parts[1] < 1e-5 &&
       b_parts[2] < 1e-5;
  if (!ok) return 1;

  // bf16 on case A: the inputs rounded; the f32 kernels on the same values.
  std::vector<unsigned short> qb(a.n_qkv()), db(a.n_out());
  std::vector<float> qr(a.n_qkv()), dr(a.n_out());
  for (size_t i = 0; i < qb.size(); i++)
    qb[i] = nearest_bf16(qkv[i]), qr[i] = (float)bf16_value(qb[i]);
  for (size_t i = 0; i < db.size(); i++)
    db[i] = nearest_bf16(dout[i]), dr[i] = (float)bf16_value(db[i]);
  Got<unsigned short> gh =
      run(a, qb, bias, db, (unsigned short)0xffff, attention_forward_bf16, attention_backward_bf16);
  Got<float> gr = run(a, qr, bias, dr, NAN, attention_forward, attention_backward);
  int wrong = 0;
  for (size_t i = 0; i < gh.out.size(); i++) wrong += gh.out[i] != nearest_bf16(gr.out[i]);
  for (size_t i = 0; i < gh.dqkv.size(); i++) wrong += gh.dqkv[i] != nearest_bf16(gr.dqkv[i]);
  for (size_t i = 0; i < gh.lse.size(); i++)
    wrong += !(gh.lse[i] == gr.lse[i]);  // -inf equals -inf; NaN never
  printf("bf16: %d of %zu values not the f32 kernels' rounded\n", wrong,
         gh.out.size() + gh.dqkv.size() + gh.lse.size());
  ok = ok && wrong == 0;

  printf("shared bytes at T 128, head width 32, 8 warps: forward %zu (f32) %zu (bf16), backward "
         "%zu (f32) %zu (bf16)\n",
         fwd_bytes(128, 32, 8, 4), fwd_bytes(128, 32, 8, 2), bwd_bytes(128, 32, 8, 4),
         bwd_bytes(128, 32, 8, 2));
  return ok ? 0 : 1;
}
