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
use crate::{ExperimentError, Result};

/// One study's pairs of runs along phase 1, as its emergence table holds them.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyCurve {
    /// The study's name in the merged curve (the prefix of its runs).
    pub study: String,
    /// The table it was read from.
    pub source: PathBuf,
    /// Its pairs (raw r, intervals, head-seed reliabilities, disattenuated r).
    pub pairs: Vec<EmergencePair>,
}

/// The pairs of the emergence table `table` of the study `study`: an `emergence.csv`, an
/// `emergence.md` (older studies kept only that: its numbers at three decimals), or a folder
/// holding one (the CSV first). Its run rows and trend rows are left out (the trends are
/// recomputed from the pairs). A typed error names the line of a row that cannot be read.
pub fn read_study_curve(study: &str, table: &Path) -> Result<StudyCurve> {
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
            what: "an emergence table: emergence.csv or emergence.md".into(),
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
    let cols = Columns::find(&header).map_err(|why| bad(head_line, why))?;
    let mut pairs = Vec::new();
    for (line, row) in &rows {
        if let Some(p) = cols.pair(row).map_err(|why| bad(*line, why))? {
            pairs.push(p);
        }
    }
    Ok(StudyCurve {
        study: study.to_string(),
        source: path,
        pairs,
    })
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
        let at = |name: &str| {
            header
                .iter()
                .position(|h| h == name)
                .ok_or_else(|| format!("no column {name:?} (not an emergence table)"))
        };
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
            tokens: cell(self.tokens)
                .parse()
                .map_err(|_| format!("tokens {:?} is not a count", cell(self.tokens)))?,
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
    let (lo, hi) = (
        number("interval", inner.0.trim())?,
        number("interval", inner.1.trim())?,
    );
    match lo <= hi {
        true => Ok(Some(Interval { lo, hi, level })),
        false => Err(format!("interval {s:?} has its ends reversed")),
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
        let got = read_study_curve("s", dir.path()).unwrap();
        assert_eq!(got.source, dir.path().join("emergence.csv"));
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
        let from_csv = read_study_curve("s", &dir.path().join("emergence.csv")).unwrap();
        let md = dir.path().join("emergence.md");
        let from_md = read_study_curve("s", &md).unwrap();
        assert_eq!(from_md.source, md);
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
        match read_study_curve("s", &md) {
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
            read_study_curve("cpu", d1.path()).unwrap(),
            read_study_curve("gpu", d2.path()).unwrap(),
        ];
        let e = merge_curves(&studies, ScoreKind::GeometricMean).unwrap();
        let names: Vec<(&str, &str, f64)> = e
            .pairs
            .iter()
            .map(|p| (p.a.as_str(), p.b.as_str(), p.fraction))
            .collect();
        assert_eq!(
            names,
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
        let missing = read_study_curve("s", dir.path()).unwrap_err();
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
            match read_study_curve("s", &f) {
                Err(e @ ExperimentError::BadTable { line: l, .. }) => {
                    assert_eq!(l, line, "{e}");
                    assert!(e.to_string().contains(why), "{e} should say {why}");
                }
                other => panic!("{why}: {other:?}"),
            }
        }
    }
}
