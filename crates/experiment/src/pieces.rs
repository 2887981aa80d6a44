//! The word-piece control. With a WordPiece vocabulary (the paper's too: bert-base-uncased) a
//! token is either word-initial or a continuation piece (`##…`); the paper's own Table 3 ranks a
//! `##s ##ed ##ly ##ing ##ism` group most secondary for ELMo and GPT. If the towers divide the
//! vocabulary along it, two seeds agree partly because both find the same split, and the
//! agreement *within* each kind of piece is the finer division. This module measures both: per run, the scores of each kind (mean, share won by
//! the primary tower) and the point-biserial correlation of the score with "is a continuation";
//! per pair of runs, Pearson r over all tokens and within each kind.

use prefscore::{by_tag, pearson, top_tokens, Bootstrap};
use report::{Cell, Table};
use serde::{Deserialize, Serialize};

use crate::analysis::{RunScores, TopTokens};
use crate::error::Result;
use crate::orientation::{Orientation, OrientedCells};

/// The class of a word-initial piece.
pub const WORD_INITIAL: &str = "word-initial";
/// The class of a continuation piece (`##…`).
pub const CONTINUATION: &str = "continuation";

/// The piece class of every id below `padded_vocab` (`None`: special tokens and padding ids).
pub fn piece_classes(
    tok: &corpus::Tokenizer,
    padded_vocab: usize,
) -> Result<Vec<Option<&'static str>>> {
    let special = tok.special_tokens()?;
    Ok((0..padded_vocab as u32)
        .map(|id| match tok.id_to_token(id) {
            Some(_) if special.contains(id) => None,
            Some(t) if t.starts_with("##") => Some(CONTINUATION),
            Some(_) => Some(WORD_INITIAL),
            None => None,
        })
        .collect())
}

/// One run's scores by piece class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PieceRun {
    /// `<style>-s<seed>`.
    pub label: String,
    /// Word-initial tokens among those scored.
    pub initial: usize,
    /// Continuation tokens among those scored.
    pub continuation: usize,
    /// Mean score of the word-initial tokens.
    pub mean_initial: f64,
    /// Mean score of the continuation tokens.
    pub mean_continuation: f64,
    /// Share of word-initial tokens won by the primary tower.
    pub primary_initial: f64,
    /// Share of continuation tokens won by the primary tower.
    pub primary_continuation: f64,
    /// Pearson r of the score with the indicator "is a continuation" (point-biserial).
    pub r_continuation: f64,
}

/// One pair's agreement over all tokens and within each piece class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PiecePair {
    /// First run.
    pub a: String,
    /// Second run.
    pub b: String,
    /// Pearson r over every classed token scored by both.
    pub r_all: f64,
    /// Within word-initial tokens (`None` with fewer than 3).
    pub r_initial: Option<f64>,
    /// Within continuation tokens (`None` with fewer than 3).
    pub r_continuation: Option<f64>,
}

/// The classed tokens of `top` that every score vector scores: (token, class).
fn classed(
    top: &[u32],
    classes: &[Option<&'static str>],
    scores: &[&[Option<f64>]],
) -> Vec<(u32, &'static str)> {
    top.iter()
        .filter_map(|&a| {
            let c = (*classes.get(a as usize)?)?;
            let all = scores.iter().all(|s| {
                s.get(a as usize)
                    .copied()
                    .flatten()
                    .is_some_and(f64::is_finite)
            });
            all.then_some((a, c))
        })
        .collect()
}

/// The scores of one run by piece class, over the `top_n` most frequent tokens.
pub fn piece_run(
    run: &RunScores,
    top: TopTokens<'_>,
    classes: &[Option<&'static str>],
) -> Result<PieceRun> {
    run_of(&run.label, &run.scores.values, top, classes)
}

fn run_of(
    label: &str,
    values: &[Option<f64>],
    top: TopTokens<'_>,
    classes: &[Option<&'static str>],
) -> Result<PieceRun> {
    let top = top_tokens(top.freq, top.n, &[values]);
    let per = by_tag(
        values,
        classes,
        &top,
        &Bootstrap {
            resamples: 0,
            ..Bootstrap::default()
        },
    )?;
    let of = |c: &str| per.iter().find(|t| t.tag == c);
    let toks = classed(&top, classes, &[values]);
    let x: Vec<f64> = toks
        .iter()
        .map(|&(a, _)| values[a as usize].unwrap_or(0.0))
        .collect();
    let y: Vec<f64> = toks
        .iter()
        .map(|&(_, c)| f64::from(u8::from(c == CONTINUATION)))
        .collect();
    Ok(PieceRun {
        label: label.to_string(),
        initial: of(WORD_INITIAL).map_or(0, |t| t.n),
        continuation: of(CONTINUATION).map_or(0, |t| t.n),
        mean_initial: of(WORD_INITIAL).map_or(f64::NAN, |t| t.mean),
        mean_continuation: of(CONTINUATION).map_or(f64::NAN, |t| t.mean),
        primary_initial: of(WORD_INITIAL).map_or(f64::NAN, |t| t.share_primary),
        primary_continuation: of(CONTINUATION).map_or(f64::NAN, |t| t.share_primary),
        r_continuation: pearson(&x, &y).unwrap_or(f64::NAN),
    })
}

/// Pearson r of two runs' scores over all classed tokens of their `top_n` most frequent scored
/// tokens, and within each class.
pub fn piece_pair(
    a: &RunScores,
    b: &RunScores,
    top: TopTokens<'_>,
    classes: &[Option<&'static str>],
) -> Result<PiecePair> {
    let (va, vb) = (&a.scores.values, &b.scores.values);
    pair_of((&a.label, va), (&b.label, vb), top, classes)
}

fn pair_of(
    (la, va): (&str, &[Option<f64>]),
    (lb, vb): (&str, &[Option<f64>]),
    top: TopTokens<'_>,
    classes: &[Option<&'static str>],
) -> Result<PiecePair> {
    let top = top_tokens(top.freq, top.n, &[va, vb]);
    let toks = classed(&top, classes, &[va, vb]);
    let r = |keep: &dyn Fn(&str) -> bool| -> Option<f64> {
        let (x, y): (Vec<f64>, Vec<f64>) = toks
            .iter()
            .filter(|(_, c)| keep(c))
            .map(|&(t, _)| (va[t as usize].unwrap_or(0.0), vb[t as usize].unwrap_or(0.0)))
            .unzip();
        (x.len() >= 3).then(|| pearson(&x, &y).ok()).flatten()
    };
    Ok(PiecePair {
        a: la.to_string(),
        b: lb.to_string(),
        r_all: r(&|_| true).unwrap_or(f64::NAN),
        r_initial: r(&|c| c == WORD_INITIAL),
        r_continuation: r(&|c| c == CONTINUATION),
    })
}

/// The two tables: runs by piece class, and pairs within each class.
pub fn piece_tables(runs: &[PieceRun], pairs: &[PiecePair], top_n: usize) -> (Table, Table) {
    let header = |h: &[&str]| h.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut t = Table::new(header(&[
        "run",
        "word-initial",
        "continuation",
        "mean initial",
        "mean continuation",
        "primary share initial",
        "primary share continuation",
        "r(score, continuation)",
    ]))
    .with_title(format!(
        "Word pieces: scores by piece class, top-{top_n} tokens"
    ))
    .with_note(
        "continuation = a `##` WordPiece; primary share = share of tokens with a positive score",
    )
    .with_precision(3);
    for r in runs {
        t.push_row(vec![
            Cell::from(r.label.as_str()),
            Cell::from(r.initial),
            Cell::from(r.continuation),
            Cell::from(r.mean_initial),
            Cell::from(r.mean_continuation),
            Cell::from(r.primary_initial),
            Cell::from(r.primary_continuation),
            Cell::from(r.r_continuation),
        ]);
    }
    let mut p = Table::new(header(&["run a", "run b", "Pearson all", "within word-initial", "within continuation"]))
        .with_title(format!("Word pieces: agreement of run pairs within each piece class, top-{top_n} tokens"))
        .with_note("Pearson r of the two runs' scores over the tokens of one class; empty: fewer than 3 tokens")
        .with_precision(3);
    let opt = |v: Option<f64>| v.map_or(Cell::Empty, Cell::from);
    for q in pairs {
        p.push_row(vec![
            Cell::from(q.a.as_str()),
            Cell::from(q.b.as_str()),
            Cell::from(q.r_all),
            opt(q.r_initial),
            opt(q.r_continuation),
        ]);
    }
    (t, p)
}

/// The word-piece control of a study's runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PieceControl {
    /// Most frequent tokens considered.
    pub top_n: usize,
    /// Per run.
    pub runs: Vec<PieceRun>,
    /// Per pair of runs, in table order.
    pub pairs: Vec<PiecePair>,
}

impl PieceControl {
    /// The pairs over all classed tokens, within word-initial and within continuation pieces,
    /// read under `orientation` (found over all top tokens): does the runs' shared division
    /// hold inside each piece class, or is it the split between them?
    pub fn oriented(&self, orientation: &Orientation) -> Result<Vec<OrientedCells>> {
        let cells = |r: PairValue| -> Vec<(String, String, f64)> {
            self.pairs
                .iter()
                .filter_map(|p| Some((p.a.clone(), p.b.clone(), r(p)?)))
                .collect()
        };
        let groups: [(&str, PairValue); 3] = [
            ("all classed tokens", |p| Some(p.r_all)),
            ("within word-initial pieces", |p| p.r_initial),
            ("within continuation pieces", |p| p.r_continuation),
        ];
        groups
            .iter()
            .map(|(what, r)| orientation.apply(what, &cells(*r)))
            .collect()
    }
}

/// One of a pair's correlations.
type PairValue = fn(&PiecePair) -> Option<f64>;

/// The control over every run and pair; `None` when the vocabulary has no continuation piece
/// among the `top_n` most frequent tokens (not a WordPiece vocabulary).
pub fn piece_control(
    runs: &[RunScores],
    top: TopTokens<'_>,
    classes: &[Option<&'static str>],
) -> Result<Option<PieceControl>> {
    let top_n = top.n;
    let per_run = runs
        .iter()
        .map(|r| piece_run(r, top, classes))
        .collect::<Result<Vec<_>>>()?;
    if per_run.iter().all(|r| r.continuation == 0) {
        return Ok(None);
    }
    let mut pairs = Vec::new();
    for i in 0..runs.len() {
        for j in i + 1..runs.len() {
            pairs.push(piece_pair(&runs[i], &runs[j], top, classes)?);
        }
    }
    Ok(Some(PieceControl {
        top_n,
        runs: per_run,
        pairs,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 40 tokens, even ids word-initial, odd ids continuations, id 0 special; frequencies
    /// decreasing with the id.
    fn setup() -> (Vec<Option<&'static str>>, Vec<u64>) {
        let classes = (0..40)
            .map(|i| match i {
                0 => None,
                i if i % 2 == 0 => Some(WORD_INITIAL),
                _ => Some(CONTINUATION),
            })
            .collect();
        let freq = (0..40).map(|i| 1000 - i as u64).collect();
        (classes, freq)
    }

    #[test]
    fn a_pure_piece_split_shows_as_agreement_between_runs_and_none_within_classes() {
        let (classes, freq) = setup();
        // Both runs: continuations negative, word-initial positive, with unrelated
        // within-class orders (a by id, b by a scrambled id).
        let a: Vec<Option<f64>> = (0..40)
            .map(|i| Some(if i % 2 == 0 { 1.0 } else { -1.0 } + 0.01 * i as f64))
            .collect();
        let b: Vec<Option<f64>> = (0..40)
            .map(|i| Some(if i % 2 == 0 { 1.0 } else { -1.0 } + 0.01 * ((i * 17) % 40) as f64))
            .collect();
        let ra = run_of("a", &a, TopTokens { freq: &freq, n: 40 }, &classes).unwrap();
        assert_eq!((ra.initial, ra.continuation), (19, 20));
        assert_eq!((ra.primary_initial, ra.primary_continuation), (1.0, 0.0));
        assert!(ra.r_continuation < -0.99, "{ra:?}");
        let p = pair_of(
            ("a", &a),
            ("b", &b),
            TopTokens { freq: &freq, n: 40 },
            &classes,
        )
        .unwrap();
        assert!(p.r_all > 0.95, "{p:?}");
        // Within a class the two orders are unrelated: far from the overall agreement.
        assert!(
            p.r_initial.unwrap().abs() < 0.5 && p.r_continuation.unwrap().abs() < 0.5,
            "{p:?}"
        );
    }

    #[test]
    fn within_class_agreement_is_measured_on_that_class_only() {
        let (classes, freq) = setup();
        let a: Vec<Option<f64>> = (0..40).map(|i| Some((i as f64 * 0.7).sin())).collect();
        // b agrees with a on word-initial tokens and is its negative on continuations.
        let b: Vec<Option<f64>> = a
            .iter()
            .enumerate()
            .map(|(i, v)| v.map(|x| if i % 2 == 0 { 2.0 * x } else { -x }))
            .collect();
        let p = pair_of(
            ("a", &a),
            ("b", &b),
            TopTokens { freq: &freq, n: 40 },
            &classes,
        )
        .unwrap();
        assert!((p.r_initial.unwrap() - 1.0).abs() < 1e-12, "{p:?}");
        assert!((p.r_continuation.unwrap() + 1.0).abs() < 1e-12, "{p:?}");
        // Only the 10 most frequent tokens (ids 0..10, id 0 unclassed): 4 initial, 5 continuation.
        let r = run_of("a", &a, TopTokens { freq: &freq, n: 10 }, &classes).unwrap();
        assert_eq!((r.initial, r.continuation), (4, 5));
    }

    #[test]
    fn the_orientation_of_all_tokens_is_read_within_each_piece_class() {
        let (classes, freq) = setup();
        // One division within both classes; run c took the other side of it, as the
        // orientation (a +, b +, c -) says.
        let a: Vec<Option<f64>> = (0..40).map(|i| Some((i as f64 * 0.7).sin())).collect();
        let scaled = |k: f64| -> Vec<Option<f64>> { a.iter().map(|v| v.map(|x| k * x)).collect() };
        let (b, c) = (scaled(2.0), scaled(-1.0));
        let runs = [
            ("a", a.as_slice()),
            ("b", b.as_slice()),
            ("c", c.as_slice()),
        ];
        let pairs = [(0, 1), (0, 2), (1, 2)]
            .map(|(i, j)| {
                pair_of(runs[i], runs[j], TopTokens { freq: &freq, n: 40 }, &classes).unwrap()
            })
            .to_vec();
        let pc = PieceControl {
            top_n: 40,
            runs: Vec::new(),
            pairs,
        };
        let rows = pc
            .oriented(&crate::orientation::tests::abc_orientation())
            .unwrap();
        let what: Vec<&str> = rows.iter().map(|r| r.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "all classed tokens",
                "within word-initial pieces",
                "within continuation pieces"
            ]
        );
        for r in &rows {
            // As measured: 1, -1, -1; oriented: 1 each.
            assert!((r.mean_r + 1.0 / 3.0).abs() < 1e-9, "{r:?}");
            assert!((r.mean_oriented_r - 1.0).abs() < 1e-9, "{r:?}");
            assert_eq!((r.sign_matches, r.strong_matches), (3, [3, 3]));
        }
    }
}
