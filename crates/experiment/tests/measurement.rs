//! The measurement defects of issue 13, each pinned by a test that failed on the old code
//! path: one seed-independent scoring set, BERT scored only at `[MASK]` inputs and at every
//! maskable position exactly once, a masked token's identity never reaching its prediction,
//! head k reading only tower k, early-stopped heads, and bit-exact resume through the real
//! corpus batches.

use candle_core::{Device, Tensor};
use corpus::{TokenBatch, IGNORE_LABEL};
use experiment::data::batcher;
use experiment::run::{train_heads_in, validation_batches};
use experiment::{CorpusData, CorpusSpec, RunOptions, RunSpec, ScoringSet, ScoringSpec};
use heads::{evaluate, retrain, FrozenTowers, HeadConfig, HeadInput, TowerHeads};
use towers::{Budget, CorpusSource, Preset, Style, TrainConfig, Trainer, TwoTowerLm};

fn data(dir: &std::path::Path) -> CorpusData {
    let mut spec = CorpusSpec::synthetic(80, 0);
    spec.train_vocab = 256;
    CorpusData::load(&spec, dir).unwrap()
}

/// Every row of every batch: (input ids, labels).
fn rows(set: &ScoringSet) -> Vec<(Vec<u32>, Vec<u32>)> {
    set.batches
        .iter()
        .flat_map(|b| {
            (0..b.batch_size).map(move |r| {
                let s = r * b.seq_len..(r + 1) * b.seq_len;
                (b.input_ids[s.clone()].to_vec(), b.labels[s].to_vec())
            })
        })
        .collect()
}

fn model(style: Style, d: &CorpusData, seed: u64) -> TwoTowerLm {
    let cfg = RunSpec::new(style, Preset::Tiny, d.spec.clone())
        .model_config(d.padded_vocab())
        .unwrap();
    TwoTowerLm::new(&cfg, &Device::Cpu, seed).unwrap()
}

#[test]
fn bert_scores_every_maskable_position_exactly_once_and_only_at_mask_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = data(dir.path());
    let spec = ScoringSpec::new(32);
    let set = ScoringSet::build(&Style::bert(), &d.tok, d.held_out(), &spec).unwrap();
    let sp = d.tok.special_tokens().unwrap();
    let windows = Style::bert().sequences(&d.tok, d.held_out(), 32).unwrap();
    let all = rows(&set);
    let (mut r, mut maskable_total) = (0, 0u64);
    for i in 0..windows.len() {
        let ids = windows.ids(i);
        let mut seen = vec![0u32; ids.len()];
        // The rows of window i follow in order: unmasked positions show the window itself.
        while r < all.len() {
            let (x, y) = &all[r];
            if !(0..ids.len()).all(|j| x[j] == ids[j] || y[j] == ids[j]) {
                break;
            }
            for j in 0..ids.len() {
                if y[j] != IGNORE_LABEL {
                    assert_eq!(x[j], sp.mask, "a scored position's input is not [MASK]");
                    seen[j] += 1;
                } else {
                    assert_eq!(x[j], ids[j], "context must be unmasked");
                }
            }
            r += 1;
        }
        for (j, &id) in ids.iter().enumerate() {
            let want = u32::from(!sp.contains(id));
            assert_eq!(
                seen[j], want,
                "window {i} position {j} scored {} times",
                seen[j]
            );
            maskable_total += want as u64;
        }
    }
    assert_eq!(r, all.len(), "rows left over");
    assert_eq!(set.id.positions, maskable_total);
    // Nothing of a run enters: built again, the set is the same.
    let again = ScoringSet::build(&Style::bert(), &d.tok, d.held_out(), &spec).unwrap();
    assert_eq!(again.id, set.id);
}

#[test]
fn gpt_and_elmo_score_every_labelled_position() {
    let dir = tempfile::tempdir().unwrap();
    let d = data(dir.path());
    for (style, not_scored_per_window) in [(Style::gpt(), 1usize), (Style::elmo(), 0)] {
        let set = ScoringSet::build(&style, &d.tok, d.held_out(), &ScoringSpec::new(32)).unwrap();
        let w = style.sequences(&d.tok, d.held_out(), 32).unwrap();
        let want: usize = (0..w.len())
            .map(|i| w.ids(i).len() - not_scored_per_window)
            .sum();
        assert_eq!(set.id.positions as usize, want, "{style:?}");
    }
}

#[test]
fn a_masked_tokens_identity_never_reaches_its_prediction() {
    let dir = tempfile::tempdir().unwrap();
    let d = data(dir.path());
    // Two scoring texts that differ in one single-piece word.
    let mut docs = d.held_out().to_vec();
    let text = docs[0].text.clone();
    let words: Vec<&str> = text.split_whitespace().collect();
    let single = |w: &str| {
        d.tok
            .encode(w, false)
            .map(|e| e.len() == 1)
            .unwrap_or(false)
    };
    let (i, w) = words
        .iter()
        .enumerate()
        .find(|(_, w)| single(w) && w.chars().all(char::is_alphabetic))
        .map(|(i, w)| (i, w.to_string()))
        .unwrap();
    let other = ["the", "a", "and", "of", "is"]
        .into_iter()
        .find(|o| *o != w.to_lowercase() && single(o))
        .unwrap();
    let mut changed = words.clone();
    changed[i] = other;
    let spec = ScoringSpec::new(32);
    let a = ScoringSet::build(&Style::bert(), &d.tok, &docs, &spec).unwrap();
    docs[0].text = changed.join(" ");
    let b = ScoringSet::build(&Style::bert(), &d.tok, &docs, &spec).unwrap();
    let (ra, rb) = (rows(&a), rows(&b));
    assert_eq!(ra.len(), rb.len());
    let m = model(Style::bert(), &d, 0);
    let pad = d.tok.special_tokens().unwrap().pad;
    let batch = |x: &Vec<u32>, y: &Vec<u32>| TokenBatch {
        batch_size: 1,
        seq_len: x.len(),
        input_ids: x.clone(),
        attention_mask: x.iter().map(|&t| u8::from(t != pad)).collect(),
        labels: y.clone(),
    };
    let mut differing = 0;
    for ((xa, ya), (xb, yb)) in ra.iter().zip(&rb) {
        for j in 0..ya.len() {
            if ya[j] != yb[j] {
                differing += 1;
                assert_eq!(xa, xb, "the changed word is visible where it is scored");
                let la = m.logits(&batch(xa, ya)).unwrap();
                let lb = m.logits(&batch(xb, yb)).unwrap();
                let diff: f32 = (la - lb)
                    .unwrap()
                    .abs()
                    .unwrap()
                    .max_all()
                    .unwrap()
                    .to_scalar()
                    .unwrap();
                assert_eq!(diff, 0.0);
            }
        }
    }
    assert_eq!(differing, 1, "the changed word is scored exactly once");
}

fn perturb_tower(model: &TwoTowerLm, k: usize) {
    for p in model.params().params() {
        if p.name.starts_with(&format!("tower{k}.")) {
            let t = p.var.as_tensor();
            let noise = Tensor::randn(0f32, 0.5, t.shape(), t.device()).unwrap();
            p.var.set(&(t + noise).unwrap()).unwrap();
        }
    }
}

#[test]
fn head_k_reads_only_tower_k_unless_it_reads_the_joint_layer_norm() {
    let dir = tempfile::tempdir().unwrap();
    let d = data(dir.path());
    let set =
        ScoringSet::build(&Style::bert(), &d.tok, d.held_out(), &ScoringSpec::new(32)).unwrap();
    let batches = &set.batches[..1];
    for (input, independent) in [
        (HeadInput::TowerLayerNorm, true),
        (HeadInput::TowerOutput, true),
        (HeadInput::JointLayerNormSlice, false),
    ] {
        let m = model(Style::bert(), &d, 1);
        let h = TowerHeads::new(&HeadConfig::for_model(&m, input), &Device::Cpu, 2).unwrap();
        let before = evaluate(&m, &h, batches, false, &Default::default()).unwrap();
        perturb_tower(&m, 1);
        let after = evaluate(&m, &h, batches, false, &Default::default()).unwrap();
        assert_ne!(
            before.logp[1], after.logp[1],
            "{input:?}: tower 1 unchanged"
        );
        assert_eq!(
            before.logp[0] == after.logp[0],
            independent,
            "{input:?}: head 0 and tower 1"
        );
    }
}

fn weights(store: &towers::ParamStore) -> Vec<Vec<f32>> {
    store
        .params()
        .iter()
        .map(|p| p.var.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
        .collect()
}

#[test]
fn phase1_and_head_training_resume_bit_exactly_through_corpus_batches() {
    let dir = tempfile::tempdir().unwrap();
    let d = data(&dir.path().join("data"));
    for style in [Style::gpt(), Style::elmo()] {
        let src =
            |seed| CorpusSource::new(batcher(&style, &d.tok, d.train(), 32, 4, seed).unwrap());
        let tc = TrainConfig {
            budget: Budget::Steps(12),
            checkpoint_every: 4,
            ..TrainConfig::default()
        };
        let whole = model(style.clone(), &d, 3);
        Trainer::new(&whole, tc.clone(), None)
            .unwrap()
            .train(&mut src(7), &[])
            .unwrap();
        let out = dir.path().join(format!("{style}"));
        let killed = model(style.clone(), &d, 3);
        Trainer::new(&killed, tc.clone(), Some(&out))
            .unwrap()
            .train_until(&mut src(7), &[], Some(6))
            .unwrap();
        // A source of another seed would train on other batches: refused by name.
        let other = model(style.clone(), &d, 99);
        let err = Trainer::resume_or_new(&other, tc.clone(), &out, &mut src(12345))
            .err()
            .expect("a cursor of another seed must be refused");
        assert!(err.to_string().contains("seed 7"), "{err}");
        // A fresh model and a fresh source of the run's seed (the cursor holds the position).
        let resumed = model(style.clone(), &d, 99);
        let mut s = src(7);
        let mut tr = Trainer::resume_or_new(&resumed, tc.clone(), &out, &mut s).unwrap();
        assert_eq!(tr.state().step, 4);
        tr.train(&mut s, &[]).unwrap();
        assert_eq!(
            weights(whole.params()),
            weights(resumed.params()),
            "{style:?} phase 1"
        );

        // Phases 2/3 on the frozen model: killed after 5 updates, resumed by `retrain`.
        let hc = HeadConfig::for_model(&whole, HeadInput::TowerLayerNorm);
        let heads = |seed| TowerHeads::new(&hc, &Device::Cpu, seed).unwrap();
        let h_whole = heads(5);
        let ctl = towers::Control::default();
        retrain(&whole, &h_whole, tc.clone(), &mut src(8), &[], None, &ctl).unwrap();
        let h_out = dir.path().join(format!("{style:?}-heads"));
        let h_killed = heads(5);
        let frozen = FrozenTowers {
            model: &whole,
            heads: &h_killed,
        };
        Trainer::new(&frozen, tc.clone(), Some(&h_out))
            .unwrap()
            .train_until(&mut src(8), &[], Some(5))
            .unwrap();
        let h_resumed = heads(77);
        retrain(
            &whole,
            &h_resumed,
            tc.clone(),
            &mut src(8),
            &[],
            Some(&h_out),
            &ctl,
        )
        .unwrap();
        assert_eq!(
            weights(h_whole.params()),
            weights(h_resumed.params()),
            "{style:?} heads"
        );
    }
}

#[test]
fn heads_stop_when_validation_stops_improving() {
    let dir = tempfile::tempdir().unwrap();
    let d = data(&dir.path().join("data"));
    let mut spec = RunSpec::new(Style::gpt(), Preset::Tiny, d.spec.clone());
    spec.phase1.seq_len = 32;
    spec.phase1.batch_size = 4;
    spec.phase1.eval_batches = 2;
    spec.heads.max_budget_tokens = 10_000_000;
    spec.heads.eval_every = 2;
    spec.heads.patience = 1;
    // An improvement this large never comes: the first validation after the best one stops.
    spec.heads.min_delta = 100.0;
    let m = model(Style::gpt(), &d, 0);
    let valid = validation_batches(&spec, &d).unwrap();
    let opts = RunOptions {
        progress: experiment::Progress::silent(),
        ..RunOptions::default()
    };
    let (_, q) = train_heads_in(&spec, &m, &d, &valid, 1, &dir.path().join("h"), &opts).unwrap();
    assert!(q.stopped_early);
    assert_eq!(
        q.steps, 4,
        "best at the first validation (2), stopped at the next (4)"
    );
    assert!(q.nll.iter().all(|v| v.is_finite()));
}
