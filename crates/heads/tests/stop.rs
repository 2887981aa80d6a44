//! A stop request ends a scoring pass between batches. Its own test binary: the stop flag is
//! process-wide, and no other test may run while it is set.

use candle_core::Device;
use heads::{
    evaluate, evaluate_resuming, HeadConfig, HeadInput, HeadsError, PartialEvaluation, TowerHeads,
};
use towers::{BatchSource, MarkovSource, ModelConfig, Style, TwoTowerLm};

fn setup() -> (TwoTowerLm, TowerHeads, Vec<corpus::TokenBatch>) {
    let cfg = ModelConfig::preset(Style::Gpt, "tiny").unwrap();
    let m = TwoTowerLm::new(&cfg, &Device::Cpu, 3).unwrap();
    let h = TowerHeads::new(
        &HeadConfig::for_model(&m, HeadInput::TowerOutput),
        &Device::Cpu,
        4,
    )
    .unwrap();
    let mut src = MarkovSource::new(Style::Gpt, 24, 2, 16, 8, 7, 5).unwrap();
    let bs: Vec<_> = (0..3).map(|_| src.next_batch().unwrap()).collect();
    (m, h, bs)
}

// One test: the stop flag is process-wide, so its two cases must not run in parallel.
#[test]
fn a_stop_request_ends_scoring_between_batches_and_a_kept_state_resumes_it_exactly() {
    let (m, h, bs) = setup();
    let whole = evaluate(&m, &h, &bs, false).unwrap();

    towers::request_stop();
    let stopped = evaluate(&m, &h, &bs, false);
    towers::clear_stop();
    match stopped {
        Err(HeadsError::Stopped { done: 0, total: 3 }) => {}
        Ok(_) => panic!("expected a stop before the first batch; the scoring ran to its end"),
        Err(e) => panic!("expected a stop before the first batch, got: {e}"),
    }
    let again = evaluate(&m, &h, &bs, false).unwrap();
    assert_eq!(
        again.logp, whole.logp,
        "scoring after the stop is cleared is unchanged"
    );

    // Stopped after one batch: the state handed to `save` on the stop, kept as JSON (as a
    // caller keeps it on disk), goes on to the very numbers of one uninterrupted pass.
    let mut state = PartialEvaluation::new(&h, false);
    let mut kept = None;
    let stopped = evaluate_resuming(&m, &h, &bs, &mut state, &mut |s, on_stop| {
        if on_stop {
            kept = Some(serde_json::to_string(s).unwrap());
        } else if s.batches_done == 1 {
            towers::request_stop();
        }
        Ok(())
    });
    towers::clear_stop();
    match stopped {
        Err(HeadsError::Stopped { done: 1, total: 3 }) => {}
        Ok(_) => panic!("expected a stop after the first batch; the scoring ran to its end"),
        Err(e) => panic!("expected a stop after the first batch, got: {e}"),
    }
    let kept = kept.expect("the stop hands its state to save");
    let mut resumed: PartialEvaluation = serde_json::from_str(&kept).unwrap();
    assert_eq!(resumed.batches_done, 1);
    assert!(
        resumed.scores.len() < whole.len() && !resumed.scores.is_empty(),
        "the kept state holds the first batch only: {} of {} positions",
        resumed.scores.len(),
        whole.len()
    );
    let mut calls = 0;
    evaluate_resuming(&m, &h, &bs, &mut resumed, &mut |_, _| {
        calls += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(calls, 2, "the resumed pass scores the two batches left");
    assert_eq!(resumed.batches_done, 3);
    assert_eq!(
        resumed.scores, whole,
        "stopped and resumed, the scores equal one uninterrupted pass bit for bit"
    );
}
