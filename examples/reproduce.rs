//! The two-tower reproduction protocols (issue 13): every run of the protocol trained (or
//! resumed, or reused) under `<out>/<style>-s<seed>/`, scored on one fixed scoring set per
//! style, compared pairwise with the noise ceiling (head-seed and split-half reliability,
//! disattenuated and partial correlations), summarised per POS tag (Fig. 4).
//!
//! ```text
//! cargo run --release --example reproduce -- --protocol smoke --out out/reproduce/smoke
//! cargo run --release --example reproduce -- --protocol cpu --out $HOME/runs/cpu [--only gpt-s0]
//! cargo run --release --example reproduce -- --protocol cpu --tokenizer trained-8k --out ...
//! ```
//!
//! `smoke` runs in about a minute on the embedded synthetic corpus; `cpu` is the powered CPU
//! protocol (WikiText-2, hours); `gpu` scales it for one GPU. A killed study resumes where it
//! stopped when started again with the same arguments; `--only` trains (or reuses) some runs
//! and writes the tables over them to `<out>/subset-<labels>/`; `--tables-only` trains nothing
//! and makes the whole study's tables once every run has finished (naming those that have
//! not); `--status` trains nothing and says where each run stands (beside the processes
//! training them); `--curve-so-far` trains the heads of the phase-1 snapshots written so far
//! (beside those processes) and draws the agreement curve over them; `--stop-at-snapshot K`
//! stops each run at its K-th phase-1 snapshot (exit 75), so that those heads can come first
//! (scripts/curve_points_first.sh). The last line printed is the study's JSON summary (with
//! `--status`, the runs' status).
//!
//! As jobs (docs/cluster.md): processes with disjoint `--only` sets may share one `--out` (the
//! study's `data/` is created once; each run folder has one writer); SIGTERM or SIGINT stops
//! training at the next update boundary after writing its checkpoint and exits with code 75
//! (EX_TEMPFAIL: requeue the same command to resume bit-exactly); exit code 1 is any other error,
//! printed as a sentence.

mod common;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use lmsplit::experiment::curve_so_far::CurvePoints;
use lmsplit::experiment::spec::Vocabulary;
use lmsplit::experiment::status::status_table;
use lmsplit::experiment::{
    run_study, study_status, ExperimentError, Progress, Protocol, RunOptions, StudySpec,
};

#[derive(Parser, Debug)]
#[command(about = "Two-tower reproduction protocols: smoke, cpu, gpu")]
struct Args {
    /// smoke, cpu or gpu.
    #[arg(long, default_value = "smoke")]
    protocol: Protocol,
    /// The shared data folder (WikiText, EWT) of the cpu and gpu protocols.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data"))]
    shared: PathBuf,
    /// Output folder (default: out/reproduce/<protocol>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The vocabulary of every run and scoring set of the study: bert-base-uncased (the
    /// paper's, the cpu and gpu protocols' default), trained-8k (an 8,192-piece WordPiece
    /// trained on the corpus), trained:<N>, or a tokenizer file (vocab.txt, tokenizer.json) or a
    /// folder holding one (e.g. a model folder).
    #[arg(long)]
    tokenizer: Option<String>,
    /// Train only these runs now (comma-separated labels such as gpt-s0,elmo_released-s1).
    #[arg(long, default_value = "")]
    only: String,
    /// Train nothing: make the study's tables over every run once all have finished (the last
    /// step after a job array of `--only <run>` jobs), their snapshots' heads included unless
    /// `--no-emergence`. A run not finished yet is named in the error, never skipped.
    #[arg(long, conflicts_with = "only")]
    tables_only: bool,
    /// Leave out the emergence analysis (each phase-1 snapshot costs a head training and a
    /// scoring).
    #[arg(long)]
    no_emergence: bool,
    /// Where to train: cpu, cuda or cuda:<N> (default: the first GPU when this build has CUDA and
    /// one is present, else the CPU; on CUDA bf16 compute with f32 master weights).
    #[arg(long)]
    device: Option<String>,
    /// Train nothing: print where each run (of --only, else all) stands, read from its folder
    /// (stage, phase-1 tokens of the budget, tokens/s, head updates, snapshot heads, the
    /// minutes left of the training in progress, the head trainings left, the process holding
    /// it), and write it to `<out>/status.md` (.csv, .json). Safe beside the processes that
    /// train the runs.
    #[arg(long, conflicts_with = "tables_only")]
    status: bool,
    /// Train no phase 1: train the heads of the phase-1 snapshots the runs (of --only, else
    /// all the agreement curve's) have written so far, beside the processes training them,
    /// and write the agreement curve over those points (and the ends of finished runs) to
    /// `<out>/curve-so-far-<runs>/`. The heads go into the runs' own cache, so the finished
    /// runs read them back instead of training them again.
    /// `--curve-so-far scored` trains nothing: the curve over the snapshots whose heads are
    /// scored already (a look while other processes train them). `--curve-so-far 2,3` trains
    /// only the heads of those snapshots (1 = the first), taking the others where scored
    /// already (after a loss, the missing points before those already known).
    #[arg(long, value_name = "train|scored|K,K...", num_args = 0..=1, default_missing_value = "train",
          value_parser = parse_points,
          conflicts_with_all = ["tables_only", "status", "no_emergence"])]
    curve_so_far: Option<CurvePoints>,
    /// Stop each run (of --only, else all) once its phase 1 holds its K-th snapshot (1 = the
    /// first), its checkpoint at that update, and exit with code 75 (a requested stop) before
    /// training anything further; `--curve-so-far` can then train those snapshots' heads, and
    /// the same command without this option goes on with the rest. Finished runs are reused.
    #[arg(long, value_name = "K", conflicts_with_all = ["tables_only", "status", "curve_so_far"])]
    stop_at_snapshot: Option<usize>,
    /// No progress bars or tables on stdout (the JSON line still comes).
    #[arg(long)]
    quiet: bool,
}

fn main() -> ExitCode {
    common::quiet_on_broken_pipe();
    // candle allocates per op: keep freed buffers for reuse (see lmsplit::alloc).
    lmsplit::alloc::retain_freed_memory();
    common::stop_on_signals();
    common::exit_stopped_or_finish(run(Args::parse()))
}

/// Every run of `spec` has finished under `out/<label>/`, with its snapshots' heads where
/// `snapshot_heads` (the study would train them for its agreement curve); else an error
/// naming each run that has not, and why.
fn check_finished(
    spec: &StudySpec,
    out: &std::path::Path,
    snapshot_heads: bool,
) -> Result<(), ExperimentError> {
    let runs: Vec<_> = spec
        .runs
        .iter()
        .map(|r| (r.label(), out.join(r.label())))
        .collect();
    lmsplit::experiment::run::check_finished(&runs, snapshot_heads)
}

fn run(args: Args) -> Result<(), ExperimentError> {
    let mut spec = StudySpec::protocol(args.protocol, &args.shared)?;
    if args.no_emergence {
        spec.emergence = None;
    }
    if let Some(t) = &args.tokenizer {
        spec = spec.with_vocabulary(&Vocabulary::parse(t, &args.shared)?);
    }
    let out = args.out.unwrap_or_else(|| {
        PathBuf::from(format!("out/reproduce/{:?}", args.protocol).to_lowercase())
    });
    let only = common::parse_list(&args.only)
        .map_err(|why| ExperimentError::bad_setting("--only", &args.only, why))?;
    let opts = RunOptions {
        device: common::device(args.device.as_deref())?,
        progress: match args.quiet {
            true => Progress::silent(),
            false => Progress::stdout(),
        },
        need_model: false,
        // Without the agreement curve its snapshot heads are not trained either.
        snapshot_heads: !args.no_emergence,
        stop_at_snapshot: args.stop_at_snapshot,
        ..RunOptions::default()
    };
    if args.status {
        return status(&spec, &out, &only, args.quiet);
    }
    if let Some(points) = args.curve_so_far {
        return curve_so_far(&spec, &out, &only, &opts, points, args.quiet);
    }
    if args.tables_only {
        check_finished(&spec, &out, opts.snapshot_heads)?;
    }
    let outcome = run_study(&spec, &out, &only, &opts)?;
    let line = serde_json::to_string(&outcome).map_err(|source| ExperimentError::Json {
        path: "the summary line".into(),
        source,
    })?;
    println!("{line}");
    Ok(())
}

/// `--status`: the status table on stdout (unless quiet) and in `<out>/status.*` where the
/// study folder exists (a query creates no folder: a mistyped `--out` is said on stderr).
fn status(
    spec: &StudySpec,
    out: &std::path::Path,
    only: &[String],
    quiet: bool,
) -> Result<(), ExperimentError> {
    let runs = study_status(spec, out, only)?;
    let table = status_table(&runs);
    if !quiet {
        println!("{}", table.to_markdown());
    }
    if out.is_dir() {
        table.write_all(out, "status")?;
    } else {
        eprintln!(
            "no study folder at {} (nothing started there): the status is not written",
            out.display()
        );
    }
    let line = serde_json::to_string(&runs).map_err(|source| ExperimentError::Json {
        path: "the status line".into(),
        source,
    })?;
    println!("{line}");
    Ok(())
}

/// `--curve-so-far`'s value: `train` (the default), `scored` or snapshots `K,K...`.
fn parse_points(s: &str) -> Result<CurvePoints, String> {
    match s {
        "train" => Ok(CurvePoints::Train),
        "scored" => Ok(CurvePoints::Scored),
        _ => s
            .split(',')
            .map(|k| k.trim().parse::<usize>())
            .collect::<Result<Vec<_>, _>>()
            .map(CurvePoints::TrainOnly)
            .map_err(|_| {
                format!(
                    "{s:?}: train (the default), scored, or snapshots such as 2,3 (1 = the first)"
                )
            }),
    }
}

/// `--curve-so-far`: each run's points, the curve's table on stdout (unless quiet), and the
/// summary's JSON line.
fn curve_so_far(
    spec: &StudySpec,
    out: &std::path::Path,
    only: &[String],
    opts: &RunOptions,
    points: CurvePoints,
    quiet: bool,
) -> Result<(), ExperimentError> {
    let c = lmsplit::experiment::curve_so_far::curve_so_far(spec, out, only, opts, points)?;
    if !quiet {
        for r in &c.runs {
            let points: Vec<String> = r.fractions.iter().map(|f| format!("{f}")).collect();
            let end = if r.finished {
                "finished"
            } else {
                "in training"
            };
            println!("{}: {end}, points at {}", r.label, points.join(", "));
        }
        common::print_table(&c.tables.join("emergence.md"))?;
    }
    let line = serde_json::to_string(&c).map_err(|source| ExperimentError::Json {
        path: "the curve's summary line".into(),
        source,
    })?;
    println!("{line}");
    Ok(())
}
