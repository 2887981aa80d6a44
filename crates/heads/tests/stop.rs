//! A stop request ends a scoring pass between batches; the request is the caller's token.

use candle_core::Device;
use heads::{evaluate, HeadConfig, HeadInput, HeadsError, TowerHeads};
use towers::{BatchSource, MarkovSource, ModelConfig, Preset, Style, TwoTowerLm};

fn setup() -> (TwoTowerLm, TowerHeads, Vec<corpus::TokenBatch>) {
    let cfg = ModelConfig::preset(&Style::gpt(), Preset::Tiny).unwrap();
    let m = TwoTowerLm::new(&cfg, &Device::Cpu, 3).unwrap();
    let h = TowerHeads::new(
        &HeadConfig::for_model(&m, HeadInput::TowerOutput),
        &Device::Cpu,
        4,
    )
    .unwrap();
    let mut src = MarkovSource::new(Style::gpt(), 24, 2, 16, 8, 7, 5).unwrap();
    let bs: Vec<_> = (0..3).map(|_| src.next_batch().unwrap()).collect();
    (m, h, bs)
}

#[test]
fn a_stop_request_ends_scoring_between_batches_and_a_cleared_one_scores_as_before() {
    let (m, h, bs) = setup();
    let stop = towers::StopToken::new();
    let whole = evaluate(&m, &h, &bs, false, &stop).unwrap();

    stop.request();
    let stopped = evaluate(&m, &h, &bs, false, &stop);
    stop.clear();
    match stopped {
        Err(HeadsError::Stopped { done: 0, total: 3 }) => {}
        Ok(_) => panic!("expected a stop before the first batch; the scoring ran to its end"),
        Err(e) => panic!("expected a stop before the first batch, got: {e}"),
    }
    let again = evaluate(&m, &h, &bs, false, &stop).unwrap();
    assert_eq!(
        again.logp, whole.logp,
        "scoring after the stop is cleared is unchanged"
    );
}
