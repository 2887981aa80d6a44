// One AdamW update per element on CUDA (optim_cuda.rs): the operation order of optim.rs's
// adamw_elem, each product and sum rounded on its own (__fmul_rn, __fadd_rn: no fused
// multiply-add) and sqrtf and the division correctly rounded (nvcc's defaults), so that the
// device's update equals the CPU's bit for bit on the same inputs. Compiled to PTX by nvcc at
// build time (build.rs), and for the host by tests/host_cuda.rs.

extern "C" __global__ void adamw_step(const float* theta, const float* g, const float* m,
                                      const float* v, float* theta_out, float* m_out,
                                      float* v_out, long long n, float grad_scale, float b1,
                                      float one_minus_b1, float b2, float one_minus_b2,
                                      float inv_bc1, float inv_bc2, float eps, float keep,
                                      float lr) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gi = __fmul_rn(g[i], grad_scale);
  float mi = __fadd_rn(__fmul_rn(m[i], b1), __fmul_rn(gi, one_minus_b1));
  float vi = __fadd_rn(__fmul_rn(v[i], b2), __fmul_rn(__fmul_rn(gi, gi), one_minus_b2));
  float denom = __fadd_rn(sqrtf(__fmul_rn(vi, inv_bc2)), eps);
  float upd = __fmul_rn(mi, inv_bc1) / denom;
  theta_out[i] = __fadd_rn(__fmul_rn(theta[i], keep), -__fmul_rn(upd, lr));
  m_out[i] = mi;
  v_out[i] = vi;
}
