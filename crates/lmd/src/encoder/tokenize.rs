//! Each model's own tokenizer: a Hugging Face `tokenizer.json`, the older vocabulary files
//! (`vocab.txt` WordPiece, `vocab.json` + `merges.txt` byte-level BPE), or llama2.c's `tok*.bin`.
//! Every encoding adds the model's special tokens and is truncated to at most T ids.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tokenizers::models::bpe::BPE;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::processors::roberta::RobertaProcessing;
use tokenizers::{Tokenizer, TruncationParams};

use crate::error::{LmdError, Result};

/// A model's tokenizer, with the file it came from (named in errors).
pub struct TextTokenizer {
    path: PathBuf,
    kind: Kind,
}

enum Kind {
    Hf(Box<Tokenizer>),
    Llama2c(Llama2cVocab),
}

fn tok_err(path: &Path, message: impl std::fmt::Display) -> LmdError {
    LmdError::Tokenizer {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

impl TextTokenizer {
    /// Loads the tokenizer of a Hugging Face model folder: `tokenizer.json`, else `vocab.txt`
    /// (BERT WordPiece; lower-cased unless `tokenizer_config.json` says `do_lower_case: false`),
    /// else `vocab.json` + `merges.txt` (byte-level BPE; RoBERTa's `<s> … </s>` when `roberta_style`,
    /// `[CLS] … [SEP]` when the vocabulary has them, as DeBERTa v1).
    pub fn from_hf_dir(dir: &Path, roberta_style: bool) -> Result<Self> {
        let json = dir.join("tokenizer.json");
        let vocab_txt = dir.join("vocab.txt");
        let vocab_json = dir.join("vocab.json");
        let tok = if json.is_file() {
            let t = Tokenizer::from_file(&json).map_err(|e| tok_err(&json, e))?;
            (json, t)
        } else if vocab_txt.is_file() {
            (vocab_txt.clone(), wordpiece(dir, &vocab_txt)?)
        } else if vocab_json.is_file() {
            (
                vocab_json.clone(),
                byte_bpe(dir, &vocab_json, roberta_style)?,
            )
        } else {
            return Err(tok_err(
                dir,
                "no tokenizer.json, vocab.txt or vocab.json + merges.txt",
            ));
        };
        let (path, mut t) = tok;
        // Padding is ours (by length bucket); truncation is set per call.
        t.with_padding(None);
        Ok(Self {
            path,
            kind: Kind::Hf(Box::new(t)),
        })
    }

    /// Loads a llama2.c tokenizer (`tok*.bin`) for a model of `vocab_size` ids.
    pub fn from_llama2c(path: &Path, vocab_size: usize) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|source| LmdError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let vocab = Llama2cVocab::parse(&bytes, vocab_size).map_err(|m| tok_err(path, m))?;
        Ok(Self {
            path: path.to_path_buf(),
            kind: Kind::Llama2c(vocab),
        })
    }

    /// The file this tokenizer was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of ids the tokenizer can emit (added tokens included).
    pub fn vocab_size(&self) -> usize {
        match &self.kind {
            Kind::Hf(t) => t.get_vocab_size(true),
            Kind::Llama2c(v) => v.pieces.len(),
        }
    }

    /// Largest id the tokenizer can emit plus one (added tokens may sit above the base vocabulary).
    pub fn id_bound(&self) -> usize {
        match &self.kind {
            Kind::Hf(t) => t
                .get_vocab(true)
                .values()
                .map(|&i| i as usize + 1)
                .max()
                .unwrap_or(0),
            Kind::Llama2c(v) => v.pieces.len(),
        }
    }

    /// Id of a token string, if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        match &self.kind {
            Kind::Hf(t) => t.token_to_id(token),
            Kind::Llama2c(v) => v.ids.get(token.as_bytes()).copied(),
        }
    }

    /// Encodes texts with the model's special tokens, each truncated to at most `t` ids.
    pub fn encode_batch(&self, texts: &[&str], t: usize) -> Result<Vec<Vec<u32>>> {
        if t == 0 {
            return Err(LmdError::InvalidArgument(
                "T must be at least 1 token".into(),
            ));
        }
        match &self.kind {
            Kind::Hf(tok) => {
                let mut tok = tok.as_ref().clone();
                tok.with_truncation(Some(TruncationParams {
                    max_length: t,
                    ..Default::default()
                }))
                .map_err(|e| tok_err(&self.path, e))?;
                let enc = tok
                    .encode_batch(texts.to_vec(), true)
                    .map_err(|e| tok_err(&self.path, e))?;
                Ok(enc.into_iter().map(|e| e.get_ids().to_vec()).collect())
            }
            Kind::Llama2c(v) => Ok(texts
                .iter()
                .map(|s| {
                    let mut ids = v.encode(s);
                    ids.truncate(t);
                    ids
                })
                .collect()),
        }
    }
}

/// `do_lower_case` from `tokenizer_config.json` (default true, as BERT uncased).
fn lower_case(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("tokenizer_config.json"))
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .and_then(|v| v.get("do_lower_case").and_then(|b| b.as_bool()))
        .unwrap_or(true)
}

fn wordpiece(dir: &Path, vocab: &Path) -> Result<Tokenizer> {
    let path_str = vocab.to_string_lossy().to_string();
    let wp = WordPiece::from_file(&path_str)
        .unk_token("[UNK]".into())
        .build()
        .map_err(|e| tok_err(vocab, e))?;
    let mut t = Tokenizer::new(wp);
    let lower = lower_case(dir);
    t.with_normalizer(Some(BertNormalizer::new(true, true, Some(lower), lower)))
        .map_err(|e| tok_err(vocab, e))?;
    t.with_pre_tokenizer(Some(BertPreTokenizer));
    let id = |s: &str| {
        t.token_to_id(s)
            .ok_or_else(|| tok_err(vocab, format!("vocabulary lacks {s}")))
    };
    let (sep, cls) = (id("[SEP]")?, id("[CLS]")?);
    t.with_post_processor(Some(BertProcessing::new(
        ("[SEP]".into(), sep),
        ("[CLS]".into(), cls),
    )));
    Ok(t)
}

fn byte_bpe(dir: &Path, vocab: &Path, roberta_style: bool) -> Result<Tokenizer> {
    let merges = dir.join("merges.txt");
    let bpe = BPE::from_file(&vocab.to_string_lossy(), &merges.to_string_lossy())
        .build()
        .map_err(|e| tok_err(vocab, e))?;
    let mut t = Tokenizer::new(bpe);
    t.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    t.with_decoder(Some(ByteLevel::default()));
    if roberta_style {
        let id = |s: &str| {
            t.token_to_id(s)
                .ok_or_else(|| tok_err(vocab, format!("vocabulary lacks {s}")))
        };
        let (sep, cls) = (id("</s>")?, id("<s>")?);
        t.with_post_processor(Some(RobertaProcessing::new(
            ("</s>".into(), sep),
            ("<s>".into(), cls),
        )));
    } else if let (Some(cls), Some(sep)) = (t.token_to_id("[CLS]"), t.token_to_id("[SEP]")) {
        // DeBERTa (v1) wraps its GPT-2 BPE pieces in [CLS] … [SEP].
        t.with_post_processor(Some(BertProcessing::new(
            ("[SEP]".into(), sep),
            ("[CLS]".into(), cls),
        )));
    }
    Ok(t)
}

/// The ids llama2.c's byte fallback reaches: 3 special tokens, then one id per byte.
const BYTE_FALLBACK_IDS: usize = 3 + 256;

/// llama2.c's tokenizer: byte strings with merge scores; BOS = 1, a dummy leading space,
/// code points looked up whole else as bytes (id = byte + 3), then greedy best-score merges.
struct Llama2cVocab {
    pieces: Vec<Vec<u8>>,
    scores: Vec<f32>,
    ids: HashMap<Vec<u8>, u32>,
}

impl Llama2cVocab {
    fn parse(bytes: &[u8], vocab_size: usize) -> std::result::Result<Self, String> {
        // Byte fallback gives ids up to 255 + 3: a smaller vocabulary cannot hold them.
        if vocab_size < BYTE_FALLBACK_IDS {
            return Err(format!(
                "vocab_size {vocab_size} is below the {BYTE_FALLBACK_IDS} ids of llama2.c's \
                 byte fallback (3 specials + 256 bytes)"
            ));
        }
        let mut pos = 0usize;
        let mut take = |n: usize| -> std::result::Result<&[u8], String> {
            let s = bytes
                .get(pos..pos + n)
                .ok_or_else(|| format!("truncated at byte {pos}"))?;
            pos += n;
            Ok(s)
        };
        let _max_len = take(4)?;
        let mut pieces = Vec::with_capacity(vocab_size);
        let mut scores = Vec::with_capacity(vocab_size);
        for _ in 0..vocab_size {
            let score = f32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
            let len = i32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
            let len = usize::try_from(len).map_err(|_| format!("negative piece length {len}"))?;
            pieces.push(take(len)?.to_vec());
            scores.push(score);
        }
        let ids = pieces
            .iter()
            .enumerate()
            .map(|(i, p)| (p.clone(), i as u32))
            .collect();
        Ok(Self {
            pieces,
            scores,
            ids,
        })
    }

    fn encode(&self, text: &str) -> Vec<u32> {
        let mut toks: Vec<u32> = Vec::with_capacity(text.len() + 2);
        if !text.is_empty() {
            if let Some(&sp) = self.ids.get(b" ".as_slice()) {
                toks.push(sp);
            }
        }
        let mut buf = [0u8; 4];
        for c in text.chars() {
            let s = c.encode_utf8(&mut buf).as_bytes();
            match self.ids.get(s) {
                Some(&id) => toks.push(id),
                None => toks.extend(s.iter().map(|&b| b as u32 + 3)),
            }
        }
        // Greedy merges, highest score first (ties: leftmost), as llama2.c's `encode`. The score
        // of every adjacent pair is cached and only the merged pair's neighbours are looked up
        // again, so a merge costs one scan instead of one hash lookup per pair.
        let mut buf = Vec::new();
        let mut pair = |a: u32, b: u32| -> Option<(f32, u32)> {
            buf.clear();
            buf.extend_from_slice(&self.pieces[a as usize]);
            buf.extend_from_slice(&self.pieces[b as usize]);
            self.ids
                .get(buf.as_slice())
                .map(|&id| (self.scores[id as usize], id))
        };
        let mut pairs: Vec<Option<(f32, u32)>> =
            toks.windows(2).map(|w| pair(w[0], w[1])).collect();
        loop {
            let mut best: Option<(f32, usize, u32)> = None;
            for (i, p) in pairs.iter().enumerate() {
                if let Some((sc, id)) = *p {
                    if best.is_none_or(|(b, _, _)| sc > b) {
                        best = Some((sc, i, id));
                    }
                }
            }
            let Some((_, i, id)) = best else { break };
            toks[i] = id;
            toks.remove(i + 1);
            pairs.remove(i);
            if i > 0 {
                pairs[i - 1] = pair(toks[i - 1], toks[i]);
            }
            if i + 1 < toks.len() {
                pairs[i] = pair(toks[i], toks[i + 1]);
            }
        }
        let mut out = Vec::with_capacity(toks.len() + 1);
        out.push(1); // BOS
        out.extend(toks);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A llama2.c tokenizer file of `n` one-byte pieces.
    fn vocab_file(n: usize) -> Vec<u8> {
        let mut b = 1i32.to_le_bytes().to_vec();
        for i in 0..n {
            b.extend_from_slice(&0f32.to_le_bytes());
            b.extend_from_slice(&1i32.to_le_bytes());
            b.push(i as u8);
        }
        b
    }

    #[test]
    fn a_vocabulary_too_small_for_the_byte_fallback_is_refused() {
        // 32 pieces: a character outside them would fall back to id byte + 3, up to 258.
        let e = Llama2cVocab::parse(&vocab_file(32), 32).err().unwrap();
        assert!(e.contains("byte fallback"), "{e}");
        assert!(Llama2cVocab::parse(&vocab_file(259), 259).is_ok());
    }
}
