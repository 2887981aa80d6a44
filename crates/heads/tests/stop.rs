//! A stop request ends a scoring pass between batches. Its own test binary: the stop flag is
//! process-wide, and no other test may run while it is set.

use candle_core::Device;
use heads::{evaluate, HeadConfig, HeadInput, HeadsError, TowerHeads};
use towers::{BatchSource, MarkovSource, ModelConfig, Preset, Style, TwoTowerLm};

fn setup() -> (TwoTowerLm, TowerHeads, Vec<corpus::TokenBatch>) {
    let cfg = ModelConfig::preset(Style::Gpt, Preset::Tiny).unwrap();
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

#[test]
fn a_stop_request_ends_scoring_between_batches_and_a_cleared_one_scores_as_before() {
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
}
