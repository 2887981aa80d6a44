//! Synthetic runs' scores shared by the unit tests of the analysis modules.

use heads::PositionLogProbs;
use prefscore::ScoreKind;

use crate::analysis::RunScores;
use crate::scoring::ScoringSetId;

/// Log-probabilities `logp[k][i]` of tower k for target `targets[i]`, all in one batch at
/// positions 0, 1, ...
pub(crate) fn one_batch(
    vocab_size: usize,
    targets: Vec<u32>,
    logp: Vec<Vec<f32>>,
) -> PositionLogProbs {
    let n = targets.len();
    PositionLogProbs {
        vocab_size,
        targets,
        batch_index: vec![0; n],
        position: (0..n as u32).collect(),
        logp,
        full: None,
    }
}

/// A GPT run's arithmetic-mean scores (eq. 4) from `lp`, on a synthetic scoring set of its
/// positions, no retest, not flagged.
pub(crate) fn gpt_run(label: String, lp: PositionLogProbs) -> RunScores {
    let id = ScoringSetId {
        style: towers::Style::gpt(),
        fingerprint: "synthetic".into(),
        text_fingerprint: "synthetic".into(),
        positions: lp.targets.len() as u64,
    };
    let kind = ScoreKind::ArithmeticMean;
    RunScores::from_logprobs(label, "gpt".into(), id, lp, None, false, kind).unwrap()
}
