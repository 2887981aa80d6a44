// bf16 as the kernels read and write it: the upper half of an f32's bits, stored as an
// unsigned short; arithmetic in f32. Loads and stores overloaded on the element type, so that
// one kernel body serves f32 and bf16 buffers. Included by nvcc from src/ (build.rs) and by the
// host harnesses.
#pragma once

__device__ __forceinline__ float bf16_to_f32(unsigned short h) {
  return __uint_as_float((unsigned)h << 16);
}

// Round to nearest, ties to even (as __float2bfloat16 and half::bf16::from_f32); NaN stays a
// (quiet) NaN.
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const unsigned short* p) { return bf16_to_f32(*p); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(unsigned short* p, float v) { *p = f32_to_bf16(v); }
