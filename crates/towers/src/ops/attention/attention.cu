// Fused multi-head self-attention on CUDA (fused_attention_cuda.rs), the counterpart of the
// CPU's FusedAttention: from the fused projection qkv [B, T, 3H] (Q, K, V blocks of width H,
// heads of width hd inside each) and the additive bias [B, 1, T, T] to the merged heads
// O [B, T, H], per (sequence, head) S = Q K^T / sqrt(hd) + bias, P = softmax(S), O = P V.
// One block per (sequence, head); the heads are read strided straight from qkv and O is written
// merged (no split, transpose or merge copies). The bias is the one the model already builds
// (causal and padding as -1e9, so a padded query keeps itself); an entry of -inf masks its key
// outright, and a row whose every entry is -inf gives O = 0 and log-sum-exp -inf, and no
// gradient. The forward pass keeps only the log-sum-exp per row (f32 [B, nh, T]); the backward
// pass recomputes P from Q, K and it: dV = P^T dO, dP = dO V^T, D_i = rowsum(P dP) (equal to
// rowsum(dO O), and the CPU op's own sum, without reading O back in bf16), dS = P (dP - D),
// dQ = dS K / sqrt(hd), dK = dS^T Q / sqrt(hd), written into one dqkv [B, T, 3H] in qkv's layout.
// Every output entry is summed by one thread in a fixed order: no atomics, the same numbers
// every run. T <= 128 (each lane holds the scores of keys lane, lane + 32, ...); any head
// width whose block fits the shared memory the op gives it (fused_attention_cuda.rs decides,
// and runs candle's composed graph otherwise). f32, and bf16 read and written with f32 inside
// (bf16.cuh): each output rounded once. Compiled to PTX by nvcc at build time (build.rs), and
// for the host by tests/host_cuda.rs.
#include "bf16.cuh"
#include "warp.cuh"

// The longest sequence: the keys (forward) or queries (backward) a lane holds.
#define ATTN_MAX_T 128
#define ATTN_PER_LANE (ATTN_MAX_T / WARP_LANES)

// The block's shared memory, sized by the op at launch (attention_shared_bytes): f32 rows of
// each warp first, then the staged [hd][pitch] (and [t][hd]) matrices in the element type.
extern __shared__ float attn_smem[];

// The row pitch, in elements, of a matrix staged transposed ([hd][pitch], column j of row d at
// d * pitch + j): at least t, and an odd number of 32-bit words, so that the lanes of a warp
// reading one column at rows d = lane hit 32 different banks.
template <class T>
__device__ __forceinline__ int attn_pitch(int t) {
  int per_word = 4 / (int)sizeof(T);
  return (((t + per_word - 1) / per_word) | 1) * per_word;
}

// Where one block's head lives: qkv's (and dqkv's) row stride, the head's Q column in it, the
// merged output's (and dO's) row stride and column.
struct AttnHead {
  long long row, q_col, seq;
  int out_col;
};

__device__ __forceinline__ AttnHead attn_head(int nh, int t, int hd) {
  int bh = blockIdx.x, b = bh / nh, head = bh % nh;
  AttnHead a;
  a.row = 3LL * nh * hd;
  a.seq = b;
  a.q_col = (long long)b * t * a.row + (long long)head * hd;
  a.out_col = head * hd;
  return a;
}

// Stages the [t, hd] block at `x` (row stride `stride`) transposed into `dst` [hd][pitch].
template <class T>
__device__ __forceinline__ void attn_stage_t(const T* x, long long stride, T* dst, int t, int hd,
                                             int pitch) {
  for (int e = threadIdx.x; e < t * hd; e += blockDim.x) {
    int j = e / hd, d = e % hd;
    dst[d * pitch + j] = x[j * stride + d];
  }
}

// One block per (sequence, head), blockDim.x a multiple of 32: warp w takes query rows w,
// w + warps, ...; its lanes score keys lane, lane + 32, ... against K staged transposed, the
// warp combines the row's maximum and sum (warp.cuh), and lane d sums P_ij V_jd over the keys
// for the output columns d, d + 32, ....
template <class T>
__device__ __forceinline__ void attention_forward_block(const T* qkv, const float* bias, T* out,
                                                        float* lse, int batch, int nh, int t,
                                                        int hd, float scale) {
  if ((int)blockIdx.x >= batch * nh) return;
  const AttnHead a = attn_head(nh, t, hd);
  const int h_all = nh * hd, lane = threadIdx.x % WARP_LANES, warp = threadIdx.x / WARP_LANES;
  const int warps = blockDim.x / WARP_LANES, pitch = attn_pitch<T>(t);
  const T* q = qkv + a.q_col;
  const T* k = q + h_all;
  const T* v = q + 2 * h_all;
  const float* bias_b = bias + a.seq * t * t;
  float* qi = attn_smem + warp * (hd + t);  // this warp's query row
  float* pi = qi + hd;                      // and its probabilities
  T* kt = (T*)(attn_smem + warps * (hd + t));
  T* vs = kt + hd * pitch;  // V [t][hd]
  attn_stage_t(k, a.row, kt, t, hd, pitch);
  for (int e = threadIdx.x; e < t * hd; e += blockDim.x) vs[e] = v[(e / hd) * a.row + e % hd];
  __syncthreads();
  for (int i = warp; i < t; i += warps) {
    for (int d = lane; d < hd; d += WARP_LANES) qi[d] = load(q + i * a.row + d);
    __syncwarp();
    float s[ATTN_PER_LANE], mx = -INFINITY;
    for (int c = 0; c < ATTN_PER_LANE; c++) {
      int j = lane + c * WARP_LANES;
      s[c] = -INFINITY;
      if (j < t) {
        float acc = 0.0f;
        for (int d = 0; d < hd; d++) acc += qi[d] * load(kt + d * pitch + j);
        s[c] = acc * scale + bias_b[(long long)i * t + j];
        mx = fmaxf(mx, s[c]);
      }
    }
    mx = warp_max(mx);
    // Every key masked (-inf): no probability, O = 0 (a NaN score still reaches the output).
    bool empty = mx == -INFINITY;
    float sum = 0.0f;
    for (int c = 0; c < ATTN_PER_LANE; c++) {
      s[c] = empty ? 0.0f : expf(s[c] - mx);
      sum += s[c];
    }
    sum = warp_sum(sum);
    for (int c = 0; c < ATTN_PER_LANE; c++) {
      int j = lane + c * WARP_LANES;
      if (j < t) pi[j] = empty ? 0.0f : s[c] / sum;
    }
    __syncwarp();
    for (int d = lane; d < hd; d += WARP_LANES) {
      float acc = 0.0f;
      for (int j = 0; j < t; j++) acc += pi[j] * load(vs + j * hd + d);
      store(out + (a.seq * t + i) * h_all + a.out_col + d, acc);
    }
    if (lane == 0) lse[(long long)blockIdx.x * t + i] = empty ? -INFINITY : mx + logf(sum);
    __syncwarp();  // the rows are read before the next query overwrites them
  }
}

// P_ij recomputed from the score s_ij and row i's log-sum-exp (0 for a row with no key).
__device__ __forceinline__ float attn_prob(float s, float lse_i) {
  return lse_i == -INFINITY ? 0.0f : expf(s - lse_i);
}

// One block per (sequence, head), in two passes over the head. Query rows (K, V staged
// transposed): per row i, P_i and dP_i over the keys, D_i, dS_i, and dQ_i summed by lane d over
// the keys. Key rows (Q, dO staged transposed): per key j, P_ij and dP_ij over the queries with
// the D_i of the first pass, dV_j and dK_j summed by lane d over the queries. The scores of
// both passes are the forward pass's, term for term.
template <class T>
__device__ __forceinline__ void attention_backward_block(const T* qkv, const float* bias,
                                                         const float* lse, const T* dout, T* dqkv,
                                                         int batch, int nh, int t, int hd,
                                                         float scale) {
  if ((int)blockIdx.x >= batch * nh) return;
  const AttnHead a = attn_head(nh, t, hd);
  const int h_all = nh * hd, lane = threadIdx.x % WARP_LANES, warp = threadIdx.x / WARP_LANES;
  const int warps = blockDim.x / WARP_LANES, pitch = attn_pitch<T>(t);
  const T* q = qkv + a.q_col;
  const T* k = q + h_all;
  const T* v = q + 2 * h_all;
  const T* go = dout + a.seq * t * h_all + a.out_col;
  T* dq = dqkv + a.q_col;
  T* dk = dq + h_all;
  T* dv = dq + 2 * h_all;
  const float* bias_b = bias + a.seq * t * t;
  const float* lse_b = lse + (long long)blockIdx.x * t;
  float* rowsum = attn_smem;                            // D_i [t]
  float* x = attn_smem + t + warp * (2 * hd + 2 * t);  // this warp's two row vectors
  float* y = x + hd;
  float* pr = y + hd;  // and two rows over the queries or keys
  float* dsr = pr + t;
  T* m1 = (T*)(attn_smem + t + warps * (2 * hd + 2 * t));
  T* m2 = m1 + hd * pitch;

  attn_stage_t(k, a.row, m1, t, hd, pitch);
  attn_stage_t(v, a.row, m2, t, hd, pitch);
  __syncthreads();
  for (int i = warp; i < t; i += warps) {
    for (int d = lane; d < hd; d += WARP_LANES) {
      x[d] = load(q + i * a.row + d);
      y[d] = load(go + i * h_all + d);
    }
    __syncwarp();
    float p[ATTN_PER_LANE], dp[ATTN_PER_LANE], part = 0.0f, lse_i = lse_b[i];
    for (int c = 0; c < ATTN_PER_LANE; c++) {
      int j = lane + c * WARP_LANES;
      p[c] = 0.0f;
      dp[c] = 0.0f;
      if (j < t) {
        float s = 0.0f, g = 0.0f;
        for (int d = 0; d < hd; d++) {
          s += x[d] * load(m1 + d * pitch + j);
          g += y[d] * load(m2 + d * pitch + j);
        }
        p[c] = attn_prob(s * scale + bias_b[(long long)i * t + j], lse_i);
        dp[c] = g;
        part += p[c] * g;
      }
    }
    float di = warp_sum(part);
    for (int c = 0; c < ATTN_PER_LANE; c++) {
      int j = lane + c * WARP_LANES;
      if (j < t) dsr[j] = p[c] * (dp[c] - di);
    }
    if (lane == 0) rowsum[i] = di;
    __syncwarp();
    for (int d = lane; d < hd; d += WARP_LANES) {
      float acc = 0.0f;
      for (int j = 0; j < t; j++) acc += dsr[j] * load(m1 + d * pitch + j);
      store(dq + i * a.row + d, acc * scale);
    }
    __syncwarp();
  }
  __syncthreads();  // every D_i written; K and V read for the last time

  attn_stage_t(q, a.row, m1, t, hd, pitch);
  attn_stage_t(go, (long long)h_all, m2, t, hd, pitch);
  __syncthreads();
  for (int j = warp; j < t; j += warps) {
    for (int d = lane; d < hd; d += WARP_LANES) {
      x[d] = load(k + j * a.row + d);
      y[d] = load(v + j * a.row + d);
    }
    __syncwarp();
    for (int c = 0; c < ATTN_PER_LANE; c++) {
      int i = lane + c * WARP_LANES;
      if (i < t) {
        float s = 0.0f, g = 0.0f;
        for (int d = 0; d < hd; d++) {
          s += load(m1 + d * pitch + i) * x[d];
          g += load(m2 + d * pitch + i) * y[d];
        }
        float pij = attn_prob(s * scale + bias_b[(long long)i * t + j], lse_b[i]);
        pr[i] = pij;
        dsr[i] = pij * (g - rowsum[i]);
      }
    }
    __syncwarp();
    for (int d = lane; d < hd; d += WARP_LANES) {
      float av = 0.0f, ak = 0.0f;
      for (int i = 0; i < t; i++) {
        av += pr[i] * load(m2 + d * pitch + i);
        ak += dsr[i] * load(m1 + d * pitch + i);
      }
      store(dv + j * a.row + d, av);
      store(dk + j * a.row + d, ak * scale);
    }
    __syncwarp();
  }
}

extern "C" __global__ void attention_forward(const float* qkv, const float* bias, float* out,
                                             float* lse, int batch, int nh, int t, int hd,
                                             float scale) {
  attention_forward_block(qkv, bias, out, lse, batch, nh, t, hd, scale);
}

extern "C" __global__ void attention_forward_bf16(const unsigned short* qkv, const float* bias,
                                                  unsigned short* out, float* lse, int batch,
                                                  int nh, int t, int hd, float scale) {
  attention_forward_block(qkv, bias, out, lse, batch, nh, t, hd, scale);
}

extern "C" __global__ void attention_backward(const float* qkv, const float* bias,
                                              const float* lse, const float* dout, float* dqkv,
                                              int batch, int nh, int t, int hd, float scale) {
  attention_backward_block(qkv, bias, lse, dout, dqkv, batch, nh, t, hd, scale);
}

extern "C" __global__ void attention_backward_bf16(const unsigned short* qkv, const float* bias,
                                                   const float* lse, const unsigned short* dout,
                                                   unsigned short* dqkv, int batch, int nh,
                                                   int t, int hd, float scale) {
  attention_backward_block(qkv, bias, lse, dout, dqkv, batch, nh, t, hd, scale);
}
