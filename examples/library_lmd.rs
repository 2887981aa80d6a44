//! The LMD study as a library call: two local models, a tiny sample, group R² per model.
//!
//! `cargo run --release --example library_lmd` (from the workspace root, with `../shared`
//! holding the models, WikiText-2 and the BERT vocabulary).

mod common;

use std::path::PathBuf;
use std::process::ExitCode;

use lmsplit::experiment::lmd_study::{run_lmd_study, LmdStudySpec};
use lmsplit::experiment::ExperimentError;
use lmsplit::experiment::Progress;

fn main() -> ExitCode {
    common::quiet_on_broken_pipe();
    common::finish(run())
}

fn run() -> Result<(), ExperimentError> {
    let shared = PathBuf::from("../shared");
    let mut spec = LmdStudySpec::new(
        vec![
            shared.join("models/all-MiniLM-L6-v2"),
            shared.join("data/stories260K"),
        ],
        shared.join("data/wikitext-2/train.txt"),
        shared.join("data/bert-base-uncased/vocab.txt"),
    );
    // Tiny sizes: the fits need more train sequences than the widest model (MiniLM, d = 384).
    spec.ts = vec![16];
    spec.n_train = 512;
    spec.n_test = 128;
    let outcome = run_lmd_study(&spec, "out/library_lmd".as_ref(), &Progress::silent())?;
    for (i, model) in outcome.models.iter().enumerate() {
        for t in &outcome.per_t {
            println!("{model:<20} T = {:<4} group R² {:.3}", t.t, t.group_r2[i]);
        }
    }
    println!("Table 2: {}", outcome.table2[1].display());
    Ok(())
}
