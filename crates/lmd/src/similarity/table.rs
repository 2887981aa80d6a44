//! The similarity report: one table (measure × pair: value, null, calibrated), one heatmap per
//! measure (through the `report` crate), and how far the measures agree on the ranking of pairs.

use std::path::{Path, PathBuf};

use report::{Cell, Table};

use super::{Measure, MeasureResult, Similarity};
use crate::error::{io_at, Result};
use crate::pair_matrix::PairMatrix;
use crate::tables::{pair_heatmap, ORIENTATION};

/// The pairs of a measure's table: (i, j) with i > j for a symmetric measure, every ordered
/// pair i ≠ j (rows = target) for a directed one.
fn pairs(r: &MeasureResult) -> Vec<(usize, usize)> {
    let m = r.values.len();
    (0..m)
        .flat_map(|i| (0..m).map(move |j| (i, j)))
        .filter(|&(i, j)| if r.measure.directed() { i != j } else { i > j })
        .collect()
}

/// One row per measure and pair: the value, its null (pairing broken) and the calibrated
/// value (value − null) / (best − null).
pub fn similarity_table(s: &Similarity) -> Table {
    let header = [
        "measure",
        "model a",
        "model b",
        "value",
        "null",
        "calibrated",
    ];
    let mut table = Table::new(header.iter().map(|h| h.to_string()).collect())
        .with_title("Similarity of every pair of models, each measure beside its null")
        .with_note(format!(
            "null: the same measure with the pairing of sequences broken (seeded derangement, \
             seed {}); calibrated = (value − null) / (best − null), best 0 for the Procrustes \
             distance and 1 otherwise; held-out R²: a = target, b = basis ({ORIENTATION}); \
             {} test sequences; SVCCA on {} directions; mutual k-NN k = {} on {} sampled \
             sequences",
            s.params.seed, s.n_test, s.params.svcca_dims, s.params.knn_k, s.params.knn_sample
        ));
    if !s.left_out.is_empty() {
        let why: Vec<&str> = s.left_out.iter().map(|(_, e)| e.as_str()).collect();
        let note = format!(
            "{}; left out: {}",
            table.note().unwrap_or(""),
            why.join("; ")
        );
        table = table.with_note(note);
    }
    for r in &s.results {
        for (i, j) in pairs(r) {
            table.push_row(vec![
                Cell::from(r.measure.name()),
                Cell::from(s.names[i].as_str()),
                Cell::from(s.names[j].as_str()),
                Cell::from(r.values.get(i, j)),
                Cell::from(r.null.get(i, j)),
                Cell::from(r.calibrated(i, j)),
            ]);
        }
    }
    table
}

/// Spearman's rank correlation of two equally long lists (average ranks for ties); NaN when
/// either is constant or has fewer than two entries.
fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let rank = |v: &[f64]| {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&x, &y| v[x].total_cmp(&v[y]));
        let mut r = vec![0.0; v.len()];
        let mut s = 0;
        while s < idx.len() {
            let mut e = s;
            while e + 1 < idx.len() && v[idx[e + 1]] == v[idx[s]] {
                e += 1;
            }
            for &k in &idx[s..=e] {
                r[k] = (s + e) as f64 / 2.0;
            }
            s = e + 1;
        }
        r
    };
    let (ra, rb) = (rank(a), rank(b));
    let n = a.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    sab / (saa * sbb).sqrt()
}

/// The values of a measure over the unordered pairs (i > j), oriented so that larger is more
/// similar (the Procrustes distance negated, held-out R² averaged over both directions: ρ).
fn similarity_scores(r: &MeasureResult) -> Vec<f64> {
    let v: PairMatrix = if r.measure.directed() {
        r.values.symmetrized()
    } else {
        r.values.clone()
    };
    let sign = if r.measure.higher_is_more_similar() {
        1.0
    } else {
        -1.0
    };
    let m = v.len();
    (0..m)
        .flat_map(|i| (0..i).map(move |j| (i, j)))
        .map(|(i, j)| sign * v.get(i, j))
        .collect()
}

/// Spearman's correlation between every two measures' rankings of the pairs of models
/// (oriented so that 1 is full agreement): a symmetric measure × measure matrix.
pub fn agreement(s: &Similarity) -> PairMatrix {
    let scores: Vec<Vec<f64>> = s.results.iter().map(similarity_scores).collect();
    let k = scores.len();
    let values = (0..k * k)
        .map(|x| {
            let (a, b) = (x / k, x % k);
            if a == b {
                1.0
            } else {
                spearman(&scores[a], &scores[b])
            }
        })
        .collect();
    PairMatrix {
        names: s
            .results
            .iter()
            .map(|r| r.measure.name().to_string())
            .collect(),
        values,
    }
}

/// [`agreement`] as a table.
pub fn rank_agreement_table(s: &Similarity) -> Table {
    let a = agreement(s);
    let pairs = s.names.len() * s.names.len().saturating_sub(1) / 2;
    crate::tables::pair_table(
        &a,
        "Agreement of the measures on the ranking of pairs (Spearman)",
        &format!(
            "Spearman's rank correlation between two measures over the {pairs} pairs of models; \
             Procrustes distance negated, held-out R² as pairwise ρ; NaN where a measure ties \
             every pair"
        ),
    )
}

/// Writes `similarity.{csv,md,json}`, `similarity_agreement.{csv,md,json}` and one heatmap per
/// measure, `similarity_<measure>.png` (values; the diagonal is the measure's best), into
/// `dir`. Returns the files written.
pub fn write_similarity(dir: &Path, s: &Similarity) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(io_at(dir))?;
    let mut files = similarity_table(s).write_all(dir, "similarity")?;
    files.extend(rank_agreement_table(s).write_all(dir, "similarity_agreement")?);
    for r in &s.results {
        let path = dir.join(format!("similarity_{}.png", r.measure.stem()));
        let range = match r.measure {
            Measure::Procrustes => Some((0.0, 2.0)),
            Measure::HeldOutR2 => None,
            _ => Some((0.0, 1.0)),
        };
        let title = if r.measure.directed() {
            format!("{} ({ORIENTATION})", r.measure.name())
        } else {
            r.measure.name().to_string()
        };
        pair_heatmap(&path, &r.values, &title, range)?;
        files.push(path);
    }
    Ok(files)
}
