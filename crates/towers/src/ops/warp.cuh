// Reductions across the 32 lanes of a warp by butterfly shuffles: after five exchanges every
// lane holds the result. The row kernels (layer_norm.cu, softmax.cu) give each row one warp,
// whose lanes read it at stride 32 (coalesced), and combine their partial sums and maxima here.
// Included by nvcc from src/ (build.rs), and by the host harnesses, whose shim.h emulates the
// shuffle with a barrier per warp.
#pragma once

#define WARP_LANES 32

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = WARP_LANES / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = WARP_LANES / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
