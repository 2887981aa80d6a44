//! The agreement curves of several studies as one table and one figure: how the preference's
//! agreement grows with training, over every class of pairs that any of the studies measured
//! (e.g. GPT, ELMo as released and BERT in one study, the full BiLSTM's seed pair in another):
//!
//! ```text
//! R=docs/results
//! cargo run --release --example emergence_merge -- cpu-gpt=$R/paper-vocab-cpu \
//!     curves=$R/curves curves-bert=$R/curves-bert \
//!     curves-elmo=$R/curves-elmo,$R/curves-elmo-29nov,$R/paper-vocab-cpu/ten-runs/pairs_arithmetic_top-5000.md \
//!     --out out/curve
//! ```
//!
//! Each study is `NAME=PATHS` or `PATHS` (named by its first table's folder), PATHS one table or
//! several joined by commas: an `emergence.csv`, an `emergence.md` or a folder holding one (as
//! `reproduce` writes it into a study and `docs/results/` keeps it; the CSV first, the Markdown
//! table where a study kept only that), and Table 2 pairs tables (`pairs_<score>_<selection>`),
//! whose pairs give the end points of the curve's pairs. Several tables are one study only where
//! they hold the same runs (e.g. trainings that repeat each other to the last digit); a pair
//! that two of them hold at one point must agree there (`read_study_curve`).
//! Nothing is trained or scored: the pairs are read back from the tables (their intervals and
//! reliabilities at the tables' three decimals, every number of a Markdown table so), each run
//! named `<study>/<run>`, and every class's trend is recomputed over the merged pairs. Writes
//! `emergence.{md,csv,json}`, `fig_emergence_correlation.png` and, where one is found,
//! `fig_emergence_oriented.png` into `--out`; the last line printed is a JSON object
//! `{"studies", "pairs", "outputs"}`.

mod common;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use lmsplit::experiment::emergence::{
    merge_curves, read_study_curve, write_merged_emergence, StudyCurve,
};
use lmsplit::experiment::units::kind_named;
use lmsplit::experiment::ExperimentError;

#[derive(Parser, Debug)]
#[command(about = "Merge several studies' agreement curves into one table and one figure")]
struct Args {
    /// The studies: NAME=PATHS or PATHS, PATHS one table or several joined by commas (an
    /// emergence.csv, an emergence.md, a folder holding one, or a Table 2 pairs table for the
    /// end points).
    #[arg(required = true, num_args = 1..)]
    studies: Vec<String>,
    /// Output folder of the table and figures.
    #[arg(long, default_value = "out/curve")]
    out: PathBuf,
    /// The score the studies' curves follow (their tables do not record it): arithmetic
    /// (eq. 4, the protocols') or geometric (the released code's).
    #[arg(long, default_value = "arithmetic")]
    score: String,
    /// No table on stdout (the JSON line still comes).
    #[arg(long)]
    quiet: bool,
}

fn main() -> ExitCode {
    common::quiet_on_broken_pipe();
    common::finish(run(Args::parse()))
}

/// A study's name: its folder's (the folder of its table when PATH is the file).
fn default_name(path: &Path) -> String {
    let folder = match path.extension().is_some_and(|e| e == "csv" || e == "md") {
        true => path.parent().unwrap_or(path),
        false => path,
    };
    folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

fn run(args: Args) -> Result<(), ExperimentError> {
    let kind = kind_named(&args.score)?;
    let studies: Vec<StudyCurve> = args
        .studies
        .iter()
        .map(|s| {
            let (name, paths) = match s.split_once('=') {
                Some((name, paths)) => (Some(name), paths),
                None => (None, s.as_str()),
            };
            let tables: Vec<&Path> = paths.split(',').map(Path::new).collect();
            let name = name.map_or_else(|| default_name(tables[0]), String::from);
            read_study_curve(&name, &tables, kind)
        })
        .collect::<Result<_, _>>()?;
    let merged = merge_curves(&studies, kind)?;
    let outputs = write_merged_emergence(&merged, &studies, &args.out)?;
    if !args.quiet {
        // The table as written, its trend rows saying whether each class still rises.
        common::print_table(&args.out.join("emergence.md"))?;
        for f in &outputs {
            println!("wrote {}", f.display());
        }
    }
    let per_study: Vec<_> = studies
        .iter()
        .map(
            |s| serde_json::json!({ "study": s.study, "sources": s.sources, "pairs": s.pairs.len() }),
        )
        .collect();
    println!(
        "{}",
        serde_json::json!({ "studies": per_study, "pairs": merged.pairs.len(), "outputs": outputs })
    );
    Ok(())
}
