//! The agreement curves of several studies in one table and one figure.
//!
//! A study's curve lies in its `emergence.csv` and `emergence.md` ([`super::write_emergence`]),
//! which outlive the study's folder (the folders of a 2-core VM's studies come and go; the
//! tables are kept under `docs/results/`, some studies' as Markdown only). The pairs are read
//! back from either table and merged: each run is named
//! `<study>/<run>`, since one label can name different runs in two studies (a seed trained on a
//! GPU in one, on the CPU in the other).

use std::path::{Path, PathBuf};

use prefscore::{Interval, ScoreKind};

use super::{Emergence, EmergencePair};
use crate::units::kind_name;
use crate::{ExperimentError, Result};

/// One study's pairs of runs along phase 1, as its tables hold them.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyCurve {
    /// The study's name in the merged curve (the prefix of its runs).
    pub study: String,
    /// The tables it was read from.
    pub sources: Vec<PathBuf>,
    /// Its pairs (raw r, intervals, head-seed reliabilities, disattenuated r).
    pub pairs: Vec<EmergencePair>,
}

/// The pairs of the study `study` from its `tables`: emergence tables (an `emergence.csv`, an
/// `emergence.md` (older studies kept only that: its numbers at three decimals), or a folder
/// holding one, the CSV first) and Table 2 pairs tables of the score `score`
/// (`pairs_<score>_<selection>.csv` or `.md`, as a study writes them over finished runs).
///
/// Several tables make one study only where they hold the same runs, e.g. the points of a seed
/// pair measured in trainings that repeat each other to the last digit. A pair at one point in
/// two tables must agree there (r and disattenuated r within a Markdown table's three
/// decimals; the first table's copy is kept), else they are not the same runs:
/// [`ExperimentError::BadTable`]. A pairs table gives the end point (fraction 1) of the pairs
/// that the emergence tables hold, its other pairs left out, so that a class's trend compares
/// the same pairs; its token selection must be the curves' (the protocols': top 5000). Run rows
/// and trend rows are left out (the trends are recomputed from the pairs). A typed error names
/// the line of a row that cannot be read.
pub fn read_study_curve<P: AsRef<Path>>(
    study: &str,
    tables: &[P],
    score: ScoreKind,
) -> Result<StudyCurve> {
    let read: Vec<TablePairs> = tables
        .iter()
        .map(|t| read_table(t.as_ref(), score))
        .collect::<Result<_>>()?;
    let mut pairs: Vec<EmergencePair> = Vec::new();
    for t in read.iter().filter(|t| !t.ends_only) {
        for (line, p) in &t.pairs {
            keep(&mut pairs, p.clone(), &t.path, *line)?;
        }
    }
    let has_curve = read.iter().any(|t| !t.ends_only);
    for t in read.iter().filter(|t| t.ends_only) {
        let refused = |why: &str| ExperimentError::BadTable {
            path: t.path.clone(),
            line: t.head_line,
            why: why.into(),
        };
        if !has_curve {
            return Err(refused(
                "a Table 2 pairs table gives end points only: name it with the study's \
                 emergence table",
            ));
        }
        let mut used = 0;
        for (line, p) in &t.pairs {
            let Some(q) = pairs.iter().find(|q| same_runs(q, p)) else {
                continue;
            };
            let p = in_order_of(p, q);
            keep(&mut pairs, p, &t.path, *line)?;
            used += 1;
        }
        if used == 0 {
            return Err(refused("none of its pairs is a pair of the study's curve"));
        }
    }
    Ok(StudyCurve {
        study: study.to_string(),
        sources: read.into_iter().map(|t| t.path).collect(),
        pairs,
    })
}

/// The pairs of one table with the lines they stand on.
struct TablePairs {
    path: PathBuf,
    head_line: u64,
    /// A Table 2 pairs table (end points only), not an emergence table.
    ends_only: bool,
    pairs: Vec<(u64, EmergencePair)>,
}

/// The pairs of one emergence table or Table 2 pairs table ([`read_study_curve`]).
fn read_table(table: &Path, score: ScoreKind) -> Result<TablePairs> {
    let path = match table.is_dir() {
        true => ["emergence.csv", "emergence.md"]
            .iter()
            .map(|f| table.join(f))
            .find(|p| p.is_file())
            .unwrap_or_else(|| table.join("emergence.csv")),
        false => table.to_path_buf(),
    };
    if !path.is_file() {
        return Err(ExperimentError::Missing {
            path,
            what: "an emergence table (emergence.csv or emergence.md) or a Table 2 pairs table \
                   (pairs_<score>_<selection>.csv or .md)"
                .into(),
        });
    }
    let bad = |line: u64, why: String| ExperimentError::BadTable {
        path: path.clone(),
        line,
        why,
    };
    let Rows {
        head_line,
        header,
        rows,
    } = match path.extension().is_some_and(|e| e == "md") {
        true => {
            let text = std::fs::read_to_string(&path).map_err(crate::error::io_at(&path))?;
            markdown_rows(&text).map_err(|(line, why)| bad(line, why))?
        }
        false => csv_rows(&path).map_err(|(line, why)| bad(line, why))?,
    };
    let ends_only = header.iter().any(|h| h == "run a");
    let reader = match ends_only {
        true => {
            let want = format!("pairs_{}_", kind_name(score));
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if !name.is_some_and(|n| n.starts_with(&want)) {
                let why = format!(
                    "a Table 2 pairs table of the {} score is named {want}<selection>.csv or .md",
                    kind_name(score)
                );
                return Err(bad(head_line, why));
            }
            Reader::Ends(EndColumns::find(&header).map_err(|why| bad(head_line, why))?)
        }
        false => Reader::Curve(Columns::find(&header).map_err(|why| bad(head_line, why))?),
    };
    let mut pairs = Vec::new();
    for (line, row) in &rows {
        if let Some(p) = reader.pair(row).map_err(|why| bad(*line, why))? {
            pairs.push((*line, p));
        }
    }
    Ok(TablePairs {
        path,
        head_line,
        ends_only,
        pairs,
    })
}

/// How the rows of a table are read: an emergence table's or a Table 2 pairs table's.
enum Reader {
    Curve(Columns),
    Ends(EndColumns),
}

impl Reader {
    /// The pair of `row`, or none for an emergence table's run row or trend row.
    fn pair(&self, row: &[String]) -> std::result::Result<Option<EmergencePair>, String> {
        match self {
            Reader::Curve(c) => c.pair(row),
            Reader::Ends(c) => c.pair(row).map(Some),
        }
    }
}

/// Whether two pairs are of the same two runs, in either order.
fn same_runs(p: &EmergencePair, q: &EmergencePair) -> bool {
    (p.a == q.a && p.b == q.b) || (p.a == q.b && p.b == q.a)
}

/// `p` with its runs in the order of `q` (the same runs) and `q`'s class.
fn in_order_of(p: &EmergencePair, q: &EmergencePair) -> EmergencePair {
    let mut p = p.clone();
    if p.a != q.a {
        std::mem::swap(&mut p.a, &mut p.b);
        p.reliability = p.reliability.map(|[a, b]| [b, a]);
    }
    p.class = q.class.clone();
    p
}

/// Adds `p` (read from line `line` of `path`) unless `pairs` holds the same pair at the same
/// point, where the two must agree within a Markdown table's three decimals.
fn keep(pairs: &mut Vec<EmergencePair>, p: EmergencePair, path: &Path, line: u64) -> Result<()> {
    let close = |x: f64, y: f64| (x - y).abs() <= 5e-4 + 1e-12;
    let Some(q) = pairs
        .iter()
        .find(|q| same_runs(q, &p) && q.fraction == p.fraction)
    else {
        pairs.push(p);
        return Ok(());
    };
    let agree = close(q.pearson, p.pearson)
        && match (q.disattenuated, p.disattenuated) {
            (Some(x), Some(y)) => close(x, y),
            (x, y) => x.is_none() && y.is_none(),
        };
    match agree {
        true => Ok(()),
        false => Err(ExperimentError::BadTable {
            path: path.to_path_buf(),
            line,
            why: format!(
                "{} × {} at {} of phase 1: r {:.3} here, {:.3} in an earlier table of the \
                 study: not the same runs",
                p.a, p.b, p.fraction, p.pearson, q.pearson
            ),
        }),
    }
}

/// A table's header and its rows, with the lines of the file they stand on.
struct Rows {
    head_line: u64,
    header: Vec<String>,
    rows: Vec<(u64, Vec<String>)>,
}

/// The header and rows of a CSV table.
fn csv_rows(path: &Path) -> std::result::Result<Rows, (u64, String)> {
    let mut reader = csv::Reader::from_path(path).map_err(|e| (1, e.to_string()))?;
    let header = reader
        .headers()
        .map_err(|e| (1, e.to_string()))?
        .iter()
        .map(String::from)
        .collect();
    let mut rows = Vec::new();
    for (i, row) in reader.records().enumerate() {
        let line = i as u64 + 2;
        let row = row.map_err(|e| (line, e.to_string()))?;
        rows.push((line, row.iter().map(String::from).collect()));
    }
    Ok(Rows {
        head_line: 1,
        header,
        rows,
    })
}

/// The header and rows of the first Markdown table in `text` (`| a | b |` lines, `\|` an
/// escaped bar, the rule under the header skipped), as `report::Table::to_markdown` writes it.
fn markdown_rows(text: &str) -> std::result::Result<Rows, (u64, String)> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, l.trim()))
        .skip_while(|(_, l)| !l.starts_with('|'))
        .take_while(|(_, l)| l.starts_with('|'));
    let (head_line, head) = lines.next().ok_or((1, "no Markdown table".to_string()))?;
    let header = markdown_cells(head);
    let rows: Vec<(u64, Vec<String>)> = lines
        .filter(|(_, l)| !l.chars().all(|c| matches!(c, '|' | '-' | ':' | ' ')))
        .map(|(n, l)| (n, markdown_cells(l)))
        .collect();
    Ok(Rows {
        head_line,
        header,
        rows,
    })
}

/// The cells of one Markdown table line, trimmed and unescaped.
fn markdown_cells(line: &str) -> Vec<String> {
    let inner = line.strip_prefix('|').unwrap_or(line);
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cells.last_mut().expect("one cell at least").push('|');
                chars.next();
            }
            '|' => cells.push(String::new()),
            c => cells.last_mut().expect("one cell at least").push(c),
        }
    }
    cells.iter().map(|c| c.trim().to_string()).collect()
}

/// The pairs of `studies` as one curve under the score `kind` (the tables do not record it),
/// each run named `<study>/<run>`. Errors: two studies of one name, or no pair at all.
pub fn merge_curves(studies: &[StudyCurve], kind: ScoreKind) -> Result<Emergence> {
    for (i, s) in studies.iter().enumerate() {
        if studies[..i].iter().any(|t| t.study == s.study) {
            return Err(ExperimentError::bad_setting(
                "study",
                &s.study,
                "two studies of one name: name each NAME=PATH",
            ));
        }
    }
    let pairs: Vec<EmergencePair> = studies
        .iter()
        .flat_map(|s| {
            s.pairs.iter().map(|p| EmergencePair {
                a: format!("{}/{}", s.study, p.a),
                b: format!("{}/{}", s.study, p.b),
                ..p.clone()
            })
        })
        .collect();
    if pairs.is_empty() {
        return Err(ExperimentError::too_little(
            "the studies' emergence tables (pairs of runs)",
            0,
            1,
        ));
    }
    Ok(Emergence {
        points: Vec::new(),
        pairs,
        kind: Some(kind),
    })
}

/// Where the columns of a pair row are in an emergence table.
struct Columns {
    what: usize,
    fraction: usize,
    tokens: usize,
    value: usize,
    /// The raw r's interval, then the disattenuated r's (same header but a trailing space).
    intervals: [usize; 2],
    level: f64,
    disattenuated: usize,
    reliability: usize,
    flagged: usize,
}

impl Columns {
    fn find(header: &[String]) -> std::result::Result<Self, String> {
        let at = |name: &str| column(header, name, "an emergence table");
        let interval_cols: Vec<usize> = (0..header.len())
            .filter(|&j| header[j].trim_end().ends_with("% interval"))
            .collect();
        let [raw, dis] = interval_cols[..] else {
            return Err(format!(
                "{} interval columns where an emergence table has two",
                interval_cols.len()
            ));
        };
        let level = header[raw]
            .split_once('%')
            .and_then(|(p, _)| p.parse::<f64>().ok())
            .ok_or_else(|| format!("no confidence level in the column {:?}", header[raw]))?;
        Ok(Columns {
            what: at("what")?,
            fraction: at("fraction")?,
            tokens: at("tokens")?,
            value: at("value")?,
            intervals: [raw, dis],
            level: level / 100.0,
            disattenuated: at("disattenuated")?,
            reliability: at("head-seed rel.")?,
            flagged: at("flagged")?,
        })
    }

    /// The pair of `row`, or none for a run row or a trend row.
    fn pair(&self, row: &[String]) -> std::result::Result<Option<EmergencePair>, String> {
        let cell = |j: usize| row.get(j).map_or("", |c| c.trim());
        let what = cell(self.what);
        let Some((a, b)) = what.split_once(" × ") else {
            return Ok(None);
        };
        if what.starts_with("trend ") {
            return Ok(None);
        }
        let (ma, mb) = (model_of(a)?, model_of(b)?);
        let interval = |j: usize| parse_interval(cell(j), self.level);
        Ok(Some(EmergencePair {
            a: a.to_string(),
            b: b.to_string(),
            class: format!("{ma} × {mb}"),
            fraction: number("fraction", cell(self.fraction))?,
            tokens: Some(count("tokens", cell(self.tokens))?),
            n: None,
            pearson: number("value", cell(self.value))?,
            interval: interval(self.intervals[0])?,
            reliability: parse_reliability(cell(self.reliability))?,
            disattenuated: optional_number("disattenuated", cell(self.disattenuated))?,
            disattenuated_interval: interval(self.intervals[1])?,
            flagged: cell(self.flagged) == "yes",
        }))
    }
}

/// Where the columns of a row are in a Table 2 pairs table ([`crate::tables::pairs_table`]).
struct EndColumns {
    runs: [usize; 2],
    selected: usize,
    pearson: usize,
    /// Low and high end of the raw r's interval, then of the disattenuated r's.
    ends: [[usize; 2]; 2],
    level: f64,
    reliability: [usize; 2],
    disattenuated: usize,
    flagged: usize,
}

impl EndColumns {
    fn find(header: &[String]) -> std::result::Result<Self, String> {
        let at = |name: &str| column(header, name, "a Table 2 pairs table");
        let low = header
            .iter()
            .find(|h| h.ends_with("% low") && !h.starts_with("disatt."))
            .ok_or_else(|| "no interval column \"<level>% low\"".to_string())?;
        let level = low.trim_end_matches(" low");
        let fraction = level
            .trim_end_matches('%')
            .parse::<f64>()
            .map_err(|_| format!("no confidence level in the column {low:?}"))?;
        Ok(EndColumns {
            runs: [at("run a")?, at("run b")?],
            selected: at("tokens")?,
            pearson: at("Pearson")?,
            ends: [
                [at(&format!("{level} low"))?, at(&format!("{level} high"))?],
                [
                    at(&format!("disatt. {level} low"))?,
                    at(&format!("disatt. {level} high"))?,
                ],
            ],
            level: fraction / 100.0,
            reliability: [at("head-seed rel. a")?, at("head-seed rel. b")?],
            disattenuated: at("disattenuated")?,
            flagged: at("flagged")?,
        })
    }

    /// The pair of `row` at the end of phase 1 (fraction 1; the table holds no token count
    /// of phase 1).
    fn pair(&self, row: &[String]) -> std::result::Result<EmergencePair, String> {
        let cell = |j: usize| row.get(j).map_or("", |c| c.trim());
        let (a, b) = (cell(self.runs[0]), cell(self.runs[1]));
        let (ma, mb) = (model_of(a)?, model_of(b)?);
        let interval = |[lo, hi]: [usize; 2]| interval_of(cell(lo), cell(hi), self.level);
        let reliability = match self.reliability.map(cell) {
            ["", ""] => None,
            [x, y] => Some([number("reliability", x)?, number("reliability", y)?]),
        };
        Ok(EmergencePair {
            a: a.to_string(),
            b: b.to_string(),
            class: format!("{ma} × {mb}"),
            fraction: 1.0,
            tokens: None,
            n: Some(count("tokens", cell(self.selected))?),
            pearson: number("Pearson", cell(self.pearson))?,
            interval: interval(self.ends[0])?,
            reliability,
            disattenuated: optional_number("disattenuated", cell(self.disattenuated))?,
            disattenuated_interval: interval(self.ends[1])?,
            flagged: cell(self.flagged) == "yes",
        })
    }
}

/// Where the column `name` of a `table` (its kind, for the error) is.
fn column(header: &[String], name: &str, table: &str) -> std::result::Result<usize, String> {
    header
        .iter()
        .position(|h| h == name)
        .ok_or_else(|| format!("no column {name:?} (not {table})"))
}

/// The model of a run label `<model>-s<seed>`.
fn model_of(label: &str) -> std::result::Result<&str, String> {
    match label.rsplit_once("-s") {
        Some((m, seed)) if !m.is_empty() && seed.parse::<u64>().is_ok() => Ok(m),
        _ => Err(format!("{label:?} is not a run label <model>-s<seed>")),
    }
}

fn number(what: &str, s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err(format!("{what} {s:?} is not a finite number")),
    }
}

/// A whole count (a token count) of a cell.
fn count<T: std::str::FromStr>(what: &str, s: &str) -> std::result::Result<T, String> {
    s.parse()
        .map_err(|_| format!("{what} {s:?} is not a count"))
}

fn optional_number(what: &str, s: &str) -> std::result::Result<Option<f64>, String> {
    match s.is_empty() {
        true => Ok(None),
        false => number(what, s).map(Some),
    }
}

/// `[lo, hi]` as the table writes it (three decimals), or nothing.
fn parse_interval(s: &str, level: f64) -> std::result::Result<Option<Interval>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    let inner = s
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .and_then(|t| t.split_once(','))
        .ok_or_else(|| format!("interval {s:?} is not [lo, hi]"))?;
    interval_of(inner.0.trim(), inner.1.trim(), level)
        .map_err(|why| format!("interval {s:?}: {why}"))
}

/// The interval of the ends `lo` and `hi`, or nothing where both are empty.
fn interval_of(lo: &str, hi: &str, level: f64) -> std::result::Result<Option<Interval>, String> {
    if lo.is_empty() && hi.is_empty() {
        return Ok(None);
    }
    let (lo, hi) = (number("interval", lo)?, number("interval", hi)?);
    match lo <= hi {
        true => Ok(Some(Interval { lo, hi, level })),
        false => Err(format!("ends {lo}, {hi} are reversed")),
    }
}

/// `a / b`, the two runs' head-seed reliabilities, or nothing.
fn parse_reliability(s: &str) -> std::result::Result<Option<[f64; 2]>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    let (a, b) = s
        .split_once(" / ")
        .ok_or_else(|| format!("reliabilities {s:?} are not a / b"))?;
    Ok(Some([
        number("reliability", a.trim())?,
        number("reliability", b.trim())?,
    ]))
}

#[cfg(test)]
mod tests {
    use super::super::tests::between;
    use super::*;

    /// The score of every test table.
    const A: ScoreKind = ScoreKind::ArithmeticMean;

    /// Each pair's runs and point.
    fn points(pairs: &[EmergencePair]) -> Vec<(&str, &str, f64)> {
        pairs
            .iter()
            .map(|p| (p.a.as_str(), p.b.as_str(), p.fraction))
            .collect()
    }
    use crate::emergence::write_emergence;

    fn study_with(pairs: Vec<EmergencePair>) -> (tempfile::TempDir, Emergence) {
        let dir = tempfile::tempdir().unwrap();
        let e = Emergence {
            points: Vec::new(),
            pairs,
            kind: Some(ScoreKind::ArithmeticMean),
        };
        write_emergence(&e, dir.path()).unwrap();
        (dir, e)
    }

    #[test]
    fn a_written_table_reads_back_as_its_pairs() {
        let mut cross = between("gpt-s0", "elmo_released-s1", 0.25, -0.31);
        cross.class = "gpt × elmo_released".into();
        cross.interval = Some(Interval {
            lo: -0.3123,
            hi: -0.2502,
            level: 0.95,
        });
        cross.flagged = true;
        let mut no_rel = between("gpt-s0", "gpt-s1", 1.0, 0.2);
        (no_rel.reliability, no_rel.disattenuated) = (None, None);
        no_rel.disattenuated_interval = None;
        let written = vec![between("gpt-s0", "gpt-s1", 0.5, 0.4), cross, no_rel];
        let (dir, _) = study_with(written.clone());
        let got = read_study_curve("s", &[dir.path()], A).unwrap();
        assert_eq!(got.sources, [dir.path().join("emergence.csv")]);
        assert_eq!(
            got.pairs.len(),
            written.len(),
            "the trend rows are not pairs"
        );
        let ends = |i: Option<Interval>| i.map(|i| (i.lo, i.hi, i.level));
        let round = |i: Option<Interval>| {
            i.map(|i| {
                (
                    (i.lo * 1e3).round() / 1e3,
                    (i.hi * 1e3).round() / 1e3,
                    i.level,
                )
            })
        };
        for (g, w) in got.pairs.iter().zip(&written) {
            assert_eq!((&g.a, &g.b, &g.class), (&w.a, &w.b, &w.class));
            assert_eq!(
                (g.fraction, g.tokens, g.pearson),
                (w.fraction, w.tokens, w.pearson)
            );
            assert_eq!(
                (g.disattenuated, g.flagged, g.n),
                (w.disattenuated, w.flagged, None)
            );
            // Reliabilities and intervals as the table prints them: three decimals.
            let rel = w.reliability.map(|r| r.map(|x| (x * 1e3).round() / 1e3));
            assert_eq!(g.reliability, rel);
            assert_eq!(ends(g.interval), round(w.interval));
            assert_eq!(
                ends(g.disattenuated_interval),
                round(w.disattenuated_interval)
            );
        }
    }

    #[test]
    fn the_markdown_table_reads_back_as_the_csv_at_three_decimals() {
        let mut pipe = between("gpt-s0", "gpt-s1", 0.25, 0.1234);
        pipe.interval = Some(Interval {
            lo: 0.0456,
            hi: 0.2011,
            level: 0.95,
        });
        let (dir, _) = study_with(vec![pipe, between("gpt-s0", "gpt-s1", 1.0, -0.4)]);
        let from_csv = read_study_curve("s", &[dir.path().join("emergence.csv")], A).unwrap();
        let md = dir.path().join("emergence.md");
        let from_md = read_study_curve("s", &[&md], A).unwrap();
        assert_eq!(from_md.sources, std::slice::from_ref(&md));
        assert_eq!(from_md.pairs.len(), 2);
        let r3 = |x: f64| (x * 1e3).round() / 1e3;
        for (m, c) in from_md.pairs.iter().zip(&from_csv.pairs) {
            assert_eq!((&m.a, &m.b, &m.class), (&c.a, &c.b, &c.class));
            assert_eq!((m.fraction, m.tokens), (c.fraction, c.tokens));
            assert_eq!(m.pearson, r3(c.pearson));
            assert_eq!(m.disattenuated, c.disattenuated.map(r3));
            assert_eq!((m.interval, m.reliability), (c.interval, c.reliability));
            assert_eq!(m.disattenuated_interval, c.disattenuated_interval);
        }
        // An escaped bar stays inside its cell.
        assert_eq!(markdown_cells(r"| a \| b | c |"), ["a | b", "c"]);
        // A Markdown table without a column the curve needs: the header's line.
        let text = std::fs::read_to_string(&md).unwrap();
        std::fs::write(&md, text.replacen("| what ", "| name ", 1)).unwrap();
        match read_study_curve("s", &[&md], A) {
            Err(ExperimentError::BadTable { line: 3, why, .. }) => assert!(why.contains("what")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn merged_runs_carry_their_study_and_keep_their_class() {
        let (d1, _) = study_with(vec![between("gpt-s0", "gpt-s1", 0.5, 0.4)]);
        let (d2, _) = study_with(vec![
            between("gpt-s0", "gpt-s1", 0.125, 0.1),
            between("gpt-s0", "gpt-s1", 0.5, 0.3),
        ]);
        let studies = [
            read_study_curve("cpu", &[d1.path()], A).unwrap(),
            read_study_curve("gpu", &[d2.path()], A).unwrap(),
        ];
        let e = merge_curves(&studies, ScoreKind::GeometricMean).unwrap();
        assert_eq!(
            points(&e.pairs),
            [
                ("cpu/gpt-s0", "cpu/gpt-s1", 0.5),
                ("gpu/gpt-s0", "gpu/gpt-s1", 0.125),
                ("gpu/gpt-s0", "gpu/gpt-s1", 0.5)
            ]
        );
        assert!(e.pairs.iter().all(|p| p.class == "gpt × gpt"));
        assert_eq!(e.kind, Some(ScoreKind::GeometricMean));
        // The same name twice, or nothing to merge: typed errors.
        let twice = [studies[0].clone(), studies[0].clone()];
        assert!(matches!(
            merge_curves(&twice, ScoreKind::ArithmeticMean),
            Err(ExperimentError::BadSetting { .. })
        ));
        let empty = StudyCurve {
            pairs: Vec::new(),
            ..studies[0].clone()
        };
        assert!(matches!(
            merge_curves(&[empty], ScoreKind::ArithmeticMean),
            Err(ExperimentError::TooLittleData { .. })
        ));
    }

    #[test]
    fn a_table_that_cannot_be_read_names_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read_study_curve("s", &[dir.path()], A).unwrap_err();
        assert!(
            matches!(missing, ExperimentError::Missing { .. }),
            "{missing}"
        );
        let (good, _) = study_with(vec![between("gpt-s0", "gpt-s1", 0.5, 0.4)]);
        let text = std::fs::read_to_string(good.path().join("emergence.csv")).unwrap();
        let f = dir.path().join("emergence.csv");
        let cases = [
            (text.replacen("what,", "name,", 1), 1, "no column \"what\""),
            (
                text.replacen("gpt-s1,0.5,", "gpt-s1,half,", 1),
                2,
                "fraction \"half\"",
            ),
            (
                text.replacen("gpt-s0 ×", "gpt ×", 1),
                2,
                "\"gpt\" is not a run label",
            ),
            (text.replacen("\"[", "\"(", 1), 2, "is not [lo, hi]"),
        ];
        for (bad, line, why) in cases {
            assert_ne!(bad, text, "the case {why} changes the table");
            std::fs::write(&f, bad).unwrap();
            match read_study_curve("s", &[&f], A) {
                Err(e @ ExperimentError::BadTable { line: l, .. }) => {
                    assert_eq!(l, line, "{e}");
                    assert!(e.to_string().contains(why), "{e} should say {why}");
                }
                other => panic!("{why}: {other:?}"),
            }
        }
    }

    /// A Table 2 pairs table of `pairs` (a, b, r, disattenuated r; reliabilities 0.9 / 0.8,
    /// intervals ±0.05) as a study writes it: `<name>.{md,csv,json}` in `dir`; the CSV's path.
    fn pairs_table_in(dir: &Path, name: &str, pairs: &[(&str, &str, f64, f64)]) -> PathBuf {
        let rows: Vec<crate::analysis::PairComparison> = pairs
            .iter()
            .map(|&(a, b, r, d)| {
                let iv = |x: f64| serde_json::json!({"lo": x - 0.05, "hi": x + 0.05, "level": 0.95});
                serde_json::from_value(serde_json::json!({
                    "a": a, "b": b, "selection": "top-5000", "tokens": 5000,
                    "pearson": {"method": "Pearson", "n": 5000, "r": r, "interval": iv(r), "p_value": null},
                    "spearman": {"method": "Spearman", "n": 5000, "r": r, "interval": null, "p_value": null},
                    "reliability_head_seed": [0.9, 0.8], "reliability_split_half": [0.7, 0.6],
                    "disattenuated": {"raw": r, "rel_a": 0.9, "rel_b": 0.8, "value": d, "interval": iv(d), "n": 5000},
                    "partial_log_freq": r, "flagged": false
                }))
                .unwrap()
            })
            .collect();
        let t = crate::tables::pairs_table(&rows, "Run pairs").unwrap();
        t.write_all(dir, name).unwrap();
        dir.join(format!("{name}.csv"))
    }

    #[test]
    fn a_study_of_several_tables_is_one_curve_and_a_pairs_table_gives_its_end() {
        let (d1, _) = study_with(vec![between("gpt-s0", "gpt-s1", 0.125, 0.1)]);
        let (d2, _) = study_with(vec![
            between("gpt-s0", "gpt-s1", 0.25, 0.2),
            between("gpt-s0", "gpt-s2", 0.25, 0.3),
        ]);
        // The end: one pair in the other order of its runs, one the curve does not hold.
        let dir = tempfile::tempdir().unwrap();
        let ends = pairs_table_in(
            dir.path(),
            "pairs_arithmetic_top-5000",
            &[
                ("gpt-s1", "gpt-s0", 0.41, 0.45),
                ("gpt-s0", "gpt-s2", 0.5, 0.55),
                ("gpt-s1", "gpt-s2", 0.7, 0.8),
            ],
        );
        let tables = [d1.path(), d2.path(), ends.as_path()];
        let got = read_study_curve("s", &tables, A).unwrap();
        assert_eq!(
            got.sources,
            [
                d1.path().join("emergence.csv"),
                d2.path().join("emergence.csv"),
                ends.clone()
            ]
        );
        assert_eq!(
            points(&got.pairs),
            [
                ("gpt-s0", "gpt-s1", 0.125),
                ("gpt-s0", "gpt-s1", 0.25),
                ("gpt-s0", "gpt-s2", 0.25),
                ("gpt-s0", "gpt-s1", 1.0),
                ("gpt-s0", "gpt-s2", 1.0),
            ],
            "the pairs table's pair outside the curve is left out"
        );
        // The end point in the curve's order of runs: its reliabilities swapped with them.
        let end = &got.pairs[3];
        assert_eq!(
            (end.tokens, end.n, end.class.as_str()),
            (None, Some(5000), "gpt × gpt")
        );
        assert_eq!(end.reliability, Some([0.8, 0.9]));
        assert_eq!((end.pearson, end.disattenuated), (0.41, Some(0.45)));
        let iv = end.disattenuated_interval.unwrap();
        assert!((iv.lo - 0.40).abs() < 1e-12 && (iv.hi - 0.50).abs() < 1e-12 && iv.level == 0.95);
        // The class's trend now runs from 1/4 to the end over the same two pairs.
        let merged = merge_curves(std::slice::from_ref(&got), A).unwrap();
        let trend = &crate::emergence::class_trends(&merged)[0];
        assert_eq!(trend.before.0, 0.25);
        assert!((trend.before.1 - 0.25).abs() < 1e-12, "{trend:?}");
        assert_eq!(trend.end.0, 1.0);
        assert!((trend.end.1 - 0.5).abs() < 1e-12, "{trend:?}");
        // A table given twice, or as Markdown beside its CSV, adds nothing.
        let md = ends.with_extension("md");
        let again = read_study_curve("s", &[d1.path(), d2.path(), d2.path(), &ends, &md], A);
        assert_eq!(again.unwrap().pairs, got.pairs);
    }

    #[test]
    fn tables_of_other_runs_or_end_points_alone_are_refused() {
        let (d1, _) = study_with(vec![
            between("gpt-s0", "gpt-s1", 0.25, 0.2),
            between("gpt-s0", "gpt-s1", 1.0, 0.3),
        ]);
        let why = |tables: &[&Path]| match read_study_curve("s", tables, A) {
            Err(ExperimentError::BadTable { why, path, line }) => (why, path, line),
            other => panic!("{other:?}"),
        };
        // Another r at the same point: not the same runs, named at its row.
        let (d3, _) = study_with(vec![between("gpt-s0", "gpt-s1", 0.25, 0.6)]);
        let (w, path, line) = why(&[d1.path(), d3.path()]);
        assert!(w.contains("not the same runs"), "{w}");
        assert_eq!((path, line), (d3.path().join("emergence.csv"), 2));
        let dir = tempfile::tempdir().unwrap();
        let ends = |name: &str, r: f64, d: f64| {
            pairs_table_in(dir.path(), name, &[("gpt-s0", "gpt-s1", r, d)])
        };
        // A pairs table whose end disagrees with the curve's own end.
        let other = ends("pairs_arithmetic_top-5000", 0.5, 0.6);
        assert!(why(&[d1.path(), &other]).0.contains("not the same runs"));
        // End points alone, or none of them the curve's.
        let same = ends("pairs_arithmetic_min-count-50", 0.3 * 0.9, 0.3);
        assert!(why(&[&same]).0.contains("end points only"));
        let (d4, _) = study_with(vec![between("gpt-s2", "gpt-s3", 0.25, 0.2)]);
        assert!(why(&[d4.path(), &same]).0.contains("none of its pairs"));
        assert!(read_study_curve("s", &[d1.path(), &same], A).is_ok());
        // A pairs table of another score.
        let geometric = ends("pairs_geometric_top-5000", 0.27, 0.3);
        assert!(why(&[d1.path(), &geometric])
            .0
            .contains("pairs_arithmetic_"));
    }
}
