//! What a run folder records: `run.json` ([`RunRecord`]: the spec, the data folder, the
//! scoring set, the results), its file names, and the run-time options that do not change what
//! a run is.

use std::path::{Path, PathBuf};

use candle_core::Device;
use serde::{Deserialize, Serialize};
use towers::TrainSummary;

use crate::progress::Progress;
use crate::scoring::ScoringSetId;
use crate::spec::RunSpec;

/// File name of a run's record.
pub const RUN_FILE: &str = "run.json";
/// File name of the scored log-probabilities.
pub const LOGPROBS_FILE: &str = "logprobs.json";
/// File name of the retest heads' log-probabilities.
pub const RETEST_FILE: &str = "logprobs_retest.json";
/// A study's data folder (tokenizer, scoring sets), beside its run folders.
pub const STUDY_DATA_DIR: &str = "data";
/// Folder of a run's phase 1 (checkpoints, snapshots, metrics, `machines.json`).
pub const PHASE1_DIR: &str = "phase1";
/// Folder of a run's heads (head seed).
pub const HEADS_DIR: &str = "heads";
/// Folder of a run's retest heads (head seed + 1).
pub const RETEST_HEADS_DIR: &str = "heads_retest";
/// Folder of a run's snapshot heads and their scores (one `step-<N>/` per phase-1 snapshot).
pub const SNAPSHOT_HEADS_DIR: &str = "emergence";

/// How well the heads of a run fit, measured on the validation batches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadQuality {
    /// Mean NLL of each head (nats).
    pub nll: Vec<f64>,
    /// Mean NLL of the joint head over both towers on the same batches.
    pub joint_nll: f64,
    /// Each head's NLL minus the joint head's.
    pub gap: Vec<f64>,
    /// Cross-entropy of the training text's unigram distribution (add-one) on the same targets.
    pub unigram_nll: f64,
    /// A head ends no better than the unigram model: its scores would record head noise, not a
    /// division of labour. Every table that uses the run says so.
    pub above_unigram: bool,
    /// Updates of the heads' training.
    pub steps: u64,
    /// Whether early stopping ended it (otherwise the token budget did).
    pub stopped_early: bool,
    /// [`crate::machine::describe`] of the machine that trained these heads (a run's heads
    /// and its snapshots' may each be another's than its phase 1); `None` in files written
    /// before 27 Nov 2026.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

/// Whether `heads` or their `retest` ended no better than the unigram model: the flag of a run
/// or a snapshot in every table that uses it.
pub fn heads_flagged(heads: &HeadQuality, retest: Option<&HeadQuality>) -> bool {
    heads.above_unigram || retest.is_some_and(|q| q.above_unigram)
}

/// A phase-1 weight snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Fraction of phase 1's updates done.
    pub fraction: f64,
    /// Update number.
    pub step: u64,
    /// The weights (safetensors) where they were written; a study moved or fetched since lies
    /// elsewhere: read them with [`Snapshot::weights_in`].
    pub path: PathBuf,
}

impl Snapshot {
    /// The phase-1 weight snapshot at fraction `f` of `total` updates, in the phase-1 folder
    /// `out`.
    pub(crate) fn at(out: &Path, f: f64, total: u64) -> Snapshot {
        let step = ((f * total as f64).round() as u64).clamp(1, total.max(1));
        Snapshot {
            fraction: f,
            step,
            path: snapshot_weights(out, step),
        }
    }

    /// The snapshot's weights in the run folder `run_dir`, wherever the run lies now.
    pub fn weights_in(&self, run_dir: &Path) -> PathBuf {
        snapshot_weights(&run_dir.join(PHASE1_DIR), self.step)
    }
}

/// The weights of update `step`'s snapshot in the phase-1 folder `phase1`.
fn snapshot_weights(phase1: &Path, step: u64) -> PathBuf {
    phase1
        .join("snapshots")
        .join(format!("step-{step:07}.safetensors"))
}

/// What a finished run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Phase 1.
    pub phase1: TrainSummary,
    /// Phases 2/3.
    pub heads: HeadQuality,
    /// The retest heads (second head seed), when the spec asks for them.
    pub retest: Option<HeadQuality>,
    /// Scored positions.
    pub positions: u64,
    /// Mean NLL of each head on the scoring set.
    pub scored_nll: Vec<f64>,
    /// Phase-1 snapshots.
    pub snapshots: Vec<Snapshot>,
    /// The machine that finished the run ([`crate::machine::describe`]); `None` in records
    /// written before it was recorded.
    #[serde(default)]
    pub machine: Option<String>,
    /// The machines that ran phase 1's updates and how many each ran
    /// ([`crate::machine::shares`]; e.g. an H100's for a run whose heads a CPU trained); empty
    /// in records written before they were noted.
    #[serde(default)]
    pub phase1_machines: Vec<crate::machine::MachineShare>,
}

/// `run.json`: the spec, where its data lives, the scoring set and the results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run.
    pub spec: RunSpec,
    /// The study's data folder (synthetic text, trained tokenizer).
    pub data_dir: PathBuf,
    /// The scoring set the run was scored on.
    pub scoring: ScoringSetId,
    /// The results, once the run finished.
    pub result: Option<RunResult>,
}

/// Run-time choices that do not change what a run is.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where to compute (bf16 compute with f32 master weights on CUDA).
    pub device: Device,
    /// Progress bars and messages (the library never prints itself).
    pub progress: Progress,
    /// Also give the trained model (for embedding analyses): a finished run's is read from its
    /// final phase-1 weights, nothing trained or scored again.
    pub need_model: bool,
    /// Train (or read) the heads of every phase-1 snapshot (the agreement curve's points; each
    /// costs one or two head trainings); `false` skips them, and the runs then carry none.
    pub snapshot_heads: bool,
    /// Checkpoint every training (phase 1 and heads) also after this many seconds of wall
    /// time since its last checkpoint ([`towers::TrainConfig::checkpoint_secs`]), so that a
    /// slow run killed without warning (a full-BiLSTM phase 1 checkpoints every 500 updates,
    /// 10–25 minutes on a 2-core CPU) loses at most that much; every scoring pass of heads
    /// keeps its batches done as often ([`crate::resumable_scoring`]; `None`: only on a stop
    /// request). It changes no number.
    pub checkpoint_secs: Option<f64>,
    /// Stop each run once its phase 1 holds its k-th snapshot (1 = the spec's first), with
    /// its checkpoint at that update, before training anything further (phase 1 or heads), so
    /// that the snapshots' heads ([`crate::curve_so_far`]) can come before the rest of the
    /// run. The stopped runs end the call with [`crate::ExperimentError::StoppedAtSnapshot`] after
    /// the others have had their turn; a finished run is reused as always. `None`: no stop.
    pub stop_at_snapshot: Option<usize>,
}

impl Default for RunOptions {
    /// CPU, progress bars and messages on stdout, no model for a finished run, snapshot heads
    /// trained, a checkpoint at least every 5 minutes of training, no stop at a snapshot.
    fn default() -> Self {
        Self {
            device: Device::Cpu,
            progress: Progress::stdout(),
            need_model: false,
            snapshot_heads: true,
            checkpoint_secs: Some(300.0),
            stop_at_snapshot: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_of_a_record_without_updates_is_step_one_not_a_panic() {
        // A damaged run.json with phase1.steps 0 reaches `at` from the status command.
        let s = Snapshot::at(Path::new("p"), 0.5, 0);
        assert_eq!(s.step, 1);
        assert_eq!(
            s.weights_in(Path::new("run")),
            Path::new("run/phase1/snapshots/step-0000001.safetensors")
        );
    }
}
