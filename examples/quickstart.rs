//! Quickstart: the whole two-tower pipeline on the embedded synthetic corpus (no downloads),
//! plus a small planted Language Model Decomposition, in a few minutes on a CPU.
//!
//! ```text
//! cargo run --release --example quickstart [-- --style gpt --budget-tokens 300000 --out out/quickstart]
//! ```
//!
//! 1. corpus: a seeded synthetic corpus whose words carry gold UPOS tags; a WordPiece vocabulary
//!    trained on it; token frequencies.
//! 2. towers + heads: two towers trained jointly (phase 1), frozen, one head retrained per tower
//!    (phases 2/3), every head scored on the same held-out positions.
//! 3. prefscore: per-token preference scores (paper eq. 3-4) and their summary per word class.
//! 4. ica: PCA + Amari ICA of the shared embedding of the frequent tokens; word clusters; the
//!    preference of each component's words (Table 3 of the paper, in miniature).
//! 5. lmd: streaming moments of planted embeddings of four "models", closed-form fits, group R²
//!    against the planted truth.
//!
//! The last line printed is a JSON summary with the output paths.

mod common;

use std::path::PathBuf;
use std::time::Instant;

use candle_core::Device;
use clap::Parser;
use common::{
    hold_out, ica_groups, load_corpus, run_two_tower, synthetic_corpus, tag_histograms, tag_table,
    CorpusSpec, PhaseSettings, Res,
};
use corpus::{PosLexicon, TokenCounts};
use ica::AmariConfig;
use prefscore::{by_tag, Bootstrap, ScoreKind, TokenStats};
use rand::SeedableRng;
use serde_json::json;
use towers::{ModelConfig, Style};

#[derive(Parser, Debug)]
#[command(about = "lmsplit quickstart: the two-tower pipeline and LMD on embedded synthetic data")]
struct Args {
    /// Tower style: gpt, bert or elmo.
    #[arg(long, default_value = "gpt")]
    style: String,
    /// Token positions of phase 1 (phases 2/3 get half).
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

fn main() -> Res<()> {
    // candle allocates per op: keep freed buffers for reuse (see lmsplit::alloc).
    lmsplit::alloc::retain_freed_memory();
    let args = Args::parse();
    let style: Style = args.style.parse()?;
    let t0 = Instant::now();

    // 1. corpus
    let spec = CorpusSpec {
        corpus: "synthetic".into(),
        format: "plain".into(),
        synthetic_documents: args.documents,
        tokenizer: None,
        train_vocab: 1024,
        seed: args.seed,
    };
    let syn = synthetic_corpus(&spec)?;
    let (docs, tok) = load_corpus(&spec, &args.out)?;
    let text_path = args.out.join("synthetic.txt");
    let tok_path = args.out.join("tokenizer.json");
    let (counts, summary) = TokenCounts::count_documents(&tok, docs.iter().cloned().map(Ok), 64)?;
    println!(
        "[1] corpus: {} synthetic documents, {} words, {} tokens, vocabulary {} -> {}",
        summary.documents,
        summary.words,
        summary.tokens,
        tok.vocab_size(),
        text_path.display()
    );

    // 2. towers + heads
    let (train_docs, valid_docs) = hold_out(&docs);
    let mut cfg = ModelConfig::preset(style, "tiny")?;
    cfg.vocab_size = tok.padded_vocab_size(8);
    let settings = PhaseSettings {
        budget_tokens: args.budget_tokens,
        heads_budget_tokens: args.budget_tokens / 2,
        seq_len: 64,
        batch_size: 16,
        lr: 2e-3,
        eval_batches: 16,
        seed: args.seed,
        progress: true,
    };
    let device = Device::Cpu;
    let run = run_two_tower(
        &cfg,
        &tok,
        train_docs,
        valid_docs,
        &settings,
        &device,
        &args.out.join("two_tower"),
    )?;
    let lp = &run.logprobs;
    let lp_path = args.out.join("logprobs.json");
    lp.save_json(&lp_path)?;
    println!(
        "[2] two towers: joint loss {:.3}, head NLL per tower {:?} on {} held-out positions",
        run.phase1.val_loss.unwrap_or(f64::NAN),
        lp.mean_nll()
            .iter()
            .map(|v| (v * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>(),
        lp.len()
    );

    // 3. prefscore: scores per token, summarised per gold word class
    let mut stats = TokenStats::new(lp.vocab_size, lp.logp.len())?;
    let towers: Vec<&[f32]> = lp.logp.iter().map(Vec::as_slice).collect();
    stats.add(&lp.targets, &towers)?;
    let scores = stats.scores(ScoreKind::ArithmeticMean)?;
    let sentences: Vec<_> = syn.sentences().collect();
    let lexicon = PosLexicon::from_tagged(&sentences, |w| tok.first_piece(w))?;
    let tags = lexicon.to_dense(lp.vocab_size);
    let frequent: Vec<u32> = counts
        .top(TOP_TOKENS)
        .into_iter()
        .map(|(id, _)| id)
        .filter(|&id| scores.get(id).is_some())
        .collect();
    let boot = Bootstrap {
        seed: args.seed,
        ..Bootstrap::default()
    };
    let per_tag = by_tag(&scores.values, &tags, &frequent, &boot)?;
    let table = tag_table(
        &per_tag,
        "Preference score per word class (synthetic corpus, gold tags)",
    );
    println!("[3] preference by word class:\n{}", table.to_markdown());
    let table_paths = table.write_all(&args.out, "preference_by_class")?;
    let hist_path = args.out.join("preference_by_class.png");
    tag_histograms(&hist_path, &per_tag, "Preference score per word class")?;

    // 4. ica: word groups in the shared embedding, and their preference
    let emb = run
        .model
        .params()
        .snapshot()?
        .remove("embed.tokens")
        .ok_or("the model has no embed.tokens table")?;
    let emb: Vec<Vec<f32>> = emb.to_vec2()?;
    let g = ica_groups(
        &emb,
        &frequent,
        counts.counts(),
        &scores.values,
        &tok,
        16,
        AmariConfig::default(),
        &boot,
    )?;
    let (dim, ica, cc, ica_table) = (g.dim, g.ica, g.counts, g.table);
    println!(
        "[4] ICA (d = {dim}, {} steps, converged: {}): {:.0}% of words in no cluster, {:.0}% in exactly one, {:.2} on average\n{}",
        ica.steps,
        ica.converged,
        100.0 * cc.none,
        100.0 * cc.exactly_one,
        cc.mean,
        ica_table.to_markdown()
    );
    let ica_paths = ica_table.write_all(&args.out, "ica_groups")?;

    // 5. lmd: planted dependence among four "models", recovered from moments alone
    let planted = lmd::synthetic::Planted::new(lmd::synthetic::PlantedSpec::default())?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
    let mut split = |n: usize| -> Res<lmd::moments::Moments> {
        let mut m = lmd::moments::Moments::new(planted.names(), planted.widths())?;
        m.update_stacked(&planted.sample(n, &mut rng))?;
        Ok(m)
    };
    let (train, test) = (split(20_000)?, split(5_000)?);
    let analysis = lmd::analysis::analyze(&train, &test, lmd::fit::Ridge::REFERENCE)?;
    let truth = planted.group_r2()?;
    let max_err = analysis
        .group
        .r2
        .iter()
        .zip(&truth)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let lmd_dir = args.out.join("lmd");
    let lmd_paths = lmd::tables::write_analysis(&lmd_dir, &analysis)?;
    println!(
        "[5] LMD on planted embeddings: group R² {:?} (planted {:?}), group ρ {:.3}, max error {:.4}",
        analysis
            .group
            .r2
            .iter()
            .map(|v| (v * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>(),
        truth
            .iter()
            .map(|v| (v * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>(),
        analysis.group.rho(),
        max_err
    );

    let summary = json!({
        "seconds": t0.elapsed().as_secs_f64(),
        "corpus": {"documents": summary.documents, "tokens": summary.tokens, "vocab": tok.vocab_size()},
        "two_tower": {"style": args.style, "phase1_val_loss": run.phase1.val_loss,
                      "head_nll": lp.mean_nll(), "positions": lp.len(),
                      "tokens_per_s": run.phase1.tokens_per_s},
        "preference_by_class": per_tag.iter().map(|t| json!({"class": t.tag, "n": t.n, "mean": t.mean, "share_primary": t.share_primary})).collect::<Vec<_>>(),
        "ica": {"dim": dim, "steps": ica.steps, "converged": ica.converged, "none": cc.none, "exactly_one": cc.exactly_one, "mean_clusters": cc.mean},
        "lmd": {"group_rho": analysis.group.rho(), "max_error_vs_planted": max_err},
        "outputs": {"corpus": text_path, "tokenizer": tok_path, "logprobs": lp_path,
                    "phase1": run.phase1_dir, "heads": run.heads_dir,
                    "preference_tables": table_paths, "preference_histograms": hist_path,
                    "ica_tables": ica_paths, "lmd": lmd_paths},
    });
    println!("{summary}");
    Ok(())
}
