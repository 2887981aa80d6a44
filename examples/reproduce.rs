//! The two-tower reproduction in two verbs:
//!
//! ```text
//! # every run of a protocol (smoke, cpu, gpu) trained, resumed or reused under <out>/<model>-s<seed>/
//! cargo run --release --example reproduce -- train --protocol smoke --out out/smoke
//! cargo run --release --example reproduce -- train --protocol cpu --out runs/cpu --only gpt-s0
//! cargo run --release --example reproduce -- train --protocol cpu --out runs/cpu --only gpt-s0@0.5
//! # every table and figure of any set of finished run folders (nothing is trained)
//! cargo run --release --example reproduce -- analyze out/smoke/gpt-s0 out/smoke/gpt-s1 out/smoke/bert-s0 \
//!     --protocol smoke --out out/smoke-analysis
//! ```
//!
//! `train` writes the study's tables too once every job of the protocol (or of `--only`) has
//! finished. As jobs: processes with disjoint `--only` sets may share one `--out` (a Slurm array,
//! one run or one snapshot of a finished run a task); SIGTERM or SIGINT stops training after its
//! checkpoint and exits with code 75 (requeue the same command to resume bit-exactly); exit code 1
//! is any other error, printed as a sentence; `analyze` over the finished folders then makes the
//! tables. The last line printed is the study's JSON summary.

mod common;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args as ClapArgs, Parser, Subcommand};
use lmsplit::experiment::spec::Vocabulary;
use lmsplit::experiment::{
    analyze, builtin, run_study, ExperimentError, Progress, Protocol, RunOptions, ScoredRun,
    StudySpec,
};
use lmsplit::towers::StopToken;

#[derive(Parser, Debug)]
#[command(about = "Two-tower reproduction: train a protocol's runs, analyse any run folders")]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Subcommand, Debug)]
enum Verb {
    /// Train (or resume, or reuse) every run of a protocol, then write its tables.
    Train(Train),
    /// Every table and figure of a set of finished run folders; nothing is trained.
    Analyze(Analyze),
}

/// What both verbs take.
#[derive(ClapArgs, Debug)]
struct Common {
    /// smoke (synthetic corpus, about a minute), cpu (WikiText-2, hours a run) or gpu.
    #[arg(long, default_value = "smoke")]
    protocol: Protocol,
    /// Output folder: the study (train) or the tables (analyze).
    #[arg(long)]
    out: PathBuf,
}

#[derive(ClapArgs, Debug)]
struct Train {
    #[command(flatten)]
    common: Common,
    /// Only these jobs (comma-separated): runs (gpt-s0) and the heads of a finished run's
    /// phase-1 snapshot (gpt-s0@0.5); default: every run, then every snapshot.
    #[arg(long, default_value = "")]
    only: String,
    /// Where to train: cpu, cuda or cuda:<N> (default: the first GPU of a CUDA build, else
    /// the CPU; bf16 compute with f32 master weights on CUDA).
    #[arg(long)]
    device: Option<String>,
    /// Every run's vocabulary: bert-base-uncased (the paper's), trained-8k, trained:<N>, or a
    /// tokenizer file or a folder holding one.
    #[arg(long)]
    tokenizer: Option<String>,
}

#[derive(ClapArgs, Debug)]
struct Analyze {
    #[command(flatten)]
    common: Common,
    /// Finished run folders (each with manifest.json and scores.safetensors), from anywhere.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
}

/// The shared data folder (WikiText, EWT, the BERT vocabulary) of the cpu and gpu protocols.
fn shared() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data"))
}

fn main() -> ExitCode {
    common::quiet_on_broken_pipe();
    // candle allocates per op: keep freed buffers for reuse (see lmsplit::alloc).
    lmsplit::alloc::retain_freed_memory();
    let stop = common::stop_on_signals();
    common::exit_stopped_or_finish(run(Cli::parse(), stop))
}

fn run(cli: Cli, stop: StopToken) -> Result<(), ExperimentError> {
    let outcome = match cli.verb {
        Verb::Train(t) => {
            let mut spec = StudySpec::protocol(t.common.protocol, &shared())?;
            if let Some(v) = &t.tokenizer {
                spec = spec.with_vocabulary(&Vocabulary::parse(v, &shared())?);
            }
            let only = common::parse_list(&t.only)
                .map_err(|why| ExperimentError::bad_setting("--only", &t.only, why))?;
            let opts = RunOptions {
                device: common::device(t.device.as_deref())?,
                stop,
                progress: Progress::stdout(),
                ..RunOptions::default()
            };
            run_study(&spec, &t.common.out, &only, &opts)?
        }
        Verb::Analyze(a) => {
            let spec = StudySpec::protocol(a.common.protocol, &shared())?;
            let runs = ScoredRun::load_all(&a.runs)?;
            analyze(&spec, &runs, &builtin(), &a.common.out, &Progress::stdout())?
        }
    };
    let line = serde_json::to_string(&outcome).map_err(|source| ExperimentError::Json {
        path: "the summary line".into(),
        source,
    })?;
    println!("{line}");
    Ok(())
}
