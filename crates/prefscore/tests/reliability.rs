//! Reliability, disattenuation and partial correlation against data whose truth is planted.

use prefscore::{
    disattenuate, disattenuated_correlation, partial_correlation, partial_on_log_frequency,
    pearson, ranks, retest_reliability, spearman_brown, split_half, split_half_reliability,
    tokens_with_min_count, Bootstrap, Method, PrefscoreError, ScoreKind, TokenStats,
    DEFAULT_MIN_COUNT,
};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn close(a: f64, b: f64, tol: f64) {
    assert!((a - b).abs() <= tol, "{a} vs {b} (tolerance {tol})");
}

/// A standard normal draw (Box–Muller; no extra dependency).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]: ln is finite
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

fn boot(resamples: usize, seed: u64) -> Bootstrap {
    Bootstrap {
        resamples,
        level: 0.95,
        seed,
    }
}

/// `t + N(0, noise_var)` per token, as a score vector.
fn measure(t: &[f64], noise_var: f64, rng: &mut ChaCha8Rng) -> Vec<Option<f64>> {
    t.iter()
        .map(|&v| Some(v + noise_var.sqrt() * normal(rng)))
        .collect()
}

#[test]
fn spearman_brown_known_values() {
    assert_eq!(spearman_brown(0.5), 2.0 / 3.0);
    assert_eq!(spearman_brown(1.0), 1.0);
    assert_eq!(spearman_brown(0.0), 0.0);
    close(spearman_brown(0.8), 1.6 / 1.8, 1e-15);
    close(spearman_brown(-0.2), -0.5, 1e-15);
    // At and below -1/3 the formula leaves [-1, 1]: clamped, no division by zero at -1.
    close(spearman_brown(-1.0 / 3.0), -1.0, 1e-15);
    assert_eq!(spearman_brown(-0.9), -1.0);
    assert_eq!(spearman_brown(-1.0), -1.0);
    assert_eq!(spearman_brown(-7.0), -1.0);
    assert_eq!(spearman_brown(3.0), 1.0);
    assert!(spearman_brown(f64::NAN).is_nan());
    // Increasing on its whole domain, and never below the half correlation when positive.
    let grid: Vec<f64> = (-100..=100).map(|i| i as f64 / 100.0).collect();
    for w in grid.windows(2) {
        assert!(spearman_brown(w[1]) >= spearman_brown(w[0]));
        if w[1] > 0.0 {
            assert!(spearman_brown(w[1]) > w[1] || w[1] == 1.0);
        }
    }
}

#[test]
fn disattenuate_edge_cases() {
    assert_eq!(disattenuate(0.5, 0.5, 0.5), Some(1.0));
    close(disattenuate(0.6, 0.81, 0.64).unwrap(), 0.6 / 0.72, 1e-15);
    // Not clamped: sampling error can push it above 1.
    close(disattenuate(0.9, 0.8, 0.8).unwrap(), 1.125, 1e-15);
    close(disattenuate(-0.3, 0.36, 0.25).unwrap(), -1.0, 1e-15);
    for (aa, bb) in [(0.0, 0.5), (0.5, 0.0), (-0.2, 0.5), (0.5, -1.0), (0.0, 0.0)] {
        assert_eq!(disattenuate(0.4, aa, bb), None, "{aa} {bb}");
    }
    assert_eq!(disattenuate(0.4, f64::NAN, 0.5), None);
    assert_eq!(disattenuate(0.4, f64::INFINITY, 0.5), None);
    assert_eq!(disattenuate(f64::NAN, 0.5, 0.5), None);
}

/// Reliability of t + e with var(t) = 1, var(e) = σ² is 1 / (1 + σ²).
#[test]
fn retest_reliability_matches_planted_noise() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let n = 4000;
    let t: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
    let tokens: Vec<u32> = (0..n as u32).collect();
    for (noise_var, seed) in [(0.5, 1u64), (0.25, 2), (2.0, 3)] {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let a = measure(&t, noise_var, &mut rng);
        let a2 = measure(&t, noise_var, &mut rng);
        let rel = retest_reliability(&a, &a2, &tokens, Method::Pearson, &boot(400, 7)).unwrap();
        let truth = 1.0 / (1.0 + noise_var);
        // Sampling sd of r at n = 4000 is about (1 - r²)/√n < 0.016.
        close(rel.r, truth, 0.04);
        assert_eq!(rel.half_r, rel.r);
        assert_eq!(rel.n, n);
        let iv = rel.interval.unwrap();
        assert!(iv.lo < rel.r && rel.r < iv.hi, "{iv:?} {}", rel.r);
        assert!(iv.hi - iv.lo < 0.1, "{iv:?}");
        // Seeded: identical again, another seed moves the interval.
        let again = retest_reliability(&a, &a2, &tokens, Method::Pearson, &boot(400, 7)).unwrap();
        assert_eq!(again, rel);
        let other = retest_reliability(&a, &a2, &tokens, Method::Pearson, &boot(400, 8)).unwrap();
        assert_eq!(other.r, rel.r);
        assert_ne!(other.interval, rel.interval);
    }
}

/// Two runs measuring true scores that correlate ρ, each with a retest: the disattenuated
/// value recovers ρ, the raw correlation is attenuated by √(rel_a rel_b).
#[test]
fn disattenuated_correlation_recovers_planted_rho() {
    let n = 4000;
    let (var_a, var_b) = (0.5, 0.25);
    let attenuation = (1.0f64 / (1.0 + var_a) / (1.0 + var_b)).sqrt();
    for (rho, seed) in [(1.0, 21u64), (0.6, 22), (0.0, 23)] {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let ta: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
        let tb: Vec<f64> = ta
            .iter()
            .map(|&v| rho * v + (1.0f64 - rho * rho).sqrt() * normal(&mut rng))
            .collect();
        let mut a = measure(&ta, var_a, &mut rng);
        let a2 = measure(&ta, var_a, &mut rng);
        let b = measure(&tb, var_b, &mut rng);
        let mut b2 = measure(&tb, var_b, &mut rng);
        // Tokens unscored in one vector drop out; ids outside `tokens` are ignored.
        a[3] = None;
        b2[10] = None;
        b2[11] = None;
        let tokens: Vec<u32> = (0..n as u32 - 100).collect();
        let d =
            disattenuated_correlation(&a, &a2, &b, &b2, &tokens, Method::Pearson, &boot(300, 5))
                .unwrap();
        assert_eq!(d.n, n - 100 - 3);
        close(d.rel_a, 1.0 / (1.0 + var_a), 0.04);
        close(d.rel_b, 1.0 / (1.0 + var_b), 0.04);
        close(d.raw, rho * attenuation, 0.04);
        let v = d.value.unwrap();
        close(v, rho, 0.05);
        assert_eq!(v, disattenuate(d.raw, d.rel_a, d.rel_b).unwrap());
        let iv = d.interval.unwrap();
        assert!(iv.lo < v && v < iv.hi, "{iv:?} {v}");
        assert!(iv.lo < rho && rho < iv.hi, "{iv:?} {rho}");
        if rho > 0.0 {
            // The raw correlation understates the agreement of the true scores.
            assert!(d.raw < v - 0.1, "raw {} vs disattenuated {v}", d.raw);
        }
        // Spearman on normal data: close to the same picture (not exact classical test theory).
        let s = disattenuated_correlation(&a, &a2, &b, &b2, &tokens, Method::Spearman, &boot(0, 5))
            .unwrap();
        assert_eq!(s.interval, None);
        close(s.value.unwrap(), rho, 0.06);
    }
}

/// A retest that is pure noise: the reliability is about 0, so many replicates have no
/// disattenuated value and no interval is claimed.
#[test]
fn unreliable_run_gives_no_interval() {
    let n = 2000;
    let mut rng = ChaCha8Rng::seed_from_u64(31);
    let t: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
    let a = measure(&t, 0.3, &mut rng);
    let a2: Vec<Option<f64>> = (0..n).map(|_| Some(normal(&mut rng))).collect();
    let b = measure(&t, 0.3, &mut rng);
    let b2 = measure(&t, 0.3, &mut rng);
    let tokens: Vec<u32> = (0..n as u32).collect();
    let d = disattenuated_correlation(&a, &a2, &b, &b2, &tokens, Method::Pearson, &boot(300, 1))
        .unwrap();
    assert!(d.rel_a.abs() < 0.08, "{}", d.rel_a);
    assert!(d.rel_b > 0.7);
    assert_eq!(d.interval, None);
    assert_eq!(d.value, disattenuate(d.raw, d.rel_a, d.rel_b));
}

/// Positions of `n_tokens` tokens, `occ` occurrences each in shuffled order. Per token a true
/// score t ~ N(0, 1); tower 1 (primary: 0.5 higher mean log p) has log p ~ N(-7.5 - t/2, 1),
/// tower 0 log p ~ N(-8 + t/2, 1), so the geometric-mean score (tower 1 first) has truth
/// 0.5 - t and per-occurrence noise variance 2.
fn planted_positions(
    n_tokens: usize,
    occ: usize,
    seed: u64,
) -> (Vec<u32>, [Vec<f32>; 2], Vec<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let t: Vec<f64> = (0..n_tokens).map(|_| normal(&mut rng)).collect();
    let mut targets: Vec<u32> = (0..n_tokens as u32)
        .flat_map(|a| std::iter::repeat_n(a, occ))
        .collect();
    targets.shuffle(&mut rng);
    let mut lp0 = Vec::with_capacity(targets.len());
    let mut lp1 = Vec::with_capacity(targets.len());
    for &a in &targets {
        let ta = t[a as usize];
        lp0.push((-8.0 + ta / 2.0 + normal(&mut rng)).min(0.0) as f32);
        lp1.push((-7.5 - ta / 2.0 + normal(&mut rng)).min(0.0) as f32);
    }
    let truth = t.iter().map(|v| 0.5 - v).collect();
    (targets, [lp0, lp1], truth)
}

#[test]
fn split_half_reliability_from_known_probabilities() {
    let n_tokens = 2000;
    let tokens: Vec<u32> = (0..n_tokens as u32).collect();
    let mut last_r = f64::INFINITY;
    // Occurrences per token -> expected full-data reliability 1 / (1 + 2·σ²/occ), σ² = 1 per
    // tower, half-score reliability 1 / (1 + 4/occ).
    for (occ, tol) in [(200usize, 0.01), (20, 0.03), (4, 0.04)] {
        let (targets, [lp0, lp1], truth) = planted_positions(n_tokens, occ, 40 + occ as u64);
        let lps: [&[f32]; 2] = [&lp0, &lp1];
        let [h0, h1] = split_half(&targets, &lps, n_tokens, ScoreKind::GeometricMean).unwrap();
        let mut full = TokenStats::new(n_tokens, 2).unwrap();
        full.add(&targets, &lps).unwrap();
        assert_eq!(full.primary_order(), vec![1, 0]);
        assert_eq!(h0.towers, vec![1, 0]);
        assert_eq!(h1.towers, vec![1, 0]);
        // Each half holds half of every token's occurrences: its error variance is 4/occ.
        for h in [&h0, &h1] {
            let mse = (0..n_tokens)
                .map(|a| (h.values[a].unwrap() - truth[a]).powi(2))
                .sum::<f64>()
                / n_tokens as f64;
            close(mse, 4.0 / occ as f64, 0.15 * 4.0 / occ as f64);
        }
        let rel = split_half_reliability(
            &targets,
            &lps,
            n_tokens,
            ScoreKind::GeometricMean,
            &tokens,
            Method::Pearson,
            &boot(200, 3),
        )
        .unwrap();
        let var_t = {
            let m = truth.iter().sum::<f64>() / n_tokens as f64;
            truth.iter().map(|v| (v - m).powi(2)).sum::<f64>() / n_tokens as f64
        };
        let expected_half = var_t / (var_t + 4.0 / occ as f64);
        let expected_full = var_t / (var_t + 2.0 / occ as f64);
        assert_eq!(rel.n, n_tokens);
        close(rel.half_r, expected_half, tol);
        close(rel.r, expected_full, tol);
        assert_eq!(rel.r, spearman_brown(rel.half_r));
        assert!(rel.r > rel.half_r);
        let iv = rel.interval.unwrap();
        assert!(iv.lo <= rel.r && rel.r <= iv.hi, "{iv:?}");
        // Fewer occurrences, lower reliability.
        assert!(rel.r < last_r);
        last_r = rel.r;
        if occ == 200 {
            assert!(rel.r > 0.98);
        }
    }
}

/// Hand-made positions: occurrences are dealt 1st, 3rd ... / 2nd, 4th ..., and the second half,
/// whose own eq. 3 order would make tower 1 primary, keeps the full data's order.
#[test]
fn split_half_deals_alternately_with_the_full_order() {
    let ln = |p: f64| p.ln() as f32;
    // Token 0 at positions 0, 2, 4, 6; token 1 at 1, 5; token 2 at 3.
    let targets = [0u32, 1, 0, 2, 0, 1, 0];
    let p0 = [0.9, 0.5, 0.1, 0.7, 0.6, 0.3, 0.2];
    let p1 = [0.1, 0.4, 0.8, 0.2, 0.5, 0.35, 0.3];
    let lp0: Vec<f32> = p0.iter().map(|&p| ln(p)).collect();
    let lp1: Vec<f32> = p1.iter().map(|&p| ln(p)).collect();
    let lps: [&[f32]; 2] = [&lp0, &lp1];
    let [h0, h1] = split_half(&targets, &lps, 4, ScoreKind::ArithmeticMean).unwrap();
    assert_eq!(h0.towers, vec![0, 1]);
    assert_eq!(h1.towers, vec![0, 1]);
    // Half 0: token 0 occurrences 1 and 3 (positions 0, 4), token 1 at 1, token 2 at 3.
    close(h0.get(0).unwrap(), (0.75f64 / 0.3).ln(), 1e-6);
    close(h0.get(1).unwrap(), (0.5f64 / 0.4).ln(), 1e-6);
    close(h0.get(2).unwrap(), (0.7f64 / 0.2).ln(), 1e-6);
    // Half 1: token 0 at positions 2, 6, token 1 at 5; token 2 occurred once, token 3 never.
    close(h1.get(0).unwrap(), (0.15f64 / 0.55).ln(), 1e-6);
    close(h1.get(1).unwrap(), (0.3f64 / 0.35).ln(), 1e-6);
    assert_eq!(h1.get(2), None);
    assert_eq!(h0.get(3), None);
    // The check above is meaningful: half 1 on its own would rank tower 1 first.
    let mut own = TokenStats::new(4, 2).unwrap();
    own.add(
        &[0, 1, 0],
        &[&[lp0[2], lp0[5], lp0[6]], &[lp1[2], lp1[5], lp1[6]]],
    )
    .unwrap();
    assert_eq!(own.primary_order(), vec![1, 0]);
    let mut full = TokenStats::new(4, 2).unwrap();
    full.add(&targets, &lps).unwrap();
    assert_eq!(full.primary_order(), vec![0, 1]);
    // Geometric mean too: token 0's half-1 score is the mean log ratio of positions 2 and 6.
    let [_, g1] = split_half(&targets, &lps, 4, ScoreKind::GeometricMean).unwrap();
    close(
        g1.get(0).unwrap(),
        0.5 * ((0.1f64 / 0.8).ln() + (0.2f64 / 0.3).ln()),
        1e-6,
    );
}

#[test]
fn split_half_errors() {
    let targets = [0u32, 1, 0];
    let lp = [-1.0f32, -2.0, -0.5];
    let kind = ScoreKind::ArithmeticMean;
    assert!(matches!(
        split_half(&targets, &[&lp, &lp, &lp], 2, kind),
        Err(PrefscoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        split_half(&[], &[&[], &[]], 2, kind),
        Err(PrefscoreError::NotEnoughData(_))
    ));
    assert!(matches!(
        split_half(&targets, &[&lp, &lp[..2]], 2, kind),
        Err(PrefscoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        split_half(&targets, &[&lp, &[-1.0, f32::NAN, -1.0]], 2, kind),
        Err(PrefscoreError::BadValue { .. })
    ));
    assert!(matches!(
        split_half(&[0, 5, 0], &[&lp, &lp], 2, kind),
        Err(PrefscoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        split_half(&targets, &[&lp, &lp], 0, kind),
        Err(PrefscoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        split_half_reliability(
            &targets,
            &[&lp, &lp],
            2,
            kind,
            &[],
            Method::Pearson,
            &boot(0, 0)
        ),
        Err(PrefscoreError::NotEnoughData(_))
    ));
    // Identical towers: every half score is 0, a constant.
    let (t, [l0, _], _) = planted_positions(10, 4, 1);
    assert!(matches!(
        split_half_reliability(
            &t,
            &[&l0, &l0],
            10,
            kind,
            &(0..10).collect::<Vec<u32>>(),
            Method::Pearson,
            &boot(0, 0)
        ),
        Err(PrefscoreError::Undefined(_))
    ));
}

/// Least-squares residuals of `v` on `z` (with intercept).
fn residuals(v: &[f64], z: &[f64]) -> Vec<f64> {
    let n = v.len() as f64;
    let (mv, mz) = (v.iter().sum::<f64>() / n, z.iter().sum::<f64>() / n);
    let szv: f64 = z.iter().zip(v).map(|(a, b)| (a - mz) * (b - mv)).sum();
    let szz: f64 = z.iter().map(|a| (a - mz) * (a - mz)).sum();
    let beta = szv / szz;
    v.iter()
        .zip(z)
        .map(|(b, a)| b - mv - beta * (a - mz))
        .collect()
}

#[test]
fn partial_correlation_matches_residual_regression() {
    let mut rng = ChaCha8Rng::seed_from_u64(51);
    let n = 4000;
    let z: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
    let x: Vec<f64> = z.iter().map(|v| v + 0.5 * normal(&mut rng)).collect();
    let y: Vec<f64> = z.iter().map(|v| v + 0.5 * normal(&mut rng)).collect();
    // A case with a real partial association too: w shares x's own noise.
    let w: Vec<f64> = x
        .iter()
        .zip(&z)
        .map(|(a, b)| 0.3 * b + (a - b) + 0.5 * normal(&mut rng))
        .collect();
    let raw = pearson(&x, &y).unwrap();
    assert!(raw > 0.75, "{raw}");
    let p = partial_correlation(&x, &y, &z, Method::Pearson).unwrap();
    assert!(p.abs() < 0.05, "{p}");
    for (u, v) in [(&x, &y), (&x, &w), (&w, &y)] {
        let by_residuals = pearson(&residuals(u, &z), &residuals(v, &z)).unwrap();
        let formula = partial_correlation(u, v, &z, Method::Pearson).unwrap();
        close(formula, by_residuals, 1e-10);
        // Spearman: the same on ranks.
        let (ru, rv, rz) = (ranks(u), ranks(v), ranks(&z));
        let by_rank_residuals = pearson(&residuals(&ru, &rz), &residuals(&rv, &rz)).unwrap();
        let spearman = partial_correlation(u, v, &z, Method::Spearman).unwrap();
        close(spearman, by_rank_residuals, 1e-10);
    }
    assert!(partial_correlation(&x, &w, &z, Method::Pearson).unwrap() > 0.5);
}

#[test]
fn partial_on_log_frequency_removes_a_shared_frequency_effect() {
    let mut rng = ChaCha8Rng::seed_from_u64(61);
    let n = 3000;
    let freq: Vec<u64> = (0..n)
        .map(|_| (10f64.powf(rng.random_range(0.0..5.0))).round() as u64)
        .collect();
    let lz: Vec<f64> = freq.iter().map(|&f| (f as f64).ln()).collect();
    let a: Vec<Option<f64>> = lz
        .iter()
        .map(|v| Some(0.4 * v + normal(&mut rng)))
        .collect();
    let mut b: Vec<Option<f64>> = lz
        .iter()
        .map(|v| Some(-0.1 + 0.4 * v + normal(&mut rng)))
        .collect();
    b[0] = None;
    let tokens: Vec<u32> = (0..n as u32).collect();
    for method in [Method::Pearson, Method::Spearman] {
        let pc = partial_on_log_frequency(&a, &b, &freq, &tokens, method).unwrap();
        assert_eq!(pc.n, n - 1);
        assert_eq!(pc.method, method);
        assert!(pc.raw > 0.6, "{pc:?}");
        assert!(pc.r_az > 0.7 && pc.r_bz > 0.7, "{pc:?}");
        assert!(pc.partial.abs() < 0.06, "{pc:?}");
        let x: Vec<f64> = (1..n).map(|i| a[i].unwrap()).collect();
        let y: Vec<f64> = (1..n).map(|i| b[i].unwrap()).collect();
        assert_eq!(
            pc.partial,
            partial_correlation(&x, &y, &lz[1..], method).unwrap()
        );
    }
    // Frequency 0 on a kept token is refused; on a dropped (unscored) token it does not matter.
    let mut f0 = freq.clone();
    f0[0] = 0;
    assert!(partial_on_log_frequency(&a, &b, &f0, &tokens, Method::Pearson).is_ok());
    f0[5] = 0;
    assert!(matches!(
        partial_on_log_frequency(&a, &b, &f0, &tokens, Method::Pearson),
        Err(PrefscoreError::BadValue { value, .. }) if value == 0.0
    ));
}

#[test]
fn reliability_errors() {
    let a: Vec<Option<f64>> = [1.0, 2.0, 3.0, 5.0, 4.0].map(Some).to_vec();
    let b: Vec<Option<f64>> = [2.0, 1.0, 4.0, 3.0, 6.0].map(Some).to_vec();
    let constant = vec![Some(1.5); 5];
    let all: Vec<u32> = (0..5).collect();
    let m = Method::Pearson;
    let bt = boot(50, 0);
    assert!(retest_reliability(&a, &b, &all, m, &bt).is_ok());
    // Length mismatch.
    assert!(matches!(
        retest_reliability(&a, &b[..4], &all, m, &bt),
        Err(PrefscoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        disattenuated_correlation(&a, &b, &a, &b[..4], &all, m, &bt),
        Err(PrefscoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        partial_on_log_frequency(&a, &b, &[1, 2, 3], &all, m),
        Err(PrefscoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        partial_correlation(&[1.0, 2.0, 3.0, 4.0], &[1.0, 2.0, 3.0], &[1.0; 4], m),
        Err(PrefscoreError::InvalidArgument(_))
    ));
    // Empty token set, and too few scored tokens.
    assert!(matches!(
        retest_reliability(&a, &b, &[], m, &bt),
        Err(PrefscoreError::NotEnoughData(_))
    ));
    assert!(matches!(
        disattenuated_correlation(&a, &b, &a, &b, &[], m, &bt),
        Err(PrefscoreError::NotEnoughData(_))
    ));
    let mut sparse = a.clone();
    sparse[0] = None;
    sparse[1] = None;
    sparse[2] = None;
    assert!(matches!(
        retest_reliability(&sparse, &b, &all, m, &bt),
        Err(PrefscoreError::NotEnoughData(_))
    ));
    assert!(matches!(
        partial_correlation(&[1.0, 2.0, 3.0], &[1.0, 3.0, 2.0], &[2.0, 1.0, 3.0], m),
        Err(PrefscoreError::NotEnoughData(_))
    ));
    // Zero variance.
    assert!(matches!(
        retest_reliability(&a, &constant, &all, m, &bt),
        Err(PrefscoreError::Undefined(_))
    ));
    assert!(matches!(
        disattenuated_correlation(&a, &b, &b, &constant, &all, Method::Spearman, &bt),
        Err(PrefscoreError::Undefined(_))
    ));
    let x = [1.0, 2.0, 3.0, 5.0, 4.0];
    let y = [2.0, 1.0, 4.0, 3.0, 6.0];
    assert!(matches!(
        partial_correlation(&x, &y, &[7.0; 5], m),
        Err(PrefscoreError::Undefined(_))
    ));
    // x an exact linear function of z: no residual left.
    let z: Vec<f64> = x.iter().map(|v| 3.0 * v - 1.0).collect();
    assert!(matches!(
        partial_correlation(&x, &y, &z, m),
        Err(PrefscoreError::Undefined(_))
    ));
    // NaN.
    let mut nan = a.clone();
    nan[2] = Some(f64::NAN);
    assert!(matches!(
        retest_reliability(&a, &nan, &all, m, &bt),
        Err(PrefscoreError::BadValue { .. })
    ));
    assert!(matches!(
        partial_correlation(&x, &y, &[1.0, 2.0, f64::NAN, 3.0, 1.0], m),
        Err(PrefscoreError::BadValue { .. })
    ));
    // Bad token ids and bootstrap level.
    assert!(matches!(
        retest_reliability(&a, &b, &[0, 1, 2, 9], m, &bt),
        Err(PrefscoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        retest_reliability(&a, &b, &[0, 1, 2, 1], m, &bt),
        Err(PrefscoreError::InvalidArgument(_))
    ));
    let bad = Bootstrap { level: 1.0, ..bt };
    assert!(matches!(
        retest_reliability(&a, &b, &all, m, &bad),
        Err(PrefscoreError::InvalidArgument(_))
    ));
}

#[test]
fn tokens_with_min_count_needs_every_run() {
    assert_eq!(DEFAULT_MIN_COUNT, 50);
    let r1 = [50u64, 49, 100, 0, 60, 70];
    let r2 = [50u64, 80, 100, 5, 49];
    assert_eq!(
        tokens_with_min_count(&[&r1, &r2], DEFAULT_MIN_COUNT),
        vec![0, 2]
    );
    assert_eq!(
        tokens_with_min_count(&[&r1], DEFAULT_MIN_COUNT),
        vec![0, 2, 4, 5]
    );
    assert_eq!(tokens_with_min_count(&[&r1, &r2], 0), vec![0, 1, 2, 3, 4]);
    assert_eq!(tokens_with_min_count(&[&r1, &r2], 101), Vec::<u32>::new());
    assert_eq!(tokens_with_min_count(&[], 1), Vec::<u32>::new());
    // From TokenStats counts.
    let mut st = TokenStats::new(3, 2).unwrap();
    let targets: Vec<u32> = [0u32; 3].into_iter().chain([2u32; 2]).collect();
    let lp = vec![-1.0f32; 5];
    st.add(&targets, &[&lp, &lp]).unwrap();
    assert_eq!(tokens_with_min_count(&[st.counts()], 2), vec![0, 2]);
    assert_eq!(tokens_with_min_count(&[st.counts()], 3), vec![0]);
}
