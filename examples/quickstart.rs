//! Quickstart: the whole two-tower pipeline on the embedded synthetic corpus (no downloads),
//! plus a planted Language Model Decomposition, in a few minutes on a CPU.
//!
//! ```text
//! cargo run --release --example quickstart [-- --style gpt --budget-tokens 300000 --out out/quickstart]
//! ```
//!
//! 1. corpus: a seeded synthetic corpus whose words carry gold UPOS tags; a WordPiece
//!    vocabulary trained on it; token frequencies.
//! 2. towers + heads: two towers trained jointly (phase 1), frozen, one head retrained per
//!    tower until its validation NLL stops improving (phases 2/3), every head scored on the
//!    fixed scoring set of the held-out documents.
//! 3. prefscore: per-token preference scores (paper eq. 3-4) summarised per word class.
//! 4. ica: PCA + Amari ICA of the shared embedding of the frequent tokens; word clusters; the
//!    preference of each component's words (Table 3 of the paper, in miniature).
//! 5. lmd: streaming moments of planted embeddings, closed-form fits, group R² against the
//!    planted truth.
//!
//! Everything is `lmsplit::experiment` API; this file only chooses settings and prints. The
//! last line printed is a JSON summary with the output paths.

mod common;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use lmsplit::experiment::analysis::{RunScores, TopTokens};
use lmsplit::experiment::pos::{lexicon, pos_tags, TagSource};
use lmsplit::experiment::tables::write_pos;
use lmsplit::experiment::{
    word_groups, write_word_groups, CorpusData, CorpusSpec, ExperimentError, RunOptions, RunSpec,
    ScoredRun, ScoringSpec, WordGroupSettings, Workspace,
};
use lmsplit::lmd::study::planted_check;
use lmsplit::prefscore::{Bootstrap, ScoreKind};
use lmsplit::towers::{Preset, Style};
use serde_json::json;

#[derive(Parser, Debug)]
#[command(about = "lmsplit quickstart: the two-tower pipeline and LMD on embedded synthetic data")]
struct Args {
    /// Tower style: gpt, bert or elmo.
    #[arg(long, default_value = "gpt")]
    style: Style,
    /// Token positions of phase 1 (the heads train until they stop improving).
    #[arg(long, default_value_t = 300_000)]
    budget_tokens: u64,
    /// Documents of the synthetic corpus.
    #[arg(long, default_value_t = 600)]
    documents: usize,
    /// Seed of the corpus, weights, batches and masks.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output directory.
    #[arg(long, default_value = "out/quickstart")]
    out: PathBuf,
}

/// Tokens whose statistics enter the word-class and ICA summaries.
const TOP_TOKENS: usize = 300;

fn main() -> ExitCode {
    common::quiet_on_broken_pipe();
    // candle allocates per op: keep freed buffers for reuse (see lmsplit::alloc).
    lmsplit::alloc::retain_freed_memory();
    common::finish(run(Args::parse()))
}

/// Steps 1-2: the corpus and one scored run of tiny towers.
fn train(args: &Args) -> Result<(CorpusData, ScoredRun), ExperimentError> {
    let mut corpus = CorpusSpec::synthetic(args.documents, args.seed);
    corpus.train_vocab = 1024;
    let ws = Workspace::open(&corpus, args.out.join("data"))?;
    let data = ws.data();
    println!(
        "[1] corpus: {} synthetic documents, vocabulary {} -> {}",
        data.docs.len(),
        data.tok.vocab_size(),
        ws.dir().display()
    );
    let mut spec = RunSpec::new(args.style.clone(), Preset::Tiny, corpus).with_seed(args.seed);
    spec.phase1.budget_tokens = args.budget_tokens;
    let scoring = ws.scoring_set(&spec.style, &ScoringSpec::new(64))?;
    let opts = RunOptions {
        need_model: true,
        progress: lmsplit::experiment::Progress::stdout(),
        ..RunOptions::default()
    };
    let run = ws.ensure_run(&spec, &args.out.join(spec.label()), &scoring, &opts)?;
    let res = run.result()?;
    println!(
        "[2] two towers: joint validation loss {:.3}; heads {:?} (unigram {:.3}) on {} scored positions",
        res.phase1.val_loss.unwrap_or(f64::NAN),
        res.heads.nll,
        res.heads.unigram_nll,
        res.positions
    );
    Ok((ws.into_data(), run))
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let (data, run) = train(&args)?;

    // 3. preference per gold word class
    let boot = Bootstrap {
        seed: args.seed,
        ..Bootstrap::default()
    };
    let scores = RunScores::new(&run, ScoreKind::ArithmeticMean)?;
    let quiet = lmsplit::experiment::Progress::silent();
    let tags = lexicon(&data, &TagSource::Gold, &quiet)?.to_dense(data.padded_vocab());
    let title = "Preference score per word class (synthetic corpus, gold tags)";
    let top = TopTokens {
        freq: &data.freq,
        n: TOP_TOKENS,
    };
    let per_tag = pos_tags(&scores, top, &tags, &boot)?;
    let pos_files = write_pos(&scores, &per_tag, title, &args.out)?;
    println!("[3] preference by word class: {}", pos_files[1].display());

    // 4. ICA word groups of the shared embedding
    let settings = WordGroupSettings {
        top_n: TOP_TOKENS,
        dim: 16,
        bootstrap: boot,
        ..WordGroupSettings::default()
    };
    let (g, tokens) = word_groups(&run, &data, &settings)?;
    let ica_files = write_word_groups(&g, &tokens, &data, &settings, &args.out.join("ica"))?;
    let cc = &g.counts;
    println!(
        "[4] ICA (d = {}, {} steps, converged: {}): {:.0}% of words in no cluster\n{}",
        g.dim,
        g.ica.steps,
        g.ica.converged,
        100.0 * cc.none,
        g.table.to_markdown()
    );

    // 5. LMD on planted embeddings
    let lmd = planted_check(args.seed, 20_000, 5_000, &args.out.join("lmd"))?;
    println!(
        "[5] LMD on planted embeddings: group ρ {:.3}, max error of group R² vs planted {:.4}",
        lmd.group_rho, lmd.max_error
    );

    let summary = json!({
        "seconds": t0.elapsed().as_secs_f64(),
        "run": run.label, "reused": run.reused, "result": run.result()?,
        "preference_by_class": per_tag.iter().map(|t| json!({"class": t.tag, "n": t.n, "mean": t.mean, "share_primary": t.share_primary})).collect::<Vec<_>>(),
        "ica": {"dim": g.dim, "steps": g.ica.steps, "converged": g.ica.converged, "none": cc.none, "exactly_one": cc.exactly_one, "mean_clusters": cc.mean},
        "lmd": lmd,
        "outputs": {"run": run.dir, "preference": pos_files, "ica": ica_files},
    });
    println!("{summary}");
    Ok(())
}
