//! Process-wide allocator tuning for CPU runs.
//!
//! candle allocates a fresh buffer for every tensor op. glibc's malloc serves buffers above its
//! mmap threshold (128 KiB, adapting up to 32 MiB) with `mmap` and hands freed heap memory back
//! to the kernel above its trim threshold, so every training step or encoder batch pays again
//! for page faults and for zeroing the same pages (measured here: a third or more of a
//! two-tower training step on 2 cores). [`retain_freed_memory`] raises both thresholds so that
//! freed buffers are reused by the next step; the price is that the process keeps its peak heap.

/// Whether [`retain_freed_memory`] changed the allocator's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocTuning {
    /// Both glibc thresholds were raised.
    Applied,
    /// Not glibc (or glibc refused a setting): nothing changed.
    Unsupported,
}

/// Keeps freed memory in the process for reuse (glibc: `M_MMAP_THRESHOLD` 1 GiB and
/// `M_TRIM_THRESHOLD` unbounded). Call once at the start of a binary, before the big work;
/// it changes process-wide state, which is why a library never does it on its own.
pub fn retain_freed_memory() -> AllocTuning {
    imp::retain()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    use super::AllocTuning;

    pub(super) fn retain() -> AllocTuning {
        // SAFETY: mallopt only adjusts glibc's allocator parameters; it is thread-safe and
        // does not invalidate existing allocations.
        let ok = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1
        };
        if ok {
            AllocTuning::Applied
        } else {
            AllocTuning::Unsupported
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod imp {
    use super::AllocTuning;

    pub(super) fn retain() -> AllocTuning {
        AllocTuning::Unsupported
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_is_applied_on_glibc_and_memory_still_works() {
        let r = retain_freed_memory();
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            assert_eq!(r, AllocTuning::Applied);
        } else {
            assert_eq!(r, AllocTuning::Unsupported);
        }
        // A large buffer (above glibc's default mmap threshold) round-trips after the change.
        let v = vec![3u8; 64 << 20];
        assert_eq!(v.iter().map(|&x| x as u64).sum::<u64>(), 3 * (64 << 20));
    }
}
