//! Code shared by the examples (not library API): boxed errors, batchers for the three model
//! styles, and the three phases of a two-tower run.
#![allow(dead_code)] // each example uses a subset

use std::path::{Path, PathBuf};

use candle_core::Device;
use corpus::{
    Batcher, BatcherConfig, Document, MaskingConfig, Objective, SentenceSplitter, TokenBatch,
    Tokenizer,
};
use heads::{
    evaluate, retrain, HeadConfig, HeadInput, PositionLogProbs, RetrainSummary, TowerHeads,
};
use towers::data::BatchSource;
use towers::{
    Budget, CorpusSource, ModelConfig, Style, TrainConfig, TrainSummary, Trainer, TwoTowerLm,
};

/// Boxed errors: the examples report any library error as it is.
pub type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Batches of the style's objective: causal blocks for GPT, BERT windows (MLM or both-sided LM)
/// for BERT and ELMo.
pub fn batcher(
    style: Style,
    tok: &Tokenizer,
    docs: &[Document],
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

/// Settings of the three phases of one two-tower run.
#[derive(Debug, Clone)]
pub struct PhaseSettings {
    /// Token positions of phase 1.
    pub budget_tokens: u64,
    /// Token positions of phases 2/3.
    pub heads_budget_tokens: u64,
    /// Sequence length.
    pub seq_len: usize,
    /// Sequences per batch.
    pub batch_size: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Held-out batches for validation and evaluation.
    pub eval_batches: usize,
    /// Seed of weights, shuffling and masks.
    pub seed: u64,
    /// Progress bars.
    pub progress: bool,
}

/// What a two-tower run leaves behind.
pub struct TwoTowerRun {
    /// The jointly trained model (towers frozen after phase 1).
    pub model: TwoTowerLm,
    /// One retrained head per tower.
    pub heads: TowerHeads,
    /// Phase 1 summary.
    pub phase1: TrainSummary,
    /// Phases 2/3 summary.
    pub phase2: RetrainSummary,
    /// Per-position log-probabilities of every head on the same held-out positions.
    pub logprobs: PositionLogProbs,
    /// Phase 1 checkpoint and metrics folder.
    pub phase1_dir: PathBuf,
    /// Head checkpoints folder.
    pub heads_dir: PathBuf,
}

/// Runs phase 1 (joint training), phases 2/3 (frozen towers, one head each, trained together on
/// identical batches) and the evaluation of every head on the same held-out positions. Every
/// phase checkpoints under `out` and resumes when started again with the same arguments.
pub fn run_two_tower(
    cfg: &ModelConfig,
    tok: &Tokenizer,
    train_docs: &[Document],
    valid_docs: &[Document],
    s: &PhaseSettings,
    device: &Device,
    out: &Path,
) -> Res<TwoTowerRun> {
    let style = cfg.style;
    let train_b = batcher(style, tok, train_docs, s.seq_len, s.batch_size, s.seed)?;
    let valid_b = batcher(style, tok, valid_docs, s.seq_len, s.batch_size, s.seed + 1)
        .or_else(|_| batcher(style, tok, valid_docs, s.seq_len, 1, s.seed + 1))?;
    let mut vs = CorpusSource::new(valid_b);
    let valid: Vec<TokenBatch> = (0..s.eval_batches)
        .map(|_| vs.next_batch())
        .collect::<Result<_, _>>()?;

    let dtype = if device.is_cuda() {
        candle_core::DType::BF16
    } else {
        candle_core::DType::F32
    };
    let model = TwoTowerLm::new(cfg, device, s.seed)?.with_compute_dtype(dtype);
    println!(
        "phase 1: {:?} x{} ({} parameters) on {:?}, {} sequences of {} tokens",
        style,
        cfg.n_towers,
        model.params().n_scalars(),
        device,
        train_b.data().len(),
        s.seq_len
    );
    let tc = |budget: u64| TrainConfig {
        lr: s.lr,
        budget: Budget::Tokens(budget),
        eval_every: 100,
        checkpoint_every: 100,
        log_every: 10,
        progress: s.progress,
        ..TrainConfig::default()
    };
    let phase1_dir = out.join("phase1");
    let mut src = CorpusSource::new(train_b);
    let mut trainer = Trainer::resume_or_new(&model, tc(s.budget_tokens), &phase1_dir, &mut src)?;
    let phase1 = trainer.train(&mut src, &valid)?;
    println!(
        "phase 1 done: {} steps, train loss {:.4}, validation loss {:.4}, {:.0} tokens/s",
        phase1.steps,
        phase1.train_loss,
        phase1.val_loss.unwrap_or(f64::NAN),
        phase1.tokens_per_s
    );

    let heads_dir = out.join("heads");
    let heads = TowerHeads::new(
        &HeadConfig::for_model(&model, HeadInput::TowerOutput),
        device,
        s.seed + 2,
    )?;
    let mut src2 = CorpusSource::new(batcher(
        style,
        tok,
        train_docs,
        s.seq_len,
        s.batch_size,
        s.seed + 3,
    )?);
    let phase2 = retrain(
        &model,
        &heads,
        tc(s.heads_budget_tokens),
        &mut src2,
        &valid,
        Some(&heads_dir),
    )?;
    heads.save(&heads_dir)?;
    println!(
        "phases 2/3 done: {} steps, head losses {:?}, {:.0} tokens/s",
        phase2.train.steps, phase2.val_loss_per_tower, phase2.train.tokens_per_s
    );

    let logprobs = evaluate(&model, &heads, &valid, false)?;
    Ok(TwoTowerRun {
        model,
        heads,
        phase1,
        phase2,
        logprobs,
        phase1_dir,
        heads_dir,
    })
}
