//! Opening a CUDA device the way a training loop needs it: candle's device, with the driver's
//! memory pool told to keep what it has mapped.
//!
//! candle allocates every tensor through cudarc's stream-ordered `cuMemAllocAsync`, from the
//! device's current memory pool. That pool's release threshold is 0 by default: at every
//! synchronisation (each training step reads its loss and gradient norm back) the driver returns
//! all freed memory to the OS, and the next step maps its activations afresh. PyTorch's caching
//! allocator never does that. [`cuda`] raises the threshold to `u64::MAX` once the device is
//! open, so freed memory stays in the pool for the next step (other processes on the same GPU
//! then see it as used, as they do PyTorch's cache). `LMSPLIT_CUDA_POOL=release` ([`POOL_ENV`])
//! leaves the driver's default, to measure the difference.
//!
//! cudarc also creates two CUDA events with every buffer (and destroys them with it) for its
//! multi-stream synchronisation. candle's device computes on one stream, the per-thread one,
//! where cudarc never waits on those events: four driver calls per tensor for nothing. [`cuda`]
//! turns that tracking off while the context has no stream of its own (cudarc's "multi-stream
//! mode"), before any buffer exists; `LMSPLIT_CUDA_EVENTS=on` ([`EVENTS_ENV`]) keeps it.

use candle_core::{Device, Result};

/// The environment variable of the pool policy: `release` leaves the driver's default
/// (release at every synchronisation); anything else, or unset, keeps freed memory.
pub const POOL_ENV: &str = "LMSPLIT_CUDA_POOL";

/// The environment variable of cudarc's per-buffer event tracking: `on` keeps it (cudarc's
/// default); anything else, or unset, turns it off on a one-stream device.
pub const EVENTS_ENV: &str = "LMSPLIT_CUDA_EVENTS";

/// Whether the pool keeps freed memory, from the variable's value.
fn keeps(value: Option<&str>) -> bool {
    value != Some("release")
}

/// Whether this process keeps freed CUDA memory in the pool ([`POOL_ENV`]).
pub fn pool_keeps_memory() -> bool {
    keeps(std::env::var(POOL_ENV).ok().as_deref())
}

/// Whether cudarc's event tracking stays on, from the variable's value.
fn tracks(value: Option<&str>) -> bool {
    value == Some("on")
}

/// Whether this process keeps cudarc's per-buffer event tracking ([`EVENTS_ENV`]).
pub fn keeps_event_tracking() -> bool {
    tracks(std::env::var(EVENTS_ENV).ok().as_deref())
}

/// CUDA device `ordinal` with its memory pool set by [`keep_pool_memory`] and, on its one
/// stream, cudarc's event tracking off (unless [`EVENTS_ENV`] says `on`); an error in a build
/// without the `cuda` feature or on a machine without that GPU (candle's own).
pub fn cuda(ordinal: usize) -> Result<Device> {
    let device = Device::new_cuda(ordinal)?;
    if !keeps_event_tracking() {
        driver::untrack_events(&device);
    }
    keep_pool_memory(&device)?;
    Ok(device)
}

/// Whether buffers made on `device` from now on carry cudarc's synchronisation events (`None`
/// where there are none: the CPU, a build without `cuda`).
pub fn event_tracking(device: &Device) -> Option<bool> {
    driver::event_tracking(device)
}

/// The first CUDA device through [`cuda`] when this build has CUDA and a GPU is present, else
/// the CPU (candle's `Device::cuda_if_available`).
pub fn cuda_if_available(ordinal: usize) -> Result<Device> {
    if candle_core::utils::cuda_is_available() {
        cuda(ordinal)
    } else {
        Ok(Device::Cpu)
    }
}

/// Raises the release threshold of `device`'s current memory pool to `u64::MAX` unless
/// [`POOL_ENV`] says `release`; the CPU, and drivers without stream-ordered allocation (where
/// cudarc falls back to `cuMemAlloc`), are left as they are. Returns the threshold the pool has
/// afterwards (`None` where there is no pool).
pub fn keep_pool_memory(device: &Device) -> Result<Option<u64>> {
    if pool_keeps_memory() {
        set_release_threshold(device, u64::MAX)?;
    }
    pool_release_threshold(device)
}

/// The driver calls behind the public functions (nothing without the `cuda` feature).
#[cfg(feature = "cuda")]
mod driver {
    use candle_core::cuda_backend::cudarc::driver::{result, sys};
    use candle_core::{Device, Result};

    /// The current pool of `device` (the one `cuMemAllocAsync` draws from), or `None`.
    fn current_pool(device: &Device) -> Result<Option<sys::CUmemoryPool>> {
        let Device::Cuda(cuda) = device else {
            return Ok(None);
        };
        let stream = cuda.cuda_stream();
        let ctx = stream.context();
        if !ctx.has_async_alloc() {
            return Ok(None);
        }
        // SAFETY: the device ordinal comes from a context cudarc opened.
        let pool = unsafe { result::device::get_mem_pool(ctx.cu_device()) }
            .map_err(candle_core::Error::wrap)?;
        Ok(Some(pool))
    }

    const THRESHOLD: sys::CUmemPool_attribute =
        sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;

    pub(super) fn set_release_threshold(device: &Device, bytes: u64) -> Result<()> {
        if let Some(pool) = current_pool(device)? {
            let mut value = bytes;
            // SAFETY: a valid pool; the attribute's value is a cuuint64_t.
            unsafe {
                result::mem_pool::set_attribute(pool, THRESHOLD, (&mut value as *mut u64).cast())
            }
            .map_err(candle_core::Error::wrap)?;
        }
        Ok(())
    }

    pub(super) fn untrack_events(device: &Device) {
        if let Device::Cuda(cuda) = device {
            let stream = cuda.cuda_stream();
            if !stream.context().is_in_multi_stream_mode() {
                // SAFETY: cudarc uses the events only to order work across streams of the
                // context; it has none of its own (candle computes on the per-thread stream),
                // and the device was opened just now, so no buffer carries events yet.
                unsafe { cuda.disable_event_tracking() }
            }
        }
    }

    pub(super) fn event_tracking(device: &Device) -> Option<bool> {
        match device {
            Device::Cuda(cuda) => Some(cuda.is_event_tracking()),
            _ => None,
        }
    }

    pub(super) fn pool_release_threshold(device: &Device) -> Result<Option<u64>> {
        let Some(pool) = current_pool(device)? else {
            return Ok(None);
        };
        let mut value = 0u64;
        // SAFETY: a valid pool; the attribute's value is a cuuint64_t.
        unsafe {
            result::mem_pool::get_attribute(pool, THRESHOLD, (&mut value as *mut u64).cast())
        }
        .map_err(candle_core::Error::wrap)?;
        Ok(Some(value))
    }
}

#[cfg(not(feature = "cuda"))]
mod driver {
    use candle_core::{Device, Result};

    pub(super) fn set_release_threshold(_: &Device, _: u64) -> Result<()> {
        Ok(())
    }

    pub(super) fn pool_release_threshold(_: &Device) -> Result<Option<u64>> {
        Ok(None)
    }

    pub(super) fn untrack_events(_: &Device) {}

    pub(super) fn event_tracking(_: &Device) -> Option<bool> {
        None
    }
}

/// Sets the release threshold (bytes kept mapped at a synchronisation) of `device`'s current
/// memory pool; nothing where there is no pool.
pub fn set_release_threshold(device: &Device, bytes: u64) -> Result<()> {
    driver::set_release_threshold(device, bytes)
}

/// The release threshold of `device`'s current memory pool, or `None` (the CPU, a build
/// without `cuda`, a driver without stream-ordered allocation).
pub fn pool_release_threshold(device: &Device) -> Result<Option<u64>> {
    driver::pool_release_threshold(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_release_leaves_the_driver_default() {
        assert!(keeps(None));
        assert!(keeps(Some("keep")));
        assert!(keeps(Some("")));
        assert!(!keeps(Some("release")));
    }

    #[test]
    fn only_on_keeps_event_tracking() {
        assert!(tracks(Some("on")));
        assert!(!tracks(None));
        assert!(!tracks(Some("off")));
        assert_eq!(event_tracking(&Device::Cpu), None);
    }

    #[test]
    fn the_cpu_has_no_pool_and_is_left_alone() {
        assert_eq!(keep_pool_memory(&Device::Cpu).unwrap(), None);
        assert_eq!(pool_release_threshold(&Device::Cpu).unwrap(), None);
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn without_cuda_cuda_if_available_is_the_cpu_and_cuda_an_error() {
        assert!(cuda_if_available(0).unwrap().is_cpu());
        assert!(cuda(0).is_err());
    }
}
