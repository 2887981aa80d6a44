//! The agreement curves of several studies as one table and one figure: how the preference's
//! agreement grows with training, over every class of pairs that any of the studies measured
//! (e.g. GPT, ELMo as released and BERT in one study, the full BiLSTM's seed pair in another):
//!
//! ```text
//! cargo run --release --example emergence_merge -- cpu-gpt=docs/results/paper-vocab-cpu \
//!     curves=docs/results/curves curves-bert=docs/results/curves-bert \
//!     curves-elmo=docs/results/curves-elmo --out out/curve
//! ```
//!
//! Each study is `NAME=PATH` or `PATH` (named by its folder), PATH an `emergence.csv`, an
//! `emergence.md` or a folder holding one (as `reproduce` writes it into a study and
//! `docs/results/` keeps it; the CSV first, the Markdown table where a study kept only that).
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
    /// The studies: NAME=PATH or PATH (an emergence.csv, an emergence.md, or a folder holding
    /// one).
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
        .map(|s| match s.split_once('=') {
            Some((name, path)) => read_study_curve(name, Path::new(path)),
            None => read_study_curve(&default_name(Path::new(s)), Path::new(s)),
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
            |s| serde_json::json!({ "study": s.study, "source": s.source, "pairs": s.pairs.len() }),
        )
        .collect();
    println!(
        "{}",
        serde_json::json!({ "studies": per_study, "pairs": merged.pairs.len(), "outputs": outputs })
    );
    Ok(())
}
