//! Borrowing the f32 data of candle CPU tensors and storages in place (custom ops, the fused
//! optimizer), instead of copying it out with `to_vec1`.

use std::sync::Mutex;

use candle_core::{CpuStorage, InplaceOp1, Layout, Storage, Tensor};

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

/// Runs `f` on the f32 data of a contiguous CPU tensor, borrowed mutably in place through
/// candle's in-place op (the storage's write guard is held for the call); `None` when the tensor
/// is on another device, of another dtype or strided. Every tensor sharing the storage sees the
/// writes, as with `Var::set`. Inside `f`, borrowing a tensor of the same storage again would
/// wait on the held guard forever: callers keep the tensors they nest apart.
pub fn with_host_f32_mut<R>(
    t: &Tensor,
    f: impl FnOnce(&mut [f32]) -> R,
) -> candle_core::Result<Option<R>> {
    if !on_host_f32(&[t]) || !t.is_contiguous() {
        return Ok(None);
    }
    let op = InPlace {
        f: Mutex::new(Some(f)),
        out: Mutex::new(None),
    };
    t.inplace_op1(&op)?;
    Ok(op.out.into_inner().unwrap_or_else(|p| p.into_inner()))
}

/// The in-place op of [`with_host_f32_mut`]: calls its closure once on the storage's data.
struct InPlace<F, R> {
    f: Mutex<Option<F>>,
    out: Mutex<Option<R>>,
}

impl<F: FnOnce(&mut [f32]) -> R, R> InplaceOp1 for InPlace<F, R> {
    fn name(&self) -> &'static str {
        "host-f32-in-place"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("host-f32-in-place expects f32 data")
        };
        let Some((a, b)) = layout.contiguous_offsets() else {
            candle_core::bail!("host-f32-in-place expects a contiguous tensor")
        };
        let f = self.f.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(f) = f else {
            candle_core::bail!("host-f32-in-place called twice")
        };
        *self.out.lock().unwrap_or_else(|p| p.into_inner()) = Some(f(&mut data[a..b]));
        Ok(())
    }
}

/// The error of a backward pass handed tensors [`with_host_f32`] cannot borrow.
pub fn not_host_f32(op: &str) -> candle_core::Error {
    candle_core::Error::Msg(format!("{op}: backward needs contiguous f32 CPU tensors"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    #[test]
    fn in_place_writes_reach_the_tensor_and_its_clones_only_in_its_range() {
        let t = Tensor::arange(0f32, 6.0, &Device::Cpu)
            .unwrap()
            .reshape((3, 2))
            .unwrap();
        let clone = t.clone();
        // Rows 1..3: a contiguous view with an offset into the same storage.
        let rows = t.narrow(0, 1, 2).unwrap();
        let len = with_host_f32_mut(&rows, |d| {
            d.iter_mut().for_each(|x| *x *= 10.0);
            d.len()
        })
        .unwrap();
        assert_eq!(len, Some(4));
        let want = [0f32, 1.0, 20.0, 30.0, 40.0, 50.0];
        assert_eq!(clone.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
        // Strided tensors and other dtypes are not borrowed (and not touched).
        assert_eq!(with_host_f32_mut(&t.t().unwrap(), |_| ()).unwrap(), None);
        let f64s = t.to_dtype(DType::F64).unwrap();
        assert_eq!(with_host_f32_mut(&f64s, |_| ()).unwrap(), None);
        assert_eq!(t.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
    }
}
