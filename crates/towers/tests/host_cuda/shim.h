// What a CUDA source needs to compile as host C++ in these harnesses: the qualifiers vanish,
// the thread indices are globals that launch() sets, and the round-to-nearest intrinsics are
// the plain operations (the host compiler contracts no multiply-add without FMA enabled).
#include <cmath>
#include <vector>

struct Dim3 {
  unsigned x, y, z;
};
static Dim3 blockIdx, blockDim, threadIdx;
#define __global__
#define __device__
#define __forceinline__ inline
#define __fmul_rn(a, b) ((a) * (b))
#define __fadd_rn(a, b) ((a) + (b))

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
    worst = std::fmax(worst, std::fabs(fd - grad[j]) / (1 + std::fabs(fd)));
    *nonzero += std::fabs(fd) > 1e-3;
  }
  return worst;
}
