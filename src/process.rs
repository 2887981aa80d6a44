//! Process CPU time, for timings that report CPU seconds beside wall time.

/// User + system CPU seconds of this process (all threads) so far, or `None` where the
/// platform gives none. Beside wall time it shows what a run cost when other work shares
/// the cores.
pub fn cpu_seconds() -> Option<f64> {
    imp::cpu()
}

#[cfg(unix)]
mod imp {
    pub(super) fn cpu() -> Option<f64> {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes a complete rusage into the buffer it is given and
        // reports failure through its return value, checked before the read.
        let usage = unsafe {
            if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
                return None;
            }
            usage.assume_init()
        };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        Some(secs(usage.ru_utime) + secs(usage.ru_stime))
    }
}

#[cfg(not(unix))]
mod imp {
    pub(super) fn cpu() -> Option<f64> {
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_time_grows_with_work() {
        let before = super::cpu_seconds().expect("getrusage on unix");
        let mut x = 0u64;
        let t0 = std::time::Instant::now();
        while t0.elapsed().as_millis() < 200 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = super::cpu_seconds().expect("getrusage on unix");
        assert!(after > before, "{before} -> {after}");
    }
}
