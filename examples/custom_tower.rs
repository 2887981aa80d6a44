//! A tower style of your own, written against the `lmsplit` facade only: a GRU.
//!
//! The style is this file's `Gru` (its configuration `GruConfig`, its tower `GruTower`),
//! handed to the library once (`towers::register`). The library's own functions then train it
//! (phase 1 through the joint head, then one head per frozen tower), score it and compare it,
//! exactly as they do ELMo, GPT and BERT: here beside a GPT run on the same synthetic corpus and
//! the same scoring set, and the two runs' preference scores (eq. 4) are correlated over the
//! tokens both scored often enough.
//!
//! ```sh
//! cargo run --release --example custom_tower -- --out out/custom_tower
//! ```
//!
//! The last line printed is a JSON summary: each run's phase-1 loss at its first and last
//! logged update, the gradient check of every GRU variable, and the pair's agreement.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use lmsplit::candle::{DType, Device, Tensor};
use lmsplit::corpus::{Document, Objective, TokenBatch, Tokenizer, TrainingData};
use lmsplit::experiment::{
    CorpusSpec, ExperimentError, Progress, RunOptions, RunSpec, ScoredRun, ScoringSpec, Workspace,
};
use lmsplit::prefscore::{pearson, ScoreKind, TokenStats};
use lmsplit::towers::nn::Linear;
use lmsplit::towers::{
    self, EmbeddingLayout, Init, Preset, SharedConfig, Tower, TowerStyle, TwoTowerLm,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The GRU style: causal single-direction GRU towers reading the shared token table (no
/// positions: the recurrence orders the tokens), predicting the next token as GPT does.
#[derive(Debug, Clone, Copy)]
struct Gru;

/// A GRU tower's sizes (what goes under `tower` in the run's `config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct GruConfig {
    /// Stacked GRU layers.
    n_layers: usize,
    /// State width H (also the width of the shared embedding).
    hidden_size: usize,
}

/// One GRU layer: input and recurrent projections to the three gates (reset, update, new).
#[derive(Debug)]
struct GruLayer {
    input: Linear,
    recurrent: Linear,
}

/// A stack of GRU layers.
#[derive(Debug)]
struct GruTower {
    layers: Vec<GruLayer>,
}

fn sigmoid(x: &Tensor) -> towers::Result<Tensor> {
    // 1 / (1 + e^-x), from ops that carry a backward pass.
    Ok((x.neg()?.exp()? + 1.0)?.recip()?)
}

impl GruLayer {
    /// h_t = (1 - z) ⊙ n + z ⊙ h_{t-1} with r, z = σ(W x + U h), n = tanh(W_n x + r ⊙ U_n h);
    /// at a PAD step (mask 0) the state is carried unchanged.
    fn forward(&self, x: &Tensor, mask: &Tensor) -> towers::Result<Tensor> {
        let (b, t, h) = x.dims3()?;
        let gx = self.input.forward(x)?; // [B, T, 3H], hoisted out of the loop
        let mut state = Tensor::zeros((b, h), x.dtype(), x.device())?;
        let mut out = Vec::with_capacity(t);
        for step in 0..t {
            let gxt = gx.narrow(1, step, 1)?.squeeze(1)?;
            let gh = self.recurrent.forward(&state)?;
            let r = sigmoid(&(gxt.narrow(1, 0, h)? + gh.narrow(1, 0, h)?)?)?;
            let z = sigmoid(&(gxt.narrow(1, h, h)? + gh.narrow(1, h, h)?)?)?;
            let n = (gxt.narrow(1, 2 * h, h)? + (r * gh.narrow(1, 2 * h, h)?)?)?.tanh()?;
            let next = ((z.affine(-1.0, 1.0)? * n)? + (&z * &state)?)?;
            let m = mask.narrow(1, step, 1)?.squeeze(1)?; // [B, 1]
            state = (next.broadcast_mul(&m)? + state.broadcast_mul(&m.affine(-1.0, 1.0)?)?)?;
            out.push(state.unsqueeze(1)?);
        }
        Ok(Tensor::cat(&out, 1)?)
    }
}

impl Tower for GruTower {
    fn forward(&self, x: &Tensor, mask: &Tensor) -> towers::Result<Tensor> {
        let mut y = x.clone();
        for layer in &self.layers {
            y = layer.forward(&y, mask)?;
        }
        Ok(y)
    }
}

impl TowerStyle for Gru {
    type Config = GruConfig;
    type Tower = GruTower;

    fn name(&self) -> &'static str {
        "gru"
    }

    fn preset(&self, preset: Preset) -> Option<GruConfig> {
        match preset {
            Preset::Tiny => Some(GruConfig {
                n_layers: 1,
                hidden_size: 32,
            }),
            Preset::PeerSmall => Some(GruConfig {
                n_layers: 2,
                hidden_size: 128,
            }),
            _ => None,
        }
    }

    fn validate(&self, cfg: &GruConfig) -> Result<(), String> {
        match cfg.n_layers > 0 && cfg.hidden_size > 0 {
            true => Ok(()),
            false => Err("n_layers and hidden_size must be positive".into()),
        }
    }

    fn input_width(&self, cfg: &GruConfig) -> usize {
        cfg.hidden_size
    }

    fn tower_width(&self, cfg: &GruConfig) -> usize {
        cfg.hidden_size
    }

    fn embed_size(&self, cfg: &GruConfig, _n_towers: usize) -> usize {
        cfg.hidden_size
    }

    fn embedding(&self) -> EmbeddingLayout {
        EmbeddingLayout {
            positions: false,
            projected: false,
        }
    }

    fn tower(
        &self,
        cfg: &GruConfig,
        shared: &SharedConfig,
        init: Init<'_>,
    ) -> towers::Result<GruTower> {
        let (h, std) = (cfg.hidden_size, shared.init_std);
        let layers = (0..cfg.n_layers)
            .map(|l| {
                let p = init.pp(format!("layer{l}"));
                Ok(GruLayer {
                    input: Linear::new(h, 3 * h, true, std, p.pp("input"))?,
                    recurrent: Linear::new(h, 3 * h, true, std, p.pp("recurrent"))?,
                })
            })
            .collect::<towers::Result<Vec<_>>>()?;
        Ok(GruTower { layers })
    }

    fn device_mask(
        &self,
        batch: &TokenBatch,
        dtype: DType,
        dev: &Device,
    ) -> towers::Result<Tensor> {
        let m: Vec<f32> = batch
            .attention_mask
            .iter()
            .map(|&x| f32::from(x.min(1)))
            .collect();
        let shape = (batch.batch_size, batch.seq_len, 1);
        Ok(Tensor::from_vec(m, shape, dev)?.to_dtype(dtype)?)
    }

    fn objective(&self) -> Objective {
        Objective::CausalLm
    }

    fn sequences(
        &self,
        tok: &Tokenizer,
        docs: &[Document],
        seq_len: usize,
    ) -> lmsplit::corpus::Result<TrainingData> {
        let it = docs.iter().cloned().map(Ok);
        lmsplit::corpus::windows::causal_blocks(tok, it, seq_len, Some(tok.special_tokens()?.sep))
    }

    /// Cut and labelled as GPT's text, so both are scored on identical positions.
    fn scoring_set(&self) -> &'static str {
        "gpt"
    }
}

#[derive(Parser, Debug)]
#[command(about = "A GRU tower style of your own, trained and compared beside GPT")]
struct Args {
    /// Output folder (the study's data and one folder per run).
    #[arg(long, default_value = "out/custom_tower")]
    out: PathBuf,
    /// Token positions of phase 1 for each run.
    #[arg(long, default_value_t = 60_000)]
    budget_tokens: u64,
    /// Documents of the synthetic corpus.
    #[arg(long, default_value_t = 200)]
    documents: usize,
    /// The heads' token cap (they stop earlier once their validation levels off).
    #[arg(long, default_value_t = 60_000)]
    head_tokens: u64,
    /// Seed of both runs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Least scored positions of a token in each run for it to enter the agreement.
    #[arg(long, default_value_t = 5)]
    min_count: u64,
}

/// Whether every trainable variable of tower 0 gets a finite, non-zero gradient from the joint
/// loss of one batch: the check a new style needs first.
fn gradient_check(model: &TwoTowerLm, batch: &TokenBatch) -> towers::Result<(usize, Vec<String>)> {
    let grads = model.loss(batch)?.backward()?;
    let mut bad = Vec::new();
    let mut n = 0;
    for p in model.params().params() {
        if !p.name.starts_with("tower") {
            continue;
        }
        n += 1;
        let ok = match grads.get(p.var.as_tensor()) {
            Some(g) => {
                let v: Vec<f32> = g.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?;
                v.iter().all(|x| x.is_finite()) && v.iter().any(|&x| x != 0.0)
            }
            None => false,
        };
        if !ok {
            bad.push(p.name.clone());
        }
    }
    Ok((n, bad))
}

/// (first, last) logged phase-1 training loss of a run.
fn loss_curve(run: &ScoredRun) -> Result<(f64, f64), ExperimentError> {
    let path = run.dir.join("phase1").join(towers::METRICS_FILE);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| ExperimentError::bad_setting("metrics", path.display(), e.to_string()))?;
    let losses: Vec<f64> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v.get("loss").and_then(serde_json::Value::as_f64))
        .collect();
    match (losses.first(), losses.last()) {
        (Some(&a), Some(&b)) => Ok((a, b)),
        _ => Err(ExperimentError::bad_setting(
            "metrics",
            path.display(),
            "no training loss was logged",
        )),
    }
}

/// The eq. 4 scores (arithmetic mean, tower 1 the primary, eq. 3) and scored counts of a run.
fn scores_of(run: &ScoredRun) -> Result<(Vec<Option<f64>>, Vec<u64>), ExperimentError> {
    let lp = &run.logprobs;
    let mut stats = TokenStats::new(lp.vocab_size, lp.logp.len())?;
    let towers: Vec<&[f32]> = lp.logp.iter().map(Vec::as_slice).collect();
    stats.add(&lp.targets, &towers)?;
    let s = stats.scores(ScoreKind::ArithmeticMean)?;
    Ok((s.values, stats.counts().to_vec()))
}

fn run(args: Args) -> Result<serde_json::Value, ExperimentError> {
    let t0 = std::time::Instant::now();
    // The one registration: runs of "gru" can now be read back from their folders.
    let gru = towers::register(Gru)?;
    let corpus = CorpusSpec::synthetic(args.documents, args.seed);
    let ws = Workspace::open(&corpus, args.out.join("data"))?;
    let opts = RunOptions {
        progress: Progress::stdout().with_bars(false),
        ..RunOptions::default()
    };
    let mut runs = Vec::new();
    for style in [gru.clone(), towers::Style::gpt()] {
        let mut spec = RunSpec::new(style, Preset::Tiny, corpus.clone()).with_seed(args.seed);
        spec.phase1.budget_tokens = args.budget_tokens;
        spec.heads.max_budget_tokens = args.head_tokens;
        spec.retest_heads = false;
        let set = ws.scoring_set(&spec.style, &ScoringSpec::new(spec.phase1.seq_len))?;
        let dir = args.out.join(spec.label());
        runs.push((spec.clone(), ws.ensure_run(&spec, &dir, &set, &opts)?));
    }
    // Read back from its folder, as an analysis in another process would.
    let gru_run = ScoredRun::load(&runs[0].1.dir)?;
    let gpt_run = &runs[1].1;
    gru_run.manifest.scoring.check_comparable(
        &gpt_run.manifest.scoring,
        &gru_run.label,
        &gpt_run.label,
    )?;

    let (gs, gc) = scores_of(&gru_run)?;
    let (ps, pc) = scores_of(gpt_run)?;
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for a in 0..gs.len().min(ps.len()) {
        if let (Some(g), Some(p)) = (gs[a], ps[a]) {
            if gc[a] >= args.min_count && pc[a] >= args.min_count {
                x.push(g);
                y.push(p);
            }
        }
    }
    let r = pearson(&x, &y)?;

    // The gradient check of the GRU's variables on one training batch, at the run's config.
    let data = ws.data();
    let cfg = runs[0].0.model_config(data.padded_vocab())?;
    let model = TwoTowerLm::new(&cfg, &Device::Cpu, args.seed)?;
    let b = lmsplit::experiment::data::batcher(&gru, &data.tok, data.train(), 32, 4, 1)?;
    let batch = b.batch(Default::default()).map_err(ExperimentError::from)?;
    let (n_vars, bad) = gradient_check(&model, &batch)?;

    let mut out = json!({"gpt_gru_agreement": {"pearson": r, "tokens": x.len(),
        "min_count": args.min_count, "score": "arithmetic mean (eq. 4), tower 1 primary (eq. 3)"}});
    for (spec, run) in [(&runs[0].0, &gru_run), (&runs[1].0, gpt_run)] {
        let (first, last) = loss_curve(run)?;
        let res = run.result()?;
        out[spec.style.name()] = json!({
            "run": run.label, "phase1_loss_first": first, "phase1_loss_last": last,
            "heads_nll": res.heads.nll, "scored_positions": res.positions,
            "config": spec.model_config(data.padded_vocab())?.to_json(),
        });
    }
    out["gru_gradients"] = json!({"variables": n_vars, "finite_nonzero": n_vars - bad.len(),
        "bad": bad});
    out["seconds"] = json!(t0.elapsed().as_secs_f64());
    Ok(out)
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
