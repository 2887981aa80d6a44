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

use std::path::{Path, PathBuf};

use anyhow_free::*;
use candle_core::{DType, Device};
use clap::Parser;
use corpus::{
    read_documents, Batcher, BatcherConfig, Format, MaskingConfig, Objective, SentenceSplitter,
    SyntheticConfig, SyntheticCorpus, TokenBatch, Tokenizer,
};
use heads::{evaluate, retrain, HeadConfig, HeadInput, TowerHeads};
use serde_json::json;
use towers::data::BatchSource;
use towers::{
    Budget, CorpusSource, ElmoMode, ModelConfig, Style, TrainConfig, Trainer, TwoTowerLm,
};

/// Boxed errors for the example (no extra dependency).
mod anyhow_free {
    pub type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;
}

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

fn load_corpus(args: &Args) -> Res<(Vec<corpus::Document>, Tokenizer)> {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
    let docs = if args.corpus == "synthetic" {
        let syn = SyntheticCorpus::new(SyntheticConfig {
            seed: args.seed,
            ..SyntheticConfig::default()
        })?;
        std::fs::create_dir_all(&args.out)?;
        let path = args.out.join("synthetic.txt");
        syn.write_text(&path)?;
        read_documents(&path, Format::Plain)?
    } else {
        let format = match args.format.as_str() {
            "plain" => Format::Plain,
            "lines" => Format::Lines,
            "wikitext" => Format::WikiText,
            "folder" => Format::Folder,
            f => return Err(format!("unknown format {f}").into()),
        };
        read_documents(&args.corpus, format)?
    };
    // A trained vocabulary is saved with the run and reused on resume (checkpoints hold ids).
    let saved = args.out.join("tokenizer.json");
    let tok = match (&args.tokenizer, args.corpus.as_str()) {
        (Some(p), _) => Tokenizer::load(p)?,
        (None, "synthetic") if saved.is_file() => Tokenizer::load(&saved)?,
        (None, "synthetic") => {
            let t = Tokenizer::train_wordpiece(
                docs.iter().map(|d| d.text.as_str()),
                args.train_vocab,
                true,
            )?;
            t.save(&saved)?;
            t
        }
        (None, _) => {
            let p = shared.join("bert-base-uncased/vocab.txt");
            if !p.is_file() {
                return Err(format!("default tokenizer {} is missing", p.display()).into());
            }
            Tokenizer::load(p)?
        }
    };
    Ok((docs, tok))
}

fn batcher(
    style: Style,
    tok: &Tokenizer,
    docs: &[corpus::Document],
    seq_len: usize,
    batch_size: usize,
    seed: u64,
) -> Res<Batcher> {
    let it = docs.iter().cloned().map(Ok);
    let data = match style {
        Style::Gpt => {
            corpus::windows::causal_blocks(tok, it, seq_len, Some(tok.special_tokens()?.sep))?
        }
        _ => corpus::windows::bert_windows(tok, it, &SentenceSplitter::default(), seq_len)?,
    };
    let objective = match style {
        Style::Gpt => Objective::CausalLm,
        Style::Bert => Objective::MaskedLm(MaskingConfig::default()),
        Style::Elmo => Objective::BidirectionalLm,
    };
    let cfg = BatcherConfig {
        batch_size,
        seed,
        drop_last: true,
    };
    Ok(Batcher::new(
        data,
        objective,
        cfg,
        tok.special_tokens()?,
        tok.vocab_size(),
    )?)
}

fn main() -> Res<()> {
    let args = Args::parse();
    let style: Style = args.style.parse()?;
    let device = Device::cuda_if_available(0)?;
    let dtype = if device.is_cuda() {
        DType::BF16
    } else {
        DType::F32
    };

    let (docs, tok) = load_corpus(&args)?;
    let n_valid = (docs.len() / 10).max(1);
    if docs.len() < 2 {
        return Err("the corpus needs at least two documents (train + held-out)".into());
    }
    let (train_docs, valid_docs) = docs.split_at(docs.len() - n_valid);
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

    let train_b = batcher(
        style,
        &tok,
        train_docs,
        args.seq_len,
        args.batch_size,
        args.seed,
    )?;
    let valid_b = batcher(
        style,
        &tok,
        valid_docs,
        args.seq_len,
        args.batch_size,
        args.seed + 1,
    )
    .or_else(|_| batcher(style, &tok, valid_docs, args.seq_len, 1, args.seed + 1))?;
    let mut vs = CorpusSource::new(valid_b);
    let valid: Vec<TokenBatch> = (0..args.eval_batches)
        .map(|_| vs.next_batch())
        .collect::<Result<_, _>>()?;

    // Phase 1: joint training.
    let model = TwoTowerLm::new(&cfg, &device, args.seed)?.with_compute_dtype(dtype);
    println!(
        "phase 1: {:?} x{} ({} parameters) on {:?}, {} sequences of {} tokens",
        style,
        cfg.n_towers,
        model.params().n_scalars(),
        device,
        train_b.data().len(),
        args.seq_len
    );
    let tc = |budget: u64| TrainConfig {
        lr: args.lr,
        budget: Budget::Tokens(budget),
        eval_every: 100,
        checkpoint_every: 100,
        log_every: 10,
        progress: true,
        ..TrainConfig::default()
    };
    let p1_dir = args.out.join("phase1");
    let mut src = CorpusSource::new(train_b.clone());
    let mut trainer = Trainer::resume_or_new(&model, tc(args.budget_tokens), &p1_dir, &mut src)?;
    let p1 = trainer.train(&mut src, &valid)?;
    println!(
        "phase 1 done: {} steps, train loss {:.4}, validation loss {:.4}, {:.0} tokens/s",
        p1.steps,
        p1.train_loss,
        p1.val_loss.unwrap_or(f64::NAN),
        p1.tokens_per_s
    );

    // Phases 2/3: frozen towers, one head per tower, trained together on identical batches.
    let heads_dir = args.out.join("heads");
    let heads = TowerHeads::new(
        &HeadConfig::for_model(&model, HeadInput::TowerOutput),
        &device,
        args.seed + 2,
    )?;
    let heads_budget = args.heads_budget_tokens.unwrap_or(args.budget_tokens / 2);
    let mut src2 = CorpusSource::new(batcher(
        style,
        &tok,
        train_docs,
        args.seq_len,
        args.batch_size,
        args.seed + 3,
    )?);
    let p2 = retrain(
        &model,
        &heads,
        tc(heads_budget),
        &mut src2,
        &valid,
        Some(&heads_dir),
    )?;
    heads.save(&heads_dir)?;
    println!(
        "phases 2/3 done: {} steps, head losses {:?}, {:.0} tokens/s",
        p2.train.steps, p2.val_loss_per_tower, p2.train.tokens_per_s
    );

    // Per-position log-probabilities of every head on the same held-out positions.
    let lp = evaluate(&model, &heads, &valid, false)?;
    let lp_path = args.out.join("logprobs.json");
    lp.save_json(&lp_path)?;
    println!(
        "{} held-out positions scored -> {}",
        lp.len(),
        lp_path.display()
    );

    let summary = json!({
        "style": args.style, "preset": args.preset, "towers": cfg.n_towers, "seed": args.seed,
        "parameters": model.params().n_scalars(), "device": format!("{device:?}"),
        "phase1": {"steps": p1.steps, "tokens": p1.tokens, "train_loss": p1.train_loss,
                   "val_loss": p1.val_loss, "val_ppl": p1.val_ppl, "tokens_per_s": p1.tokens_per_s},
        "phase2_3": {"steps": p2.train.steps, "tokens": p2.train.tokens,
                     "train_loss_sum_over_heads": p2.train.train_loss,
                     "val_loss_per_tower": p2.val_loss_per_tower, "tokens_per_s": p2.train.tokens_per_s},
        "eval": {"positions": lp.len(), "mean_nll_per_tower": lp.mean_nll()},
        "outputs": {"phase1_checkpoint": p1_dir.join("checkpoint"), "phase1_metrics": p1_dir.join("metrics.jsonl"),
                    "heads": heads_dir, "logprobs": lp_path},
    });
    println!("{summary}");
    Ok(())
}
