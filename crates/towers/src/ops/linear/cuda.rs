//! The fused Linear y = x Wᵀ + b on CUDA, for every Linear with a bias: one custom op
//! with its own backward pass where candle's composed graph casts the f32 master weight, adds
//! the bias by a broadcast, and in the backward pass reduces the bias gradient and casts both
//! gradients back to f32 as separate ops and graph edges. Forward: the bias broadcast into y's
//! rows (`linear.cu`), then one cuBLAS `cublasGemmEx` adds x Wᵀ onto it (β = 1). Backward: dx =
//! dy W in x's dtype, dW = dyᵀ x written in f32 by the GEMM itself (bf16 operands, f32 output,
//! `CUBLAS_COMPUTE_32F`), db the column sums of dy in f32 by two passes of `linear.cu`'s sums in
//! a fixed order (no atomics). x and dy are f32 or bf16 (the compute dtype); W and b are f32
//! masters, W cast to bf16 for a bf16 product. On the CPU the op is [`FusedLinear`].
//!
//! Row-major matrices reach column-major cuBLAS as their transposes (Cᵀ = Bᵀ Aᵀ), as in
//! `fused_lstm_seq_cuda.rs`.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::cublas::result::gemm_ex;
use candle_core::cuda_backend::cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use candle_core::cuda_backend::cudarc::cublas::sys::{
    cublasComputeType_t, cublasGemmAlgo_t, cudaDataType_t,
};
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaView, DevicePtr, DevicePtrMut, PushKernelArg,
};
use candle_core::cuda_backend::WrapErr;
use candle_core::{
    CpuStorage, CudaDevice, CudaStorage, CustomOp3, DType, Layout, Result, Shape, Tensor, WithDType,
};

use crate::ops::cuda::{
    by_element, f32_view, grid, kernel_name, ptx, tensor, view, with_cuda, written_whole, Element,
};
use crate::ops::linear::FusedLinear;

/// The kernels' PTX, from `build.rs`.
const PTX: &str = ptx!("linear");

/// The module name the kernels are loaded under, once per device.
const MODULE: &str = "lmsplit_linear";

/// The op's name, in its errors.
const OP: &str = "fused-linear-cuda";

/// Rows of dy per partial sum in the bias gradient's first pass: enough (part, column) threads
/// to fill the device for a few thousand rows, few enough partials for the second pass.
const CHUNK: usize = 64;

/// The custom op: x [N, I] (contiguous f32 or bf16), W [O, I] and b [O] (contiguous f32) to
/// y [N, O] in x's dtype, on CUDA or (f32) the CPU.
pub(crate) struct FusedLinearCuda;

/// (N, I, O) from the shapes, each in i32 as cuBLAS and the launch grids take them.
fn dims(x: &Shape, w: &Shape, b: &Shape) -> Result<(usize, usize, usize)> {
    let (n, i) = x.dims2()?;
    let (o, i2) = w.dims2()?;
    if i != i2 || b.dims() != [o] {
        candle_core::bail!("{OP}: x {x:?}, W {w:?}, b {b:?}")
    }
    for m in [n * i, n * o, o * i] {
        if i32::try_from(m).is_err() {
            candle_core::bail!("{OP}: {m} elements beyond i32")
        }
    }
    Ok((n, i, o))
}

/// cuBLAS's data type of element type `T`.
fn blas_type<T: Element>() -> cudaDataType_t {
    match T::DTYPE {
        DType::BF16 => cudaDataType_t::CUDA_R_16BF,
        _ => cudaDataType_t::CUDA_R_32F,
    }
}

/// A row-major product out [rows, cols] (= or, with `beta` 1, +=) A [rows, inner] B [inner,
/// cols]: `a` and `b` are the buffers and whether each holds its factor's transpose; the row
/// strides follow from the shapes (every matrix here is whole and contiguous).
struct Product {
    rows: usize,
    cols: usize,
    inner: usize,
    a_t: bool,
    b_t: bool,
    beta: f32,
}

/// `cublasGemmEx` on the device's handle and stream for `p`, operands of element type `T`, the
/// output of element type `O`, summed in f32 (`CUBLAS_COMPUTE_32F`: no TF32, as candle's f32
/// matmul by default).
fn gemm<T: Element, O: Element>(
    dev: &CudaDevice,
    p: &Product,
    a: &impl DevicePtr<T>,
    b: &impl DevicePtr<T>,
    out: &mut impl DevicePtrMut<O>,
) -> Result<()> {
    let op = |t: bool| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
    // A row-major X [r, c] is a column-major Xᵀ with leading dimension c; a buffer holding Xᵀ
    // row-major [c, r] has leading dimension r.
    let ld = |r: usize, c: usize, t: bool| (if t { r } else { c }) as i32;
    let (alpha, beta) = (1.0f32, p.beta);
    let blas = dev.cublas_handle();
    let stream = dev.cuda_stream();
    let (a, _a) = a.device_ptr(&stream);
    let (b, _b) = b.device_ptr(&stream);
    let (c, _c) = out.device_ptr_mut(&stream);
    // SAFETY: `dims` bounded every size by i32; each buffer holds exactly its matrix (the
    // callers allocate and view them whole), the output is distinct from both operands, and α
    // and β live on the host through the call.
    unsafe {
        gemm_ex(
            *blas.handle(),
            op(p.b_t),
            op(p.a_t),
            p.cols as i32,
            p.rows as i32,
            p.inner as i32,
            (&alpha) as *const f32 as *const _,
            b as *const _,
            blas_type::<T>(),
            ld(p.inner, p.cols, p.b_t),
            a as *const _,
            blas_type::<T>(),
            ld(p.rows, p.inner, p.a_t),
            (&beta) as *const f32 as *const _,
            c as *mut _,
            blas_type::<O>(),
            p.cols as i32,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .w()
}

/// y [N, O] = b broadcast, then += x Wᵀ, with x and W of element type `T`.
fn forward<T: Element>(
    dev: &CudaDevice,
    x: &CudaView<T>,
    w: &CudaView<T>,
    b: &CudaView<f32>,
    (n, i, o): (usize, usize, usize),
) -> Result<CudaSlice<T>> {
    // SAFETY: the bias kernel writes all n·o entries before the GEMM reads them (β = 1).
    let mut y = unsafe { written_whole::<T>(dev, n * o)? };
    if n * o == 0 {
        return Ok(y);
    }
    let (rows, cols) = (n as i64, o as i64);
    let f = dev.get_or_load_custom_func(&kernel_name::<T>("linear_bias_rows"), MODULE, PTX)?;
    let mut launch = f.builder();
    launch.arg(b).arg(&mut y).arg(&rows).arg(&cols);
    // SAFETY: the arguments match linear_bias_rows(_bf16) in linear.cu: b [o], y [n, o].
    unsafe { launch.launch(grid(n * o)) }.w()?;
    if i == 0 {
        // No product to add (and no valid leading dimension for cuBLAS): y is the bias.
        return Ok(y);
    }
    let p = Product {
        rows: n,
        cols: o,
        inner: i,
        a_t: false,
        b_t: true,
        beta: 1.0,
    };
    gemm::<T, T>(dev, &p, x, w, &mut y)?;
    Ok(y)
}

/// The column sums [cols] in f32 of dy [rows, cols] (element type `T`): partial sums over
/// chunks of [`CHUNK`] rows, then the partials summed in one chunk; rows and cols > 0 (the
/// backward pass returns zeros for an empty product before it gets here).
fn column_sums<T: Element>(
    dev: &CudaDevice,
    dy: &CudaView<T>,
    rows: usize,
    cols: usize,
) -> Result<CudaSlice<f32>> {
    let parts = rows.div_ceil(CHUNK);
    // SAFETY: each pass writes every (part, column) entry of its output: parts·cols, then cols.
    let (mut partial, mut db) = unsafe {
        (
            written_whole::<f32>(dev, parts * cols)?,
            written_whole::<f32>(dev, cols)?,
        )
    };
    let (ri, ci, chunk) = (rows as i64, cols as i64, CHUNK as i64);
    let first =
        dev.get_or_load_custom_func(&kernel_name::<T>("linear_column_sums"), MODULE, PTX)?;
    let mut launch = first.builder();
    launch
        .arg(dy)
        .arg(&mut partial)
        .arg(&ri)
        .arg(&ci)
        .arg(&chunk);
    // SAFETY: the arguments match linear_column_sums(_bf16) in linear.cu: dy [rows, cols],
    // partial [parts, cols].
    unsafe { launch.launch(grid(parts * cols)) }.w()?;
    let pi = parts as i64;
    let second = dev.get_or_load_custom_func("linear_column_sums", MODULE, PTX)?;
    let mut launch = second.builder();
    launch.arg(&partial).arg(&mut db).arg(&pi).arg(&ci).arg(&pi);
    // SAFETY: as above, partial [parts, cols] summed in one chunk into db [cols].
    unsafe { launch.launch(grid(cols)) }.w()?;
    Ok(db)
}

/// (dx in `T`, dW and db in f32) for CUDA tensors x [n, i], W [o, i] and dy [n, o].
fn backward<T: Element>(
    x: &Tensor,
    w: &Tensor,
    dy: &Tensor,
    (n, i, o): (usize, usize, usize),
) -> Result<(Tensor, Tensor, Tensor)> {
    if n * i * o == 0 {
        // An empty matrix somewhere: dx and dW are sums of nothing (or empty), db still the
        // column sums of dy (candle's, over possibly no rows).
        let dev = x.device();
        return Ok((
            Tensor::zeros((n, i), T::DTYPE, dev)?,
            Tensor::zeros((o, i), DType::F32, dev)?,
            dy.to_dtype(DType::F32)?.sum(0)?,
        ));
    }
    let dy = dy.to_dtype(T::DTYPE)?.contiguous()?;
    let w = w.to_dtype(T::DTYPE)?.contiguous()?;
    let x = x.contiguous()?;
    with_cuda::<T, _>(&[&x, &w, &dy], OP, |dev, v| {
        let (x, w, dy) = (&v[0], &v[1], &v[2]);
        // SAFETY: each GEMM (β = 0) writes its output whole (no size is 0 here).
        let (mut dx, mut dw) = unsafe {
            (
                written_whole::<T>(dev, n * i)?,
                written_whole::<f32>(dev, o * i)?,
            )
        };
        let p = Product {
            rows: n,
            cols: i,
            inner: o,
            a_t: false,
            b_t: false,
            beta: 0.0,
        };
        gemm::<T, T>(dev, &p, dy, w, &mut dx)?;
        let p = Product {
            rows: o,
            cols: i,
            inner: n,
            a_t: true,
            b_t: false,
            beta: 0.0,
        };
        gemm::<T, f32>(dev, &p, dy, x, &mut dw)?;
        let db = column_sums(dev, dy, n, o)?;
        Ok((
            tensor(dx, dev, Shape::from((n, i))),
            tensor(dw, dev, Shape::from((o, i))),
            tensor(db, dev, Shape::from(o)),
        ))
    })
}

impl CustomOp3 for FusedLinearCuda {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        FusedLinear.cpu_fwd(s1, l1, s2, l2, s3, l3)
    }

    fn cuda_fwd(
        &self,
        s1: &CudaStorage,
        l1: &Layout,
        s2: &CudaStorage,
        l2: &Layout,
        s3: &CudaStorage,
        l3: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let sizes = dims(l1.shape(), l2.shape(), l3.shape())?;
        let dev = &s1.device;
        let b = f32_view(s3, l3, OP)?;
        let y = by_element!(s1.dtype(), T => {
            let x = view::<T>(s1, l1, OP)?;
            // The f32 master in the compute dtype: as is for f32, one cast for bf16.
            let cast;
            let w = if T::DTYPE == DType::F32 {
                view::<T>(s2, l2, OP)?
            } else {
                cast = s2.to_dtype(l2, T::DTYPE)?;
                view::<T>(&cast, &Layout::contiguous(l2.shape()), OP)?
            };
            let y = forward::<T>(dev, &x, &w, &b, sizes)?;
            CudaStorage::wrap_cuda_slice(y, dev.clone())
        });
        Ok((y, Shape::from((sizes.0, sizes.2))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        if !x.device().is_cuda() {
            return FusedLinear.bwd(x, w, b, res, grad_res);
        }
        let sizes = dims(x.shape(), w.shape(), b.shape())?;
        let (dx, dw, db) = by_element!(x.dtype(), T => backward::<T>(x, w, grad_res, sizes)?);
        Ok((Some(dx), Some(dw), Some(db)))
    }
}
