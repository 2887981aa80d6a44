//! Fig. 4 across runs: each UPOS class's mean preference score on every run of a study, tag by
//! tag beside the paper's directions (VERB, ADP, ADV and AUX go to the primary tower, PROPN to
//! the secondary). A run's scores can lean to one tower as a whole (a primary tower that wins
//! 80% of tokens puts every class above zero), so each class is judged twice: by the sign of
//! its mean (its interval clear of zero on the paper's side) and by its rank among the run's
//! classes (the upper half for a primary class, the lower half for PROPN).

use std::path::{Path, PathBuf};

use prefscore::TagSummary;

use crate::error::Result;

/// The tower the paper's Fig. 4 gives a class to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tower {
    /// The primary tower (tower 1: positive scores).
    Primary,
    /// The secondary tower (negative scores).
    Secondary,
}

/// The paper's directions: verbs, adpositions, adverbs and auxiliaries primary, proper nouns
/// secondary (section 5.2, Fig. 4).
pub const PAPER_DIRECTIONS: [(&str, Tower); 5] = [
    ("VERB", Tower::Primary),
    ("ADP", Tower::Primary),
    ("ADV", Tower::Primary),
    ("AUX", Tower::Primary),
    ("PROPN", Tower::Secondary),
];

/// Classes with fewer tokens than this are left out of the ranks and the table.
pub const MIN_TOKENS: usize = 20;

/// One run's summaries per tag (as [`crate::tables::pos_tags`] returns them).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RunTags {
    /// The run's label.
    pub label: String,
    /// Its summaries, one per tag.
    pub tags: Vec<TagSummary>,
}

/// How one class fares on one run.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassOnRun {
    /// Mean score.
    pub mean: f64,
    /// Its bootstrap interval (at the level of the run's tag summaries), when bootstrapped.
    pub interval: Option<(f64, f64)>,
    /// Rank among the run's classes with at least [`MIN_TOKENS`] tokens, 1 the most primary.
    pub rank: usize,
    /// How many classes were ranked.
    pub of: usize,
}

impl ClassOnRun {
    /// Whether the interval (the mean when there is none) lies on `tower`'s side of zero.
    pub fn sign_as(&self, tower: Tower) -> bool {
        let (lo, hi) = self.interval.unwrap_or((self.mean, self.mean));
        match tower {
            Tower::Primary => lo > 0.0,
            Tower::Secondary => hi < 0.0,
        }
    }

    /// Whether the rank lies in `tower`'s half (upper for primary, lower for secondary); with
    /// an odd number of classes the middle one is in neither.
    pub fn half_as(&self, tower: Tower) -> bool {
        match tower {
            Tower::Primary => 2 * self.rank <= self.of,
            Tower::Secondary => 2 * (self.of + 1 - self.rank) <= self.of,
        }
    }
}

/// The rows of the comparison: the paper's classes first (with their direction), then every
/// other class with at least [`MIN_TOKENS`] tokens on the first run, most tokens first; for each,
/// one entry per run (`None` where the run has too few tokens of it).
pub fn compare(runs: &[RunTags]) -> Vec<(String, Option<Tower>, Vec<Option<ClassOnRun>>)> {
    let ranked: Vec<Vec<(&TagSummary, usize, usize)>> = runs.iter().map(ranks).collect();
    let on = |tag: &str| -> Vec<Option<ClassOnRun>> {
        ranked
            .iter()
            .map(|r| {
                r.iter()
                    .find(|(t, _, _)| t.tag == tag)
                    .map(|(t, rank, of)| ClassOnRun {
                        mean: t.mean,
                        interval: t.interval.map(|i| (i.lo, i.hi)),
                        rank: *rank,
                        of: *of,
                    })
            })
            .collect()
    };
    let mut rows: Vec<_> = PAPER_DIRECTIONS
        .iter()
        .map(|(tag, tower)| (tag.to_string(), Some(*tower), on(tag)))
        .collect();
    if let Some(first) = runs.first() {
        let mut others: Vec<&TagSummary> = first
            .tags
            .iter()
            .filter(|t| t.n >= MIN_TOKENS && !PAPER_DIRECTIONS.iter().any(|(p, _)| *p == t.tag))
            .collect();
        others.sort_by(|a, b| b.n.cmp(&a.n).then(a.tag.cmp(&b.tag)));
        rows.extend(others.iter().map(|t| (t.tag.clone(), None, on(&t.tag))));
    }
    rows
}

/// A run's classes with at least [`MIN_TOKENS`] tokens, each with its rank (1 = highest mean)
/// and the number ranked.
fn ranks(run: &RunTags) -> Vec<(&TagSummary, usize, usize)> {
    let mut kept: Vec<&TagSummary> = run.tags.iter().filter(|t| t.n >= MIN_TOKENS).collect();
    kept.sort_by(|a, b| b.mean.total_cmp(&a.mean));
    let of = kept.len();
    kept.into_iter()
        .enumerate()
        .map(|(i, t)| (t, i + 1, of))
        .collect()
}

/// The table `pos_by_run` and the figure `fig4_pos_by_run.png` in `out`.
pub fn write_pos_by_run(runs: &[RunTags], title: &str, out: &Path) -> Result<Vec<PathBuf>> {
    let rows = compare(runs);
    let mut files = table(runs, &rows, title).write_all(out, "pos_by_run")?;
    let fig = out.join("fig4_pos_by_run.png");
    figure(runs, &rows, title, &fig)?;
    files.push(fig);
    Ok(files)
}

type Rows = [(String, Option<Tower>, Vec<Option<ClassOnRun>>)];

/// The confidence level of the runs' tag intervals, for labels.
fn level(runs: &[RunTags]) -> String {
    prefscore::common_level(
        runs.iter()
            .flat_map(|r| r.tags.iter().map(|t| t.interval.as_ref())),
    )
}

fn table(runs: &[RunTags], rows: &Rows, title: &str) -> report::Table {
    let level = level(runs);
    let mut head = vec!["tag".to_string(), "paper".to_string()];
    for r in runs {
        head.push(format!("{} mean [{level}]", r.label));
        head.push(format!("{} rank", r.label));
    }
    head.push("sign as the paper".into());
    head.push("half as the paper".into());
    let mut t = report::Table::new(head)
        .with_title(title)
        .with_note(format!(
            "rank among a run's classes with at least {MIN_TOKENS} tokens, 1 the most primary; \
             sign as the paper: runs whose {level} interval lies on the paper's side of zero; half \
             as the paper: runs ranking the class in the upper half (a primary class) or the \
             lower half (PROPN)"
        ));
    for (tag, tower, per_run) in rows {
        let mut row = vec![
            report::Cell::from(tag.as_str()),
            report::Cell::from(match tower {
                Some(Tower::Primary) => "primary",
                Some(Tower::Secondary) => "secondary",
                None => "",
            }),
        ];
        for c in per_run {
            row.push(report::Cell::from(
                c.as_ref().map(mean_text).unwrap_or_default(),
            ));
            row.push(report::Cell::from(
                c.as_ref()
                    .map(|c| format!("{} of {}", c.rank, c.of))
                    .unwrap_or_default(),
            ));
        }
        let held = |f: fn(&ClassOnRun, Tower) -> bool| match tower {
            Some(tw) => format!(
                "{} of {}",
                per_run.iter().flatten().filter(|c| f(c, *tw)).count(),
                per_run.iter().flatten().count()
            ),
            None => String::new(),
        };
        row.push(report::Cell::from(held(ClassOnRun::sign_as)));
        row.push(report::Cell::from(held(ClassOnRun::half_as)));
        t.push_row(row);
    }
    t
}

fn mean_text(c: &ClassOnRun) -> String {
    match c.interval {
        Some((lo, hi)) => format!("{:.3} [{lo:.3}, {hi:.3}]", c.mean),
        None => format!("{:.3}", c.mean),
    }
}

fn figure(runs: &[RunTags], rows: &Rows, title: &str, path: &Path) -> Result<()> {
    let categories: Vec<String> = rows
        .iter()
        .map(|(tag, tower, _)| match tower {
            Some(Tower::Primary) => format!("{tag} (P)"),
            Some(Tower::Secondary) => format!("{tag} (S)"),
            None => tag.clone(),
        })
        .collect();
    let groups: Vec<report::IntervalGroup> = runs
        .iter()
        .enumerate()
        .map(|(ri, r)| report::IntervalGroup {
            name: r.label.clone(),
            points: rows
                .iter()
                .enumerate()
                .filter_map(|(at, (_, _, per_run))| {
                    per_run[ri].as_ref().map(|c| report::IntervalPoint {
                        at,
                        y: c.mean,
                        interval: c.interval,
                    })
                })
                .collect(),
            ..report::IntervalGroup::default()
        })
        .collect();
    report::category_interval_plot(
        path,
        &categories,
        &groups,
        &report::PlotOptions {
            title: title.into(),
            x_label: "UPOS class ((P)/(S): the paper's primary/secondary classes)".into(),
            y_label: format!("mean preference score, {} interval", level(runs)),
            size: Some((1100, 560)),
            ..report::PlotOptions::default()
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prefscore::Interval;

    fn tag(name: &str, n: usize, mean: f64) -> TagSummary {
        TagSummary {
            tag: name.into(),
            n,
            mean,
            interval: Some(Interval {
                lo: mean - 0.05,
                hi: mean + 0.05,
                level: 0.95,
            }),
            sd: 0.1,
            quantiles: [mean; 5],
            share_primary: 0.5,
            scores: vec![],
            tokens: vec![],
        }
    }

    fn run(label: &str, shift: f64) -> RunTags {
        RunTags {
            label: label.into(),
            tags: vec![
                tag("NOUN", 1800, -0.05 + shift),
                tag("PROPN", 840, -0.01 + shift),
                tag("VERB", 817, 0.18 + shift),
                tag("ADJ", 495, -0.04 + shift),
                tag("ADV", 154, 0.2 + shift),
                tag("ADP", 48, 0.3 + shift),
                tag("AUX", 20, 0.6 + shift),
                tag("INTJ", 1, 0.9 + shift),
            ],
        }
    }

    #[test]
    fn classes_are_judged_by_sign_and_by_rank() {
        // The second run leans to its primary tower: every class above zero.
        let runs = [run("a", 0.0), run("b", 0.4)];
        let rows = compare(&runs);
        let tags: Vec<&str> = rows.iter().map(|(t, _, _)| t.as_str()).collect();
        // The paper's five first, then the others by tokens; INTJ (1 token) is left out.
        assert_eq!(tags, ["VERB", "ADP", "ADV", "AUX", "PROPN", "NOUN", "ADJ"]);
        let propn = &rows[4].2;
        // PROPN: rank 5 of 7 on both runs (lower half), but its sign is secondary on neither
        // (a's interval spans zero, b's lies above it).
        for c in propn.iter().flatten() {
            assert_eq!((c.rank, c.of), (5, 7));
            assert!(c.half_as(Tower::Secondary) && !c.sign_as(Tower::Secondary));
        }
        let aux = rows[3].2[1].as_ref().unwrap();
        assert!(aux.sign_as(Tower::Primary) && aux.half_as(Tower::Primary) && aux.rank == 1);
        // VERB is 4th of 7: primary by sign on both runs, not in the upper half.
        let verb = rows[0].2[0].as_ref().unwrap();
        assert!(verb.sign_as(Tower::Primary) && !verb.half_as(Tower::Primary));
        // ... nor in the lower half: the middle class of an odd count is in neither.
        assert!(!verb.half_as(Tower::Secondary));
    }

    #[test]
    fn the_table_and_figure_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let runs = [run("gpt-s0", 0.0), run("gpt-s1", 0.4)];
        let files = write_pos_by_run(&runs, "POS by run", dir.path()).unwrap();
        assert!(files.iter().all(|f| f.is_file()));
        let md = std::fs::read_to_string(dir.path().join("pos_by_run.md")).unwrap();
        assert!(
            md.contains("gpt-s1 rank") && md.contains("| PROPN |"),
            "{md}"
        );
        // AUX: primary by sign on both runs; PROPN: secondary by sign on neither.
        let line = |tag: &str| {
            md.lines()
                .find(|l| l.starts_with(&format!("| {tag} ")))
                .unwrap()
        };
        assert!(line("AUX").contains("2 of 2"), "{}", line("AUX"));
        assert!(line("PROPN").contains("0 of 2"), "{}", line("PROPN"));
    }
}
