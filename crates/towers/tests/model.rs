//! Gradients, leakage and input validation of the K-tower models.

mod common;

use candle_core::{Tensor, D};
use common::*;
use corpus::{TokenBatch, IGNORE_LABEL};
use towers::{BatchSource, SYN_MASK};
use towers::{ElmoMode, ModelConfig, Style, TowersError};

fn all_configs() -> Vec<(&'static str, ModelConfig)> {
    vec![
        ("elmo-bilstm", tiny_elmo(ElmoMode::BiLstm)),
        ("elmo-as-released", tiny_elmo(ElmoMode::AsReleased)),
        ("gpt", tiny(Style::gpt(), 2)),
        ("bert", tiny(Style::bert(), 2)),
        ("gpt-k1", tiny(Style::gpt(), 1)),
        ("bert-k3", tiny(Style::bert(), 3)),
    ]
}

#[test]
fn every_variable_gets_a_finite_nonzero_gradient() {
    for (name, cfg) in all_configs() {
        let m = model(&cfg, 1);
        let b = source(&cfg, 4, 12, 3).next_batch().unwrap();
        let grads = m.loss(&b).unwrap().backward().unwrap();
        let params = m.params().params();
        assert!(!params.is_empty());
        for p in params {
            let g = grads
                .get(p.var.as_tensor())
                .unwrap_or_else(|| panic!("{name}: no gradient for {}", p.name));
            let v: Vec<f32> = g.flatten_all().unwrap().to_vec1().unwrap();
            assert!(
                v.iter().all(|x| x.is_finite()),
                "{name}: non-finite gradient for {}",
                p.name
            );
            assert!(
                v.iter().any(|&x| x != 0.0),
                "{name}: zero gradient for {}",
                p.name
            );
        }
    }
}

fn fixed_batch(ids: Vec<u32>, b: usize, t: usize, labels: Vec<u32>) -> TokenBatch {
    TokenBatch {
        batch_size: b,
        seq_len: t,
        attention_mask: vec![1; b * t],
        input_ids: ids,
        labels,
    }
}

fn max_diff_at(a: &Tensor, b: &Tensor, pos: usize) -> f32 {
    let d = (a.narrow(1, pos, 1).unwrap() - b.narrow(1, pos, 1).unwrap()).unwrap();
    d.abs().unwrap().max_all().unwrap().to_scalar().unwrap()
}

fn ids(t: usize) -> Vec<u32> {
    (0..t as u32).map(|i| 2 + (i * 5) % 60).collect()
}

#[test]
fn gpt_prediction_never_sees_its_target_or_later_tokens() {
    let cfg = tiny(Style::gpt(), 2);
    let m = model(&cfg, 2);
    let t = 10;
    let base = ids(t);
    let l0 = m
        .logits(&fixed_batch(base.clone(), 1, t, vec![IGNORE_LABEL; t]))
        .unwrap();
    for j in [0, 3, 9] {
        let mut x = base.clone();
        x[j] = 63 - x[j] % 7;
        let l1 = m
            .logits(&fixed_batch(x, 1, t, vec![IGNORE_LABEL; t]))
            .unwrap();
        // Position p predicts token p+1: positions < j (which predict tokens <= j) are untouched.
        for p in 0..j {
            assert_eq!(
                max_diff_at(&l0, &l1, p),
                0.0,
                "token {j} leaked into position {p}"
            );
        }
        assert!(
            max_diff_at(&l0, &l1, j) > 1e-4,
            "changing token {j} must change position {j}"
        );
    }
}

#[test]
fn elmo_directions_never_see_their_own_token() {
    for mode in [ElmoMode::BiLstm, ElmoMode::AsReleased] {
        let cfg = tiny_elmo(mode);
        let m = model(&cfg, 3);
        let t = 9;
        let base = ids(t);
        let b0 = fixed_batch(base.clone(), 1, t, vec![IGNORE_LABEL; t]);
        let l0 = m.logits(&b0).unwrap();
        for j in [0, 4, 8] {
            let mut x = base.clone();
            x[j] = 63 - x[j] % 7;
            let b1 = fixed_batch(x, 1, t, vec![IGNORE_LABEL; t]);
            let l1 = m.logits(&b1).unwrap();
            assert_eq!(
                max_diff_at(&l0, &l1, j),
                0.0,
                "{mode:?}: token {j} reached its own prediction"
            );
            for k in 0..2 {
                let (f0, r0) = m.directions(&m.device_batch(&b0).unwrap(), k).unwrap();
                let (f1, r1) = m.directions(&m.device_batch(&b1).unwrap(), k).unwrap();
                for p in 0..t {
                    let (df, db) = (max_diff_at(&f0, &f1, p), max_diff_at(&r0, &r1, p));
                    if p <= j {
                        assert_eq!(df, 0.0, "forward at {p} saw token {j}");
                    } else {
                        assert!(df > 0.0, "forward at {p} must see token {j}");
                    }
                    if mode == ElmoMode::BiLstm && p < j {
                        assert!(db > 0.0, "backward at {p} must see token {j}");
                    } else {
                        assert_eq!(db, 0.0, "backward at {p} saw token {j}");
                    }
                }
            }
            // The joint logits: as released, the backward direction contributes nothing, so no
            // earlier position hears of token j; the full BiLSTM carries it back to every one.
            for p in 0..j {
                let d = max_diff_at(&l0, &l1, p);
                match mode {
                    ElmoMode::AsReleased => {
                        assert_eq!(d, 0.0, "as-released: token {j} reached {p}")
                    }
                    ElmoMode::BiLstm => {
                        assert!(d > 0.0, "full: token {j} must reach {p} backward")
                    }
                }
            }
        }
    }
}

#[test]
fn bert_masked_token_identity_never_reaches_its_prediction() {
    let cfg = tiny(Style::bert(), 2);
    let m = model(&cfg, 4);
    let t = 8;
    let j = 3;
    let mut logits = Vec::new();
    // Same corrupted input, different original tokens at the masked position.
    for original in [10u32, 40, 55] {
        let mut x = ids(t);
        x[j] = SYN_MASK;
        let mut labels = vec![IGNORE_LABEL; t];
        labels[j] = original;
        let b = fixed_batch(x, 1, t, labels);
        logits.push(m.logits(&b).unwrap());
        assert!(m.loss(&b).unwrap().to_scalar::<f32>().unwrap().is_finite());
    }
    assert_eq!(max_diff_at(&logits[0], &logits[1], j), 0.0);
    assert_eq!(max_diff_at(&logits[0], &logits[2], j), 0.0);
    // The prediction is bidirectional: a later context token does reach it.
    let mut x = ids(t);
    x[j] = SYN_MASK;
    x[j + 2] = 61;
    let other = m
        .logits(&fixed_batch(x, 1, t, vec![IGNORE_LABEL; t]))
        .unwrap();
    assert!(max_diff_at(&logits[0], &other, j) > 1e-4);
    // And the synthetic MLM batches never show the label at [MASK]-ed inputs.
    let b = source(&cfg, 8, 16, 5).next_batch().unwrap();
    let masked = b.labels.iter().filter(|&&l| l != IGNORE_LABEL).count();
    assert!(masked > 0);
    for (i, &l) in b.labels.iter().enumerate() {
        if l == IGNORE_LABEL {
            assert!(b.input_ids[i] != SYN_MASK);
        }
    }
}

#[test]
fn padding_does_not_change_real_positions() {
    for cfg in [
        tiny(Style::gpt(), 2),
        tiny(Style::bert(), 2),
        tiny_elmo(ElmoMode::BiLstm),
    ] {
        let m = model(&cfg, 5);
        let t = 6;
        let short = fixed_batch(ids(t), 1, t, vec![IGNORE_LABEL; t]);
        let mut long_ids = ids(t);
        long_ids.extend([0, 0, 0]);
        let mut long = fixed_batch(long_ids, 1, t + 3, vec![IGNORE_LABEL; t + 3]);
        long.attention_mask[t..].fill(0);
        let a = m.logits(&short).unwrap();
        let b = m.logits(&long).unwrap().narrow(1, 0, t).unwrap();
        let d: f32 = (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        assert!(
            d < 1e-5,
            "{:?}: PAD changed real positions by {d}",
            cfg.style()
        );
    }
}

#[test]
fn bad_batches_get_typed_errors() {
    let cfg = tiny(Style::gpt(), 2);
    let m = model(&cfg, 6);
    let mut b = fixed_batch(ids(4), 1, 4, vec![3, 4, 5, IGNORE_LABEL]);
    b.input_ids[1] = 64;
    assert!(matches!(m.loss(&b), Err(TowersError::Batch(_))));
    let b = fixed_batch(ids(4), 1, 5, vec![IGNORE_LABEL; 4]);
    assert!(matches!(m.loss(&b), Err(TowersError::Batch(_))));
    let b = fixed_batch(ids(4), 1, 4, vec![IGNORE_LABEL; 4]);
    assert!(matches!(m.loss(&b), Err(TowersError::NoTargets)));
    let b = fixed_batch(ids(65), 1, 65, vec![IGNORE_LABEL; 65]);
    assert!(matches!(m.loss(&b), Err(TowersError::Batch(_))));
    let logits = m
        .logits(&fixed_batch(ids(4), 1, 4, vec![IGNORE_LABEL; 4]))
        .unwrap();
    assert_eq!(logits.dims(), &[1, 4, 64]);
    let _ = logits.max_keepdim(D::Minus1).unwrap();
}

/// bf16 compute with f32 master weights: finite loss close to the f32 one, f32 gradients.
#[test]
fn bf16_compute_keeps_f32_masters_and_gradients() {
    for cfg in [
        tiny(Style::gpt(), 2),
        tiny(Style::bert(), 2),
        tiny_elmo(ElmoMode::BiLstm),
    ] {
        let m32 = model(&cfg, 9);
        let m16 = model(&cfg, 9).with_compute_dtype(candle_core::DType::BF16);
        let b = source(&cfg, 4, 8, 1).next_batch().unwrap();
        let l32 = m32.loss(&b).unwrap().to_scalar::<f32>().unwrap();
        let loss = m16.loss(&b).unwrap();
        let l16 = loss.to_scalar::<f32>().unwrap();
        assert!(
            (l32 - l16).abs() < 0.05 * l32,
            "{:?}: f32 {l32} vs bf16 {l16}",
            cfg.style()
        );
        let grads = loss.backward().unwrap();
        for p in m16.params().params() {
            let g = grads.get(p.var.as_tensor()).unwrap();
            assert_eq!(g.dtype(), candle_core::DType::F32, "{}", p.name);
            assert_eq!(p.var.dtype(), candle_core::DType::F32);
        }
    }
}
