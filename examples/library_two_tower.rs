//! The two-tower experiment as a library call (the README's program): two tiny GPT towers on
//! the embedded synthetic corpus, trained, their heads retrained and scored, and the preference
//! per word class.
//!
//! `cargo run --release --example library_two_tower` (about a minute on a CPU).

use lmsplit::experiment::pos::{preference_by_tag, TagSource};
use lmsplit::experiment::{CorpusSpec, RunOptions, RunSpec, ScoringSpec, Workspace};
use lmsplit::towers::{Preset, Style};

fn main() -> Result<(), lmsplit::experiment::ExperimentError> {
    let out = std::path::Path::new("out/library_two_tower");
    let corpus = CorpusSpec::synthetic(300, 0);
    let ws = Workspace::open(&corpus, out.join("data"))?;
    let spec = RunSpec::new(Style::gpt(), Preset::Tiny, corpus).with_seed(0);
    let set = ws.scoring_set(&spec.style, &ScoringSpec::new(64))?;
    let run = ws.ensure_run(&spec, &out.join("gpt-s0"), &set, &RunOptions::default())?;
    for t in preference_by_tag(&run, ws.data(), &TagSource::Gold, 300)? {
        println!("{:<6} n = {:<4} mean score {:+.3}", t.tag, t.n, t.mean);
    }
    Ok(())
}
