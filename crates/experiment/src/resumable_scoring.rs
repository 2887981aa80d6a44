//! The scoring pass of a run's heads, kept part of the way through: a full-BiLSTM run's heads
//! take 10–30 minutes of a CPU core to score (518,680 positions at V 30,528), and a session
//! that ends in the middle of it should cost the next one only what was not scored yet.
//!
//! Beside the heads (`<heads folder>/scoring-partial.json`) the pass saves the batches done
//! every `RunOptions::checkpoint_secs` and on a stop request, with what they belong to: the
//! scoring set's fingerprint and the SHA-256 of the heads' weights file. A later pass of the
//! same heads on the same set goes on from there (each batch is scored on its own, so the
//! numbers are those of one uninterrupted pass); a saved pass of other heads or another set
//! is set aside, said, and the scoring starts anew. The file is removed once the whole
//! scores are written.

use std::path::Path;
use std::time::Instant;

use heads::{evaluate_resuming, PartialEvaluation, PositionLogProbs, TowerHeads, HEADS_FILE};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use towers::TwoTowerLm;

use crate::error::{io_at, read_json, write_bytes_atomic};
use crate::record::RunOptions;
use crate::scoring::{hex, ScoringSet};
use crate::{ExperimentError, Result};

/// File name (in a heads folder) of a scoring pass kept part of the way through.
pub const PARTIAL_SCORES_FILE: &str = "scoring-partial.json";

/// What a kept pass holds: the batches done and what they belong to.
#[derive(Debug, Serialize, Deserialize)]
struct KeptPass {
    /// The scoring set's fingerprint ([`crate::scoring::ScoringSetId::fingerprint`]).
    scoring: String,
    /// SHA-256 (hex) of the heads' weights file.
    heads_sha256: String,
    /// The batches done and their results.
    state: PartialEvaluation,
}

/// Scores `heads` (saved in `heads_dir`) on `scoring`, going on from a pass kept there, and
/// hands the whole scores to `finish` (which writes them where the caller keeps them) before
/// the kept pass is removed.
pub(crate) fn score_heads(
    model: &TwoTowerLm,
    heads: &TowerHeads,
    heads_dir: &Path,
    scoring: &ScoringSet,
    opts: &RunOptions,
    finish: impl FnOnce(&PositionLogProbs) -> Result<()>,
) -> Result<PositionLogProbs> {
    let kept_path = heads_dir.join(PARTIAL_SCORES_FILE);
    let weights = heads_dir.join(HEADS_FILE);
    let heads_sha256 = hex(Sha256::digest(
        std::fs::read(&weights).map_err(io_at(&weights))?,
    ));
    let fingerprint = &scoring.id.fingerprint;
    let batches = &scoring.batches;
    let mut state = match resumable(&kept_path, fingerprint, &heads_sha256, batches.len(), opts)? {
        Some(state) => {
            opts.progress.say(|| {
                format!(
                    "scoring {}: going on from batch {} of {} (kept in {})",
                    heads_dir.display(),
                    state.batches_done,
                    batches.len(),
                    kept_path.display()
                )
            });
            state
        }
        None => PartialEvaluation::new(heads, false),
    };
    let bar = progress_bar(opts.progress.bars(), batches.len(), state.batches_done);
    let mut last_save = Instant::now();
    // A failure to keep the pass, returned as itself rather than as the heads crate's error.
    let mut failed = None;
    let scored = evaluate_resuming(model, heads, batches, &mut state, &mut |s, on_stop| {
        bar.set_position(s.batches_done as u64);
        let due = opts
            .checkpoint_secs
            .is_some_and(|secs| last_save.elapsed().as_secs_f64() >= secs);
        if (on_stop || due) && s.batches_done < batches.len() {
            let kept = KeptPass {
                scoring: fingerprint.clone(),
                heads_sha256: heads_sha256.clone(),
                state: s.clone(),
            };
            if let Err(e) = keep(&kept_path, &kept) {
                let msg = e.to_string();
                failed = Some(e);
                return Err(heads::HeadsError::Mismatch(msg));
            }
            last_save = Instant::now();
        }
        Ok(())
    });
    if let Some(e) = failed {
        return Err(e);
    }
    scored?;
    bar.finish_and_clear();
    finish(&state.scores)?;
    match std::fs::remove_file(&kept_path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_at(&kept_path)(e)),
        _ => Ok(state.scores),
    }
}

/// The kept pass at `path` when it belongs to these heads and this scoring set; `None`: no
/// file, or one of other heads or another set (said, and replaced by the new pass).
fn resumable(
    path: &Path,
    fingerprint: &str,
    heads_sha256: &str,
    n_batches: usize,
    opts: &RunOptions,
) -> Result<Option<PartialEvaluation>> {
    if !path.is_file() {
        return Ok(None);
    }
    let kept: KeptPass = read_json(path)?;
    let same = kept.scoring == fingerprint
        && kept.heads_sha256 == heads_sha256
        && kept.state.batches_done <= n_batches;
    if !same {
        opts.progress.say(|| {
            format!(
                "{}: a scoring pass of other heads or another scoring set; scoring anew",
                path.display()
            )
        });
    }
    Ok(same.then_some(kept.state))
}

/// The bar of a scoring pass (hidden without bars).
fn progress_bar(show: bool, len: usize, done: usize) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len as u64).with_style(
        ProgressStyle::with_template("scoring {bar:30} {pos}/{len} batches {elapsed_precise}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_position(done as u64);
    bar
}

/// Writes the kept pass whole or not at all (compact: it holds every scored position).
fn keep(path: &Path, kept: &KeptPass) -> Result<()> {
    let bytes = serde_json::to_vec(kept).map_err(|source| ExperimentError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    write_bytes_atomic(path, &bytes)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use candle_core::Device;
    use heads::{evaluate, HeadConfig, HeadInput};
    use towers::{BatchSource, MarkovSource, ModelConfig, Style};

    use super::*;
    use crate::error::write_json_atomic;
    use crate::progress::Progress;
    use crate::scoring::{ScoringSetId, ScoringSpec};

    /// A tiny GPT with its heads saved in `heads_dir`, a three-batch scoring set, options
    /// whose messages land in `said` (a pass kept after every batch), and the scores of one
    /// uninterrupted pass.
    struct Fixture {
        dir: tempfile::TempDir,
        m: TwoTowerLm,
        h: TowerHeads,
        scoring: ScoringSet,
        opts: RunOptions,
        said: Arc<Mutex<Vec<String>>>,
        heads_dir: std::path::PathBuf,
        kept_path: std::path::PathBuf,
        whole: PositionLogProbs,
    }

    impl Fixture {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let m = TwoTowerLm::new(
                &ModelConfig::preset(Style::Gpt, "tiny").unwrap(),
                &Device::Cpu,
                3,
            )
            .unwrap();
            let h = TowerHeads::new(
                &HeadConfig::for_model(&m, HeadInput::TowerOutput),
                &Device::Cpu,
                4,
            )
            .unwrap();
            let heads_dir = dir.path().join("heads");
            h.save(&heads_dir).unwrap();
            let mut src = MarkovSource::new(Style::Gpt, 24, 2, 16, 8, 7, 5).unwrap();
            let batches: Vec<_> = (0..3).map(|_| src.next_batch().unwrap()).collect();
            let scoring = ScoringSet {
                id: ScoringSetId {
                    style: Style::Gpt,
                    fingerprint: "set".into(),
                    text_fingerprint: "text".into(),
                    positions: batches.iter().map(|b| b.n_targets() as u64).sum(),
                },
                spec: ScoringSpec::new(16),
                batches,
            };
            let said = Arc::new(Mutex::new(Vec::new()));
            let sink = said.clone();
            let opts = RunOptions {
                progress: Progress::to(move |m| sink.lock().unwrap().push(m.to_string()))
                    .with_bars(false),
                checkpoint_secs: Some(0.0),
                ..RunOptions::default()
            };
            let whole = evaluate(&m, &h, &scoring.batches, false).unwrap();
            Self {
                kept_path: heads_dir.join(PARTIAL_SCORES_FILE),
                dir,
                m,
                h,
                scoring,
                opts,
                said,
                heads_dir,
                whole,
            }
        }

        /// [`score_heads`] of the fixture's heads, handing the scores to `finish`.
        fn score(
            &self,
            finish: impl FnOnce(&PositionLogProbs) -> Result<()>,
        ) -> Result<PositionLogProbs> {
            score_heads(
                &self.m,
                &self.h,
                &self.heads_dir,
                &self.scoring,
                &self.opts,
                finish,
            )
        }

        /// Whether a message said so far contains `text`.
        fn said(&self, text: &str) -> bool {
            self.said.lock().unwrap().iter().any(|m| m.contains(text))
        }
    }

    #[test]
    fn a_pass_cut_off_goes_on_from_the_batches_it_kept_and_forgets_them_when_whole() {
        let f = Fixture::new();

        // The first pass dies after its last batch, before its scores are written: the pass
        // kept after batch 2 of 3 stays.
        let cut = f.score(|_| Err(ExperimentError::Interrupted("killed".into())));
        assert!(
            matches!(cut, Err(ExperimentError::Interrupted(_))),
            "{cut:?}"
        );
        let mut kept: KeptPass = read_json(&f.kept_path).unwrap();
        assert_eq!(kept.state.batches_done, 2);
        assert_eq!(kept.scoring, "set");

        // Marked, so that a result holding the mark was read from the kept pass, not rescored.
        let mark = -123.25f32;
        kept.state.scores.logp[0][0] = mark;
        keep(&f.kept_path, &kept).unwrap();
        let out = f.dir.path().join("logprobs.json");
        let lp = f.score(|lp| write_json_atomic(&out, lp)).unwrap();
        assert!(f.said("going on from batch 2 of 3"));
        let mut expected = f.whole.clone();
        expected.logp[0][0] = mark;
        assert_eq!(lp, expected, "the kept batches as kept, the rest scored");
        assert_eq!(read_json::<PositionLogProbs>(&out).unwrap(), expected);
        assert!(
            !f.kept_path.exists(),
            "the kept pass is removed once the scores are written"
        );

        // Unmarked, the resumed scores are one uninterrupted pass's, bit for bit.
        kept.state.scores.logp[0][0] = f.whole.logp[0][0];
        keep(&f.kept_path, &kept).unwrap();
        let lp = f.score(|_| Ok(())).unwrap();
        assert_eq!(lp, f.whole);
    }

    #[test]
    fn a_kept_pass_of_other_heads_or_another_set_is_set_aside_and_missing_heads_are_named() {
        let f = Fixture::new();
        let mut state = PartialEvaluation::new(&f.h, false);
        state.batches_done = 1;
        let weights = std::fs::read(f.heads_dir.join(HEADS_FILE)).unwrap();
        for (what, scoring_fp, heads_sha) in [
            (
                "other heads",
                "set".to_string(),
                hex(Sha256::digest(b"other")),
            ),
            (
                "another set",
                "other".to_string(),
                hex(Sha256::digest(&weights)),
            ),
        ] {
            // An empty state that claims a batch done: read, it would lose that batch's positions.
            let kept = KeptPass {
                scoring: scoring_fp,
                heads_sha256: heads_sha,
                state: state.clone(),
            };
            keep(&f.kept_path, &kept).unwrap();
            f.said.lock().unwrap().clear();
            let lp = f.score(|_| Ok(())).unwrap();
            assert_eq!(lp, f.whole, "{what}: scored anew");
            assert!(f.said("scoring anew"), "{what}");
        }
        std::fs::remove_file(f.heads_dir.join(HEADS_FILE)).unwrap();
        match f.score(|_| Ok(())) {
            Err(ExperimentError::Io { path, .. }) => {
                assert!(path.ends_with(HEADS_FILE), "{path:?}")
            }
            other => panic!("expected the missing heads file named, got {other:?}"),
        }
    }
}
