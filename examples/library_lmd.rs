//! The LMD study as a library call: two local models, a tiny sample, group R² per model.
//!
//! `cargo run --release --example library_lmd` (from the workspace root, with `../shared`
//! holding the models, WikiText-2 and the BERT vocabulary).

use lmsplit::lmd::study::{run_lmd_study, LmdStudySpec};
use lmsplit::report::Progress;

fn main() -> Result<(), lmsplit::lmd::LmdError> {
    let shared = std::path::Path::new("../shared");
    let mut spec = LmdStudySpec::new(
        vec![
            shared.join("models/all-MiniLM-L6-v2"),
            shared.join("data/stories260K"),
        ],
        shared.join("data/wikitext-2/train.txt"),
        shared.join("data/bert-base-uncased/vocab.txt"),
    );
    // Tiny sizes: the fits need more train sequences than the widest model (d = 384).
    (spec.ts, spec.n_train, spec.n_test) = (vec![16], 512, 128);
    let outcome = run_lmd_study(&spec, "out/library_lmd".as_ref(), &Progress::silent())?;
    for (model, r2) in outcome.models.iter().zip(&outcome.per_t[0].group_r2) {
        println!("{model}: group R² {r2:.3}");
    }
    Ok(())
}
