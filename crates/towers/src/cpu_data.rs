//! Borrowing the data of candle CPU storages inside custom ops.

use candle_core::{CpuStorage, Layout};

/// The contiguous f32 data of a CPU storage, or an error naming the custom op `op`.
pub(crate) fn f32_data<'a>(
    s: &'a CpuStorage,
    l: &Layout,
    op: &str,
) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(data) = s else {
        candle_core::bail!("{op} expects f32 inputs")
    };
    let Some((a, b)) = l.contiguous_offsets() else {
        candle_core::bail!("{op} expects contiguous inputs")
    };
    Ok(&data[a..b])
}
