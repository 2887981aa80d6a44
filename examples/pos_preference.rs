//! Fig. 4 of the two-tower paper: the preference score per part of speech. Every vocabulary
//! token gets its most frequent UPOS tag over the corpus (gold tags on the synthetic corpus;
//! on a real corpus the averaged-perceptron tagger trained on UD English EWT tags every
//! sentence), then `prefscore::by_tag` summarises the scores of the most frequent tokens per tag.
//!
//! ```text
//! cargo run --release -p lmsplit --example pos_preference -- [--run out/preference_table/gpt-s0]
//!     [--style gpt --seed 0 --corpus synthetic | --corpus ../shared/data/wikitext-2/train.txt \
//!      --format wikitext] [--tagger out/pos_tagger/tagger.bin] [--top-n 5000] [--out out/pos_preference]
//! ```
//!
//! With `--run` the run folder of another example is reused (its `run.json` says what it is);
//! otherwise the run is trained (or resumed, or reused) in `<out>/<style>-s<seed>/`. The last
//! line printed is a JSON object with the table and the output paths.

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use common::{run_scores, synthetic_corpus, tag_histograms, tag_table, Res, RunSelect};
use corpus::{PerceptronTagger, PosLexicon, SentenceSplitter, TaggerConfig, Tokenizer};
use indicatif::{ProgressBar, ProgressStyle};
use prefscore::{by_tag, top_tokens, Bootstrap, ScoreKind};
use serde_json::json;

#[derive(Parser, Debug)]
#[command(about = "Preference score per part of speech (Fig. 4 of the two-tower paper)")]
struct Args {
    /// The run analysed: an existing folder, or one trained here.
    #[command(flatten)]
    select: RunSelect,
    /// A saved perceptron tagger (real corpora); default: train one on UD English EWT.
    #[arg(long)]
    tagger: Option<PathBuf>,
    /// CoNLL-U training file of the tagger.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data/ud-english-ewt/en_ewt-ud-train.conllu"))]
    tagger_train: PathBuf,
    /// Most frequent tokens entering the summary (capped by what was scored).
    #[arg(long, default_value_t = 5000)]
    top_n: usize,
    /// Score: arithmetic (paper eq. 4) or geometric (released code).
    #[arg(long, default_value = "arithmetic")]
    score: String,
    /// Output directory.
    #[arg(long, default_value = "out/pos_preference")]
    out: PathBuf,
}

/// The tagger of `--tagger`, or one trained on `train` and saved as `out/tagger.bin` (reused
/// when that file exists).
fn tagger(args: &Args) -> Res<(PerceptronTagger, PathBuf)> {
    let saved = args.out.join("tagger.bin");
    let path = args.tagger.clone().unwrap_or_else(|| saved.clone());
    if path.is_file() {
        println!("tagger: {}", path.display());
        return Ok((PerceptronTagger::load(&path)?, path));
    }
    if !args.tagger_train.is_file() {
        return Err(format!(
            "tagger training file {} is missing",
            args.tagger_train.display()
        )
        .into());
    }
    let t0 = Instant::now();
    let train = corpus::read_conllu(&args.tagger_train)?;
    let tagger = PerceptronTagger::train(&train, &TaggerConfig::default())?;
    tagger.save(&saved)?;
    println!(
        "tagger trained on {} ({} sentences) in {:.0} s -> {}",
        args.tagger_train.display(),
        train.len(),
        t0.elapsed().as_secs_f64(),
        saved.display()
    );
    Ok((tagger, saved))
}

/// Tags every sentence of the documents (sentence splitter + whitespace words) and counts each
/// word's tag on its first WordPiece.
fn tag_documents(
    tagger: &PerceptronTagger,
    docs: &[corpus::Document],
    tok: &Tokenizer,
) -> PosLexicon {
    let splitter = SentenceSplitter::default();
    let bar = ProgressBar::new(docs.len() as u64).with_style(
        ProgressStyle::with_template("tagging {bar:30} {pos}/{len} documents {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut lex = PosLexicon::new();
    for d in docs {
        let sentences = splitter
            .split(&d.text)
            .into_iter()
            .map(|s| s.split_whitespace().collect::<Vec<_>>())
            .filter(|w| !w.is_empty());
        lex.merge(&PosLexicon::tag_corpus(tagger, sentences, |w| {
            tok.first_piece(w)
        }));
        bar.inc(1);
    }
    bar.finish_and_clear();
    lex
}

fn main() -> Res<()> {
    // candle allocates per op: keep freed buffers for reuse (see lmsplit::alloc).
    lmsplit::alloc::retain_freed_memory();
    let args = Args::parse();
    let t0 = Instant::now();
    let kind = match args.score.as_str() {
        "arithmetic" => ScoreKind::ArithmeticMean,
        "geometric" => ScoreKind::GeometricMean,
        k => return Err(format!("unknown score {k:?} (arithmetic, geometric)").into()),
    };
    std::fs::create_dir_all(&args.out)?;
    let run = args.select.open(&args.out, false)?;
    let lp = &run.result.logprobs;
    let scores = run_scores(lp, kind)?;

    // Tag of every token: gold on the synthetic corpus, the tagger's on a real one.
    let synthetic = run.spec.corpus.corpus == "synthetic";
    let (lexicon, tag_source, tagger_path) = if synthetic {
        let sentences: Vec<_> = synthetic_corpus(&run.spec.corpus)?.sentences().collect();
        let lex = PosLexicon::from_tagged(&sentences, |w| run.tok.first_piece(w))?;
        (lex, "gold (synthetic corpus)", None)
    } else {
        let (tagger, path) = tagger(&args)?;
        let t1 = Instant::now();
        let lex = tag_documents(&tagger, &run.docs, &run.tok);
        println!(
            "tagged {} words in {:.0} s ({} without a WordPiece)",
            lex.mapped_words() + lex.unmapped_words(),
            t1.elapsed().as_secs_f64(),
            lex.unmapped_words()
        );
        (
            lex,
            "perceptron tagger trained on UD English EWT",
            Some(path),
        )
    };
    let lexicon_path = args.out.join("lexicon.json");
    lexicon.save(&lexicon_path)?;
    let tags = lexicon.to_dense(lp.vocab_size);

    let top = top_tokens(&run.freq, args.top_n, &[&scores.values]);
    let per_tag = by_tag(&scores.values, &tags, &top, &Bootstrap::default())?;
    let label = run
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let title = format!(
        "Preference score per UPOS tag, {label}, top {} tokens ({tag_source})",
        top.len()
    );
    let table = tag_table(&per_tag, &title);
    println!("{}", table.to_markdown());
    let table_paths = table.write_all(&args.out, "pos_preference")?;
    let fig4 = args.out.join("fig4_pos_histograms.png");
    tag_histograms(
        &fig4,
        &per_tag,
        &format!("Preference score per UPOS tag ({label})"),
    )?;

    let summary = json!({
        "seconds": t0.elapsed().as_secs_f64(),
        "run": run.dir, "style": run.spec.style, "seed": run.spec.settings.seed,
        "corpus": run.spec.corpus.corpus, "tags": tag_source, "score": args.score,
        "positions": lp.len(), "tokens": top.len(), "primary_tower": scores.towers[0],
        "per_tag": per_tag.iter().map(|t| json!({"tag": t.tag, "n": t.n, "mean": t.mean,
            "lo": t.interval.map(|i| i.lo), "hi": t.interval.map(|i| i.hi),
            "share_primary": t.share_primary})).collect::<Vec<_>>(),
        "outputs": {"table": table_paths, "fig4": fig4, "lexicon": lexicon_path,
                    "tagger": tagger_path, "logprobs": run.result.logprobs_path},
    });
    std::fs::write(
        Path::new(&args.out).join("summary.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    println!("{summary}");
    Ok(())
}
