//! Phase-1 weight snapshots brought from another machine (`scripts/gpu_session.sh snapshot`)
//! join a run only with proof that they lie on its phase 1. A machine that does not hold the
//! run trains phase 1 again up to the snapshot; on the same arithmetic that repeats the run bit
//! for bit, but on another kind of GPU, or with other CUDA kernels (`LMSPLIT_CUDA_KERNELS`), it
//! reaches another model, whose heads would then be read as the run's. The proof is the log of
//! the training that wrote them, packed beside them as `step-<N>.metrics.jsonl`
//! ([`BROUGHT_LOG_SUFFIX`]): it must repeat every line of the run's own phase-1 log up to each
//! snapshot, number for number ([`towers::compare_logs`]).

use std::path::{Path, PathBuf};

use towers::{compare_logs, LogAgreement, METRICS_FILE};

use crate::error::{io_at, ExperimentError};
use crate::record::{RunRecord, Snapshot, PHASE1_DIR};
use crate::Result;

/// How the log that comes with brought snapshots ends its name, in the snapshots' folder
/// (`step-<N>.metrics.jsonl`, N the last snapshot it was packed with).
pub const BROUGHT_LOG_SUFFIX: &str = ".metrics.jsonl";

/// The snapshots of a finished run's spec that are in place under its folder `dir` but not in
/// its record: brought after it finished (docs/gpu.md), to be adopted once [`check_brought`]
/// accepts them. Empty for a run without a result.
pub(crate) fn late_snapshots(record: &RunRecord, dir: &Path) -> Vec<Snapshot> {
    let Some(res) = record.result.as_ref() else {
        return Vec::new();
    };
    let out = dir.join(PHASE1_DIR);
    record
        .spec
        .phase1
        .snapshots
        .iter()
        .map(|&f| Snapshot::at(&out, f, res.phase1.steps))
        .filter(|snap| snap.path.is_file() && !res.snapshots.iter().any(|s| s.step == snap.step))
        .collect()
}

/// The logs that came with snapshots into the folder `snapshots`, by name.
fn brought_logs(snapshots: &Path) -> Result<Vec<PathBuf>> {
    let mut logs = Vec::new();
    for e in std::fs::read_dir(snapshots).map_err(io_at(snapshots))? {
        let p = e.map_err(io_at(snapshots))?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.ends_with(BROUGHT_LOG_SUFFIX) && p.is_file() {
            logs.push(p);
        }
    }
    logs.sort();
    Ok(logs)
}

fn refuse(path: &Path, why: String) -> ExperimentError {
    ExperimentError::BroughtSnapshot {
        path: path.to_path_buf(),
        why,
    }
}

/// Checks that the snapshots `brought` into the phase-1 folder `phase1` (from another machine)
/// are points of the training that the folder's log records: every log that came with
/// snapshots must agree with it wherever both logged, and each snapshot needs one that repeats
/// the run's log up to the snapshot's update. A [`ExperimentError::BroughtSnapshot`] naming the
/// log or the snapshot otherwise.
pub fn check_brought(phase1: &Path, brought: &[Snapshot]) -> Result<()> {
    let Some(first) = brought.first() else {
        return Ok(());
    };
    let run_log = phase1.join(METRICS_FILE);
    if !run_log.is_file() {
        return Err(refuse(
            &first.path,
            format!(
                "the run's phase-1 log ({}) is not there to check it against",
                run_log.display()
            ),
        ));
    }
    let folder = first.path.parent().unwrap_or(phase1);
    let mut agreements: Vec<(PathBuf, LogAgreement)> = Vec::new();
    for log in brought_logs(folder)? {
        let a = compare_logs(&run_log, &log)?;
        if let Some(d) = &a.difference {
            return Err(refuse(
                &log,
                format!(
                    "the training that wrote the snapshots beside it departs from this run at \
                     update {}: {} {} here, {} there. It ran on other arithmetic (another kind \
                     of GPU, other CUDA kernels: docs/gpu.md) and reached another model; move \
                     it and the snapshots it came with out of {}",
                    d.step,
                    d.field,
                    d.reference,
                    d.other,
                    folder.display()
                ),
            ));
        }
        agreements.push((log, a));
    }
    for s in brought {
        if agreements.iter().any(|(_, a)| a.repeats_up_to(s.step)) {
            continue;
        }
        let logs: Vec<String> = agreements
            .iter()
            .map(|(p, a)| match a.first_missing {
                Some(m) => format!("{} stops before update {m}", p.display()),
                None => p.display().to_string(),
            })
            .collect();
        return Err(refuse(
            &s.path,
            format!(
                "it came from another machine (it was not in the run's record) {}: nothing \
                 shows that it is update {} of this run's phase 1. Bring it again with the log \
                 `scripts/gpu_session.sh snapshot` packs beside it, or move it away (the run \
                 goes on without it)",
                match logs.is_empty() {
                    true => format!("without a `*{BROUGHT_LOG_SUFFIX}` log beside it"),
                    false => format!("and the logs beside it stop short ({})", logs.join("; ")),
                },
                s.step
            ),
        ));
    }
    Ok(())
}
