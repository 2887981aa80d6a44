//! Corpus statistics: documents, words, tokens, vocabulary used, most frequent tokens and the
//! tokenizing throughput.
//!
//! ```text
//! cargo run --release --example corpus_stats -- \
//!     --corpus ../shared/data/wikitext-2/train.txt \
//!     --tokenizer ../shared/data/bert-base-uncased/bert_base_uncased.json
//! ```
//!
//! The corpus is streamed (one chunk of lines in memory), tokenized in parallel chunks and
//! counted. The last line printed is a JSON object
//! `{"documents", "words", "tokens", "vocab_used", "tokens_per_s"}`.

mod common;

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use lmsplit::corpus::{Documents, Format, TokenCounts, Tokenizer};

#[derive(Parser, Debug)]
#[command(about = "Tokenize a corpus and print its statistics")]
struct Args {
    /// Corpus file (or folder of .txt files).
    #[arg(long)]
    corpus: PathBuf,
    /// Layout: wikitext, plain, lines, folder, jsonl or jsonl:<field> (default: guessed from the
    /// path).
    #[arg(long)]
    format: Option<String>,
    /// A tokenizer.json, or a WordPiece vocab.txt (BERT uncased pipeline).
    #[arg(long)]
    tokenizer: PathBuf,
    /// Lines tokenized per parallel batch.
    #[arg(long, default_value_t = 4096)]
    chunk: usize,
    /// How many of the most frequent tokens to show.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Where the token counts go (`<corpus name>.counts.tsv` in this folder).
    #[arg(long, default_value = "out/corpus_stats")]
    out: PathBuf,
}

fn main() -> std::process::ExitCode {
    common::quiet_on_broken_pipe();
    common::finish(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let format = match &args.format {
        Some(name) => Format::parse(name)?,
        None => Format::guess(&args.corpus),
    };
    let t_load = Instant::now();
    let tokenizer = Tokenizer::load(&args.tokenizer)?;
    println!(
        "tokenizer {} ({} tokens, padded to {}) loaded in {:.2} s",
        args.tokenizer.display(),
        tokenizer.vocab_size(),
        tokenizer.padded_vocab_size(8),
        t_load.elapsed().as_secs_f64()
    );
    println!("corpus {} as {format:?}", args.corpus.display());

    let bar = ProgressBar::new_spinner().with_style(
        ProgressStyle::with_template("{spinner} {pos} documents  {elapsed_precise}")
            .expect("valid template"),
    );
    let start = Instant::now();
    let documents = Documents::open(&args.corpus, format)?.inspect(|_| bar.inc(1));
    let (counts, summary) = TokenCounts::count_documents(&tokenizer, documents, args.chunk)?;
    let seconds = start.elapsed().as_secs_f64();
    bar.finish_and_clear();

    let tokens_per_s = summary.tokens as f64 / seconds;
    println!(
        "read and tokenized {} documents, {} words -> {} tokens ({:.3} tokens/word) in {seconds:.2} s: {:.0} tokens/s",
        summary.documents,
        summary.words,
        summary.tokens,
        summary.tokens as f64 / summary.words.max(1) as f64,
        tokens_per_s
    );
    println!(
        "vocabulary used: {} of {} ids",
        counts.vocab_used(),
        counts.vocab_size()
    );
    println!("most frequent tokens:");
    for (rank, (id, c)) in counts.top(args.top).into_iter().enumerate() {
        let token = tokenizer.id_to_token(id).unwrap_or_default();
        println!(
            "  {:>3}. {token:<12} id {id:>6}  {c:>9}  {:.2}%",
            rank + 1,
            100.0 * c as f64 / counts.total().max(1) as f64
        );
    }
    std::fs::create_dir_all(&args.out)?;
    let stem = args
        .corpus
        .file_name()
        .map_or("corpus".into(), |n| n.to_string_lossy().into_owned());
    let counts_path = args.out.join(format!("{stem}.counts.tsv"));
    counts.save(&counts_path)?;
    println!(
        "token counts (id<TAB>count, load with TokenCounts::load) written to {}",
        counts_path.display()
    );
    println!(
        "{}",
        serde_json::json!({
            "documents": summary.documents,
            "words": summary.words,
            "tokens": summary.tokens,
            "vocab_used": counts.vocab_used(),
            "tokens_per_s": tokens_per_s.round(),
        })
    );
    Ok(())
}
