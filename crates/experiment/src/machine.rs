//! Where a run was trained, in one line for its record and the runs table: throughputs and wall
//! times only mean something beside the machine that measured them.

use std::path::Path;

use candle_core::Device;
use serde::{Deserialize, Serialize};

use crate::error::{read_json, write_json_atomic};
use crate::Result;

/// The file in a run's `phase1` folder that lists who trained which stretch of phase 1.
pub const PHASE1_MACHINES_FILE: &str = "machines.json";

/// One call's share of phase 1: the machine that resumed (or started) it at `from_step`. A
/// stretch ends where the next one starts, or at phase 1's last update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stretch {
    /// [`describe`] of the machine.
    pub machine: String,
    /// The update phase 1 stood at when this machine took it up.
    pub from_step: u64,
}

/// How many of phase 1's updates one machine ran (e.g. the updates on an H100 of a run whose
/// heads were trained on a CPU).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineShare {
    /// [`describe`] of the machine; `None` for updates run before machines were noted.
    pub machine: Option<String>,
    /// Updates it ran.
    pub updates: u64,
}

/// Notes in `phase1_dir` that `machine` takes phase 1 up at `from_step` (written atomically
/// before it trains, so a call killed later still counts the updates its checkpoints kept).
/// Stretches noted at or after `from_step` are dropped (they ran no update that a checkpoint
/// kept, or phase 1 went back, e.g. its checkpoint was removed); the same machine going on
/// from its own stretch then adds nothing.
pub fn note_stretch(phase1_dir: &Path, machine: &str, from_step: u64) -> Result<()> {
    let noted = read_stretches(phase1_dir)?;
    let mut stretches = noted.clone();
    stretches.retain(|s| s.from_step < from_step);
    if stretches.last().is_none_or(|s| s.machine != machine) {
        stretches.push(Stretch {
            machine: machine.to_string(),
            from_step,
        });
    }
    match stretches == noted {
        true => Ok(()),
        false => write_json_atomic(&phase1_dir.join(PHASE1_MACHINES_FILE), &stretches),
    }
}

/// The stretches noted in `phase1_dir` (none for phase 1s trained before they were noted).
pub fn read_stretches(phase1_dir: &Path) -> Result<Vec<Stretch>> {
    let path = phase1_dir.join(PHASE1_MACHINES_FILE);
    match path.is_file() {
        true => read_json(&path),
        false => Ok(Vec::new()),
    }
}

/// Updates per machine for a phase 1 that ended at `last_step`, in the order the machines
/// first took it up: the updates before the first stretch belong to no noted machine, a
/// stretch that ran no update (it resumed a finished phase 1, or was killed before its
/// first checkpoint) is left out, and a machine's stretches are summed.
pub fn shares(stretches: &[Stretch], last_step: u64) -> Vec<MachineShare> {
    let mut out: Vec<MachineShare> = Vec::new();
    let mut add = |machine: Option<&str>, updates: u64| {
        if updates == 0 {
            return;
        }
        match out.iter_mut().find(|s| s.machine.as_deref() == machine) {
            Some(s) => s.updates += updates,
            None => out.push(MachineShare {
                machine: machine.map(String::from),
                updates,
            }),
        }
    };
    let first = stretches.first().map_or(last_step, |s| s.from_step);
    add(None, first.min(last_step));
    for (i, s) in stretches.iter().enumerate() {
        let end = stretches.get(i + 1).map_or(last_step, |n| n.from_step);
        add(
            Some(&s.machine),
            end.min(last_step).saturating_sub(s.from_step),
        );
    }
    out
}

/// One line for a table: the machine alone when one ran every update, else each machine with
/// its updates (`not recorded` for updates no machine was noted for).
pub fn describe_shares(shares: &[MachineShare]) -> String {
    let name = |s: &MachineShare| s.machine.clone().unwrap_or_else(|| "not recorded".into());
    match shares {
        [] => "not recorded".into(),
        [one] => name(one),
        many => {
            let total: u64 = many.iter().map(|s| s.updates).sum();
            many.iter()
                .map(|s| format!("{} ({} of {total} updates)", name(s), s.updates))
                .collect::<Vec<_>>()
                .join("; ")
        }
    }
}

/// The device and this machine's processor, e.g. `cuda:0 NVIDIA H100 80GB HBM3 (host AMD EPYC
/// 9654, 16 threads)`, `cpu AMD EPYC 7B13 (2 threads)` or, where the name has no model number,
/// `cpu AMD EPYC family 23 model 1 (2 threads)`.
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
        .and_then(|info| cpu_model_in(&info))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The first processor's model name in a `/proc/cpuinfo` text. A name without a model number
/// (a hypervisor's `AMD EPYC`) gets the CPU family and model, which tell its generation: the
/// same name has covered build VMs four times apart in speed.
fn cpu_model_in(info: &str) -> Option<String> {
    let field = |key: &str| {
        info.lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|v| !v.is_empty())
    };
    let name = field("model name")?;
    Some(match (field("cpu family"), field("model")) {
        (Some(family), Some(model)) if !name.chars().any(|c| c.is_ascii_digit()) => {
            format!("{name} family {family} model {model}")
        }
        _ => name,
    })
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

    fn stretch(machine: &str, from_step: u64) -> Stretch {
        Stretch {
            machine: machine.into(),
            from_step,
        }
    }

    fn share(machine: Option<&str>, updates: u64) -> MachineShare {
        MachineShare {
            machine: machine.map(String::from),
            updates,
        }
    }

    #[test]
    fn each_machine_gets_the_updates_of_its_stretches() {
        // Phase 1 on a GPU, its finished checkpoint resumed on a CPU: every update is the GPU's.
        let gpu_then_cpu = [stretch("gpu", 0), stretch("cpu", 3907)];
        assert_eq!(shares(&gpu_then_cpu, 3907), [share(Some("gpu"), 3907)]);
        assert_eq!(describe_shares(&shares(&gpu_then_cpu, 3907)), "gpu");
        // Back and forth: a machine's stretches are summed, in the order it first came.
        let mixed = [stretch("a", 0), stretch("b", 100), stretch("a", 250)];
        assert_eq!(
            shares(&mixed, 400),
            [share(Some("a"), 250), share(Some("b"), 150)]
        );
        assert_eq!(
            describe_shares(&shares(&mixed, 400)),
            "a (250 of 400 updates); b (150 of 400 updates)"
        );
        // A phase 1 begun before machines were noted: its first updates belong to nobody.
        let late = [stretch("cpu", 1500)];
        assert_eq!(
            shares(&late, 3907),
            [share(None, 1500), share(Some("cpu"), 2407)]
        );
        assert_eq!(
            describe_shares(&shares(&late, 3907)),
            "not recorded (1500 of 3907 updates); cpu (2407 of 3907 updates)"
        );
        // Nothing noted at all.
        assert_eq!(shares(&[], 3907), [share(None, 3907)]);
        assert_eq!(describe_shares(&shares(&[], 3907)), "not recorded");
        assert_eq!(describe_shares(&[]), "not recorded");
    }

    #[test]
    fn a_stretch_is_noted_once_per_change_of_machine() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_stretches(dir.path()).unwrap().is_empty());
        note_stretch(dir.path(), "gpu", 0).unwrap();
        note_stretch(dir.path(), "gpu", 1200).unwrap();
        note_stretch(dir.path(), "cpu", 3907).unwrap();
        assert_eq!(
            read_stretches(dir.path()).unwrap(),
            [stretch("gpu", 0), stretch("cpu", 3907)]
        );
        // The GPU takes it up again where the CPU came in: the CPU ran nothing that was kept.
        note_stretch(dir.path(), "gpu", 3907).unwrap();
        assert_eq!(read_stretches(dir.path()).unwrap(), [stretch("gpu", 0)]);
        // Phase 1 started over on the CPU (its checkpoint removed): only that is left.
        note_stretch(dir.path(), "cpu", 0).unwrap();
        assert_eq!(read_stretches(dir.path()).unwrap(), [stretch("cpu", 0)]);
        // A damaged file is an error, not an empty history.
        std::fs::write(dir.path().join(PHASE1_MACHINES_FILE), "[{").unwrap();
        assert!(read_stretches(dir.path()).is_err());
    }

    #[test]
    fn a_cpu_name_without_a_model_number_gets_its_family_and_model() {
        let generic = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\n\
                       model\t\t: 1\nmodel name\t: AMD  EPYC\nstepping\t: 2\n";
        assert_eq!(
            cpu_model_in(generic).as_deref(),
            Some("AMD EPYC family 23 model 1")
        );
        let named =
            "cpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n";
        assert_eq!(
            cpu_model_in(named).as_deref(),
            Some("AMD EPYC 7B13 64-Core Processor")
        );
        // No model name: none, and the caller names the architecture.
        assert_eq!(cpu_model_in("cpu family\t: 6\n"), None);
    }

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
