//! What a run folder records: `manifest.json` ([`Manifest`]: the run's id and spec, the stage it
//! has reached, the scoring set, the results), its file names, and the run-time options that do
//! not change what a run is.
//!
//! A run folder (a job, as HF Trainer and Lightning users know one):
//!
//! ```text
//! <run>/manifest.json         spec, stage, step, scoring-set fingerprints, weights hash, device, build
//! <run>/scores.safetensors    every head's log p(target) on the scoring set (heads::ScoresFile)
//! <run>/tokenizer/<file>      the run's vocabulary, so the folder is read anywhere
//! <run>/phase1/               phase-1 checkpoint (bit-exact resume), snapshots, metrics
//! <run>/heads/, heads_retest/ the heads' checkpoints
//! <run>/emergence/step-<N>/   one snapshot job each: snapshot.json, its heads, its scores file
//! ```

use std::path::{Path, PathBuf};

use candle_core::Device;
use serde::{Deserialize, Serialize};
use towers::TrainSummary;

use report::Progress;

use crate::disk::read_json;
use crate::error::{ExperimentError, Result};
use crate::scoring::ScoringSetId;
use crate::spec::RunSpec;

/// File name of a run's manifest.
pub const MANIFEST_FILE: &str = "manifest.json";
/// File name of a run's scores (and a snapshot job's): every head's log p(target) on the run's
/// fixed scoring set in one safetensors file that any machine reads without the run's
/// checkpoints or corpus; the codec and its layout are [`heads::ScoresFile`], its `scoring`
/// metadata the run's [`crate::ScoringSetId::fingerprint`].
///
/// Size: 12 bytes per scored position plus 4·K per position for each head set, so 28 bytes
/// per position for a run's two sets of K = 2 towers. The `cpu` protocol's scoring sets hold
/// 500,979 positions (GPT), 504,545 (BERT, masked) and 518,680 (ELMo): 14.0, 14.1 and 14.5 MB
/// a run, and as much again for each of its three snapshot jobs.
pub const SCORES_FILE: &str = "scores.safetensors";
/// The scores file's set of the main heads (the head seed).
pub const MAIN: &str = "main";
/// The scores file's set of the retest heads (head seed + 1).
pub const RETEST: &str = "retest";
/// The manifest layout this crate writes (3: the spec patches the style's own configuration,
/// `spec.tower`, where layout 2 had `spec.elmo_mode`); layout 2 is still read.
pub const MANIFEST_VERSION: u32 = 3;
/// A study's data folder (tokenizer, scoring sets), beside its run folders.
pub const STUDY_DATA_DIR: &str = "data";
/// Folder of a run's copy of its tokenizer.
pub const TOKENIZER_DIR: &str = "tokenizer";
/// Folder of a run's phase 1 (checkpoints, snapshots, metrics).
pub const PHASE1_DIR: &str = "phase1";
/// Folder of a run's heads (head seed).
pub const HEADS_DIR: &str = "heads";
/// Folder of a run's retest heads (head seed + 1).
pub const RETEST_HEADS_DIR: &str = "heads_retest";
/// Folder of a run's snapshot jobs (one `step-<N>/` per phase-1 snapshot, [`crate::snapshots`]).
pub const SNAPSHOT_HEADS_DIR: &str = "emergence";

/// What names a run: its model and its seed (`<model>-s<seed>`, the folder name in a study).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RunId {
    /// The model's name ([`RunSpec::model_name`]: `gpt`, `elmo_released`, `bert_large`, ...).
    pub model: String,
    /// The phase-1 seed.
    pub seed: u64,
}

impl RunId {
    /// The id of the run `spec`.
    pub fn of(spec: &RunSpec) -> Self {
        Self {
            model: spec.model_name(),
            seed: spec.seed,
        }
    }
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-s{}", self.model, self.seed)
    }
}

/// The step a run has reached, in the order a run goes through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Phase 1 has not spent its budget.
    Phase1,
    /// Phase 1 done; the heads (head seed) are training or scoring.
    Heads,
    /// The heads scored; the retest heads (head seed + 1) are training or scoring.
    RetestHeads,
    /// Every head scored: the results and scores are final.
    Done,
}

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
}

impl Snapshot {
    /// The phase-1 weight snapshot at fraction `f` of `total` updates.
    pub(crate) fn at(f: f64, total: u64) -> Snapshot {
        let step = ((f * total as f64).round() as u64).clamp(1, total.max(1));
        Snapshot { fraction: f, step }
    }

    /// The snapshot's weights in the run folder `run_dir`.
    pub fn weights_in(&self, run_dir: &Path) -> PathBuf {
        run_dir
            .join(PHASE1_DIR)
            .join("snapshots")
            .join(format!("step-{:07}.safetensors", self.step))
    }

    /// The folder of the snapshot's job in the run folder `run_dir` (`emergence/step-<N>/`).
    pub fn job_dir(&self, run_dir: &Path) -> PathBuf {
        (run_dir.join(SNAPSHOT_HEADS_DIR)).join(format!("step-{:07}", self.step))
    }
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
    /// Phase-1 snapshots (each scored by a job of its own, [`crate::snapshots`]).
    pub snapshots: Vec<Snapshot>,
}

/// `manifest.json`: what the run is, how far it has got, and what it measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_VERSION`] of the layout.
    pub version: u32,
    /// The run's model and seed.
    pub id: RunId,
    /// The run.
    pub spec: RunSpec,
    /// The stage reached.
    pub stage: Stage,
    /// Phase-1 updates done, as of the manifest's last write.
    pub step: u64,
    /// The scoring set the run is scored on (fingerprints of its positions and of its text and
    /// vocabulary).
    pub scoring: ScoringSetId,
    /// The run's tokenizer, relative to its folder.
    pub tokenizer: PathBuf,
    /// SHA-256 (hex) of the final phase-1 weights, once phase 1 is done.
    pub weights_sha256: Option<String>,
    /// The device that last wrote the manifest (`cpu`, `cuda:0`).
    pub device: String,
    /// The build that last wrote the manifest (`lmsplit-experiment <version>`).
    pub build: String,
    /// The results of the stages done (phase 1 onwards).
    pub result: Option<RunResult>,
}

impl Manifest {
    /// Whether the run has finished (every head scored).
    pub fn finished(&self) -> bool {
        self.stage == Stage::Done && self.result.is_some()
    }

    /// The results of the finished run, or [`ExperimentError::Unfinished`] naming its stage.
    pub fn finished_result(&self) -> Result<&RunResult> {
        match &self.result {
            Some(r) if self.finished() => Ok(r),
            _ => Err(ExperimentError::Unfinished {
                runs: vec![format!("{} (stage {:?})", self.id, self.stage)],
                total: 1,
            }),
        }
    }
}

/// The manifest of the run folder `dir`; a folder without one is [`ExperimentError::NotA`] a
/// run folder.
pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST_FILE);
    if !path.is_file() {
        return Err(ExperimentError::NotA {
            path: dir.to_path_buf(),
            expected: format!("a run folder (it has no {MANIFEST_FILE})"),
        });
    }
    let mut v: serde_json::Value = read_json(&path)?;
    upgrade_layout_2(&mut v);
    let m: Manifest = serde_json::from_value(v).map_err(|e| ExperimentError::NotA {
        path: path.clone(),
        expected: format!("a run manifest ({e})"),
    })?;
    if m.version != MANIFEST_VERSION {
        return Err(ExperimentError::NotA {
            path,
            expected: format!(
                "a manifest of version {MANIFEST_VERSION} (it is {})",
                m.version
            ),
        });
    }
    Ok(m)
}

/// A layout-2 manifest read as layout 3: its `spec.elmo_mode` becomes the patch
/// `spec.tower = {"mode": ...}` (as-released ELMo) or goes (the default, both directions).
pub(crate) fn upgrade_layout_2(v: &mut serde_json::Value) {
    if v.get("version").and_then(serde_json::Value::as_u64) != Some(2) {
        return;
    }
    if let Some(spec) = v.get_mut("spec").and_then(serde_json::Value::as_object_mut) {
        let mode = spec.remove("elmo_mode");
        if let Some(mode) = mode.filter(|m| m != "BiLstm") {
            spec.insert("tower".into(), serde_json::json!({ "mode": mode }));
        }
    }
    v["version"] = MANIFEST_VERSION.into();
}

/// The name of `device` in a manifest.
pub(crate) fn device_name(device: &Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

/// The build that writes a manifest.
pub(crate) fn build_name() -> String {
    format!("lmsplit-experiment {}", env!("CARGO_PKG_VERSION"))
}

/// Run-time choices that do not change what a run is.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where to compute (bf16 compute with f32 master weights on CUDA).
    pub device: Device,
    /// Progress bars and messages (the library never prints itself).
    pub progress: Progress,
    /// The caller's stop request (e.g. set by a SIGTERM handler): training and scoring stop
    /// at their next step boundary with a checkpoint.
    pub stop: towers::StopToken,
    /// Also give the trained model (for embedding analyses): a finished run's is read from its
    /// final phase-1 weights, nothing trained or scored again.
    pub need_model: bool,
    /// Checkpoint every training (phase 1 and heads) also after this many seconds of wall
    /// time since its last checkpoint ([`towers::TrainConfig::checkpoint_secs`]), so that a
    /// run killed without warning loses at most that much. It changes no number.
    pub checkpoint_secs: Option<f64>,
}

impl Default for RunOptions {
    /// CPU, silent (no bars, no messages: a command line chooses `Progress::stdout()`), no
    /// model for a finished run, a checkpoint at least every 5 minutes of training.
    fn default() -> Self {
        Self {
            device: Device::Cpu,
            progress: Progress::silent(),
            stop: towers::StopToken::new(),
            need_model: false,
            checkpoint_secs: Some(300.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_of_a_run_without_updates_is_step_one_not_a_panic() {
        let s = Snapshot::at(0.5, 0);
        assert_eq!(s.step, 1);
        assert_eq!(
            s.weights_in(Path::new("run")),
            Path::new("run/phase1/snapshots/step-0000001.safetensors")
        );
        assert!(Stage::Heads < Stage::Done);
        let id = RunId {
            model: "gpt".into(),
            seed: 3,
        };
        assert_eq!(id.to_string(), "gpt-s3");
    }
}
