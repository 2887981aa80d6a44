//! A Linear layer y = x Wᵀ + b as one CPU custom op with its backward pass: the three GEMMs
//! (forward, dx = dy W, dW = dyᵀ x) run on faer, whose f32 kernels were 1.2–1.5x candle's on
//! this project's 2-core Zen 4 runner, and the bias is added inside the forward pass and its
//! gradient (a column sum) formed in the backward pass instead of as separate broadcast and
//! reduction ops. The composed `matmul` + `broadcast_add` is the reference in the tests.

/// The CUDA side (`linear.cu` and cuBLAS).
#[cfg(feature = "cuda")]
pub(crate) mod cuda;

use candle_core::{CpuStorage, CustomOp3, Device, Layout, Shape, Tensor};
use faer::{Accum, MatMut, MatRef};

use kernels::host::{f32_data, not_host_f32, with_host_f32};
use kernels::par::gemm;

/// The custom op: x [N, I], W [O, I], b [O] (contiguous f32) to y [N, O].
pub(crate) struct FusedLinear;

fn dims(x: &Shape, w: &Shape, b: &Shape) -> candle_core::Result<(usize, usize, usize)> {
    let (n, i) = x.dims2()?;
    let (o, i2) = w.dims2()?;
    if i != i2 || b.dims() != [o] {
        candle_core::bail!("fused-linear: x {x:?}, W {w:?}, b {b:?}")
    }
    Ok((n, i, o))
}

/// (dx = dy W, dW = dyᵀ x, db = Σ_rows dy) for x [n, i], W [o, i], dy [n, o].
fn grads(
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    n: usize,
    i: usize,
    o: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let dym = MatRef::from_row_major_slice(dy, n, o);
    let mut dx = vec![0f32; n * i];
    gemm(
        MatMut::from_row_major_slice_mut(&mut dx, n, i),
        Accum::Replace,
        dym,
        MatRef::from_row_major_slice(w, o, i),
        1.0,
    );
    let mut dw = vec![0f32; o * i];
    gemm(
        MatMut::from_row_major_slice_mut(&mut dw, o, i),
        Accum::Replace,
        dym.transpose(),
        MatRef::from_row_major_slice(x, n, i),
        1.0,
    );
    let mut db = vec![0f32; o];
    for row in dy.chunks_exact(o) {
        for (d, &g) in db.iter_mut().zip(row) {
            *d += g;
        }
    }
    (dx, dw, db)
}

impl CustomOp3 for FusedLinear {
    fn name(&self) -> &'static str {
        "fused-linear"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, i, o) = dims(l1.shape(), l2.shape(), l3.shape())?;
        let (x, w) = (
            f32_data(s1, l1, "fused-linear")?,
            f32_data(s2, l2, "fused-linear")?,
        );
        let b = f32_data(s3, l3, "fused-linear")?;
        // Start from the broadcast bias and accumulate the product onto it.
        let mut y: Vec<f32> = b.repeat(n);
        gemm(
            MatMut::from_row_major_slice_mut(&mut y, n, o),
            Accum::Add,
            MatRef::from_row_major_slice(x, n, i),
            MatRef::from_column_major_slice(w, i, o),
            1.0,
        );
        Ok((CpuStorage::F32(y), Shape::from((n, o))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (n, i, o) = dims(x.shape(), w.shape(), b.shape())?;
        let dy = grad_res.to_dtype(candle_core::DType::F32)?.contiguous()?;
        let (dx, dw, db) = with_host_f32(&[x, w, &dy], |s| grads(s[0], s[1], s[2], n, i, o))
            .ok_or_else(|| not_host_f32("fused-linear"))?;
        let dev = Device::Cpu;
        Ok((
            Some(Tensor::from_vec(dx, (n, i), &dev)?),
            Some(Tensor::from_vec(dw, (o, i), &dev)?),
            Some(Tensor::from_vec(db, o, &dev)?),
        ))
    }
}
