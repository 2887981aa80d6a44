//! Section 5.3 of the two-tower paper: PCA (d = 128, capped by the embedding width) and Amari
//! ICA of the trained shared embedding of the most frequent tokens; word clusters at |y| > 2.5;
//! Fig. 5 (ICA loadings of the 500 most frequent words), Fig. 6 (how many clusters a word is
//! in) and Table 3 (typical words of each component with the mean preference score and rank of
//! its words).
//!
//! ```text
//! cargo run --release -p lmsplit --example ica_groups -- [--run out/preference_table/gpt-s0]
//!     [--style gpt --seed 0 --corpus synthetic ...] [--top-n 5000] [--dim 128] [--out out/ica_groups]
//! ```
//!
//! With `--run` the run folder of another example is reused (its checkpoints are loaded, nothing
//! is trained again); otherwise the run is trained (or resumed) in `<out>/<style>-s<seed>/`.
//! The last line printed is a JSON object with the numbers and the output paths.

mod common;

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use common::{ica_groups, run_scores, Res, RunSelect};
use prefscore::{top_tokens, Bootstrap, ScoreKind};
use report::{MatrixOptions, PlotOptions};
use serde_json::json;

#[derive(Parser, Debug)]
#[command(about = "ICA word groups of a two-tower run's shared embedding (Table 3, Fig. 5, 6)")]
struct Args {
    /// The run analysed: an existing folder, or one trained here.
    #[command(flatten)]
    select: RunSelect,
    /// Most frequent tokens whose embeddings are analysed.
    #[arg(long, default_value_t = 5000)]
    top_n: usize,
    /// PCA dimension (capped by the embedding width).
    #[arg(long, default_value_t = 128)]
    dim: usize,
    /// Words shown in the loading matrix (Fig. 5).
    #[arg(long, default_value_t = 500)]
    fig_words: usize,
    /// Output directory.
    #[arg(long, default_value = "out/ica_groups")]
    out: PathBuf,
}

fn main() -> Res<()> {
    // candle allocates per op: keep freed buffers for reuse (see lmsplit::alloc).
    lmsplit::alloc::retain_freed_memory();
    let args = Args::parse();
    let t0 = Instant::now();
    std::fs::create_dir_all(&args.out)?;
    let run = args.select.open(&args.out, true)?;
    let model = &run
        .result
        .run
        .as_ref()
        .ok_or("the model was not loaded")?
        .model;
    let scores = run_scores(&run.result.logprobs, ScoreKind::ArithmeticMean)?;
    let emb: Vec<Vec<f32>> = model
        .params()
        .snapshot()?
        .remove("embed.tokens")
        .ok_or("the model has no embed.tokens table")?
        .to_vec2()?;

    // The most frequent tokens of the training text (scored or not), special tokens excluded
    // (they never occur in the counts).
    let tokens: Vec<u32> = top_tokens(&run.freq, args.top_n, &[])
        .into_iter()
        .filter(|&t| run.freq[t as usize] > 0)
        .collect();
    let g = ica_groups(
        &emb,
        &tokens,
        &run.freq,
        &scores.values,
        &run.tok,
        args.dim,
        ica::AmariConfig::default(),
        &Bootstrap::default(),
    )?;
    let cc = &g.counts;
    println!(
        "PCA d = {} of {} embeddings (width {}); ICA {} steps, converged: {}",
        g.dim,
        tokens.len(),
        emb[0].len(),
        g.ica.steps,
        g.ica.converged
    );
    println!(
        "clusters at 2.5: {:.1}% of words in none, {:.1}% in exactly one, {:.2} on average (paper: 13%, 45%, 1.45)",
        100.0 * cc.none,
        100.0 * cc.exactly_one,
        cc.mean
    );
    println!("{}", g.table.to_markdown());
    let table_paths = g.table.write_all(&args.out, "table3_ica_groups")?;

    // Fig. 5: loadings of the most frequent words (rows by frequency).
    let n_fig = args.fig_words.min(tokens.len());
    let d = g.sources.cols();
    let values: Vec<f64> = (0..n_fig)
        .flat_map(|i| g.sources.row(i).iter().map(|&v| v as f64))
        .collect();
    let labels: Vec<String> = tokens[..n_fig]
        .iter()
        .map(|&t| run.tok.id_to_token(t).unwrap_or_default())
        .collect();
    let fig5 = args.out.join("fig5_ica_loadings.png");
    report::matrix_image(
        &fig5,
        &values,
        n_fig,
        d,
        Some(&labels),
        &MatrixOptions {
            title: format!("ICA loadings of the {n_fig} most frequent words"),
            x_label: "independent component".into(),
            y_label: "word (by frequency)".into(),
            diverging: true,
            ..MatrixOptions::default()
        },
    )?;
    // Fig. 6: share of words in 0, 1, 2, ... clusters.
    let fig6 = args.out.join("fig6_cluster_counts.png");
    let n_words = tokens.len() as f64;
    let bar_labels: Vec<String> = (0..cc.words_with.len()).map(|k| k.to_string()).collect();
    let shares: Vec<f64> = cc.words_with.iter().map(|&c| c as f64 / n_words).collect();
    report::bar_chart(
        &fig6,
        &bar_labels,
        &shares,
        &PlotOptions {
            title: "Clusters per word (|y| > 2.5)".into(),
            x_label: "number of clusters".into(),
            y_label: "share of words".into(),
            ..PlotOptions::default()
        },
    )?;

    let summary = json!({
        "seconds": t0.elapsed().as_secs_f64(),
        "run": run.dir, "style": run.spec.style, "seed": run.spec.settings.seed,
        "corpus": run.spec.corpus.corpus, "words": tokens.len(), "embedding_width": emb[0].len(),
        "dim": g.dim, "ica_steps": g.ica.steps, "ica_converged": g.ica.converged,
        "clusters": {"none": cc.none, "exactly_one": cc.exactly_one, "mean": cc.mean, "words_with": cc.words_with},
        "outputs": {"table3": table_paths, "fig5": fig5, "fig6": fig6},
    });
    std::fs::write(
        args.out.join("summary.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    println!("{summary}");
    Ok(())
}
