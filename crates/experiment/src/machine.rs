//! Where a run was trained, in one line for its record and the runs table: throughputs and wall
//! times only mean something beside the machine that measured them.

use candle_core::Device;

/// The device and this machine's processor, e.g. `cuda:0 NVIDIA H100 80GB HBM3 (host AMD EPYC
/// 9654, 16 threads)` or `cpu AMD EPYC 7B13 (2 threads)`.
pub fn describe(dev: &Device) -> String {
    let host = format!(
        "{} ({} threads)",
        cpu_model(),
        candle_core::utils::get_num_threads()
    );
    match dev {
        Device::Cpu => format!("cpu {host}"),
        Device::Cuda(_) => format!("{} (host {host})", gpu_name(dev)),
        Device::Metal(_) => format!("metal (host {host})"),
    }
}

/// The processor's model name from `/proc/cpuinfo`, else the architecture.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// `cuda:<ordinal> <name>` as the driver reports it (H100 and H200 differ in memory and speed).
#[cfg(feature = "cuda")]
fn gpu_name(dev: &Device) -> String {
    let ordinal = match dev.location() {
        candle_core::DeviceLocation::Cuda { gpu_id } => gpu_id,
        _ => 0,
    };
    let name = match dev {
        Device::Cuda(d) => d.cuda_stream().context().name().ok(),
        _ => None,
    };
    format!(
        "cuda:{ordinal} {}",
        name.unwrap_or_else(|| "(name unknown)".into())
    )
}

/// Without the `cuda` feature no CUDA device can exist; the location is all there is.
#[cfg(not(feature = "cuda"))]
fn gpu_name(dev: &Device) -> String {
    format!("{:?}", dev.location())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_is_named_with_its_threads() {
        let d = describe(&Device::Cpu);
        assert!(d.starts_with("cpu "), "{d}");
        let threads = candle_core::utils::get_num_threads();
        assert!(d.ends_with(&format!("({threads} threads)")), "{d}");
        // A model name or the architecture, never nothing.
        assert!(d.len() > "cpu  (1 threads)".len(), "{d}");
    }
}
