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
//! Embeddings are stored per model, split and T under `<out>/embeddings/` (safetensors): a rerun
//! reuses every finished model. Outputs: `table2.{csv,md,json}` and `table2_group_r2.png`
//! (rows = models, columns = T), and per T under `T<t>/` the pairwise R², pairwise ρ and CKA
//! tables and heatmaps and the group table (rows = target, columns = basis). Models whose
//! position table is shorter than the largest T are left out (the run says so). The last line
//! printed is a JSON summary with the output paths.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use lmsplit::corpus::{Documents, Format, SamplerConfig, SequenceSampler, Split, Tokenizer};
use lmsplit::lmd::analysis::{analyze, Analysis, GroupR2};
use lmsplit::lmd::encoder::{load, resolve, Encoder, LoadOptions, LoadedEncoder, Pooling};
use lmsplit::lmd::extract::{EmbeddingStore, ExtractOptions};
use lmsplit::lmd::fit::Ridge;
use lmsplit::lmd::moments::Moments;
use lmsplit::lmd::tables::{group_table, write_analysis, ORIENTATION};
use lmsplit::report::{heatmap, HeatmapOptions};
use serde_json::json;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

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
    /// Corpus format: wikitext, lines or plain.
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
    /// Output folder.
    #[arg(long, default_value = "out/lmd_table")]
    out: PathBuf,
}

fn parse_ridge(s: &str) -> AnyResult<Ridge> {
    let num = |v: &str| -> AnyResult<f64> { Ok(v.parse::<f64>()?) };
    Ok(match s.split_once(':') {
        None if s == "pinv" || s == "none" => Ridge::None,
        Some(("ridge", v)) => Ridge::Fixed(num(v)?),
        Some(("min-eig", v)) => Ridge::MinEigen(num(v)?),
        _ => return Err(format!("unknown ridge {s:?} (pinv, ridge:<λ>, min-eig:<v>)").into()),
    })
}

fn parse_format(s: &str) -> AnyResult<Format> {
    Ok(match s {
        "wikitext" => Format::WikiText,
        "lines" => Format::Lines,
        "plain" => Format::Plain,
        _ => return Err(format!("unknown corpus format {s:?}").into()),
    })
}

/// Joint moments of one split from the stored/extracted embeddings of every model.
fn split_moments(
    encs: &[&LoadedEncoder],
    store: &EmbeddingStore,
    split: &str,
    texts: &[String],
    opts: &ExtractOptions,
) -> AnyResult<Moments> {
    let mut blocks = Vec::with_capacity(encs.len());
    for enc in encs {
        let (e, reused) = store.get_or_embed(*enc, split, texts, opts)?;
        if reused {
            println!(
                "  {:<28} {split:<5} reused {}",
                enc.name(),
                store.path(enc.name(), split, opts).display()
            );
        } else {
            println!(
                "  {:<28} {split:<5} {} seq in {:.1} s = {:.1} seq/s ({:.0} tokens/s)",
                enc.name(),
                e.rows,
                e.seconds,
                e.sequences_per_second(),
                e.tokens as f64 / e.seconds
            );
        }
        blocks.push(e);
    }
    let names = encs.iter().map(|e| e.name().to_string()).collect();
    let widths = encs.iter().map(|e| e.width()).collect();
    let mut m = Moments::new(names, widths)?;
    let views: Vec<&[f32]> = blocks.iter().map(|b| b.data.as_slice()).collect();
    m.update(&views)?;
    Ok(m)
}

fn main() -> AnyResult<()> {
    // candle allocates per op: keep freed buffers for reuse (see lmsplit::alloc).
    lmsplit::alloc::retain_freed_memory();
    let args = Args::parse();
    let start = Instant::now();
    let pooling = Pooling::parse(&args.pooling)?;
    let ridge = parse_ridge(&args.ridge)?;
    if args.models.len() < 2 {
        return Err("LMD needs at least two models".into());
    }
    std::fs::create_dir_all(&args.out)?;
    let load_opts = LoadOptions::auto();
    println!("device {:?}, dtype {:?}", load_opts.device, load_opts.dtype);
    let mut encoders = Vec::new();
    for spec in &args.models {
        let enc = load(resolve(spec)?, &load_opts)?;
        println!(
            "loaded {:<28} {:<10} d = {:<5} max T = {}",
            enc.name(),
            enc.model_type(),
            enc.width(),
            enc.max_tokens()
        );
        encoders.push(enc);
    }
    let mut all: Vec<String> = encoders.iter().map(|e| e.name().to_string()).collect();
    all.sort();
    all.dedup();
    if all.len() != encoders.len() {
        return Err("two models share a folder name".into());
    }
    let tokenizer = Tokenizer::load(&args.tokenizer)?;
    let docs: Vec<_> =
        Documents::open(&args.corpus, parse_format(&args.format)?)?.collect::<Result<_, _>>()?;
    println!("corpus {}: {} documents", args.corpus.display(), docs.len());
    let store = EmbeddingStore::new(args.out.join("embeddings"));

    // Every T is analysed over the same models (Table 2 compares them across T): models whose
    // position table is shorter than the largest T are left out, and the run says so.
    let t_max = args.t.iter().copied().max().unwrap_or(0);
    for e in encoders.iter().filter(|e| e.max_tokens() < t_max) {
        println!(
            "leaving out {} (max {} tokens < T = {t_max})",
            e.name(),
            e.max_tokens()
        );
    }
    let active: Vec<&LoadedEncoder> = encoders
        .iter()
        .filter(|e| e.max_tokens() >= t_max)
        .collect();
    if active.len() < 2 {
        return Err(format!("fewer than two models accept T = {t_max}").into());
    }
    let names: Vec<String> = active.iter().map(|e| e.name().to_string()).collect();

    let mut per_t: Vec<(usize, Analysis)> = Vec::new();
    let mut analysis_files = Vec::new();
    for &t in &args.t {
        let cfg = SamplerConfig::new(t, args.n_train, 0, args.n_test, args.seed);
        let splits =
            SequenceSampler::new(tokenizer.clone(), cfg)?.sample(docs.iter().cloned().map(Ok))?;
        let (train, test) = (splits.texts(Split::Train), splits.texts(Split::Test));
        println!(
            "T = {t}: {} train, {} test sequences",
            train.len(),
            test.len()
        );
        let mut opts = ExtractOptions::new(t);
        opts.pooling = pooling;
        opts.token_budget = args.token_budget;
        let m_train = split_moments(&active, &store, "train", &train, &opts)?;
        let m_test = split_moments(&active, &store, "test", &test, &opts)?;
        let a = analyze(&m_train, &m_test, ridge)?;
        println!("T = {t}: group rho = {:.4}", a.group.rho());
        let dir = args.out.join(format!("T{t}"));
        let files = write_analysis(&dir, &a)?;
        println!(
            "T = {t}: pairwise R², rho, CKA tables and heatmaps in {}",
            dir.display()
        );
        analysis_files.extend(files);
        per_t.push((t, a));
    }

    // Table 2: rows = models, columns = T, cells = group R² of the model on all others.
    let ts: Vec<usize> = per_t.iter().map(|(t, _)| *t).collect();
    let settings: Vec<(String, &GroupR2)> = per_t
        .iter()
        .map(|(t, a)| (format!("T={t}"), &a.group))
        .collect();
    let table = group_table(&settings)?
        .with_title("Table 2: held-out group R² of each model on all the others, by T")
        .with_note(format!(
            "{ORIENTATION}; n_train {}, n_test {}, pooling {}, {}, corpus {}; last row: group rho (mean over models)",
            args.n_train,
            args.n_test,
            pooling.as_str(),
            ridge.label(),
            args.corpus.display()
        ));
    let table_files = table.write_all(&args.out, "table2")?;
    let grid: Vec<f64> = (0..names.len())
        .flat_map(|i| per_t.iter().map(move |(_, a)| a.group.r2[i]))
        .collect();
    let grid_png = args.out.join("table2_group_r2.png");
    let t_labels: Vec<String> = ts.iter().map(|t| format!("T={t}")).collect();
    heatmap(
        &grid_png,
        &grid,
        names.len(),
        ts.len(),
        &names,
        &t_labels,
        &HeatmapOptions {
            title: "group R² (model on all others)".into(),
            x_label: "T".into(),
            y_label: "model".into(),
            value_range: Some((0.0, 1.0)),
            annotate: true,
        },
    )?;
    println!("{}", table.to_markdown());
    let secs = start.elapsed().as_secs_f64();
    println!(
        "wrote {} and {} in {secs:.1} s",
        table_files[0].display(),
        grid_png.display()
    );
    let summary = json!({
        "table2": table_files,
        "table2_heatmap": grid_png,
        "analysis_files": analysis_files,
        "embeddings": args.out.join("embeddings"),
        "t": ts,
        "group_rho": per_t.iter().map(|(_, a)| a.group.rho()).collect::<Vec<_>>(),
        "models": names,
        "pooling": pooling.as_str(),
        "ridge": ridge.label(),
        "n_train": args.n_train,
        "n_test": args.n_test,
        "seconds": secs,
    });
    println!("{summary}");
    Ok(())
}
