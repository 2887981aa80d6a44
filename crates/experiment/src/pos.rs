//! The part-of-speech tag of every vocabulary token (Fig. 4): gold tags on the synthetic
//! corpus; on real text, the averaged-perceptron tagger trained on UD English EWT (gold UPOS),
//! each word's tag counted on its first WordPiece, the most frequent tag kept.

use corpus::{PerceptronTagger, PosLexicon, Tokenizer};
use report::Progress;

use crate::analysis::{RunScores, TopTokens};
use crate::data::{synthetic_corpus, CorpusData};
use crate::error::{ExperimentError, Result};
use crate::spec::Corpus;

/// Where a study's tags come from.
#[derive(Debug, Clone, PartialEq)]
pub enum TagSource {
    /// The synthetic corpus' gold word classes.
    Gold,
    /// A tagger trained on a CoNLL-U file (UD English EWT train), saved as `tagger_cache`.
    Tagger {
        /// The CoNLL-U training file.
        conllu: std::path::PathBuf,
        /// Where the trained tagger is kept (reused when present).
        tagger_cache: std::path::PathBuf,
    },
}

impl TagSource {
    /// A short description for table notes.
    pub fn describe(&self) -> &'static str {
        match self {
            TagSource::Gold => "gold word classes of the synthetic corpus",
            TagSource::Tagger { .. } => "perceptron tagger trained on UD English EWT",
        }
    }
}

/// The lexicon of `data`'s words (tags per first WordPiece): the tagger's over the training
/// documents; the synthetic corpus's gold tags over all its documents (every synthetic word has
/// one gold tag, so the held-out tenth adds no other).
pub fn lexicon(data: &CorpusData, source: &TagSource, progress: &Progress) -> Result<PosLexicon> {
    match source {
        TagSource::Gold => {
            let Corpus::Synthetic { documents, seed } = data.spec.source else {
                let why = "gold word classes exist only for the synthetic corpus";
                return Err(ExperimentError::bad_setting("tags", "gold", why));
            };
            let sentences: Vec<_> = synthetic_corpus(documents, seed)?.sentences().collect();
            Ok(PosLexicon::from_tagged(&sentences, |w| {
                data.tok.first_piece(w)
            })?)
        }
        TagSource::Tagger {
            conllu,
            tagger_cache,
        } => {
            let tagger = PerceptronTagger::load_or_train(conllu, tagger_cache)?;
            Ok(tag_documents(&tagger, data.train(), &data.tok, progress))
        }
    }
}

/// Tags the documents ([`PosLexicon::tag_documents`]), with a bar of documents where the
/// caller's `progress` draws bars.
fn tag_documents(
    tagger: &PerceptronTagger,
    docs: &[corpus::Document],
    tok: &Tokenizer,
    progress: &Progress,
) -> PosLexicon {
    let bar = progress.bar(docs.len() as u64, "tagging documents");
    let lex = PosLexicon::tag_documents(tagger, docs, |w| tok.first_piece(w), || bar.inc(1));
    bar.finish();
    lex
}

/// Fig. 4's numbers for one run: the scores of the `top` most frequent training tokens
/// summarised per tag (`tags`: one tag per token id), with bootstrap intervals `boot`.
pub fn pos_tags<T: std::fmt::Display>(
    scores: &RunScores,
    top: TopTokens<'_>,
    tags: &[Option<T>],
    boot: &prefscore::Bootstrap,
) -> Result<Vec<prefscore::TagSummary>> {
    let tokens = prefscore::top_tokens(top.freq, top.n, &[&scores.scores.values]);
    Ok(prefscore::by_tag(
        &scores.scores.values,
        tags,
        &tokens,
        boot,
    )?)
}

/// Fig. 4's numbers for one run, computed and not written: the arithmetic-mean preference score
/// (eq. 4) of the `top_n` most frequent training tokens, summarised per tag of `tags`, with
/// bootstrap intervals ([`crate::tables::write_pos`] writes them as a table and figure).
pub fn preference_by_tag(
    run: &crate::run::ScoredRun,
    data: &CorpusData,
    tags: &TagSource,
    top_n: usize,
) -> Result<Vec<prefscore::TagSummary>> {
    let scores = RunScores::new(run, prefscore::ScoreKind::ArithmeticMean)?;
    let dense = lexicon(data, tags, &Progress::silent())?.to_dense(data.padded_vocab());
    let boot = prefscore::Bootstrap::default();
    let top = TopTokens {
        freq: &data.freq,
        n: top_n,
    };
    pos_tags(&scores, top, &dense, &boot)
}
