//! Finished two-tower runs compared wherever their folders lie: Table 2's pair statistics
//! (Pearson with its bootstrap interval, Spearman, head-seed and split-half reliabilities,
//! disattenuated r, the frequency partial) for runs no one study holds, e.g. one run of a
//! protocol trained on two machines:
//!
//! ```text
//! cargo run --release --example compare_runs -- \
//!     cpu=$HOME/runs/cpu-paper/gpt-s0 h100=$HOME/runs/gpu-twin/gpt-s0 --out out/compare
//! ```
//!
//! Each run is `NAME=DIR` or `DIR` (named `<study folder>/<run folder>`). Nothing is trained:
//! an unfinished folder is an error naming it; a finished one is read as it lies, also while
//! the process that holds it still trains its snapshot heads. A study moved whole, or brought
//! from another machine, reads its scoring sets from its own `data/` beside the run when the
//! folder its records name is not here. Writes `pairs_<score>_<selection>.{md,csv,json}`
//! and `fig_table2_<score>_<selection>.png` into `--out`; the last line printed is a JSON object
//! `{"pairs": [{"a", "b", "selection", "tokens", "pearson", "disattenuated"}], "outputs"}`.

mod common;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use lmsplit::experiment::analysis::TokenSelection;
use lmsplit::experiment::compare::{compare_run_folders, NamedRun};
use lmsplit::experiment::units::kind_named;
use lmsplit::experiment::{ExperimentError, Progress};

#[derive(Parser, Debug)]
#[command(about = "Compare finished two-tower runs from any folders (Table 2's pair statistics)")]
struct Args {
    /// The runs: NAME=DIR or DIR (named <study folder>/<run folder>), at least two.
    #[arg(required = true, num_args = 2..)]
    runs: Vec<String>,
    /// Output folder of the tables and figures.
    #[arg(long, default_value = "out/compare")]
    out: PathBuf,
    /// The paper's selection: the N most frequent training tokens scored in every run.
    #[arg(long, default_value_t = 5000)]
    top: usize,
    /// The second selection: tokens with at least this many scored positions in every run.
    #[arg(long, default_value_t = 50)]
    min_count: u64,
    /// The score: arithmetic (eq. 4) or geometric (the released code's).
    #[arg(long, default_value = "arithmetic")]
    score: String,
    /// Bootstrap resamples and permutations of every correlation.
    #[arg(long, default_value_t = 1000)]
    resamples: usize,
    /// No tables on stdout (the JSON line still comes).
    #[arg(long)]
    quiet: bool,
}

fn main() -> ExitCode {
    common::quiet_on_broken_pipe();
    common::finish(run(Args::parse()))
}

fn run(args: Args) -> Result<(), ExperimentError> {
    let kind = kind_named(&args.score)?;
    let runs: Vec<NamedRun> = args
        .runs
        .iter()
        .map(|r| match r.split_once('=') {
            Some((name, dir)) => NamedRun {
                name: name.into(),
                dir: dir.into(),
            },
            None => NamedRun::from_dir(r),
        })
        .collect();
    let progress = match args.quiet {
        true => Progress::silent(),
        false => Progress::stdout(),
    };
    let selections = [
        TokenSelection::TopFrequent(args.top),
        TokenSelection::MinCount(args.min_count),
    ];
    let found = compare_run_folders(
        &runs,
        &selections,
        kind,
        args.resamples,
        &args.out,
        &progress,
    )?;
    let pairs: Vec<_> = found
        .pairs
        .iter()
        .map(|p| {
            serde_json::json!({
                "a": p.a, "b": p.b, "selection": p.selection, "tokens": p.tokens,
                "pearson": p.pearson.r,
                "disattenuated": p.disattenuated.as_ref().and_then(|d| d.value),
            })
        })
        .collect();
    println!(
        "{}",
        serde_json::json!({ "pairs": pairs, "outputs": found.outputs })
    );
    Ok(())
}
