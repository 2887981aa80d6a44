//! Phases 2/3: frozen towers, per-tower heads, per-position log-probabilities.

use candle_core::Device;
use corpus::{TokenBatch, IGNORE_LABEL};
use heads::{evaluate, retrain, FrozenTowers, HeadConfig, HeadInput, TowerHeads};
use towers::{unigram_entropy, BatchSource};
use towers::{
    Budget, MarkovSource, ModelConfig, Preset, Style, TrainConfig, Trainable, Trainer, TwoTowerLm,
};

fn tiny(style: Style) -> ModelConfig {
    ModelConfig::preset(&style, Preset::Tiny).unwrap()
}

fn src(style: Style, seed: u64) -> MarkovSource {
    MarkovSource::new(style, 24, 2, 16, 8, 7, seed).unwrap()
}

fn batches(style: Style, seed: u64, n: usize) -> Vec<TokenBatch> {
    let mut s = src(style, seed);
    (0..n).map(|_| s.next_batch().unwrap()).collect()
}

fn tc(steps: u64) -> TrainConfig {
    TrainConfig {
        lr: 1e-2,
        budget: Budget::Steps(steps),
        warmup_frac: 0.1,
        ..TrainConfig::default()
    }
}

#[test]
fn only_head_variables_get_gradients() {
    for (cfg, input) in [
        (tiny(Style::gpt()), HeadInput::TowerOutput),
        (tiny(Style::bert()), HeadInput::JointLayerNormSlice),
        (tiny(Style::elmo()), HeadInput::TowerOutput),
    ] {
        let m = TwoTowerLm::new(&cfg, &Device::Cpu, 1).unwrap();
        let h = TowerHeads::new(&HeadConfig::for_model(&m, input), &Device::Cpu, 2).unwrap();
        let frozen = FrozenTowers {
            model: &m,
            heads: &h,
        };
        let b = batches(cfg.style(), 3, 1).remove(0);
        let grads = frozen.loss(&b).unwrap().backward().unwrap();
        for p in h.params().params() {
            let g: Vec<f32> = grads
                .get(p.var.as_tensor())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            assert!(
                g.iter().all(|x| x.is_finite()) && g.iter().any(|&x| x != 0.0),
                "{}",
                p.name
            );
        }
        for p in m.params().params() {
            assert!(
                grads.get(p.var.as_tensor()).is_none(),
                "gradient reached tower variable {}",
                p.name
            );
        }
    }
}

#[test]
fn heads_learn_on_frozen_towers_which_stay_bit_identical() {
    for cfg in [tiny(Style::gpt()), tiny(Style::elmo())] {
        let m = TwoTowerLm::new(&cfg, &Device::Cpu, 5).unwrap();
        Trainer::new(&m, tc(100), None)
            .unwrap()
            .train(&mut src(cfg.style(), 1), &[])
            .unwrap();
        let before = m.params().snapshot().unwrap();
        let valid = batches(cfg.style(), 999, 4);
        let h = TowerHeads::new(
            &HeadConfig::for_model(&m, HeadInput::TowerOutput),
            &Device::Cpu,
            6,
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let s = retrain(
            &m,
            &h,
            tc(100),
            &mut src(cfg.style(), 2),
            &valid,
            Some(dir.path()),
            &towers::Control::default(),
        )
        .unwrap();
        let after = m.params().snapshot().unwrap();
        for (name, t) in &before {
            let d: f32 = (t - &after[name])
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar()
                .unwrap();
            assert_eq!(d, 0.0, "tower variable {name} changed in phase 2/3");
        }
        let ent = unigram_entropy(&valid);
        assert_eq!(s.val_loss_per_tower.len(), 2);
        for (k, &l) in s.val_loss_per_tower.iter().enumerate() {
            assert!(
                l < 0.8 * ent,
                "{:?} head {k}: loss {l} vs unigram entropy {ent}",
                cfg.style()
            );
        }
        assert!(dir.path().join("checkpoint/weights.safetensors").is_file());
    }
}

#[test]
fn evaluation_reports_identical_positions_for_all_towers() {
    let cfg = tiny(Style::bert());
    let m = TwoTowerLm::new(&cfg, &Device::Cpu, 7).unwrap();
    let h = TowerHeads::new(
        &HeadConfig::for_model(&m, HeadInput::TowerOutput),
        &Device::Cpu,
        8,
    )
    .unwrap();
    let bs = batches(Style::bert(), 4, 3);
    let r = evaluate(&m, &h, &bs, true, &Default::default()).unwrap();
    let expected: Vec<u32> = bs
        .iter()
        .flat_map(|b| b.labels.iter().copied().filter(|&l| l != IGNORE_LABEL))
        .collect();
    assert_eq!(r.targets, expected);
    assert_eq!(r.batch_index.len(), r.len());
    for (i, (&bi, &pos)) in r.batch_index.iter().zip(&r.position).enumerate() {
        assert_eq!(bs[bi as usize].labels[pos as usize], r.targets[i]);
    }
    let full = r.full.as_ref().unwrap();
    let v = cfg.vocab_size;
    for (lp, fl) in r.logp.iter().zip(full) {
        assert_eq!(lp.len(), r.len());
        assert_eq!(fl.len(), r.len() * v);
        for i in 0..r.len() {
            let row = &fl[i * v..(i + 1) * v];
            let total: f64 = row.iter().map(|&x| (x as f64).exp()).sum();
            assert!((total - 1.0).abs() < 1e-4);
            // The scores come from the fused row kernel, the full rows from the composed
            // log-softmax: two computations of one number.
            assert!((row[r.targets[i] as usize] - lp[i]).abs() < 1e-5);
            assert!(lp[i] <= 0.0);
        }
    }
    // Save / load round trip gives the same evaluation.
    let dir = tempfile::tempdir().unwrap();
    h.save(dir.path()).unwrap();
    let h2 = TowerHeads::load(dir.path(), &Device::Cpu).unwrap();
    let r2 = evaluate(&m, &h2, &bs, false, &Default::default()).unwrap();
    assert_eq!(r2.logp, r.logp);
    // Heads of another shape are refused.
    let mut one = tiny(Style::bert());
    one.n_towers = 1;
    let other = TwoTowerLm::new(&one, &Device::Cpu, 1).unwrap();
    assert!(evaluate(&other, &h, &bs, false, &Default::default()).is_err());
}
