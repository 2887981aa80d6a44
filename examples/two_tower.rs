//! Two-tower experiment, end to end: phase 1 trains K towers jointly through the tied joint
//! head; phases 2 and 3 freeze them and train one head per tower; every head is then evaluated
//! on the same held-out positions and the per-position log-probabilities are saved.
//!
//! ```text
//! cargo run --release -p lmsplit --example two_tower -- --style gpt --preset tiny \
//!     --corpus synthetic --budget-tokens 200000 --seed 0 --out out/two_tower/gpt
//! ```
//! A killed run resumes from its checkpoints when started again with the same arguments.
//! The last line printed is a JSON summary.

mod common;

use std::path::PathBuf;

use candle_core::Device;
use clap::Parser;
use common::{hold_out, load_corpus, run_two_tower, CorpusSpec, PhaseSettings, Res};
use serde_json::json;
use towers::{ElmoMode, ModelConfig, Style};

#[derive(Parser, Debug)]
#[command(about = "Two-tower LM: joint training, frozen-tower heads, per-position log-probs")]
struct Args {
    /// Tower style: elmo, gpt or bert.
    #[arg(long)]
    style: String,
    /// Model preset: tiny, base_2tower, large_2tower, paper (bert also paper_large).
    #[arg(long, default_value = "tiny")]
    preset: String,
    /// "synthetic" or a text file / folder.
    #[arg(long, default_value = "synthetic")]
    corpus: String,
    /// Corpus format for a path: plain, lines, wikitext, folder.
    #[arg(long, default_value = "plain")]
    format: String,
    /// Tokenizer (vocab.txt or tokenizer.json); default: a WordPiece vocabulary trained on the
    /// synthetic corpus, or bert-base-uncased for a real corpus.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// WordPiece size when training one on the synthetic corpus.
    #[arg(long, default_value_t = 512)]
    train_vocab: usize,
    /// Token positions of phase 1.
    #[arg(long, default_value_t = 200_000)]
    budget_tokens: u64,
    /// Token positions of phases 2/3 (default: half of phase 1).
    #[arg(long)]
    heads_budget_tokens: Option<u64>,
    /// Sequence length.
    #[arg(long, default_value_t = 64)]
    seq_len: usize,
    /// Sequences per batch.
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// Peak learning rate.
    #[arg(long, default_value_t = 2e-3)]
    lr: f64,
    /// Number of towers.
    #[arg(long, default_value_t = 2)]
    towers: usize,
    /// ELMo mode: bilstm or as-released.
    #[arg(long, default_value = "bilstm")]
    elmo_mode: String,
    /// Held-out batches for validation and evaluation.
    #[arg(long, default_value_t = 8)]
    eval_batches: usize,
    /// Seed of weights, shuffling and masks.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output directory.
    #[arg(long, default_value = "out/two_tower")]
    out: PathBuf,
}

fn main() -> Res<()> {
    // candle allocates per op: keep freed buffers for reuse (see lmsplit::alloc).
    lmsplit::alloc::retain_freed_memory();
    let args = Args::parse();
    let style: Style = args.style.parse()?;
    let device = Device::cuda_if_available(0)?;
    let spec = CorpusSpec {
        corpus: args.corpus.clone(),
        format: args.format.clone(),
        synthetic_documents: corpus::SyntheticConfig::default().n_documents,
        tokenizer: args.tokenizer.clone(),
        train_vocab: args.train_vocab,
        seed: args.seed,
    };
    let (docs, tok) = load_corpus(&spec, &args.out)?;
    let (train_docs, valid_docs) = hold_out(&docs);
    let mut cfg = ModelConfig::preset(style, &args.preset)?;
    cfg.n_towers = args.towers;
    cfg.vocab_size = tok.padded_vocab_size(8);
    cfg.max_positions = cfg.max_positions.max(args.seq_len);
    cfg.elmo_mode = match args.elmo_mode.as_str() {
        "bilstm" => ElmoMode::BiLstm,
        "as-released" => ElmoMode::AsReleased,
        m => return Err(format!("unknown ELMo mode {m}").into()),
    };
    println!(
        "corpus: {} train / {} held-out documents; vocabulary {} (padded {})",
        train_docs.len(),
        valid_docs.len(),
        tok.vocab_size(),
        cfg.vocab_size
    );
    let settings = PhaseSettings {
        budget_tokens: args.budget_tokens,
        heads_budget_tokens: args.heads_budget_tokens.unwrap_or(args.budget_tokens / 2),
        seq_len: args.seq_len,
        batch_size: args.batch_size,
        lr: args.lr,
        eval_batches: args.eval_batches,
        seed: args.seed,
        progress: true,
    };
    let run = run_two_tower(
        &cfg, &tok, train_docs, valid_docs, &settings, &device, &args.out,
    )?;
    let (p1, p2, lp) = (&run.phase1, &run.phase2, &run.logprobs);
    let lp_path = args.out.join("logprobs.json");
    lp.save_json(&lp_path)?;
    println!(
        "{} held-out positions scored -> {}",
        lp.len(),
        lp_path.display()
    );

    let summary = json!({
        "style": args.style, "preset": args.preset, "towers": cfg.n_towers, "seed": args.seed,
        "parameters": run.model.params().n_scalars(), "device": format!("{device:?}"),
        "phase1": {"steps": p1.steps, "tokens": p1.tokens, "train_loss": p1.train_loss,
                   "val_loss": p1.val_loss, "val_ppl": p1.val_ppl, "tokens_per_s": p1.tokens_per_s},
        "phase2_3": {"steps": p2.train.steps, "tokens": p2.train.tokens,
                     "train_loss_sum_over_heads": p2.train.train_loss,
                     "val_loss_per_tower": p2.val_loss_per_tower, "tokens_per_s": p2.train.tokens_per_s},
        "eval": {"positions": lp.len(), "mean_nll_per_tower": lp.mean_nll()},
        "outputs": {"phase1_checkpoint": run.phase1_dir.join("checkpoint"), "phase1_metrics": run.phase1_dir.join("metrics.jsonl"),
                    "heads": run.heads_dir, "logprobs": lp_path},
    });
    println!("{summary}");
    Ok(())
}
