// What a CUDA source needs to compile as host C++ in these harnesses: the qualifiers vanish,
// the thread indices are per-thread variables that the launches set, the round-to-nearest
// intrinsics are the plain operations (the host compiler contracts no multiply-add without FMA
// enabled), and a warp's shuffle is an exchange between 32 host threads at a barrier.
#include <barrier>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

struct Dim3 {
  unsigned x, y, z;
};
static thread_local Dim3 blockIdx, blockDim, threadIdx;
#define __global__
#define __device__
#define __forceinline__ inline
#define __fmul_rn(a, b) ((a) * (b))
#define __fadd_rn(a, b) ((a) + (b))

// CUDA's reinterpretations of a float's bits.
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// A launch of n threads in blocks of 4 (so that the grid arithmetic is exercised), with one
// block past the end, as a grid rounded up has.
template <class F>
void launch(long n, F kernel) {
  blockDim.x = 4;
  for (long block = 0; block * 4 < n + 4; block++)
    for (unsigned thread = 0; thread < 4; thread++) {
      blockIdx.x = block;
      threadIdx.x = thread;
      kernel();
    }
}

// The value of bf16 bits h, and the bf16 nearest to a finite f (ties to the even one) found by
// comparing its two bf16 neighbours in double: the harnesses' oracle, independent of the
// kernels' bit arithmetic (bf16.cuh).
inline double bf16_value(unsigned short h) {
  unsigned u = (unsigned)h << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline unsigned short nearest_bf16(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  unsigned short lo = (unsigned short)(u >> 16), hi = (unsigned short)(lo + 1);
  double dlo = std::fabs(bf16_value(lo) - f), dhi = std::fabs(bf16_value(hi) - f);
  if (dlo != dhi) return dlo < dhi ? lo : hi;
  return (lo & 1) ? hi : lo;
}

// The 32 lanes of one emulated warp: a slot each for a shuffle's values, and the barrier at
// which they meet.
struct Warp {
  std::barrier<> meet{32};
  float slot[32];
};
static thread_local Warp* this_warp = nullptr;

// CUDA's __shfl_xor_sync over a whole warp (mask 0xffffffff): lane l gets lane l ^ m's v.
// Every lane of the warp must call it, as on the device.
inline float __shfl_xor_sync(unsigned, float v, int m) {
  int lane = threadIdx.x % 32;
  this_warp->slot[lane] = v;
  this_warp->meet.arrive_and_wait();
  float got = this_warp->slot[lane ^ m];
  this_warp->meet.arrive_and_wait();
  return got;
}

// A launch of the kernels that give each row one warp: `rows` warps in blocks of two (so that
// the grid arithmetic is exercised), with one block past the end, each lane a host thread, so
// that the lanes of a warp run together as on the device.
template <class F>
void launch_warps(long rows, F kernel) {
  const unsigned lanes = 32, per_block = 2 * lanes;
  for (long block = 0; block * 2 < rows + 2; block++) {
    std::vector<std::unique_ptr<Warp>> warps;
    for (int w = 0; w < 2; w++) warps.push_back(std::make_unique<Warp>());
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < per_block; t++)
      threads.emplace_back([&, t] {
        blockIdx.x = block;
        blockDim.x = per_block;
        threadIdx.x = t;
        this_warp = warps[t / lanes].get();
        kernel();
      });
    for (auto& t : threads) t.join();
  }
}

// The larger of two errors, NaN when either is (std::fmax skips a NaN: a kernel writing NaN
// would pass every bound).
inline double worse(double a, double b) {
  return (a != a || b != b) ? NAN : (a > b ? a : b);
}

// Checks a float gradient against central differences (step 1e-6, in double) of loss() in each
// entry of v: returns the worst |fd - grad| / (1 + |fd|) and adds to *nonzero the entries whose
// difference exceeds 1e-3 in size.
template <class Loss>
double worst_fd_error(std::vector<double>& v, const std::vector<float>& grad, Loss loss,
                      int* nonzero) {
  double worst = 0;
  for (size_t j = 0; j < v.size(); j++) {
    double e = 1e-6, keep = v[j];
    v[j] = keep + e;
    double up = loss();
    v[j] = keep - e;
    double down = loss();
    v[j] = keep;
    double fd = (up - down) / (2 * e);
    worst = worse(worst, std::fabs(fd - grad[j]) / (1 + std::fabs(fd)));
    *nonzero += std::fabs(fd) > 1e-3;
  }
  return worst;
}
