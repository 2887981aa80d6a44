//! Structural and UPOS probes of every layer of a model on a UD treebank: each probe trained on
//! train, chosen on dev (the dev loss over the `--l2` candidates and epochs), scored on test
//! with bootstrap intervals; the right-branching baseline beside them. Writes
//! `probe_layers.{csv,md,json}` and the figure `probe_layers.png` under `--out`, and prints a
//! JSON summary as its last line.
//!
//! `cargo run --release --example probe -- --model ../shared/models/all-MiniLM-L6-v2 --ud
//!  ../shared/data/ud-english-ewt --out out/probe [--max-sentences 2000]`
//!
//! Exported states: `--states train.safetensors --conllu train.conllu` (one tensor per layer,
//! `layer_0`, `layer_1`, ..., each [n_words, H], the CoNLL-U file's words in order). Three
//! pairs (repeat both flags) are train, dev and test; one pair is split by sentence index
//! (index mod 10: 0-7 train, 8 dev, 9 test).

mod common;

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use candle_core::Device;
use clap::Parser;
use lmsplit::corpus::{read_conllu_trees, ParsedSentence};
use lmsplit::lmd::encoder::LoadOptions;
use lmsplit::probe::{
    gold_trees, layer_curve, Bootstrap, CurveSettings, DistanceLoss, EncoderLayers, GoldTree,
    LayerStates, PiecePooling, ProbeParams, ProbeTask, Split, StateSource, StatesFile,
};
use lmsplit::report::Progress;
use serde_json::json;

#[derive(Parser, Debug)]
#[command(about = "Probe every layer of a model (structural distance, depth, UPOS)")]
struct Args {
    /// A BERT-family model folder (config.json, weights, tokenizer.json).
    #[arg(long, conflicts_with = "states")]
    model: Option<PathBuf>,
    /// A UD treebank folder with *-ud-train.conllu, *-ud-dev.conllu and *-ud-test.conllu.
    #[arg(long)]
    ud: Option<PathBuf>,
    /// Exported states (safetensors, `layer_<i>` [n_words, H]); once, or three times.
    #[arg(long)]
    states: Vec<PathBuf>,
    /// The CoNLL-U file of each `--states` file, in the same order.
    #[arg(long)]
    conllu: Vec<PathBuf>,
    /// Output folder.
    #[arg(long, default_value = "out/probe")]
    out: PathBuf,
    /// Keep the first N sentences of each split (all when absent).
    #[arg(long)]
    max_sentences: Option<usize>,
    /// Probe rank (rows of B).
    #[arg(long, default_value_t = 64)]
    rank: usize,
    /// Most epochs per probe.
    #[arg(long, default_value_t = 30)]
    epochs: usize,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// L2 penalties to choose from on dev (comma separated).
    #[arg(long, default_value = "0")]
    l2: String,
    /// Epochs without a better dev loss before stopping.
    #[arg(long, default_value_t = 4)]
    patience: usize,
    /// Sentences per batch.
    #[arg(long, default_value_t = 20)]
    batch: usize,
    /// The distance probe's loss: `hm` (Hewitt & Manning, L1 on squared distances) or
    /// `mse` (the two-tower paper's released code: Euclidean distance, MSE).
    #[arg(long, default_value = "hm")]
    loss: String,
    /// A word's vector from its pieces: `mean` or `first`.
    #[arg(long, default_value = "mean")]
    pooling: String,
    /// Layers to probe (comma separated; all when absent).
    #[arg(long)]
    layers: Option<String>,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = 1000)]
    bootstrap: usize,
    /// Seed of the probes' initial weights, batch order and bootstrap.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print every epoch's losses.
    #[arg(long)]
    verbose: bool,
}

/// Train, dev and test sentences with their states.
struct Data {
    name: String,
    splits: Vec<(Vec<GoldTree>, LayerStates)>,
}

fn split_files(ud: &Path) -> Result<[PathBuf; 3], Box<dyn Error>> {
    let mut found: [Option<PathBuf>; 3] = Default::default();
    for entry in std::fs::read_dir(ud).map_err(|e| format!("{}: {e}", ud.display()))? {
        let p = entry?.path();
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        for (i, s) in ["-ud-train.conllu", "-ud-dev.conllu", "-ud-test.conllu"]
            .iter()
            .enumerate()
        {
            if name.ends_with(s) {
                found[i] = Some(p.clone());
            }
        }
    }
    match found {
        [Some(a), Some(b), Some(c)] => Ok([a, b, c]),
        _ => Err(format!("{}: needs *-ud-train/dev/test.conllu", ud.display()).into()),
    }
}

fn read(path: &Path, max: Option<usize>) -> Result<Vec<ParsedSentence>, Box<dyn Error>> {
    let mut s = read_conllu_trees(path)?;
    if let Some(m) = max {
        s.truncate(m);
    }
    Ok(s)
}

fn from_model(args: &Args, model: &Path, progress: &Progress) -> Result<Data, Box<dyn Error>> {
    let ud = args.ud.as_ref().ok_or("--model needs --ud")?;
    let pooling = match args.pooling.as_str() {
        "mean" => PiecePooling::Mean,
        "first" => PiecePooling::First,
        p => return Err(format!("--pooling {p:?}: mean or first").into()),
    };
    let enc = EncoderLayers::load(model, &LoadOptions::default(), pooling)?;
    let mut splits = Vec::new();
    for path in split_files(ud)? {
        let sents = read(&path, args.max_sentences)?;
        let t = Instant::now();
        let states = enc.states(&sents, progress)?;
        println!(
            "{}: {} sentences, {} words, {} layers in {:.1} s",
            path.display(),
            sents.len(),
            states.n_words(),
            states.n_layers(),
            t.elapsed().as_secs_f64()
        );
        splits.push((gold_trees(&sents)?, states));
    }
    Ok(Data {
        name: enc.name().to_string(),
        splits,
    })
}

fn from_files(args: &Args) -> Result<Data, Box<dyn Error>> {
    if args.states.len() != args.conllu.len() || !matches!(args.states.len(), 1 | 3) {
        return Err("give --states and --conllu once each, or three times each".into());
    }
    let name = args.states[0]
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let mut splits = Vec::new();
    for (st, cl) in args.states.iter().zip(&args.conllu) {
        let sents = read_conllu_trees(cl)?;
        let states = StatesFile::open(st)?.states(&sents, &Progress::silent())?;
        splits.push((sents, states));
    }
    let cap = |idx: Vec<usize>| match args.max_sentences {
        Some(m) => idx.into_iter().take(m).collect(),
        None => idx,
    };
    let part = |sents: &[ParsedSentence], states: &LayerStates, idx: Vec<usize>| {
        let idx: Vec<usize> = cap(idx);
        let chosen: Vec<ParsedSentence> = idx.iter().map(|&k| sents[k].clone()).collect();
        Ok::<_, Box<dyn Error>>((gold_trees(&chosen)?, states.select(&idx)?))
    };
    let mut out = Vec::new();
    if let [(sents, states)] = splits.as_slice() {
        // One file: sentences by index mod 10, 0-7 train, 8 dev, 9 test.
        for keep in [0..8, 8..9, 9..10] {
            let idx = (0..sents.len())
                .filter(|k| keep.contains(&(k % 10)))
                .collect();
            out.push(part(sents, states, idx)?);
        }
    } else {
        for (sents, states) in &splits {
            out.push(part(sents, states, (0..sents.len()).collect())?);
        }
    }
    Ok(Data { name, splits: out })
}

fn run(args: Args) -> Result<(), Box<dyn Error>> {
    let start = Instant::now();
    let progress = if args.verbose {
        Progress::stdout()
    } else {
        Progress::to(|m| {
            if !m.starts_with("  ") {
                println!("{m}")
            }
        })
    };
    let data = match &args.model {
        Some(m) => from_model(&args, m, &progress)?,
        None if !args.states.is_empty() => from_files(&args)?,
        None => return Err("give --model DIR --ud DIR, or --states FILE --conllu FILE".into()),
    };
    let states_s = start.elapsed().as_secs_f64();
    let kind = match args.loss.as_str() {
        "hm" => DistanceLoss::HewittManning,
        "mse" => DistanceLoss::ReleasedMse,
        l => return Err(format!("--loss {l:?}: hm or mse").into()),
    };
    let l2s: Vec<f64> = common::parse_list(&args.l2)?;
    if l2s.is_empty() {
        return Err("--l2 needs at least one value".into());
    }
    let width = data.splits[0].1.width();
    let base = |task: ProbeTask| {
        ProbeParams::new(task)
            .rank(args.rank.min(width))
            .epochs(args.epochs)
            .learning_rate(args.lr)
            .patience(args.patience)
            .batch_sentences(args.batch)
            .seed(args.seed)
    };
    let candidates =
        |task: ProbeTask| -> Vec<ProbeParams> { l2s.iter().map(|&l| base(task).l2(l)).collect() };
    let settings = CurveSettings {
        distance: candidates(ProbeTask::Distance(kind)),
        depth: candidates(ProbeTask::Depth),
        upos: candidates(ProbeTask::Upos),
        bootstrap: Bootstrap {
            resamples: args.bootstrap,
            seed: args.seed,
            ..Default::default()
        },
        layers: args
            .layers
            .as_deref()
            .map(common::parse_list::<usize>)
            .transpose()?,
    };
    let split = |i: usize| Split {
        gold: &data.splits[i].0,
        states: &data.splits[i].1,
    };
    let t = Instant::now();
    let curve = layer_curve(
        &data.name,
        split(0),
        split(1),
        split(2),
        &settings,
        &Device::Cpu,
        &progress,
    )?;
    let probes_s = t.elapsed().as_secs_f64();
    let files = curve.write(&args.out)?;
    println!("{}", curve.table().to_markdown());
    let summary = json!({
        "model": curve.model,
        "sentences": curve.sentences,
        "words": data.splits.iter().map(|s| s.1.n_words()).collect::<Vec<_>>(),
        "distance_loss": args.loss,
        "pooling": args.pooling,
        "layers": curve.rows.iter().map(|r| json!({
            "layer": r.layer,
            "uuas": r.distance.uuas,
            "dspr": r.distance.dspr,
            "root_accuracy": r.depth.root_accuracy,
            "nspr": r.depth.nspr,
            "upos_accuracy": r.upos.accuracy,
            "chosen_l2": r.chosen.iter().map(|p| p.l2).collect::<Vec<_>>(),
            "epochs_run": r.epochs_run,
        })).collect::<Vec<_>>(),
        "right_branching_uuas": curve.right_branching,
        "states_seconds": states_s,
        "probe_seconds": probes_s,
        "files": files,
    });
    println!("{summary}");
    Ok(())
}

fn main() -> ExitCode {
    common::quiet_on_broken_pipe();
    common::finish(run(Args::parse()))
}
