//! Learning, optimizer and resumption tests of the training loop.

mod common;

use candle_core::{Device, Tensor};
use common::*;
use towers::clip_grad_norm;
use towers::unigram_entropy;
use towers::{AdamW, AdamWConfig, Budget, ElmoMode, ParamStore, Style, TrainConfig, Trainer};

fn cfg(steps: u64, lr: f64) -> TrainConfig {
    TrainConfig {
        lr,
        budget: Budget::Steps(steps),
        warmup_frac: 0.1,
        ..TrainConfig::default()
    }
}

/// The synthetic chain (24 symbols, 2 successors each) is far more predictable from context
/// than from unigram statistics; every style must get well below the unigram entropy. MLM has
/// fewer targets per batch and must learn positional attention, so it gets a larger batch and a
/// 40% masking rate to stay quick.
#[test]
fn loss_falls_well_below_unigram_entropy_for_every_style() {
    for (mc, steps, batch, mask_rate) in [
        (tiny(Style::gpt(), 2), 100, 16, 0.15),
        (tiny(Style::bert(), 2), 200, 32, 0.4),
        (tiny_elmo(ElmoMode::BiLstm), 100, 16, 0.15),
    ] {
        let m = model(&mc, 11);
        let mut train = source(&mc, batch, 8, 1).with_mask_rate(mask_rate).unwrap();
        let valid = batches(&mut source(&mc, 16, 8, 999), 8);
        let h = unigram_entropy(&valid);
        let mut tr = Trainer::new(&m, cfg(steps, 1e-2), None).unwrap();
        let s = tr.train(&mut train, &valid).unwrap();
        let v = s.val_loss.unwrap();
        eprintln!(
            "{:?}: unigram entropy {h:.3}, validation loss {v:.3}",
            mc.style()
        );
        assert!(
            v < 0.7 * h,
            "{:?}: validation loss {v} not well below unigram entropy {h}",
            mc.style()
        );
    }
}

#[test]
fn killed_run_resumes_to_identical_weights() {
    let mc = tiny(Style::bert(), 2);
    let mut tc = cfg(8, 5e-3);
    tc.grad_accum = 2;
    tc.checkpoint_every = 3;
    tc.eval_every = 4;
    let dir = tempfile::tempdir().unwrap();
    let valid = batches(&mut source(&mc, 4, 12, 50), 1);

    let a = model(&mc, 21);
    let mut sa = source(&mc, 4, 12, 5);
    let summary_a = Trainer::new(&a, tc.clone(), Some(&dir.path().join("a")))
        .unwrap()
        .train(&mut sa, &valid)
        .unwrap();

    // Run B is "killed" after update 7 (last checkpoint: update 6) ...
    let b = model(&mc, 21);
    let out_b = dir.path().join("b");
    let mut sb = source(&mc, 4, 12, 5);
    let s = Trainer::new(&b, tc.clone(), Some(&out_b))
        .unwrap()
        .train_until(&mut sb, &valid, Some(7))
        .unwrap();
    assert!(s.interrupted);
    // ... and restarted from scratch: fresh weights (another seed), a fresh source.
    let b2 = model(&mc, 999);
    let mut sb2 = source(&mc, 4, 12, 12345);
    let mut tr = Trainer::resume_or_new(&b2, tc.clone(), &out_b, &mut sb2).unwrap();
    assert_eq!(tr.state().step, 6);
    let s = tr.train(&mut sb2, &valid).unwrap();
    assert_eq!(s.steps, 8);
    // The last-10 training loss spans the interruption (the checkpoint keeps the losses).
    assert_eq!(s.train_loss, summary_a.train_loss);
    assert!(s.train_loss.is_finite());
    // Resuming a finished run does no update and still reports its loss and rate.
    let a2 = model(&mc, 5);
    let mut sa2 = source(&mc, 4, 12, 5);
    let mut done =
        Trainer::resume_or_new(&a2, tc.clone(), &dir.path().join("a"), &mut sa2).unwrap();
    let again = done.train(&mut sa2, &valid).unwrap();
    assert_eq!((again.steps, again.train_loss), (8, summary_a.train_loss));
    // ... nor a second validation: the final loss is the stored one and the log keeps one
    // final line (a BERT run resumed in its heads would otherwise validate at every restart).
    assert_eq!(again.val_loss, summary_a.val_loss);
    assert_eq!(again.checkpoint, summary_a.checkpoint);
    let log = std::fs::read_to_string(dir.path().join("a/metrics.jsonl")).unwrap();
    assert_eq!(log.matches("\"final\":true").count(), 1, "{log}");
    assert!(again.tokens_per_s.is_finite() && again.tokens_per_s > 0.0);
    // The rate is the run's, not the call's: the same whether the call trained or not, and
    // over both stretches of the interrupted run.
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * y.abs();
    assert!(close(again.tokens_per_s, summary_a.tokens_per_s));
    let st = tr.state();
    assert!(close(s.tokens_per_s, st.tokens as f64 / st.elapsed_s));

    assert_same_weights(&a, &b2, "after resume");
    // A checkpoint of another model is refused.
    let other = model(&tiny(Style::gpt(), 2), 1);
    assert!(Trainer::resume_or_new(&other, tc, &out_b, &mut sb2).is_err());
}

#[test]
fn token_budget_sets_the_step_count() {
    let mc = tiny(Style::gpt(), 1);
    let m = model(&mc, 1);
    let mut tc = cfg(0, 1e-3);
    tc.budget = Budget::Tokens(4 * 8 * 5 + 1);
    let s = Trainer::new(&m, tc, None)
        .unwrap()
        .train(&mut source(&mc, 4, 8, 1), &[])
        .unwrap();
    assert_eq!(s.steps, 6);
    assert_eq!(s.tokens, 4 * 8 * 6);
}

/// AdamW against the update written out by hand in f64.
#[test]
fn adamw_matches_hand_computed_steps() {
    let ps = ParamStore::new(&Device::Cpu, 0);
    let root = ps.root();
    let w = root.normal("w", &[2], 1.0).unwrap(); // decayed
    let b = root.constant("b", &[1], 0.5).unwrap(); // not decayed
    let w0: Vec<f32> = w.to_vec1().unwrap();
    let c = AdamWConfig::default();
    let mut opt = AdamW::new(ps.params(), c).unwrap();
    let grads = [[0.5f32, -0.1, 0.3], [-0.2, 0.4, 0.3]];
    let lrs = [0.1, 0.05];
    let mut p: Vec<f64> = vec![w0[0] as f64, w0[1] as f64, 0.5];
    let (mut m, mut v) = (vec![0f64; 3], vec![0f64; 3]);
    for (t, (g, lr)) in grads.iter().zip(lrs).enumerate() {
        let gw = Tensor::new(&g[..2], &Device::Cpu).unwrap();
        let gb = Tensor::new(&g[2..], &Device::Cpu).unwrap();
        opt.step(&[Some(gw), Some(gb)], lr).unwrap();
        let t = (t + 1) as i32;
        for i in 0..3 {
            let gi = g[i] as f64;
            m[i] = 0.9 * m[i] + 0.1 * gi;
            v[i] = 0.98 * v[i] + 0.02 * gi * gi;
            let mh = m[i] / (1.0 - 0.9f64.powi(t));
            let vh = v[i] / (1.0 - 0.98f64.powi(t));
            let wd = if i < 2 { 0.01 } else { 0.0 };
            p[i] = p[i] * (1.0 - lr * wd) - lr * mh / (vh.sqrt() + 1e-6);
        }
    }
    let got: Vec<f32> = w.to_vec1().unwrap();
    let gb: Vec<f32> = b.to_vec1().unwrap();
    for (x, y) in got.iter().chain(gb.iter()).zip(&p) {
        assert!((*x as f64 - y).abs() < 1e-6, "{x} vs {y}");
    }
    assert_eq!(opt.step_count(), 2);
}

#[test]
fn clipping_scales_to_max_norm() {
    let mut g = vec![
        Some(Tensor::new(&[3f32, 0.0], &Device::Cpu).unwrap()),
        None,
        Some(Tensor::new(&[4f32], &Device::Cpu).unwrap()),
    ];
    let n = clip_grad_norm(&mut g, 1.0).unwrap();
    assert!((n - 5.0).abs() < 1e-6);
    let a: Vec<f32> = g[0].as_ref().unwrap().to_vec1().unwrap();
    assert!((a[0] - 0.6).abs() < 1e-5);
    let mut bad = vec![Some(Tensor::new(&[f32::NAN], &Device::Cpu).unwrap())];
    assert!(clip_grad_norm(&mut bad, 1.0).is_err());
}

/// A wall-clock interval checkpoints between the update-count ones: at 0 s every update is
/// saved, so a run killed after update 5 resumes at 5 (not at 0, the last scheduled one) and
/// ends with the weights of an uninterrupted run. On resume the caller's interval wins over the
/// stored one, and a negative interval is refused.
#[test]
fn a_wall_clock_interval_checkpoints_between_scheduled_checkpoints() {
    let mc = tiny(Style::gpt(), 2);
    let mut tc = cfg(8, 5e-3);
    tc.checkpoint_every = 0;
    tc.checkpoint_secs = Some(0.0);
    let dir = tempfile::tempdir().unwrap();
    let valid = batches(&mut source(&mc, 4, 12, 50), 1);

    let whole = model(&mc, 4);
    Trainer::new(&whole, tc.clone(), None)
        .unwrap()
        .train(&mut source(&mc, 4, 12, 5), &valid)
        .unwrap();

    let out = dir.path().join("killed");
    let first = model(&mc, 4);
    let s = Trainer::new(&first, tc.clone(), Some(&out))
        .unwrap()
        .train_until(&mut source(&mc, 4, 12, 5), &valid, Some(5))
        .unwrap();
    assert!(s.interrupted);

    let again = model(&mc, 99);
    let mut src = source(&mc, 4, 12, 777);
    let mut resumed = tc.clone();
    resumed.checkpoint_secs = Some(3600.0);
    resumed.budget = Budget::Steps(100);
    // Other AdamW settings must not reach the rest of the run: the stored ones are rebuilt.
    resumed.adamw.weight_decay = 0.5;
    let mut tr = Trainer::resume_or_new(&again, resumed, &out, &mut src).unwrap();
    assert_eq!(tr.state().step, 5, "the interval saved update 5");
    assert_eq!(tr.state().train.checkpoint_secs, Some(3600.0));
    assert_eq!(
        tr.state().train.budget,
        Budget::Steps(8),
        "the stored budget wins"
    );
    assert_eq!(tr.state().train.adamw, tc.adamw);
    assert_eq!(tr.train(&mut src, &valid).unwrap().steps, 8);
    assert_same_weights(
        &whole,
        &again,
        "after a resume from the interval's checkpoint",
    );

    // Settings that would hang, do nothing or silently drop a feature are refused.
    let bads: [fn(&mut TrainConfig); 5] = [
        |c| c.checkpoint_secs = Some(-1.0),
        |c| c.clip_norm = f64::NAN,
        |c| c.budget = Budget::WallClockSecs(f64::NAN),
        |c| {
            c.eval_every = 2;
            c.early_stop = Some(towers::EarlyStop {
                patience: 0,
                min_delta: 1e-3,
            })
        },
        |c| c.warmup_frac = 1.0,
    ];
    for edit in bads {
        let mut bad = tc.clone();
        edit(&mut bad);
        assert!(matches!(
            Trainer::new(&model(&mc, 1), bad, None),
            Err(towers::TowersError::Config(_))
        ));
    }
}

#[test]
fn truncated_checkpoint_is_a_typed_error() {
    let mc = tiny(Style::gpt(), 1);
    let m = model(&mc, 1);
    let dir = tempfile::tempdir().unwrap();
    let mut tc = cfg(1, 1e-3);
    tc.checkpoint_every = 1;
    let mut s = source(&mc, 2, 8, 1);
    Trainer::new(&m, tc.clone(), Some(dir.path()))
        .unwrap()
        .train(&mut s, &[])
        .unwrap();
    let ck = dir.path().join("checkpoint");
    let loaded = towers::load_model(&ck, &Device::Cpu).unwrap();
    assert_eq!(loaded.config(), &mc);
    let w = ck.join("weights.safetensors");
    let bytes = std::fs::read(&w).unwrap();
    std::fs::write(&w, &bytes[..bytes.len() / 2]).unwrap();
    match Trainer::resume_or_new(&m, tc, dir.path(), &mut s) {
        Err(towers::TowersError::Checkpoint { .. }) => {}
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("a truncated checkpoint was accepted"),
    }
}

/// Under the constant schedule, a finished run continued to a larger budget ends with the
/// weights of one run trained to that budget; under linear decay the continuation is refused.
#[test]
fn constant_schedule_run_continues_to_a_larger_budget_bit_exactly() {
    use towers::Schedule;
    let mc = tiny(Style::gpt(), 2);
    let mut tc = cfg(10, 5e-3);
    tc.schedule = Schedule::Constant { warmup_steps: 3 };
    tc.checkpoint_every = 4;
    let dir = tempfile::tempdir().unwrap();
    let valid = batches(&mut source(&mc, 4, 12, 50), 1);

    let whole = model(&mc, 3);
    let mut long = tc.clone();
    long.budget = Budget::Steps(10);
    Trainer::new(&whole, long, None)
        .unwrap()
        .train(&mut source(&mc, 4, 12, 5), &valid)
        .unwrap();

    let mut short = tc.clone();
    short.budget = Budget::Steps(6);
    let out = dir.path().join("short");
    let first = model(&mc, 3);
    let s = Trainer::new(&first, short.clone(), Some(&out))
        .unwrap()
        .train(&mut source(&mc, 4, 12, 5), &valid)
        .unwrap();
    assert_eq!(s.steps, 6);

    let again = model(&mc, 77);
    let mut src = source(&mc, 4, 12, 9);
    let mut tr = Trainer::resume_or_new(&again, short.clone(), &out, &mut src).unwrap();
    assert!(
        tr.extend_budget(Budget::Steps(4)).is_err(),
        "a smaller budget is refused"
    );
    tr.extend_budget(Budget::Steps(10)).unwrap();
    assert_eq!(tr.train(&mut src, &valid).unwrap().steps, 10);
    assert_same_weights(&whole, &again, "after the continuation");

    // Linear decay: every rate depends on the total, so the continuation is refused.
    let out = dir.path().join("decay");
    let m = model(&mc, 3);
    let decay = cfg(6, 5e-3);
    Trainer::new(&m, decay.clone(), Some(&out))
        .unwrap()
        .train(&mut source(&mc, 4, 12, 5), &valid)
        .unwrap();
    let mut src = source(&mc, 4, 12, 5);
    let mut tr = Trainer::resume_or_new(&m, decay, &out, &mut src).unwrap();
    let e = tr.extend_budget(Budget::Steps(10)).unwrap_err().to_string();
    assert!(e.contains("linear-decay"), "{e}");
}

/// Every variable of `a` equals the one of `b`, bit for bit.
fn assert_same_weights(a: &towers::TwoTowerLm, b: &towers::TwoTowerLm, when: &str) {
    let (wa, wb) = (
        a.params().snapshot().unwrap(),
        b.params().snapshot().unwrap(),
    );
    for (name, ta) in &wa {
        let d: f32 = (ta - &wb[name])
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        assert_eq!(d, 0.0, "{name} differs {when}");
    }
}

/// An update whose batch has no target leaves AdamW's own step count behind the trainer's; a
/// resume restores the optimizer's count (saved beside the trainer's), so its bias correction
/// continues as in the uninterrupted run.
#[test]
fn a_resume_after_an_update_without_targets_continues_bit_exactly() {
    let mc = tiny(Style::gpt(), 2);
    let mut data = batches(&mut source(&mc, 4, 8, 3), 6);
    data[1].labels.fill(corpus::IGNORE_LABEL);
    assert_eq!(data[1].n_targets(), 0);
    let mut tc = cfg(6, 5e-3);
    tc.checkpoint_every = 0;
    tc.checkpoint_secs = Some(0.0);
    let src = || towers::VecSource::new(data.clone()).unwrap();

    let whole = model(&mc, 8);
    Trainer::new(&whole, tc.clone(), None)
        .unwrap()
        .train(&mut src(), &[])
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("killed");
    let first = model(&mc, 8);
    let s = Trainer::new(&first, tc.clone(), Some(&out))
        .unwrap()
        .train_until(&mut src(), &[], Some(3))
        .unwrap();
    assert!(s.interrupted);
    let again = model(&mc, 77);
    let mut resumed_src = src();
    let mut tr = Trainer::resume_or_new(&again, tc, &out, &mut resumed_src).unwrap();
    assert_eq!(tr.state().step, 3);
    assert_eq!(tr.state().optimizer_step, Some(2));
    tr.train(&mut resumed_src, &[]).unwrap();
    assert_same_weights(
        &whole,
        &again,
        "after a resume past an update without targets",
    );
}
