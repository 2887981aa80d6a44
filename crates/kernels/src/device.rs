//! Opening a CUDA device the way a training loop needs it: candle's device, with the driver's
//! memory pool told to keep what it has mapped.
//!
//! candle allocates every tensor through cudarc's stream-ordered `cuMemAllocAsync`, from the
//! device's current memory pool. That pool's release threshold is 0 by default: at every
//! synchronisation (each training step reads its loss and gradient norm back) the driver returns
//! all freed memory to the OS, and the next step maps its activations afresh. PyTorch's caching
//! allocator never does that. [`cuda`] raises the threshold to `u64::MAX` once the device is
//! open, so freed memory stays in the pool for the next step (other processes on the same GPU
//! then see it as used, as they do PyTorch's cache). [`CudaOptions::keep_pool`] false leaves the
//! driver's default, to measure the difference (the examples: `LMSPLIT_CUDA_POOL=release`,
//! [`POOL_ENV`]).
//!
//! cudarc also creates two CUDA events with every buffer (and destroys them with it) for its
//! multi-stream synchronisation. candle's device computes on one stream, the per-thread one,
//! where cudarc never waits on those events: four driver calls per tensor for nothing. [`cuda`]
//! turns that tracking off while the context has no stream of its own (cudarc's "multi-stream
//! mode"), before any buffer exists; [`CudaOptions::track_events`] keeps it (the examples:
//! `LMSPLIT_CUDA_EVENTS=on`, [`EVENTS_ENV`]). The library reads no environment variable: the
//! caller builds the options.

use candle_core::{Device, Result};

/// The environment variable the examples read into [`CudaOptions::keep_pool`]: `release`
/// leaves the driver's default (release at every synchronisation); anything else, or unset,
/// keeps freed memory.
pub const POOL_ENV: &str = "LMSPLIT_CUDA_POOL";

/// The environment variable the examples read into [`CudaOptions::track_events`]: `on` keeps
/// cudarc's per-buffer event tracking (its default); anything else, or unset, turns it off on a
/// one-stream device.
pub const EVENTS_ENV: &str = "LMSPLIT_CUDA_EVENTS";

/// How a CUDA device is opened for training.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaOptions {
    /// Keep freed memory in the driver's pool across synchronisations (default true).
    pub keep_pool: bool,
    /// Keep cudarc's per-buffer synchronisation events (default false on a one-stream device).
    pub track_events: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        Self {
            keep_pool: true,
            track_events: false,
        }
    }
}

impl CudaOptions {
    /// The options the values of [`POOL_ENV`] and [`EVENTS_ENV`] name (`None`: unset).
    pub fn from_env_values(pool: Option<&str>, events: Option<&str>) -> Self {
        Self {
            keep_pool: pool != Some("release"),
            track_events: events == Some("on"),
        }
    }
}

/// CUDA device `ordinal` opened with the default [`CudaOptions`] ([`cuda_with`]).
pub fn cuda(ordinal: usize) -> Result<Device> {
    cuda_with(ordinal, CudaOptions::default())
}

/// CUDA device `ordinal` with its memory pool kept ([`keep_pool_memory`]) and, on its one
/// stream, cudarc's event tracking off, as `opts` say; an error in a build without the `cuda`
/// feature or on a machine without that GPU (candle's own).
pub fn cuda_with(ordinal: usize, opts: CudaOptions) -> Result<Device> {
    let device = Device::new_cuda(ordinal)?;
    if !opts.track_events {
        driver::untrack_events(&device);
    }
    if opts.keep_pool {
        keep_pool_memory(&device)?;
    }
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
    cuda_if_available_with(ordinal, CudaOptions::default())
}

/// [`cuda_if_available`] with `opts` ([`cuda_with`]).
pub fn cuda_if_available_with(ordinal: usize, opts: CudaOptions) -> Result<Device> {
    if candle_core::utils::cuda_is_available() {
        cuda_with(ordinal, opts)
    } else {
        Ok(Device::Cpu)
    }
}

/// Raises the release threshold of `device`'s current memory pool to `u64::MAX`; the CPU, and
/// drivers without stream-ordered allocation (where cudarc falls back to `cuMemAlloc`), are left
/// as they are. Returns the threshold the pool has afterwards (`None` where there is no pool).
pub fn keep_pool_memory(device: &Device) -> Result<Option<u64>> {
    set_release_threshold(device, u64::MAX)?;
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
    fn only_release_leaves_the_driver_default_and_only_on_keeps_events() {
        let keeps = |v| CudaOptions::from_env_values(v, None).keep_pool;
        assert!(keeps(None) && keeps(Some("keep")) && keeps(Some("")));
        assert!(!keeps(Some("release")));
        let tracks = |v| CudaOptions::from_env_values(None, v).track_events;
        assert!(tracks(Some("on")));
        assert!(!tracks(None) && !tracks(Some("off")));
        assert_eq!(
            CudaOptions::from_env_values(None, None),
            CudaOptions::default()
        );
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
