//! What the CUDA sides of the custom ops share: the PTX that `build.rs` compiled, contiguous
//! views of CUDA storages and tensors (f32, and bf16 where a kernel reads it), uninitialised
//! buffers for kernels that write them whole, launch grids, and new CUDA tensors from device
//! buffers.

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DeviceRepr, LaunchConfig};
use candle_core::cuda_backend::CudaDType;
use candle_core::op::BackpropOp;
use candle_core::{
    CudaDevice, CudaStorage, DType, Layout, Result, Shape, Storage, Tensor, WithDType,
};

/// The PTX of one of our `.cu` files, from `build.rs` (`OUT_DIR/<name>.ptx`).
macro_rules! ptx {
    ($name:literal) => {
        include_str!(concat!(env!("OUT_DIR"), "/", $name, ".ptx"))
    };
}
pub(crate) use ptx;

/// The element types our kernels read and write: f32, and bf16 (as the kernels' `unsigned
/// short`, `bf16.cuh`).
pub(crate) trait Element: CudaDType + WithDType + DeviceRepr {}
impl<T: CudaDType + WithDType + DeviceRepr> Element for T {}

/// Evaluates `$body` with the type `$T` bound to the element type of `$dtype` (a
/// [`candle_core::DType`]): bf16 for BF16, f32 otherwise (where a view of another dtype then
/// fails with candle's typed error).
macro_rules! by_element {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            candle_core::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            _ => {
                type $T = f32;
                $body
            }
        }
    };
}
pub(crate) use by_element;

/// The name of kernel `name`'s variant for `T`: `name` for f32, `name_bf16` for bf16.
pub(crate) fn kernel_name<T: Element>(name: &str) -> String {
    match T::DTYPE {
        DType::BF16 => format!("{name}_bf16"),
        _ => name.to_string(),
    }
}

/// The CUDA storage of a tensor's storage, or an error naming the op `op`.
fn cuda_storage<'a>(storage: &'a Storage, op: &str) -> Result<&'a CudaStorage> {
    match storage {
        Storage::Cuda(s) => Ok(s),
        _ => candle_core::bail!("{op}: a tensor off CUDA where CUDA was expected"),
    }
}

/// The data of a contiguous CUDA storage of element type `T`, as a view from its layout's
/// offset (an error when the storage holds another dtype).
pub(crate) fn view<'a, T: CudaDType>(
    s: &'a CudaStorage,
    l: &Layout,
    op: &str,
) -> Result<CudaView<'a, T>> {
    let Some((a, b)) = l.contiguous_offsets() else {
        candle_core::bail!("{op} expects contiguous inputs")
    };
    Ok(s.as_cuda_slice::<T>()?.slice(a..b))
}

/// The f32 data of a contiguous CUDA storage ([`view`]).
pub(crate) fn f32_view<'a>(s: &'a CudaStorage, l: &Layout, op: &str) -> Result<CudaView<'a, f32>> {
    view(s, l, op)
}

/// Runs `f` on the device and the contiguous data (element type `T`) of CUDA tensors, their
/// read guards held for the call: the CUDA counterpart of `kernels::host::with_host_f32` for
/// the backward passes, or an error naming the op `op` when a tensor is off CUDA, of another
/// dtype or strided.
pub(crate) fn with_cuda<T: CudaDType, R>(
    ts: &[&Tensor],
    op: &str,
    f: impl FnOnce(&CudaDevice, &[CudaView<'_, T>]) -> Result<R>,
) -> Result<R> {
    let guards: Vec<_> = ts.iter().map(|t| t.storage_and_layout()).collect();
    let views = guards
        .iter()
        .map(|(s, l)| view(cuda_storage(s, op)?, l, op))
        .collect::<Result<Vec<_>>>()?;
    let Some((first, _)) = guards.first() else {
        candle_core::bail!("{op}: no tensors")
    };
    f(&cuda_storage(first, op)?.device, &views)
}

/// [`with_cuda`] over f32 tensors.
pub(crate) fn with_cuda_f32<R>(
    ts: &[&Tensor],
    op: &str,
    f: impl FnOnce(&CudaDevice, &[CudaView<'_, f32>]) -> Result<R>,
) -> Result<R> {
    with_cuda(ts, op, f)
}

/// A buffer of `n` elements (f32 unless a caller names another type) without the memset
/// `alloc_zeros` launches: on a launch-bound step each one counts.
///
/// # Safety
/// The caller's kernel (or GEMM) writes all `n` entries before anything reads them.
pub(crate) unsafe fn written_whole<T: DeviceRepr>(
    dev: &CudaDevice,
    n: usize,
) -> Result<CudaSlice<T>> {
    // SAFETY: passed on to the caller.
    unsafe { dev.alloc::<T>(n) }
}

/// Threads per block of the elementwise kernels. cudarc's `for_num_elems` takes 1,024, which
/// puts an LSTM step's 16 × 2,048 units on 32 of an H100's 132 SMs; 256 spreads them over 128.
const BLOCK: u32 = 256;

/// Lanes of a warp: the row kernels (LayerNorm, softmax) give each row one warp (`warp.cuh`).
const WARP: u32 = 32;

/// Rows (warps) per block of the row kernels: 8, blocks of 256 threads.
const ROWS_PER_BLOCK: u32 = 8;

/// The launch of `n` threads, one per element (callers bound `n` below 2³¹).
pub(crate) fn grid(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(BLOCK), 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The launch of one warp per row, `rows` rows (callers bound `rows` below 2³¹), in whole
/// warps: the kernels let a warp past the last row leave as one.
pub(crate) fn row_grid(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((rows as u32).div_ceil(ROWS_PER_BLOCK), 1, 1),
        block_dim: (ROWS_PER_BLOCK * WARP, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A new tensor (no gradient history) of `shape` over a device buffer.
pub(crate) fn tensor<T: CudaDType>(slice: CudaSlice<T>, dev: &CudaDevice, shape: Shape) -> Tensor {
    let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(slice, dev.clone()));
    Tensor::from_storage(storage, shape, BackpropOp::none(), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every thread index below n is launched, in as few blocks as hold them; every row gets
    /// a warp, in whole warps.
    #[test]
    fn the_grids_cover_every_thread_and_row_in_whole_blocks() {
        for n in [1, 256, 257, 16 * 2048] {
            let cfg = grid(n);
            let threads = (cfg.grid_dim.0 * cfg.block_dim.0) as usize;
            assert!(
                threads >= n && threads - n < BLOCK as usize,
                "{n} in {cfg:?}"
            );
        }
        assert_eq!(grid(16 * 2048).grid_dim.0, 128);
        for rows in [1, 8, 9, 8192] {
            let cfg = row_grid(rows);
            assert_eq!(cfg.block_dim.0 % WARP, 0);
            let warps = (cfg.grid_dim.0 * cfg.block_dim.0 / WARP) as usize;
            assert!(
                warps >= rows && warps - rows < ROWS_PER_BLOCK as usize,
                "{rows} in {cfg:?}"
            );
        }
        assert_eq!(row_grid(8192).grid_dim.0, 1024);
    }

    /// The PTX that `build.rs` compiled for each `.cu` holds every kernel the ops load from it
    /// by name.
    #[test]
    fn each_ptx_holds_every_kernel_its_op_loads() {
        let files: [(&str, &str, &[&str]); 7] = [
            (
                "fused_lstm_seq",
                ptx!("fused_lstm_seq"),
                &[
                    "lstm_seq_step_forward",
                    "lstm_seq_step_backward",
                    "lstm_seq_shift_steps",
                    "lstm_chains_step_forward_bf16",
                    "lstm_chains_step_backward_bf16",
                    "lstm_chains_shift_steps_bf16",
                ],
            ),
            ("adamw", ptx!("adamw"), &["adamw_step"]),
            (
                "layer_norm",
                ptx!("layer_norm"),
                &[
                    "layer_norm_rows",
                    "layer_norm_backward_rows",
                    "layer_norm_rows_bf16",
                    "layer_norm_backward_rows_bf16",
                ],
            ),
            (
                "softmax",
                ptx!("softmax"),
                &["softmax_rows", "softmax_rows_bf16"],
            ),
            (
                "softmax_nll",
                ptx!("softmax_nll"),
                &[
                    "softmax_nll_rows",
                    "softmax_nll_grad",
                    "softmax_nll_rows_bf16",
                    "softmax_nll_grad_bf16",
                ],
            ),
            (
                "gelu",
                ptx!("gelu"),
                &[
                    "gelu_erf_forward",
                    "gelu_erf_backward",
                    "gelu_erf_forward_bf16",
                    "gelu_erf_backward_bf16",
                ],
            ),
            (
                "linear",
                ptx!("linear"),
                &[
                    "linear_bias_rows",
                    "linear_bias_rows_bf16",
                    "linear_column_sums",
                    "linear_column_sums_bf16",
                ],
            ),
        ];
        for (file, ptx, kernels) in files {
            for k in kernels {
                assert!(
                    ptx.contains(&format!(".entry {k}(")),
                    "{k} missing from {file}.ptx"
                );
            }
        }
    }
}
