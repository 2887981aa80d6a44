// What a CUDA source needs to compile as host C++ in these harnesses: the qualifiers vanish,
// the thread indices are globals that launch() sets, and the round-to-nearest intrinsics are
// the plain operations (the host compiler contracts no multiply-add without FMA enabled).
#include <cmath>

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
