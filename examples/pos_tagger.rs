//! Trains the averaged-perceptron UPOS tagger on UD English EWT and evaluates it.
//!
//! ```text
//! cargo run --release --example pos_tagger -- \
//!     --train ../shared/data/ud-english-ewt/en_ewt-ud-train.conllu \
//!     --eval ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu [--save out/pos_tagger/tagger.bin] [--epochs N]
//! ```
//!
//! Prints per-tag accuracy and, as its last line,
//! `{"accuracy": …, "tokens": …, "tokens_per_s": …, …}` where `tokens_per_s` is the tagging
//! speed on the evaluation set (one thread). The model is saved (default
//! `out/pos_tagger/tagger.bin`) and reloaded to check that it predicts the same.

mod common;

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use corpus::pos::TagScratch;
use corpus::{PerceptronTagger, TaggedSentence, TaggerConfig, Upos};
use indicatif::{ProgressBar, ProgressStyle};

const EWT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/ud-english-ewt/"
);

#[derive(Parser)]
#[command(about = "Train and evaluate the UPOS tagger on CoNLL-U files")]
struct Args {
    /// Training CoNLL-U file (gold UPOS in column 4).
    #[arg(long, default_value_t = format!("{EWT}en_ewt-ud-train.conllu"))]
    train: String,
    /// Evaluation CoNLL-U file.
    #[arg(long, default_value_t = format!("{EWT}en_ewt-ud-dev.conllu"))]
    eval: String,
    /// Where to save the trained model.
    #[arg(long, default_value = "out/pos_tagger/tagger.bin")]
    save: PathBuf,
    /// Training epochs.
    #[arg(long, default_value_t = TaggerConfig::default().epochs)]
    epochs: usize,
    /// Shuffling seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn main() -> std::process::ExitCode {
    common::quiet_on_broken_pipe();
    common::finish(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let train = corpus::read_conllu(&args.train)?;
    let eval = corpus::read_conllu(&args.eval)?;
    let n_train: usize = train.iter().map(TaggedSentence::len).sum();
    let n_eval: usize = eval.iter().map(TaggedSentence::len).sum();
    println!(
        "train: {} ({} sentences, {n_train} tokens)",
        args.train,
        train.len()
    );
    println!(
        "eval:  {} ({} sentences, {n_eval} tokens)",
        args.eval,
        eval.len()
    );

    let cfg = TaggerConfig {
        epochs: args.epochs,
        seed: args.seed,
        ..TaggerConfig::default()
    };
    let bar = ProgressBar::new(cfg.epochs as u64).with_style(ProgressStyle::with_template(
        "training {bar:30} epoch {pos}/{len} {msg}",
    )?);
    let t0 = Instant::now();
    let tagger = PerceptronTagger::train_with_progress(&train, &cfg, |_, acc| {
        bar.set_message(format!("train acc {acc:.4}"));
        bar.inc(1);
    })?;
    bar.finish();
    let train_s = t0.elapsed().as_secs_f64();
    println!(
        "trained in {train_s:.2} s: {} features, {} tag-dictionary words",
        tagger.n_features(),
        tagger.tagdict_len()
    );

    let acc = tagger.evaluate(&eval);
    println!("\n{:<6} {:>7} {:>9}", "tag", "tokens", "accuracy");
    for tag in Upos::ALL {
        if let Some(a) = acc.tag_accuracy(tag) {
            println!("{:<6} {:>7} {:>9.4}", tag, acc.per_tag[tag.index()].1, a);
        }
    }
    println!("{:<6} {:>7} {:>9.4}\n", "all", acc.total, acc.accuracy());

    // Tagging speed: repeat passes over the evaluation set for at least a second.
    let mut scratch = TagScratch::default();
    let mut tags = Vec::new();
    let (mut tokens, t0) = (0usize, Instant::now());
    while tokens == 0 || t0.elapsed().as_secs_f64() < 1.0 {
        for s in &eval {
            tagger.tag_into(&s.words, &mut scratch, &mut tags);
            tokens += tags.len();
        }
    }
    let tokens_per_s = tokens as f64 / t0.elapsed().as_secs_f64();
    println!("tagging speed: {tokens_per_s:.0} tokens/s (one thread)");

    if let Some(dir) = args.save.parent() {
        std::fs::create_dir_all(dir)?;
    }
    tagger.save(&args.save)?;
    let reloaded = PerceptronTagger::load(&args.save)?;
    let same = reloaded.evaluate(&eval) == acc;
    println!(
        "model saved to {} ({} bytes); reloaded model predicts identically: {same}",
        args.save.display(),
        std::fs::metadata(&args.save)?.len()
    );
    if !same {
        return Err("reloaded model differs".into());
    }

    println!(
        "{}",
        serde_json::json!({
            "accuracy": acc.accuracy(),
            "tokens": acc.total,
            "tokens_per_s": tokens_per_s,
            "train_tokens": n_train,
            "epochs": cfg.epochs,
            "train_s": train_s,
        })
    );
    Ok(())
}
