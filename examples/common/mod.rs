//! Code shared by the examples (not library API): boxed errors, batchers for the three model
//! styles, and the three phases of a two-tower run.
#![allow(dead_code)] // each example uses a subset

use std::path::{Path, PathBuf};

use candle_core::Device;
use corpus::{
    read_documents, Batcher, BatcherConfig, Document, Format, MaskingConfig, Objective,
    SentenceSplitter, SyntheticConfig, SyntheticCorpus, TokenBatch, Tokenizer,
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

/// Where the text and the tokenizer of a run come from.
#[derive(Debug, Clone)]
pub struct CorpusSpec {
    /// "synthetic" or a text file / folder.
    pub corpus: String,
    /// Corpus format for a path: plain, lines, wikitext, folder (see `corpus::Format::parse`).
    pub format: String,
    /// Documents of the synthetic corpus.
    pub synthetic_documents: usize,
    /// Tokenizer (vocab.txt or tokenizer.json); default: a WordPiece vocabulary trained on the
    /// synthetic corpus, or bert-base-uncased from ../shared/data for a real corpus.
    pub tokenizer: Option<PathBuf>,
    /// WordPiece size when training one on the synthetic corpus.
    pub train_vocab: usize,
    /// Seed of the synthetic corpus.
    pub seed: u64,
}

/// The synthetic corpus of a spec (its documents carry gold UPOS tags).
pub fn synthetic_corpus(spec: &CorpusSpec) -> Res<SyntheticCorpus> {
    Ok(SyntheticCorpus::new(SyntheticConfig {
        seed: spec.seed,
        n_documents: spec.synthetic_documents,
        ..SyntheticConfig::default()
    })?)
}

/// Reads the documents and loads (or trains) the tokenizer of a run. A trained vocabulary is
/// saved in `out` and reused on resume: WordPiece training is not reproducible bit for bit, and
/// checkpoints hold token ids.
pub fn load_corpus(spec: &CorpusSpec, out: &Path) -> Res<(Vec<Document>, Tokenizer)> {
    std::fs::create_dir_all(out)?;
    let docs = if spec.corpus == "synthetic" {
        let path = out.join("synthetic.txt");
        synthetic_corpus(spec)?.write_text(&path)?;
        read_documents(&path, Format::Plain)?
    } else {
        let format = Format::parse(&spec.format)?;
        read_documents(&spec.corpus, format)?
    };
    if docs.len() < 2 {
        return Err("the corpus needs at least two documents (train + held-out)".into());
    }
    let saved = out.join("tokenizer.json");
    let tok = match (&spec.tokenizer, spec.corpus.as_str()) {
        (Some(p), _) => Tokenizer::load(p)?,
        (None, "synthetic") if saved.is_file() => Tokenizer::load(&saved)?,
        (None, "synthetic") => {
            let t = Tokenizer::train_wordpiece(
                docs.iter().map(|d| d.text.as_str()),
                spec.train_vocab,
                true,
            )?;
            t.save(&saved)?;
            t
        }
        (None, _) => {
            let p = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../shared/data/bert-base-uncased/vocab.txt");
            if !p.is_file() {
                return Err(format!("default tokenizer {} is missing", p.display()).into());
            }
            Tokenizer::load(p)?
        }
    };
    Ok((docs, tok))
}

/// The last tenth of the documents (at least one) is held out for validation and scoring.
pub fn hold_out(docs: &[Document]) -> (&[Document], &[Document]) {
    let n_valid = (docs.len() / 10).max(1);
    docs.split_at(docs.len() - n_valid)
}

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
