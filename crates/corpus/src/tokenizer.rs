//! A thin wrapper over the `tokenizers` crate: loading (including the older `tokenizer.json`
//! whose model has no `"type"`), building a BERT WordPiece tokenizer from `vocab.txt`, training a
//! WordPiece vocabulary, saving, named special tokens and encoding.

use std::collections::BTreeSet;
use std::path::Path;

use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::wordpiece::{WordPiece, WordPieceTrainer};
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::{
    AddedToken, NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString,
    PreTokenizer,
};

use crate::error::{CorpusError, Result};

/// Names of the BERT special tokens, in the id order a trained vocabulary gives them.
pub const BERT_SPECIAL_TOKENS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

fn tok_err(e: impl std::fmt::Display) -> CorpusError {
    CorpusError::Tokenizer(e.to_string())
}

/// Ids of the five BERT special tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SpecialTokens {
    /// `[PAD]`.
    pub pad: u32,
    /// `[UNK]`.
    pub unk: u32,
    /// `[CLS]`.
    pub cls: u32,
    /// `[SEP]`.
    pub sep: u32,
    /// `[MASK]`.
    pub mask: u32,
}

impl SpecialTokens {
    /// The five ids, in the order pad, unk, cls, sep, mask.
    pub fn ids(&self) -> [u32; 5] {
        [self.pad, self.unk, self.cls, self.sep, self.mask]
    }

    /// Is `id` one of the five?
    pub fn contains(&self, id: u32) -> bool {
        self.ids().contains(&id)
    }
}

/// The encoding of one text: piece ids and their byte offsets in the original text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Encoded {
    /// Token ids.
    pub ids: Vec<u32>,
    /// `(start, end)` byte offsets of each token in the input text (`(0, 0)` for added specials).
    pub offsets: Vec<(usize, usize)>,
    /// Index of the pre-tokenized word each token belongs to (`None` for specials).
    pub word_ids: Vec<Option<u32>>,
}

impl Encoded {
    fn from_encoding(e: tokenizers::Encoding) -> Self {
        Self {
            ids: e.get_ids().to_vec(),
            offsets: e.get_offsets().to_vec(),
            word_ids: e.get_word_ids().to_vec(),
        }
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// No token at all?
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// The non-empty chunks of `text` between ASCII spaces, tabs and line breaks.
pub(crate) fn space_chunks(text: &str) -> impl Iterator<Item = &str> {
    text.split([' ', '\t', '\n', '\r'])
        .filter(|c| !c.is_empty())
}

/// Token ids of space-separated chunks already seen (see [`Tokenizer::encode_ids_memo`]);
/// emptied when it grows past its capacity.
#[derive(Debug, Clone)]
pub struct ChunkMemo {
    map: std::collections::HashMap<String, Vec<u32>>,
    capacity: usize,
}

impl ChunkMemo {
    /// A memo of at most about `capacity` chunks.
    pub fn new(capacity: usize) -> Self {
        Self {
            map: std::collections::HashMap::new(),
            capacity,
        }
    }
}

impl Default for ChunkMemo {
    /// Two million chunks (a few hundred MB at worst; WikiText-103 has about 0.3M types).
    fn default() -> Self {
        Self::new(2_000_000)
    }
}

/// A tokenizer (any `tokenizers` model) with truncation and padding always off.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

/// Inserts the model `"type"` that old `tokenizer.json` files omit, judged from the model's keys.
fn add_model_type(json: &mut serde_json::Value) -> Result<()> {
    let model = json
        .get_mut("model")
        .and_then(|m| m.as_object_mut())
        .ok_or_else(|| CorpusError::Tokenizer("tokenizer.json has no \"model\" object".into()))?;
    if model.contains_key("type") {
        return Ok(());
    }
    let kind = if model.contains_key("merges") {
        "BPE"
    } else if model.contains_key("continuing_subword_prefix")
        || model.contains_key("max_input_chars_per_word")
    {
        "WordPiece"
    } else if model.get("vocab").is_some_and(|v| v.is_array()) {
        "Unigram"
    } else if model.contains_key("vocab") {
        "WordLevel"
    } else {
        return Err(CorpusError::Tokenizer(
            "cannot tell the model type of tokenizer.json (no type, vocab or merges)".into(),
        ));
    };
    model.insert("type".into(), kind.into());
    Ok(())
}

impl Tokenizer {
    /// Wraps a `tokenizers` tokenizer, switching truncation and padding off.
    pub fn from_inner(mut inner: tokenizers::Tokenizer) -> Result<Self> {
        inner.with_truncation(None).map_err(tok_err)?;
        inner.with_padding(None);
        Ok(Self { inner })
    }

    /// Loads a `tokenizer.json`, also in the older format whose model has no `"type"`.
    /// Truncation and padding stored in the file are cleared.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| CorpusError::io(path, e))?;
        Self::from_json_str(&text).map_err(|e| match e {
            CorpusError::Tokenizer(m) => CorpusError::Tokenizer(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Parses the content of a `tokenizer.json` (see [`Tokenizer::from_file`]).
    pub fn from_json_str(text: &str) -> Result<Self> {
        let inner = match text.parse::<tokenizers::Tokenizer>() {
            Ok(t) => t,
            Err(first) => {
                let mut json: serde_json::Value =
                    serde_json::from_str(text).map_err(|e| tok_err(format!("bad JSON: {e}")))?;
                add_model_type(&mut json)?;
                serde_json::from_value(json)
                    .map_err(|e| tok_err(format!("{first}; with a model type added: {e}")))?
            }
        };
        Self::from_inner(inner)
    }

    /// Loads by file name: a `*.txt` is a BERT WordPiece vocabulary (lower-casing, as
    /// bert-base-uncased), anything else a `tokenizer.json`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if path.extension().is_some_and(|e| e == "txt") {
            Self::from_vocab_txt(path, true)
        } else {
            Self::from_file(path)
        }
    }

    /// The BERT pipeline (normalizer, pre-tokenizer, WordPiece decoder) around a WordPiece
    /// model; the `[CLS] A [SEP] B [SEP]` post-processor is set once the vocabulary is known.
    fn bert_pipeline(model: WordPiece, lowercase: bool) -> Result<Self> {
        let mut inner = tokenizers::Tokenizer::new(model);
        inner
            .with_normalizer(Some(BertNormalizer::new(true, true, None, lowercase)))
            .map_err(tok_err)?;
        inner.with_pre_tokenizer(Some(BertPreTokenizer));
        inner.with_decoder(Some(WordPieceDecoder::new("##".into(), true)));
        Self::from_inner(inner)
    }

    fn set_bert_post_processor(&mut self) -> Result<()> {
        let cls = self.require("[CLS]")?;
        let sep = self.require("[SEP]")?;
        self.inner.with_post_processor(Some(BertProcessing::new(
            ("[SEP]".into(), sep),
            ("[CLS]".into(), cls),
        )));
        Ok(())
    }

    /// Builds a BERT WordPiece tokenizer from a `vocab.txt` (one piece per line, id = line - 1).
    /// `lowercase` lower-cases and strips accents (uncased models).
    pub fn from_vocab_txt(path: impl AsRef<Path>, lowercase: bool) -> Result<Self> {
        let path = path.as_ref();
        let vocab = WordPiece::read_file(&path.to_string_lossy())
            .map_err(|e| tok_err(format!("{}: {e}", path.display())))?;
        if vocab.is_empty() {
            return Err(CorpusError::Empty {
                path: path.to_path_buf(),
            });
        }
        let model = WordPiece::builder()
            .vocab(vocab)
            .unk_token("[UNK]".into())
            .build()
            .map_err(tok_err)?;
        let mut t = Self::bert_pipeline(model, lowercase)?;
        t.special_tokens()?;
        t.set_bert_post_processor()?;
        Ok(t)
    }

    /// Trains a BERT-style WordPiece vocabulary of (at most) `vocab_size` pieces on `texts`.
    /// The five special tokens get ids 0..5 in the order of [`BERT_SPECIAL_TOKENS`].
    ///
    /// Deterministic: the same texts give the same vocabulary, ids included. The `tokenizers`
    /// trainer alone does not: it numbers each continuation piece of one character (`##e`) the
    /// first time it meets it while iterating a randomly seeded hash map of the words, and
    /// breaks ties between merges of equal count by those numbers (huggingface/tokenizers
    /// issue 1794). Here every such piece of the texts is numbered beforehand, in sorted order
    /// right after the special tokens, so the trainer finds them all numbered; they are then
    /// ordinary pieces of the vocabulary, not special tokens.
    pub fn train_wordpiece<I, S>(texts: I, vocab_size: usize, lowercase: bool) -> Result<Self>
    where
        I: Iterator<Item = S> + Send,
        S: AsRef<str> + Send + Sync,
    {
        if vocab_size <= BERT_SPECIAL_TOKENS.len() {
            return Err(CorpusError::InvalidArgument(format!(
                "vocab_size {vocab_size} leaves no room beside the 5 special tokens"
            )));
        }
        let texts: Vec<S> = texts.collect();
        let mut t = Self::bert_pipeline(WordPiece::default(), lowercase)?;
        let pieces = t.continuation_chars(&texts)?;
        let numbered = BERT_SPECIAL_TOKENS
            .iter()
            .map(|s| s.to_string())
            .chain(pieces.iter().map(|c| format!("##{c}")));
        let trainer = WordPieceTrainer::builder()
            .vocab_size(vocab_size)
            .show_progress(false)
            .special_tokens(numbered.map(|s| AddedToken::from(s, true)).collect())
            .build();
        let mut trainer = tokenizers::models::TrainerWrapper::from(trainer);
        t.inner.train(&mut trainer, texts.iter()).map_err(tok_err)?;
        t.keep_only_bert_special_tokens()?;
        if t.vocab_size() <= BERT_SPECIAL_TOKENS.len() + pieces.len() {
            return Err(CorpusError::NotEnoughData(
                "the training texts produced no word pieces".into(),
            ));
        }
        t.set_bert_post_processor()?;
        t.special_tokens()?;
        Ok(t)
    }

    /// The characters that stand after the first character of a word of `texts` once
    /// normalised and pre-tokenised as the trainer sees them: those of the `##c` pieces.
    fn continuation_chars<S: AsRef<str>>(&self, texts: &[S]) -> Result<BTreeSet<char>> {
        let mut chars = BTreeSet::new();
        for text in texts {
            let mut normalized = NormalizedString::from(text.as_ref());
            if let Some(n) = self.inner.get_normalizer() {
                n.normalize(&mut normalized).map_err(tok_err)?;
            }
            let mut words = PreTokenizedString::from(normalized);
            if let Some(p) = self.inner.get_pre_tokenizer() {
                p.pre_tokenize(&mut words).map_err(tok_err)?;
            }
            for (word, _, _) in words.get_splits(OffsetReferential::Original, OffsetType::Byte) {
                chars.extend(word.chars().skip(1));
            }
        }
        Ok(chars)
    }

    /// Drops every added token but the five BERT special tokens (the `##c` pieces numbered
    /// for training stay in the model's vocabulary as ordinary pieces).
    fn keep_only_bert_special_tokens(&mut self) -> Result<()> {
        let mut json = serde_json::to_value(&self.inner).map_err(|e| tok_err(e.to_string()))?;
        if let Some(added) = json
            .get_mut("added_tokens")
            .and_then(serde_json::Value::as_array_mut)
        {
            added.retain(|a| {
                a.get("content")
                    .and_then(serde_json::Value::as_str)
                    .is_some_and(|c| BERT_SPECIAL_TOKENS.contains(&c))
            });
        }
        self.inner = serde_json::from_value(json).map_err(|e| tok_err(e.to_string()))?;
        Ok(())
    }

    /// Saves as a `tokenizer.json` (with a model `"type"`).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        self.inner
            .save(path, false)
            .map_err(|e| tok_err(format!("{}: {e}", path.display())))
    }

    /// The wrapped `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Id of a token string, if it is in the vocabulary (added tokens included).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Token string of an id.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    fn require(&self, token: &str) -> Result<u32> {
        self.token_to_id(token)
            .ok_or_else(|| CorpusError::MissingSpecialToken(token.to_string()))
    }

    /// The ids of `[PAD] [UNK] [CLS] [SEP] [MASK]`; [`CorpusError::MissingSpecialToken`] names
    /// the first one missing (e.g. GPT-2 has none of them).
    pub fn special_tokens(&self) -> Result<SpecialTokens> {
        Ok(SpecialTokens {
            pad: self.require("[PAD]")?,
            unk: self.require("[UNK]")?,
            cls: self.require("[CLS]")?,
            sep: self.require("[SEP]")?,
            mask: self.require("[MASK]")?,
        })
    }

    /// Vocabulary size, added tokens included (ids are `0..vocab_size`).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Vocabulary size rounded up to a multiple of `multiple_of` (models pad their embedding
    /// to a multiple of 8); `multiple_of` 0 or 1 leaves it as is.
    pub fn padded_vocab_size(&self, multiple_of: usize) -> usize {
        let v = self.vocab_size();
        if multiple_of <= 1 {
            v
        } else {
            v.div_ceil(multiple_of) * multiple_of
        }
    }

    /// Encodes one text; `add_special_tokens` adds what the post-processor adds (`[CLS] … [SEP]`
    /// for BERT).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Encoded> {
        self.inner
            .encode(text, add_special_tokens)
            .map(Encoded::from_encoding)
            .map_err(tok_err)
    }

    /// Encodes many texts in parallel (rayon inside `tokenizers`).
    pub fn encode_batch<S: AsRef<str>>(
        &self,
        texts: &[S],
        add_special_tokens: bool,
    ) -> Result<Vec<Encoded>> {
        let inputs: Vec<&str> = texts.iter().map(|s| s.as_ref()).collect();
        self.inner
            .encode_batch(inputs, add_special_tokens)
            .map(|v| v.into_iter().map(Encoded::from_encoding).collect())
            .map_err(tok_err)
    }

    /// Ids only, for many texts in parallel, without offsets (the fast path for counting).
    pub fn encode_ids_batch<S: AsRef<str>>(
        &self,
        texts: &[S],
        add_special_tokens: bool,
    ) -> Result<Vec<Vec<u32>>> {
        let inputs: Vec<&str> = texts.iter().map(|s| s.as_ref()).collect();
        self.inner
            .encode_batch_fast(inputs, add_special_tokens)
            .map(|v| v.into_iter().map(|e| e.get_ids().to_vec()).collect())
            .map_err(tok_err)
    }

    /// Id of the first piece of `word` (no special tokens); `None` when it yields no piece.
    /// An unknown word gives the `[UNK]` id.
    pub fn first_piece(&self, word: &str) -> Option<u32> {
        self.inner
            .encode_fast(word, false)
            .ok()
            .and_then(|e| e.get_ids().first().copied())
    }

    /// Does this tokenizer never let tokens cross an ASCII space, tab or line break, with each
    /// space-separated chunk tokenized independently of its neighbours?
    ///
    /// True for BERT-style pipelines (no normalizer or `BertNormalizer`, a `BertPreTokenizer`
    /// / `Whitespace` / `WhitespaceSplit` pre-tokenizer, a WordPiece or WordLevel model, no added
    /// token containing whitespace): then a text's ids are the concatenation of its chunks' ids,
    /// which lets counting tokenize each distinct chunk once. False for byte-level BPE (GPT-2),
    /// whose tokens carry the leading space.
    pub fn is_space_separable(&self) -> bool {
        fn type_of<T: serde::Serialize>(x: &T) -> Option<String> {
            let v = serde_json::to_value(x).ok()?;
            v.get("type")?.as_str().map(str::to_string)
        }
        let inner = &self.inner;
        let normalizer_ok = inner
            .get_normalizer()
            .is_none_or(|n| type_of(n).as_deref() == Some("BertNormalizer"));
        let pre_ok = inner.get_pre_tokenizer().is_some_and(|p| {
            matches!(
                type_of(p).as_deref(),
                Some("BertPreTokenizer" | "Whitespace" | "WhitespaceSplit")
            )
        });
        let model_ok = matches!(
            type_of(inner.get_model()).as_deref(),
            Some("WordPiece" | "WordLevel")
        );
        let added_ok = inner
            .get_added_tokens_decoder()
            .values()
            .all(|t| !t.content.chars().any(char::is_whitespace));
        normalizer_ok && pre_ok && model_ok && added_ok
    }

    /// Ids of many texts (no special tokens), equal to [`Tokenizer::encode_ids_batch`]'s; when
    /// the tokenizer [is space separable](Tokenizer::is_space_separable), each distinct
    /// space-separated chunk is tokenized once (in parallel) and remembered in `memo`.
    pub fn encode_ids_memo<S: AsRef<str>>(
        &self,
        texts: &[S],
        memo: &mut ChunkMemo,
    ) -> Result<Vec<Vec<u32>>> {
        if !self.is_space_separable() {
            return self.encode_ids_batch(texts, false);
        }
        if memo.map.len() > memo.capacity {
            memo.map.clear();
        }
        let mut missing: Vec<&str> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for t in texts {
            for c in space_chunks(t.as_ref()) {
                if !memo.map.contains_key(c) && seen.insert(c) {
                    missing.push(c);
                }
            }
        }
        for (c, ids) in missing.iter().zip(self.encode_ids_batch(&missing, false)?) {
            memo.map.insert(c.to_string(), ids);
        }
        Ok(texts
            .iter()
            .map(|t| {
                space_chunks(t.as_ref())
                    .flat_map(|c| memo.map[c].iter().copied())
                    .collect()
            })
            .collect())
    }

    /// Decodes ids to text (the model's decoder; `skip_special_tokens` drops specials).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner.decode(ids, skip_special_tokens).map_err(tok_err)
    }
}
