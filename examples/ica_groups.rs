//! Section 5.3 of the two-tower paper for a finished run: PCA (d = 128, capped by the
//! embedding width) and Amari ICA of the trained shared embedding of the most frequent tokens;
//! word clusters at |y| > 2.5; Table 3 (typical words of each component with the mean
//! preference score and rank of its words), Fig. 5 (ICA loadings) and Fig. 6 (clusters per
//! word).
//!
//! ```text
//! cargo run --release --example ica_groups -- --run out/reproduce/smoke/gpt-s0 \
//!     [--top-n 5000] [--dim 128] [--out out/ica_groups]
//! ```
//!
//! The run folder comes from `reproduce` or `two_tower` (its `manifest.json` says what it is; its
//! final checkpoint is read, nothing is trained again). The last line printed is a JSON object
//! with the numbers and the output paths.

mod common;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use lmsplit::experiment::groups::FitRows;
use lmsplit::experiment::{
    word_groups, write_word_groups, CorpusData, ExperimentError, ScoredRun, WordGroupSettings,
};
use serde_json::json;

#[derive(Parser, Debug)]
#[command(about = "ICA word groups of a two-tower run's shared embedding (Table 3, Fig. 5, 6)")]
struct Args {
    /// A finished run folder (with manifest.json).
    #[arg(long)]
    run: PathBuf,
    /// Most frequent training tokens analysed.
    #[arg(long, default_value_t = 5000)]
    top_n: usize,
    /// PCA dimension before ICA (below the embedding's width: 64 for a width-128 model).
    #[arg(long, default_value_t = 128)]
    dim: usize,
    /// Rows of the fit: corpus positions (the paper's: a word weighs by its frequency; this
    /// many drawn) or 0 for the vocabulary, each word once.
    #[arg(long, default_value_t = 100_000)]
    positions: usize,
    /// Words shown in Fig. 5.
    #[arg(long, default_value_t = 500)]
    fig_words: usize,
    /// Output directory.
    #[arg(long, default_value = "out/ica_groups")]
    out: PathBuf,
}

fn main() -> ExitCode {
    common::quiet_on_broken_pipe();
    // candle allocates per op: keep freed buffers for reuse (see lmsplit::alloc).
    lmsplit::alloc::retain_freed_memory();
    common::finish(run(Args::parse()))
}

fn run(args: Args) -> Result<(), ExperimentError> {
    // The embedding comes from the run's final checkpoint: nothing is trained or scored again.
    let mut run = ScoredRun::load(&args.run)?;
    let data = CorpusData::for_runs(std::slice::from_ref(&run), &args.out.join("data"))?;
    let device = lmsplit::kernels::device::cuda_if_available(0)?;
    run.model = Some(run.trained_model(&data, &device)?);
    let settings = WordGroupSettings {
        top_n: args.top_n,
        dim: args.dim,
        fig_words: args.fig_words,
        rows: match args.positions {
            0 => FitRows::Vocabulary,
            positions => FitRows::CorpusTokens { positions, seed: 0 },
        },
        ..WordGroupSettings::default()
    };
    let (g, tokens) = word_groups(&run, &data, &settings)?;
    let files = write_word_groups(&g, &tokens, &data, &settings, &args.out)?;
    let cc = &g.counts;
    println!(
        "{}: PCA d = {} of {} words; ICA {} steps, converged: {}",
        run.label,
        g.dim,
        tokens.len(),
        g.ica.steps,
        g.ica.converged
    );
    println!(
        "clusters at 2.5: {:.1}% of words in none, {:.1}% in exactly one, {:.2} on average \
         (paper: 13%, 45%, 1.45)",
        100.0 * cc.none,
        100.0 * cc.exactly_one,
        cc.mean
    );
    println!("{}", g.table.to_markdown());
    let summary = json!({
        "run": run.dir, "words": tokens.len(), "dim": g.dim,
        "ica_steps": g.ica.steps, "ica_converged": g.ica.converged,
        "clusters": {"none": cc.none, "exactly_one": cc.exactly_one, "mean": cc.mean,
                     "words_with": cc.words_with},
        "outputs": files,
    });
    println!("{summary}");
    Ok(())
}
