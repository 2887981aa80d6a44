//! Borrowing the f32 data of candle CPU tensors and storages in place (custom ops, the fused
//! optimizer), instead of copying it out with `to_vec1`.

use candle_core::{CpuStorage, Layout, Storage, Tensor};

/// Whether every tensor is f32 on the CPU: the domain of the custom ops built on this crate
/// (other devices and dtypes take candle's composed ops).
pub fn on_host_f32(ts: &[&Tensor]) -> bool {
    ts.iter()
        .all(|t| t.device().is_cpu() && t.dtype() == candle_core::DType::F32)
}

/// The contiguous f32 data of a CPU storage, or an error naming the custom op `op`.
pub fn f32_data<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(data) = s else {
        candle_core::bail!("{op} expects f32 inputs")
    };
    let Some((a, b)) = l.contiguous_offsets() else {
        candle_core::bail!("{op} expects contiguous inputs")
    };
    Ok(&data[a..b])
}

/// Runs `f` on the f32 data of contiguous CPU tensors, borrowed in place (their read guards are
/// held for the call); `None` when any is on another device, of another dtype or strided.
pub fn with_host_f32<R>(ts: &[&Tensor], f: impl FnOnce(&[&[f32]]) -> R) -> Option<R> {
    let guards: Vec<_> = ts.iter().map(|t| t.storage_and_layout()).collect();
    let mut slices = Vec::with_capacity(ts.len());
    for (storage, layout) in &guards {
        let Storage::Cpu(CpuStorage::F32(data)) = &**storage else {
            return None;
        };
        let (a, b) = layout.contiguous_offsets()?;
        slices.push(&data[a..b]);
    }
    Some(f(&slices))
}

/// The error of a backward pass handed tensors [`with_host_f32`] cannot borrow.
pub fn not_host_f32(op: &str) -> candle_core::Error {
    candle_core::Error::Msg(format!("{op}: backward needs contiguous f32 CPU tensors"))
}
