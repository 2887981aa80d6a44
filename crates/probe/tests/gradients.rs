//! The probes' losses against finite differences (f64), a finite non-zero gradient for every
//! variable, and the UPOS probe on planted labels.

mod common;

use candle_core::{DType, Device, Tensor, Var};
use corpus::Upos;
use probe::loss::{depth_loss, distance_loss, upos_loss};
use probe::{Bootstrap, DistanceLoss, GoldTree, LayerStates, ProbeParams, ProbeSet, Scores};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const H: usize = 6;
const K: usize = 3;

fn randn(shape: &[usize], rng: &mut ChaCha8Rng) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

/// A padded batch of two sentences (5 and 3 words) of random trees: states, distances,
/// depths, pair and word masks, lengths.
struct Batch {
    x: Tensor,
    dist: Tensor,
    depth: Tensor,
    pair_mask: Tensor,
    word_mask: Tensor,
    lens: Tensor,
}

fn batch(rng: &mut ChaCha8Rng) -> Batch {
    let lens = [5usize, 3];
    let n = 5;
    let mut dist = vec![0f64; 2 * n * n];
    let mut depth = vec![0f64; 2 * n];
    let mut pm = vec![0f64; 2 * n * n];
    let mut wm = vec![0f64; 2 * n];
    for (r, &m) in lens.iter().enumerate() {
        let t = GoldTree::from_heads(&common::random_heads(m, rng), &vec![Upos::Noun; m]).unwrap();
        for i in 0..m {
            depth[r * n + i] = t.depth(i) as f64;
            wm[r * n + i] = 1.0;
            for j in 0..m {
                dist[r * n * n + i * n + j] = t.distance(i, j) as f64;
                pm[r * n * n + i * n + j] = 1.0;
            }
        }
    }
    // Padded words (sentence 1, words 3 and 4) are zero vectors, as in the training batches.
    let mut x: Vec<f64> = (0..2 * n * H)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    x[(n + 3) * H..].iter_mut().for_each(|v| *v = 0.0);
    let d = Device::Cpu;
    Batch {
        x: Tensor::from_vec(x, (2, n, H), &d).unwrap(),
        dist: Tensor::from_vec(dist, (2, n, n), &d).unwrap(),
        depth: Tensor::from_vec(depth, (2, n), &d).unwrap(),
        pair_mask: Tensor::from_vec(pm, (2, n, n), &d).unwrap(),
        word_mask: Tensor::from_vec(wm, (2, n), &d).unwrap(),
        lens: Tensor::new(&[5f64, 3.0], &d).unwrap(),
    }
}

/// Checks d loss / d v of every variable against central differences, and that each
/// gradient is finite and not zero.
fn check(vars: &[Var], loss: &dyn Fn(&[Tensor]) -> Tensor) {
    let values: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let grads = loss(&values).backward().unwrap();
    for (k, v) in vars.iter().enumerate() {
        let g = grads
            .get(v)
            .unwrap_or_else(|| panic!("variable {k} gets no gradient"));
        let g: Vec<f64> = g.flatten_all().unwrap().to_vec1().unwrap();
        assert!(g.iter().all(|x| x.is_finite()), "variable {k}: {g:?}");
        assert!(g.iter().any(|x| *x != 0.0), "variable {k}: zero gradient");
        let base: Vec<f64> = v.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
        let eps = 1e-6;
        for (e, &ge) in g.iter().enumerate() {
            let at = |delta: f64| {
                let mut p = base.clone();
                p[e] += delta;
                let mut vals: Vec<Tensor> = values.iter().map(|t| t.detach()).collect();
                vals[k] = Tensor::from_vec(p, v.shape(), &Device::Cpu).unwrap();
                loss(&vals).to_scalar::<f64>().unwrap()
            };
            let fd = (at(eps) - at(-eps)) / (2.0 * eps);
            assert!(
                (fd - ge).abs() <= 1e-5 * (1.0 + fd.abs()),
                "variable {k} element {e}: autograd {ge}, finite differences {fd}"
            );
        }
    }
}

#[test]
fn distance_losses_match_finite_differences() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let b = batch(&mut rng);
    for kind in [DistanceLoss::HewittManning, DistanceLoss::ReleasedMse] {
        let proj = Var::from_tensor(&randn(&[K, H], &mut rng)).unwrap();
        check(&[proj], &|v| {
            distance_loss(&v[0], &b.x, &b.dist, &b.pair_mask, &b.lens, kind).unwrap()
        });
    }
}

#[test]
fn depth_loss_matches_finite_differences() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let b = batch(&mut rng);
    let proj = Var::from_tensor(&randn(&[K, H], &mut rng)).unwrap();
    check(&[proj], &|v| {
        depth_loss(&v[0], &b.x, &b.depth, &b.word_mask, &b.lens).unwrap()
    });
}

#[test]
fn upos_loss_matches_finite_differences() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let x = randn(&[12, H], &mut rng);
    let labels: Vec<u32> = (0..12)
        .map(|_| rng.random_range(0..Upos::COUNT as u32))
        .collect();
    let labels = Tensor::new(labels.as_slice(), &Device::Cpu).unwrap();
    let w = Var::from_tensor(&(randn(&[Upos::COUNT, H], &mut rng) * 0.3).unwrap()).unwrap();
    let bias = Var::from_tensor(&(randn(&[Upos::COUNT], &mut rng) * 0.1).unwrap()).unwrap();
    check(&[w, bias], &|v| {
        upos_loss(&v[0], &v[1], &x, &labels).unwrap()
    });
}

#[test]
fn the_f32_training_graph_gives_every_variable_a_gradient() {
    // The dtype and shapes the training loop uses (f32, zero-padded words).
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let b = batch(&mut rng);
    let f = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
    let proj = Var::from_tensor(&f(&randn(&[K, H], &mut rng))).unwrap();
    for loss in [
        distance_loss(
            proj.as_tensor(),
            &f(&b.x),
            &f(&b.dist),
            &f(&b.pair_mask),
            &f(&b.lens),
            DistanceLoss::HewittManning,
        )
        .unwrap(),
        distance_loss(
            proj.as_tensor(),
            &f(&b.x),
            &f(&b.dist),
            &f(&b.pair_mask),
            &f(&b.lens),
            DistanceLoss::ReleasedMse,
        )
        .unwrap(),
        depth_loss(
            proj.as_tensor(),
            &f(&b.x),
            &f(&b.depth),
            &f(&b.word_mask),
            &f(&b.lens),
        )
        .unwrap(),
    ] {
        let g = loss.backward().unwrap();
        let g: Vec<f32> = g
            .get(&proj)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert!(g.iter().all(|x| x.is_finite()) && g.iter().any(|x| *x != 0.0));
    }
}

/// Word vectors = a planted mean per tag + noise: the UPOS probe finds the tags.
#[test]
fn upos_probe_recovers_planted_labels() {
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let h = 32;
    let means: Vec<Vec<f32>> = (0..Upos::COUNT)
        .map(|_| (0..h).map(|_| rng.random_range(-1.0..1.0)).collect())
        .collect();
    let make = |count: usize, rng: &mut ChaCha8Rng| {
        let mut trees = Vec::new();
        let mut rows: Vec<f32> = Vec::new();
        for _ in 0..count {
            let n = rng.random_range(3..12);
            let tags: Vec<Upos> = (0..n)
                .map(|_| Upos::ALL[rng.random_range(0..Upos::COUNT)])
                .collect();
            for t in &tags {
                rows.extend(
                    means[*t as usize]
                        .iter()
                        .map(|m| m + rng.random_range(-0.3..0.3)),
                );
            }
            trees.push(GoldTree::from_heads(&common::random_heads(n, rng), &tags).unwrap());
        }
        let lens: Vec<usize> = trees.iter().map(GoldTree::len).collect();
        let states = LayerStates::from_layers(h, &lens, vec![rows]).unwrap();
        (trees, states)
    };
    let (tr, s_tr) = make(300, &mut rng);
    let (dv, s_dv) = make(50, &mut rng);
    let (te, s_te) = make(100, &mut rng);
    let fitted = ProbeParams::upos()
        .epochs(30)
        .learning_rate(1e-2)
        .fit(
            &ProbeSet::new(&tr, &s_tr, 0).unwrap(),
            &ProbeSet::new(&dv, &s_dv, 0).unwrap(),
        )
        .unwrap();
    let Scores::Upos(s) = fitted
        .evaluate(
            &ProbeSet::new(&te, &s_te, 0).unwrap(),
            &Bootstrap::default(),
        )
        .unwrap()
    else {
        panic!("not UPOS scores")
    };
    assert!(s.accuracy.value > 0.98, "{s:?}");
    // The dev loss went down from the first epoch to the kept one.
    assert!(fitted.dev_loss < fitted.history[0].dev);
}

#[test]
fn parameters_are_checked() {
    let set_ok = |p: ProbeParams| p.check(8);
    assert!(set_ok(ProbeParams::distance().rank(8)).is_ok());
    assert!(set_ok(ProbeParams::distance().rank(9)).is_err());
    assert!(set_ok(ProbeParams::distance().rank(0)).is_err());
    assert!(set_ok(ProbeParams::upos().rank(0)).is_ok());
    assert!(set_ok(ProbeParams::depth().rank(4).epochs(0)).is_err());
    assert!(set_ok(ProbeParams::depth().rank(4).learning_rate(f64::NAN)).is_err());
    assert!(set_ok(ProbeParams::depth().rank(4).learning_rate(0.0)).is_err());
    assert!(set_ok(ProbeParams::depth().rank(4).l2(-1.0)).is_err());
    assert!(set_ok(ProbeParams::depth().rank(4).batch_sentences(0)).is_err());
    assert!(set_ok(ProbeParams::depth().rank(4).patience(0)).is_err());
}
