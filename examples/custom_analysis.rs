//! An analysis of one's own beside the built-ins: the preference score against a token's length
//! in characters, as a table and a figure, run by `analyze` over the smoke study's run folders
//! with every built-in table.
//!
//! ```text
//! cargo run --release --example reproduce -- train --protocol smoke --out out/smoke
//! cargo run --release --example custom_analysis -- out/smoke [out/smoke/custom]
//! ```
//!
//! It reads the run folders of the study folder (each `<model>-s<seed>/` with a manifest),
//! writes the built-ins' tables, `score_by_length.{md,csv,json}` and
//! `fig_score_by_length.png` into the output folder (default `<study>/custom/`), and prints
//! the files it wrote. Everything it uses is the facade's (`lmsplit::...`).

use std::error::Error;
use std::path::{Path, PathBuf};

use lmsplit::experiment::units::{Analysis, Input, Outputs, StudyContext};
use lmsplit::experiment::{analyze, builtin, Progress, Protocol, Result, ScoredRun, StudySpec};
use lmsplit::prefscore::{pearson, top_tokens};
use lmsplit::report::{line_plot, Cell, PlotOptions, Series, Table};
use serde::Serialize;

/// The unit: the main score of each run's top tokens against their length in characters.
struct ScoreByLength;

/// One run's scores by token length.
#[derive(Debug, Serialize)]
struct RunByLength {
    /// The run.
    label: String,
    /// Tokens used (the top tokens with a score and a printable piece).
    tokens: usize,
    /// Pearson r of score and length.
    pearson: f64,
    /// Per length (characters, a continuation piece's `##` left out): (length, tokens, mean
    /// score).
    by_length: Vec<(usize, usize, f64)>,
}

/// What the unit computed: one row per run (its entry of `study.json`).
#[derive(Debug, Serialize)]
struct ByLength(Vec<RunByLength>);

impl Analysis for ScoreByLength {
    type Output = ByLength;

    fn name(&self) -> &str {
        "score_by_length"
    }

    fn needs(&self) -> &[Input] {
        // The pieces' text (the vocabulary) and the top tokens (the corpus' frequencies).
        &[Input::Vocabulary, Input::Corpus]
    }

    fn compute(&self, ctx: &StudyContext<'_>, _: &Outputs) -> Result<Option<ByLength>> {
        let Some((_, runs)) = ctx.main() else {
            return Ok(None);
        };
        let (data, top) = (ctx.data(self.name())?, ctx.top(self.name())?);
        let mut rows = Vec::new();
        for r in runs {
            let values = &r.scores.values;
            let mut pairs = Vec::new(); // (length, score)
            for t in top_tokens(top.freq, top.n, &[values]) {
                let (Some(piece), Some(s)) = (data.tok.id_to_token(t), values[t as usize]) else {
                    continue;
                };
                let len = piece.trim_start_matches("##").chars().count();
                pairs.push((len, s));
            }
            let (x, y): (Vec<f64>, Vec<f64>) = pairs.iter().map(|&(l, s)| (l as f64, s)).unzip();
            let mut by_length: Vec<(usize, usize, f64)> = Vec::new();
            let longest = pairs.iter().map(|p| p.0).max().unwrap_or(0);
            for len in 1..=longest {
                let s: Vec<f64> = (pairs.iter()).filter(|p| p.0 == len).map(|p| p.1).collect();
                if !s.is_empty() {
                    by_length.push((len, s.len(), s.iter().sum::<f64>() / s.len() as f64));
                }
            }
            rows.push(RunByLength {
                label: r.label.clone(),
                tokens: pairs.len(),
                pearson: pearson(&x, &y).unwrap_or(f64::NAN),
                by_length,
            });
        }
        Ok(Some(ByLength(rows)))
    }

    fn write(
        &self,
        o: &ByLength,
        ctx: &StudyContext<'_>,
        _: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let mut t = Table::new(
            [
                "run",
                "length",
                "tokens",
                "mean score",
                "Pearson r (all lengths)",
            ]
            .map(String::from)
            .to_vec(),
        )
        .with_title("Preference score by token length (characters)");
        for r in &o.0 {
            for &(len, n, mean) in &r.by_length {
                t.push_row(vec![
                    Cell::from(r.label.as_str()),
                    Cell::from(len),
                    Cell::from(n),
                    Cell::from(mean),
                    Cell::from(r.pearson),
                ]);
            }
        }
        files.extend(t.write_all(ctx.out, "score_by_length")?);
        let series: Vec<Series> = (o.0.iter())
            .map(|r| {
                let (x, y) = r.by_length.iter().map(|&(l, _, m)| (l as f64, m)).unzip();
                Series::new(format!("{} (r = {:.2})", r.label, r.pearson), x, y)
            })
            .collect();
        let fig = ctx.out.join("fig_score_by_length.png");
        let opts = PlotOptions {
            title: "Mean preference score by token length".into(),
            x_label: "length (characters)".into(),
            y_label: "mean score s".into(),
            ..PlotOptions::default()
        };
        line_plot(&fig, &series, &opts)?;
        files.push(fig);
        Ok(())
    }
}

/// The run folders of a study folder: the protocol's runs in its order (the order
/// `reproduce train` writes its tables in), then any other run folder in name order.
fn run_folders(study: &Path, spec: &StudySpec) -> std::io::Result<Vec<PathBuf>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(study)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    dirs.retain(|d| d.join("manifest.json").is_file());
    let order: Vec<String> = spec.runs.iter().map(|r| r.label()).collect();
    dirs.sort_by_key(|d| {
        let name = d.file_name().map(|n| n.to_string_lossy().into_owned());
        let rank = name
            .as_ref()
            .and_then(|n| order.iter().position(|l| l == n));
        (rank.unwrap_or(usize::MAX), name)
    });
    Ok(dirs)
}

fn main() -> std::result::Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let study = PathBuf::from(
        args.next()
            .ok_or("usage: custom_analysis <study folder> [out]")?,
    );
    let out = args
        .next()
        .map_or_else(|| study.join("custom"), PathBuf::from);
    let spec = StudySpec::protocol(Protocol::Smoke, Path::new("unused"))?;
    let runs = ScoredRun::load_all(&run_folders(&study, &spec)?)?;
    let mut units = builtin();
    units.push(Box::new(ScoreByLength));
    let outcome = analyze(&spec, &runs, &units, &out, &Progress::silent())?;
    for l in &outcome.left_out {
        println!("left out: {} (needs {}: {})", l.unit, l.input, l.why);
    }
    for f in &outcome.outputs {
        println!("{}", f.display());
    }
    Ok(())
}
