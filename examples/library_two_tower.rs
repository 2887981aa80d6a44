//! The two-tower experiment as a library call: two tiny GPT towers on the embedded synthetic
//! corpus, trained, their heads retrained and scored, and the preference per word class.
//!
//! `cargo run --release --example library_two_tower` (about a minute on a CPU).

mod common;

use std::process::ExitCode;

use lmsplit::experiment::analysis::RunScores;
use lmsplit::experiment::pos::{lexicon, TagSource};
use lmsplit::experiment::tables::pos_figure;
use lmsplit::experiment::{
    CorpusSpec, ExperimentError, RunOptions, RunSpec, ScoringSpec, Workspace,
};
use lmsplit::prefscore::{Bootstrap, ScoreKind};
use lmsplit::towers::Style;

fn main() -> ExitCode {
    common::quiet_on_broken_pipe();
    common::finish(run())
}

fn run() -> Result<(), ExperimentError> {
    let out = std::path::Path::new("out/library_two_tower");
    let corpus = CorpusSpec::synthetic(300, 0);
    let ws = Workspace::open(&corpus, out.join("data"))?;
    let spec = RunSpec::new(Style::Gpt, "tiny", corpus).with_seed(0);
    let set = ws.scoring_set(spec.style, &ScoringSpec::new(64))?;
    let run = ws.ensure_run(&spec, &out.join("gpt-s0"), &set, &RunOptions::default())?;
    let data = ws.data();
    let scores = RunScores::new(&run, ScoreKind::ArithmeticMean)?;
    let tags = lexicon(data, &TagSource::Gold, false)?.to_dense(data.padded_vocab());
    let title = "Preference per word class";
    let (per_tag, files) = pos_figure(
        &scores,
        &data.freq,
        &tags,
        300,
        &Bootstrap::default(),
        title,
        out,
    )?;
    for t in &per_tag {
        println!("{:<6} n = {:<4} mean score {:+.3}", t.tag, t.n, t.mean);
    }
    println!("table and figure: {}", files[1].display());
    Ok(())
}
