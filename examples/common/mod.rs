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
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
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
    /// Held-out batches for validation during training (and, unless more are asked for, for
    /// scoring: see [`run_two_tower_scored`]).
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
    run_two_tower_scored(
        cfg,
        tok,
        train_docs,
        valid_docs,
        s,
        s.eval_batches,
        device,
        out,
    )
}

/// [`run_two_tower`], scoring the heads on `score_batches` held-out batches (the first
/// `eval_batches` of them validate training; at most one epoch of the held-out data, so no
/// position is scored twice): more positions behind each token's preference score.
#[allow(clippy::too_many_arguments)]
pub fn run_two_tower_scored(
    cfg: &ModelConfig,
    tok: &Tokenizer,
    train_docs: &[Document],
    valid_docs: &[Document],
    s: &PhaseSettings,
    score_batches: usize,
    device: &Device,
    out: &Path,
) -> Res<TwoTowerRun> {
    let style = cfg.style;
    let train_b = batcher(style, tok, train_docs, s.seq_len, s.batch_size, s.seed)?;
    let valid_b = batcher(style, tok, valid_docs, s.seq_len, s.batch_size, s.seed + 1)
        .or_else(|_| batcher(style, tok, valid_docs, s.seq_len, 1, s.seed + 1))?;
    // One pass over the held-out data at most, so no position is scored twice.
    let n_scored = (score_batches.max(s.eval_batches) as u64).min(valid_b.batches_per_epoch());
    let mut vs = CorpusSource::new(valid_b);
    let scored: Vec<TokenBatch> = (0..n_scored.max(1))
        .map(|_| vs.next_batch())
        .collect::<Result<_, _>>()?;
    let valid = &scored[..s.eval_batches.clamp(1, scored.len())];

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
    let phase1 = trainer.train(&mut src, valid)?;
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
        valid,
        Some(&heads_dir),
    )?;
    heads.save(&heads_dir)?;
    println!(
        "phases 2/3 done: {} steps, head losses {:?}, {:.0} tokens/s",
        phase2.train.steps, phase2.val_loss_per_tower, phase2.train.tokens_per_s
    );

    let logprobs = evaluate(&model, &heads, &scored, false)?;
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

/// Everything that defines one two-tower run of the analysis examples, saved as `run.json` in
/// the run's folder so that another example can reuse the run (`--run <dir>`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RunSpec {
    /// Tower style: gpt, bert or elmo.
    pub style: String,
    /// Model preset (`towers::ModelConfig::preset`).
    pub preset: String,
    /// Text and tokenizer.
    pub corpus: CorpusSpec,
    /// Folder of the corpus files shared by the runs (synthetic text, trained tokenizer).
    pub data_dir: PathBuf,
    /// Training settings (the seed of weights, batches and masks is `settings.seed`).
    pub settings: PhaseSettings,
    /// Held-out batches on which the heads are scored.
    pub score_batches: usize,
}

impl RunSpec {
    /// Reads `run.json` of a run folder.
    pub fn load(run_dir: &Path) -> Res<RunSpec> {
        let path = run_dir.join("run.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("{}: {e} (not a run folder?)", path.display()))?;
        Ok(serde_json::from_str(&text)?)
    }

    /// The model configuration for a tokenizer's vocabulary.
    pub fn model_config(&self, tok: &Tokenizer) -> Res<ModelConfig> {
        let mut cfg = ModelConfig::preset(self.style.parse()?, &self.preset)?;
        cfg.vocab_size = tok.padded_vocab_size(8);
        cfg.max_positions = cfg.max_positions.max(self.settings.seq_len);
        Ok(cfg)
    }
}

/// Token frequencies of the training documents, one entry per id of a `vocab_size`-wide
/// (padded) vocabulary: the "most frequent tokens" of every table.
pub fn train_frequencies(tok: &Tokenizer, train: &[Document], vocab_size: usize) -> Res<Vec<u64>> {
    let (counts, _) = corpus::TokenCounts::count_documents(tok, train.iter().cloned().map(Ok), 64)?;
    let mut freq = counts.counts().to_vec();
    freq.resize(vocab_size.max(freq.len()), 0);
    Ok(freq)
}

/// A run's per-position log-probabilities, and the trained model when it was asked for.
pub struct RunResult {
    /// Every head on the same held-out positions.
    pub logprobs: PositionLogProbs,
    /// The trained run (`None` when the saved log-probabilities were reused).
    pub run: Option<TwoTowerRun>,
    /// `run_dir/logprobs.json`.
    pub logprobs_path: PathBuf,
}

/// Trains (or resumes, or reuses) the run `spec` in `run_dir`: writes `run.json` (refusing a
/// folder that holds a different run), runs the three phases through their checkpoints, and
/// saves `logprobs.json`. A finished run is reused without touching the model unless
/// `need_model` (then the checkpoints are loaded, nothing is trained again).
pub fn ensure_run(
    spec: &RunSpec,
    run_dir: &Path,
    tok: &Tokenizer,
    docs: &[Document],
    device: &Device,
    need_model: bool,
) -> Res<RunResult> {
    std::fs::create_dir_all(run_dir)?;
    let spec_path = run_dir.join("run.json");
    let mine = serde_json::to_value(spec)?;
    if spec_path.is_file() {
        let theirs: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&spec_path)?)?;
        // Progress bars do not change a run.
        let strip = |mut v: serde_json::Value| {
            v["settings"]["progress"] = serde_json::Value::Null;
            v
        };
        if strip(theirs) != strip(mine.clone()) {
            return Err(format!(
                "{} describes another run; choose another --out or remove the folder",
                spec_path.display()
            )
            .into());
        }
    } else {
        std::fs::write(&spec_path, serde_json::to_string_pretty(&mine)?)?;
    }
    let logprobs_path = run_dir.join("logprobs.json");
    if logprobs_path.is_file() && !need_model {
        let logprobs: PositionLogProbs = serde_json::from_slice(&std::fs::read(&logprobs_path)?)?;
        println!(
            "{}: finished run reused ({} scored positions)",
            run_dir.display(),
            logprobs.len()
        );
        return Ok(RunResult {
            logprobs,
            run: None,
            logprobs_path,
        });
    }
    let (train, valid) = hold_out(docs);
    let cfg = spec.model_config(tok)?;
    // A finished run only needs its model loaded: score the validation batches alone and keep
    // the saved scores of all positions.
    let saved = logprobs_path.is_file();
    let score_batches = if saved {
        spec.settings.eval_batches
    } else {
        spec.score_batches
    };
    let mut run = run_two_tower_scored(
        &cfg,
        tok,
        train,
        valid,
        &spec.settings,
        score_batches,
        device,
        run_dir,
    )?;
    if saved {
        run.logprobs = serde_json::from_slice(&std::fs::read(&logprobs_path)?)?;
        return Ok(RunResult {
            logprobs: run.logprobs.clone(),
            run: Some(run),
            logprobs_path,
        });
    }
    // Written through a temporary file so that a killed run never leaves half a file.
    let tmp = run_dir.join("logprobs.json.tmp");
    run.logprobs.save_json(&tmp)?;
    std::fs::rename(&tmp, &logprobs_path)?;
    Ok(RunResult {
        logprobs: run.logprobs.clone(),
        run: Some(run),
        logprobs_path,
    })
}

/// Preference scores (towers ordered by eq. 3) of one run's held-out positions.
pub fn run_scores(lp: &PositionLogProbs, kind: prefscore::ScoreKind) -> Res<prefscore::Scores> {
    let mut stats = prefscore::TokenStats::new(lp.vocab_size, lp.logp.len())?;
    let towers: Vec<&[f32]> = lp.logp.iter().map(Vec::as_slice).collect();
    stats.add(&lp.targets, &towers)?;
    Ok(stats.scores(kind)?)
}

/// A run × run correlation matrix as a table of coefficients (`Table::matrix`).
pub fn correlation_table(m: &prefscore::CorrelationMatrix, title: &str) -> Res<report::Table> {
    Ok(report::Table::matrix("run", &m.labels, &m.labels, &m.r)?
        .with_title(title)
        .with_precision(3))
}

/// Parses a comma-separated list (`gpt,bert` or `0,1`).
pub fn parse_list<T: std::str::FromStr>(s: &str) -> Res<Vec<T>>
where
    T::Err: std::fmt::Display,
{
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| x.parse::<T>().map_err(|e| format!("{x:?}: {e}").into()))
        .collect()
}

/// ICA word groups of an embedding (paper section 5.3) and their preference (Table 3).
pub struct IcaGroups {
    /// PCA dimension d.
    pub dim: usize,
    /// The ICA fit (steps, convergence).
    pub ica: ica::IcaResult,
    /// Independent components of every word (rows in the order of `tokens`), signed so that
    /// each component's long tail is positive.
    pub sources: ica::Matrix,
    /// Share of words in no / exactly one cluster, mean clusters per word.
    pub counts: ica::analysis::ClusterCounts,
    /// Table 3: per component its typical words, size, mean score and rank.
    pub table: report::Table,
}

/// PCA to `dim` (capped by the embedding width and the number of words) and Amari ICA
/// (`cfg`) of the embedding rows of `tokens`; clusters at the paper's threshold 2.5; each
/// component's words summarised by `prefscore::group_summary` against `scores` over `tokens`.
#[allow(clippy::too_many_arguments)]
pub fn ica_groups(
    embedding: &[Vec<f32>],
    tokens: &[u32],
    freq: &[u64],
    scores: &[Option<f64>],
    tok: &Tokenizer,
    dim: usize,
    cfg: ica::AmariConfig,
    boot: &prefscore::Bootstrap,
) -> Res<IcaGroups> {
    use ica::analysis::{cluster_counts, clusters, component_words, sign_to_positive_skew};
    let width = embedding.first().ok_or("empty embedding")?.len();
    let rows: Vec<f32> = tokens
        .iter()
        .flat_map(|&id| embedding[id as usize].iter().copied())
        .collect();
    let x = ica::Matrix::new(tokens.len(), width, rows)?;
    let dim = dim.min(width).min(tokens.len().saturating_sub(1)).max(1);
    let pca = ica::Pca::fit(&x, &ica::PcaConfig::new(dim))?;
    let white = pca.transform(&x)?;
    let fit = ica::AmariIca::new(cfg).fit(&white)?;
    let mut sources = fit.sources(&white)?;
    sign_to_positive_skew(&mut sources);
    let per_word = clusters(&sources, ica::analysis::PAPER_THRESHOLD)?;
    let counts = cluster_counts(&per_word);
    let freqs: Vec<u64> = tokens.iter().map(|&id| freq[id as usize]).collect();
    let comps = component_words(&sources, ica::analysis::PAPER_THRESHOLD, &freqs, 5)?;
    let groups: Vec<(String, Vec<u32>)> = comps
        .iter()
        .map(|c| {
            let ids = c.members.iter().map(|&(i, _)| tokens[i]).collect();
            (format!("IC{}", c.component), ids)
        })
        .collect();
    let stats = prefscore::group_summary(scores, &groups, tokens, boot)?;
    let mut table = report::Table::new(
        [
            "component",
            "typical words",
            "words",
            "mean score",
            "95% low",
            "95% high",
            "mean rank",
            "rank (0 = most primary)",
            "share primary",
        ]
        .map(String::from)
        .to_vec(),
    )
    .with_title("Table 3: ICA word groups of the shared embedding and their preference")
    .with_note(
        "a word is in component k when |y_k| > 2.5; typical words: the 5 most frequent members; \
         rank among the reference tokens by score, descending",
    )
    .with_precision(3);
    for (c, g) in comps.iter().zip(&stats) {
        let typical: Vec<String> = c
            .typical
            .iter()
            .filter_map(|&i| tok.id_to_token(tokens[i]))
            .collect();
        let (lo, hi) = g.interval.map(|i| (i.lo, i.hi)).unzip();
        table.push_row(vec![
            report::Cell::from(c.component),
            report::Cell::from(typical.join(" ")),
            report::Cell::from(c.members.len()),
            report::Cell::from(g.mean),
            report::Cell::from(lo),
            report::Cell::from(hi),
            report::Cell::from(g.mean_rank),
            report::Cell::from(g.mean_rank_fraction),
            report::Cell::from(g.share_primary),
        ]);
    }
    Ok(IcaGroups {
        dim,
        ica: fit,
        sources,
        counts,
        table,
    })
}

/// Table of `prefscore::by_tag` results: per tag n, mean score with interval, share primary.
pub fn tag_table(per_tag: &[prefscore::TagSummary], title: &str) -> report::Table {
    let mut t = report::Table::new(
        [
            "tag",
            "tokens",
            "mean score",
            "95% low",
            "95% high",
            "median",
            "share primary",
        ]
        .map(String::from)
        .to_vec(),
    )
    .with_title(title)
    .with_note("score s_a = log p̄1_a − log p̄2_a (eq. 4); tower 1 is the primary tower (eq. 3)")
    .with_precision(3);
    for g in per_tag {
        let (lo, hi) = g.interval.map(|i| (i.lo, i.hi)).unzip();
        t.push_row(vec![
            report::Cell::from(g.tag.as_str()),
            report::Cell::from(g.n),
            report::Cell::from(g.mean),
            report::Cell::from(lo),
            report::Cell::from(hi),
            report::Cell::from(g.quantiles[2]),
            report::Cell::from(g.share_primary),
        ]);
    }
    t
}

/// Fig. 4: one histogram of scores per tag.
pub fn tag_histograms(path: &Path, per_tag: &[prefscore::TagSummary], title: &str) -> Res<()> {
    let groups: Vec<(String, Vec<f64>)> = per_tag
        .iter()
        .map(|t| (t.tag.clone(), t.scores.clone()))
        .collect();
    report::histogram_grid(
        path,
        &groups,
        &report::HistogramOptions {
            title: title.into(),
            x_label: "score (primary − secondary)".into(),
            bins: 20,
            columns: 4,
            mark_zero: true,
            ..report::HistogramOptions::default()
        },
    )?;
    Ok(())
}

/// Which run an analysis example reads: an existing run folder, or one trained here from
/// `run_args` (flattened into each example's own options).
#[derive(clap::Args, Debug, Clone)]
pub struct RunSelect {
    /// Reuse this run folder (with its run.json) instead of training one.
    #[arg(long)]
    pub run: Option<PathBuf>,
    /// Tower style of a run trained here.
    #[arg(long, default_value = "gpt")]
    pub style: String,
    /// Seed of a run trained here.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Corpus, model and training settings of a run trained here.
    #[command(flatten)]
    pub run_args: RunArgs,
}

impl RunSelect {
    /// Opens the selected run (see [`open_run`]).
    pub fn open(&self, out: &Path, need_model: bool) -> Res<OpenedRun> {
        open_run(
            self.run.as_deref(),
            &self.run_args,
            &self.style,
            self.seed,
            out,
            need_model,
        )
    }
}

/// Command-line options of one two-tower run shared by the analysis examples (flattened into
/// each example's own options).
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Model preset of every run.
    #[arg(long, default_value = "tiny")]
    pub preset: String,
    /// "synthetic" or a text file / folder.
    #[arg(long, default_value = "synthetic")]
    pub corpus: String,
    /// Corpus format for a path: plain, lines, wikitext, folder, jsonl[:field].
    #[arg(long, default_value = "plain")]
    pub format: String,
    /// Tokenizer (vocab.txt or tokenizer.json); default: WordPiece trained on the synthetic
    /// corpus, bert-base-uncased for a real one.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// WordPiece size when training one on the synthetic corpus.
    #[arg(long, default_value_t = 1024)]
    pub train_vocab: usize,
    /// Documents of the synthetic corpus.
    #[arg(long, default_value_t = 600)]
    pub documents: usize,
    /// Seed of the synthetic corpus (the same text for every run).
    #[arg(long, default_value_t = 0)]
    pub corpus_seed: u64,
    /// Token positions of phase 1.
    #[arg(long, default_value_t = 200_000)]
    pub budget_tokens: u64,
    /// Token positions of phases 2/3 (default: half of phase 1).
    #[arg(long)]
    pub heads_budget_tokens: Option<u64>,
    /// Sequence length.
    #[arg(long, default_value_t = 64)]
    pub seq_len: usize,
    /// Sequences per batch.
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    /// Peak learning rate.
    #[arg(long, default_value_t = 2e-3)]
    pub lr: f64,
    /// Held-out batches validating training.
    #[arg(long, default_value_t = 8)]
    pub eval_batches: usize,
    /// Held-out batches scored by the heads (capped by one pass over the held-out data).
    #[arg(long, default_value_t = 200)]
    pub score_batches: usize,
}

impl RunArgs {
    /// The corpus of the runs; a trained tokenizer is kept in `data_dir`.
    pub fn corpus_spec(&self) -> CorpusSpec {
        CorpusSpec {
            corpus: self.corpus.clone(),
            format: self.format.clone(),
            synthetic_documents: self.documents,
            tokenizer: self.tokenizer.clone(),
            train_vocab: self.train_vocab,
            seed: self.corpus_seed,
        }
    }

    /// Reads the corpus and the tokenizer into `data_dir`; the returned spec names the
    /// tokenizer file, so every run (and every later reuse) shares the same token ids.
    pub fn load(&self, data_dir: &Path) -> Res<(CorpusSpec, Vec<Document>, Tokenizer)> {
        let mut spec = self.corpus_spec();
        let (docs, tok) = load_corpus(&spec, data_dir)?;
        if spec.tokenizer.is_none() && spec.corpus == "synthetic" {
            spec.tokenizer = Some(data_dir.join("tokenizer.json"));
        }
        Ok((spec, docs, tok))
    }

    /// The run of `style` and `seed` on `corpus` (from [`RunArgs::load`]).
    pub fn spec(&self, style: &str, seed: u64, corpus: &CorpusSpec, data_dir: &Path) -> RunSpec {
        RunSpec {
            style: style.to_string(),
            preset: self.preset.clone(),
            corpus: corpus.clone(),
            data_dir: data_dir.to_path_buf(),
            settings: PhaseSettings {
                budget_tokens: self.budget_tokens,
                heads_budget_tokens: self.heads_budget_tokens.unwrap_or(self.budget_tokens / 2),
                seq_len: self.seq_len,
                batch_size: self.batch_size,
                lr: self.lr,
                eval_batches: self.eval_batches,
                seed,
                progress: true,
            },
            score_batches: self.score_batches,
        }
    }
}

/// A run opened by an analysis example: from an existing run folder (`run.json`, e.g. one of
/// `preference_table`'s) or trained/resumed from the command line.
pub struct OpenedRun {
    /// What the run is.
    pub spec: RunSpec,
    /// Its folder.
    pub dir: PathBuf,
    /// All documents (the last tenth held out).
    pub docs: Vec<Document>,
    /// The run's tokenizer.
    pub tok: Tokenizer,
    /// Token frequencies of the training documents, over the padded vocabulary.
    pub freq: Vec<u64>,
    /// Log-probabilities (and the model when asked for).
    pub result: RunResult,
}

/// Opens `run` if given, else the run `style`/`seed` of `args` in `out/<style>-s<seed>`.
pub fn open_run(
    run: Option<&Path>,
    args: &RunArgs,
    style: &str,
    seed: u64,
    out: &Path,
    need_model: bool,
) -> Res<OpenedRun> {
    let (spec, dir, docs, tok) = match run {
        Some(dir) => {
            let spec = RunSpec::load(dir)?;
            let (docs, tok) = load_corpus(&spec.corpus, &spec.data_dir)?;
            (spec, dir.to_path_buf(), docs, tok)
        }
        None => {
            let data_dir = out.join("data");
            let (corpus, docs, tok) = args.load(&data_dir)?;
            let spec = args.spec(style, seed, &corpus, &data_dir);
            (spec, out.join(format!("{style}-s{seed}")), docs, tok)
        }
    };
    let freq = train_frequencies(&tok, hold_out(&docs).0, tok.padded_vocab_size(8))?;
    let device = Device::cuda_if_available(0)?;
    let result = ensure_run(&spec, &dir, &tok, &docs, &device, need_model)?;
    Ok(OpenedRun {
        spec,
        dir,
        docs,
        tok,
        freq,
        result,
    })
}
