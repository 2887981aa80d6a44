//! One set of word groups scored on several runs (Table 3 across runs) and the runs' rank
//! agreement over the groups.

use prefscore::Bootstrap;
use serde::Serialize;

use super::WordGroup;
use crate::error::Result;

/// One set of word groups scored on several runs: each group's mean score and rank 1..G on
/// every run, and the rank correlation of the groups' means between runs (the paper lists the
/// groups' ELMo and GPT preferences side by side).
#[derive(Debug, Clone, Serialize)]
pub struct GroupsByRun {
    /// The runs, in column order.
    pub runs: Vec<String>,
    /// `means[g][r]`: group g's mean score on run r (over its scored members).
    pub means: Vec<Vec<Option<f64>>>,
    /// `ranks[g][r]`: its rank among the groups on run r, 1 the most primary.
    pub ranks: Vec<Vec<Option<usize>>>,
    /// Spearman correlation of the group means for every pair of runs (a, b, ρ, groups).
    pub agreement: Vec<(String, String, f64, usize)>,
}

/// Scores the groups on every run of `runs` (over the analysed `tokens`).
pub fn groups_by_run(
    groups: &[WordGroup],
    runs: &[&crate::analysis::RunScores],
    tokens: &[u32],
) -> Result<GroupsByRun> {
    let named: Vec<(String, Vec<u32>)> = groups
        .iter()
        .map(|g| (format!("IC{}", g.component), g.members.clone()))
        .collect();
    let no_intervals = Bootstrap {
        resamples: 0,
        ..Bootstrap::default()
    };
    let mut per_run = Vec::new();
    for r in runs {
        let stats = prefscore::group_summary(&r.scores.values, &named, tokens, &no_intervals)?;
        per_run.push(stats.iter().map(|g| g.mean).collect::<Vec<_>>());
    }
    let ranks_per_run: Vec<Vec<Option<usize>>> =
        per_run.iter().map(|m| ranks_descending(m)).collect();
    let g = groups.len();
    let means = (0..g)
        .map(|k| per_run.iter().map(|m| m[k]).collect())
        .collect();
    let ranks = (0..g)
        .map(|k| ranks_per_run.iter().map(|r| r[k]).collect())
        .collect();
    let mut agreement = Vec::new();
    for a in 0..runs.len() {
        for b in a + 1..runs.len() {
            let (x, y): (Vec<f64>, Vec<f64>) = per_run[a]
                .iter()
                .zip(&per_run[b])
                .filter_map(|(x, y)| Some(((*x)?, (*y)?)))
                .unzip();
            if x.len() >= 3 {
                let rho = prefscore::spearman(&x, &y)?;
                agreement.push((runs[a].label.clone(), runs[b].label.clone(), rho, x.len()));
            }
        }
    }
    Ok(GroupsByRun {
        runs: runs.iter().map(|r| r.label.clone()).collect(),
        means,
        ranks,
        agreement,
    })
}

/// Table 3 across runs (each group's mean and rank per run) and the runs' rank agreement.
pub fn groups_by_run_tables(
    groups: &[WordGroup],
    by: &GroupsByRun,
) -> (report::Table, report::Table) {
    let mut cols = vec![
        "component".to_string(),
        "typical words".into(),
        "## share".into(),
    ];
    for r in &by.runs {
        cols.push(format!("{r} mean"));
        cols.push(format!("{r} rank"));
    }
    let mut t = report::Table::new(cols)
        .with_title("Table 3 across runs: each word group's mean score and rank on every run")
        .with_note("groups from one run's embedding; rank among the groups by mean score on that run, 1 the most primary; (##): mostly continuation pieces")
        .with_precision(3);
    for (k, g) in groups.iter().enumerate() {
        let mark = if g.continuation_share > 0.5 {
            " (##)"
        } else {
            ""
        };
        let mut row = vec![
            report::Cell::from(g.component),
            report::Cell::from(format!("{}{mark}", g.typical.join(" "))),
            report::Cell::from(g.continuation_share),
        ];
        for r in 0..by.runs.len() {
            row.push(report::Cell::from(by.means[k][r]));
            row.push(report::Cell::from(by.ranks[k][r]));
        }
        t.push_row(row);
    }
    let mut a = report::Table::new(
        ["run a", "run b", "Spearman of group means", "groups"]
            .map(String::from)
            .to_vec(),
    )
    .with_title("Agreement of the word groups' preference between runs")
    .with_precision(3);
    for (x, y, rho, n) in &by.agreement {
        a.push_row(vec![
            x.as_str().into(),
            y.as_str().into(),
            (*rho).into(),
            (*n).into(),
        ]);
    }
    (t, a)
}

/// The rank 1..G of each value, 1 the largest (`None` values last, unranked).
pub fn ranks_descending(values: &[Option<f64>]) -> Vec<Option<usize>> {
    let mut order: Vec<usize> = (0..values.len()).filter(|&i| values[i].is_some()).collect();
    order.sort_by(|&a, &b| {
        values[b]
            .unwrap_or(0.0)
            .total_cmp(&values[a].unwrap_or(0.0))
    });
    let mut out = vec![None; values.len()];
    for (r, i) in order.into_iter().enumerate() {
        out[i] = Some(r + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_put_the_largest_first_and_leave_missing_values_out() {
        let r = ranks_descending(&[Some(0.1), None, Some(0.5), Some(-0.2)]);
        assert_eq!(r, [Some(2), None, Some(1), Some(3)]);
    }
}
