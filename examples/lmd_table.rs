//! LMD end to end (Zhang, "Language Model Decomposition", Table 2 and its heatmaps):
//! sample sequences of T BERT-uncased word pieces from disjoint documents, embed them with every
//! model, accumulate joint moments per split, fit each model on the others (closed form, train)
//! and report held-out R² (test): group R² per model and T, group ρ, pairwise R²/ρ heatmaps.
//!
//! ```text
//! cargo run --release --example lmd_table -- \
//!     --models ../shared/models/all-MiniLM-L6-v2,../shared/data/stories260K \
//!     --corpus ../shared/data/wikitext-2/train.txt --t 32,128 --n-train 2000 --n-test 500
//! ```
//!
//! Embeddings stream into the joint moments of each split (memory O(D² + chunk·D), never the
//! n × D embeddings), stored under `<out>/moments/` with what they were computed from: a rerun
//! reuses finished shards, resumes an interrupted one and recomputes a stale one. At scale, cut
//! each split into N sample-range shards and run them as independent processes (a Slurm job
//! array, one process per GPU), then merge and analyse once:
//!
//! ```text
//! lmd_table ... --shard 0/4        # ... --shard 3/4: extraction only, one process each
//! lmd_table ... --shards 4 --merge-only   # keys checked, shards summed, tables written
//! ```
//!
//! Outputs: `table2.{csv,md,json}` and `table2_group_r2.png`
//! (rows = models, columns = T), and per T under `T<t>/` the pairwise R², pairwise ρ and CKA
//! tables and heatmaps and the group table (rows = target, columns = basis). Models whose
//! position table is shorter than the largest T are left out (the run says so). Beside them,
//! per T, the similarity table of `lmd::similarity` (measure × pair with its null:
//! `similarity.{csv,md,json}`), the measures' agreement on the ranking of pairs
//! (`similarity_agreement.*`) and one heatmap per measure (`similarity_<measure>.png`);
//! mutual k-NN reads a seeded sample of the test sequences from the embedding store under
//! `<out>/embeddings/`. `--no-similarity` leaves them out (and halves the moments' memory).
//! The last line printed is a JSON summary with the output paths.
//!
//! Everything is `lmsplit::lmd::study` API; this file only reads flags and prints.

mod common;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use lmsplit::corpus::Format;
use lmsplit::lmd::encoder::Pooling;
use lmsplit::lmd::shard::Shard;
use lmsplit::lmd::similarity::SimilarityParams;
use lmsplit::lmd::study::{extract_lmd_shard, parse_ridge, run_lmd_study, LmdStudySpec};
use lmsplit::lmd::LmdError;
use lmsplit::report::Progress;

#[derive(Parser, Debug)]
#[command(about = "LMD Table 2: group R² of each model on all others, by sequence length T")]
struct Args {
    /// Model folders (Hugging Face layout or llama2.c), or hub ids with `--features hub`,
    /// comma separated.
    #[arg(long, value_delimiter = ',', required = true)]
    models: Vec<String>,
    /// Corpus text file.
    #[arg(long, default_value = "../shared/data/wikitext-2/train.txt")]
    corpus: PathBuf,
    /// Corpus format: wikitext, lines, plain, folder or jsonl[:field].
    #[arg(long, default_value = "wikitext")]
    format: String,
    /// Tokenizer that counts the T word pieces of each sampled sequence (BERT uncased).
    #[arg(long, default_value = "../shared/data/bert-base-uncased/vocab.txt")]
    tokenizer: PathBuf,
    /// Sequence lengths T, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "32,128")]
    t: Vec<usize>,
    /// Training sequences per T.
    #[arg(long, default_value_t = 2000)]
    n_train: usize,
    /// Test sequences per T.
    #[arg(long, default_value_t = 500)]
    n_test: usize,
    /// Pooling: mean (masked mean), paper (masked sum / T, the reference code), cls, last.
    #[arg(long, default_value = "mean")]
    pooling: String,
    /// Ridge: pinv, ridge:<λ> (the reference: ridge:1e-6) or min-eig:<value>.
    #[arg(long, default_value = "ridge:1e-6")]
    ridge: String,
    /// Seed of the document split and the sampling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Most padded tokens per forward pass.
    #[arg(long, default_value_t = 4096)]
    token_budget: usize,
    /// How sequences are made: sampled (exactly T word pieces from disjoint documents) or
    /// reference (the reference code's chunks of concatenated rows; needs --test-corpus).
    #[arg(long, default_value = "sampled")]
    sampler: String,
    /// Test split's file for `--sampler reference` (e.g. wikitext-2/test.txt).
    #[arg(long)]
    test_corpus: Option<PathBuf>,
    /// Compute dtype: f32 (fidelity) or bf16 (speed on a GPU).
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Sequences per joint moments update.
    #[arg(long, default_value_t = 512)]
    chunk: usize,
    /// Extract only shard i of N (`i/N`) of every split and T, then stop.
    #[arg(long, conflicts_with_all = ["shards", "merge_only"])]
    shard: Option<String>,
    /// Sample-range shards per split (computed here unless `--merge-only`).
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// Merge shards extracted elsewhere (all must exist) and analyse; embed nothing.
    #[arg(long)]
    merge_only: bool,
    /// Output folder.
    #[arg(long, default_value = "out/lmd_table")]
    out: PathBuf,
    /// Leave out the similarity measures and their accumulators.
    #[arg(long)]
    no_similarity: bool,
    /// SVCCA: top principal directions kept per model.
    #[arg(long, default_value_t = 20)]
    svcca_dims: usize,
    /// Mutual k-NN: neighbours per sequence.
    #[arg(long, default_value_t = 10)]
    knn_k: usize,
    /// Mutual k-NN: test sequences sampled (by --seed).
    #[arg(long, default_value_t = 512)]
    knn_sample: usize,
}

fn main() -> ExitCode {
    common::quiet_on_broken_pipe();
    // candle allocates per op: keep freed buffers for reuse (see lmsplit::alloc).
    lmsplit::alloc::retain_freed_memory();
    common::finish(run(Args::parse()))
}

/// A model argument as a local folder: hub ids are fetched with `--features hub`; without it
/// the path is passed on as it is, so a missing folder is reported as missing.
fn model_folder(arg: &str) -> Result<PathBuf, LmdError> {
    let path = PathBuf::from(arg);
    if cfg!(feature = "hub") && !path.exists() {
        return lmsplit::lmd::encoder::resolve(arg);
    }
    Ok(path)
}

fn spec_of(args: &Args) -> Result<LmdStudySpec, LmdError> {
    let models = args
        .models
        .iter()
        .map(|m| model_folder(m))
        .collect::<Result<_, _>>()?;
    let mut spec = LmdStudySpec::new(models, args.corpus.clone(), args.tokenizer.clone());
    spec.format = Format::parse(&args.format)?;
    spec.ts = args.t.clone();
    spec.n_train = args.n_train;
    spec.n_test = args.n_test;
    spec.pooling = Pooling::parse(&args.pooling)?;
    spec.ridge = parse_ridge(&args.ridge)?;
    spec.seed = args.seed;
    spec.token_budget = args.token_budget;
    spec.dtype = args.dtype.parse()?;
    spec.sampler = args.sampler.parse()?;
    spec.test_corpus = args.test_corpus.clone();
    spec.chunk = args.chunk;
    spec.shards = args.shards;
    spec.merge_only = args.merge_only;
    spec.similarity = (!args.no_similarity).then(|| SimilarityParams {
        svcca_dims: args.svcca_dims,
        knn_k: args.knn_k,
        knn_sample: args.knn_sample,
        seed: args.seed,
        ..SimilarityParams::default()
    });
    Ok(spec)
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut spec = spec_of(&args)?;
    if let Some(shard) = &args.shard {
        let shard: Shard = shard.parse()?;
        spec.shards = shard.count;
        let files = extract_lmd_shard(&spec, shard, &args.out, &Progress::stdout())?;
        let json = serde_json::json!({ "shard": shard.to_string(), "files": files });
        println!("{json}");
        return Ok(());
    }
    let outcome = run_lmd_study(&spec, &args.out, &Progress::stdout())?;
    println!("{}", outcome.table2_markdown);
    println!(
        "wrote {} and {} in {:.1} s",
        outcome.table2[0].display(),
        outcome.table2_heatmap.display(),
        outcome.seconds
    );
    let json = serde_json::to_string(&outcome).map_err(|e| format!("the summary line: {e}"))?;
    println!("{json}");
    Ok(())
}
