//! Token frequencies: counts per id, ranks, top-N, save/load as JSON or TSV.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::error::{CorpusError, Result};
use crate::read::Document;
use crate::tokenizer::{space_chunks, Tokenizer};

/// The most token ids a count file can hold (ids are `u32`).
const MAX_VOCAB: usize = 1 << 32;

/// How often each token id occurs in a corpus.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenCounts {
    counts: Vec<u64>,
    total: u64,
}

/// What [`TokenCounts::count_documents`] saw besides the counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CountSummary {
    /// Documents read.
    pub documents: usize,
    /// Whitespace-separated words.
    pub words: u64,
    /// Tokens (no special tokens added).
    pub tokens: u64,
}

impl TokenCounts {
    /// All-zero counts for ids `0..vocab_size`.
    pub fn new(vocab_size: usize) -> Self {
        Self {
            counts: vec![0; vocab_size],
            total: 0,
        }
    }

    /// Counts from a vector of per-id counts.
    pub fn from_counts(counts: Vec<u64>) -> Self {
        let total = counts.iter().sum();
        Self { counts, total }
    }

    /// Adds the tokens of one sequence; an id beyond the current size grows the table.
    pub fn add(&mut self, ids: &[u32]) {
        self.add_weighted(ids, 1);
    }

    /// Adds the tokens of one sequence `times` times.
    pub fn add_weighted(&mut self, ids: &[u32], times: u64) {
        for &id in ids {
            let i = id as usize;
            if i >= self.counts.len() {
                self.counts.resize(i + 1, 0);
            }
            self.counts[i] += times;
        }
        self.total += ids.len() as u64 * times;
    }

    /// Adds another table's counts.
    pub fn merge(&mut self, other: &TokenCounts) {
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
    }

    /// Tokenizes documents and counts their tokens, without special tokens.
    ///
    /// When the tokenizer [is space separable](Tokenizer::is_space_separable) (BERT), every
    /// distinct space-separated chunk is tokenized once and its ids weighted by its frequency
    /// (identical counts, many times faster on natural text); otherwise each line is tokenized,
    /// in parallel batches of `chunk_lines` lines.
    pub fn count_documents<I>(
        tokenizer: &Tokenizer,
        documents: I,
        chunk_lines: usize,
    ) -> Result<(Self, CountSummary)>
    where
        I: IntoIterator<Item = Result<Document>>,
    {
        if tokenizer.is_space_separable() {
            Self::count_by_chunk(tokenizer, documents, chunk_lines)
        } else {
            Self::count_by_line(tokenizer, documents, chunk_lines)
        }
    }

    /// Counts by distinct space-separated chunk (see [`TokenCounts::count_documents`]).
    fn count_by_chunk<I>(
        tokenizer: &Tokenizer,
        documents: I,
        batch: usize,
    ) -> Result<(Self, CountSummary)>
    where
        I: IntoIterator<Item = Result<Document>>,
    {
        let mut summary = CountSummary::default();
        let mut chunks: HashMap<String, u64> = HashMap::new();
        for doc in documents {
            let doc = doc?;
            summary.documents += 1;
            summary.words += doc.text.split_whitespace().count() as u64;
            for chunk in space_chunks(&doc.text) {
                match chunks.get_mut(chunk) {
                    Some(c) => *c += 1,
                    None => {
                        chunks.insert(chunk.to_string(), 1);
                    }
                }
            }
        }
        let mut counts = Self::new(tokenizer.vocab_size());
        let distinct: Vec<(String, u64)> = chunks.into_iter().collect();
        for part in distinct.chunks(batch.max(1)) {
            let texts: Vec<&str> = part.iter().map(|(s, _)| s.as_str()).collect();
            for (ids, (_, n)) in tokenizer.encode_ids_batch(&texts, false)?.iter().zip(part) {
                counts.add_weighted(ids, *n);
            }
        }
        summary.tokens = counts.total;
        Ok((counts, summary))
    }

    /// Counts line by line (see [`TokenCounts::count_documents`]).
    fn count_by_line<I>(
        tokenizer: &Tokenizer,
        documents: I,
        chunk_lines: usize,
    ) -> Result<(Self, CountSummary)>
    where
        I: IntoIterator<Item = Result<Document>>,
    {
        let chunk_lines = chunk_lines.max(1);
        let mut counts = Self::new(tokenizer.vocab_size());
        let mut summary = CountSummary::default();
        let mut lines: Vec<String> = Vec::with_capacity(chunk_lines);
        let flush = |lines: &mut Vec<String>, counts: &mut Self| -> Result<()> {
            for ids in tokenizer.encode_ids_batch(lines, false)? {
                counts.add(&ids);
            }
            lines.clear();
            Ok(())
        };
        for doc in documents {
            let doc = doc?;
            summary.documents += 1;
            for line in doc.text.lines() {
                summary.words += line.split_whitespace().count() as u64;
                lines.push(line.to_string());
                if lines.len() == chunk_lines {
                    flush(&mut lines, &mut counts)?;
                }
            }
        }
        flush(&mut lines, &mut counts)?;
        summary.tokens = counts.total;
        Ok((counts, summary))
    }

    /// Count of one id (0 beyond the table).
    pub fn count(&self, id: u32) -> u64 {
        self.counts.get(id as usize).copied().unwrap_or(0)
    }

    /// All counts, indexed by id.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Total number of tokens counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Size of the id table.
    pub fn vocab_size(&self) -> usize {
        self.counts.len()
    }

    /// Number of ids seen at least once.
    pub fn vocab_used(&self) -> usize {
        self.counts.iter().filter(|&&c| c > 0).count()
    }

    /// Ids from most to least frequent; ties broken by the smaller id.
    pub fn ids_by_frequency(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = (0..self.counts.len() as u32).collect();
        ids.sort_by(|&a, &b| {
            self.counts[b as usize]
                .cmp(&self.counts[a as usize])
                .then(a.cmp(&b))
        });
        ids
    }

    /// Rank of every id (1 = most frequent; ties broken by id, so ranks are a permutation of
    /// `1..=vocab_size`), indexed by id.
    pub fn ranks(&self) -> Vec<u32> {
        let mut ranks = vec![0u32; self.counts.len()];
        for (r, id) in self.ids_by_frequency().into_iter().enumerate() {
            ranks[id as usize] = r as u32 + 1;
        }
        ranks
    }

    /// The `n` most frequent ids with their counts (ids never seen are left out).
    pub fn top(&self, n: usize) -> Vec<(u32, u64)> {
        self.ids_by_frequency()
            .into_iter()
            .map(|id| (id, self.counts[id as usize]))
            .take_while(|&(_, c)| c > 0)
            .take(n)
            .collect()
    }

    /// Saves as JSON (`*.json`) or as TSV (anything else): a `vocab_size<TAB>N` header line, then
    /// `id<TAB>count` for every id seen. The file is replaced whole or not at all.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        files::write_atomic_with(path, |w| {
            if is_json(path) {
                return serde_json::to_writer(w, self).map_err(std::io::Error::from);
            }
            writeln!(w, "vocab_size\t{}", self.counts.len())?;
            for (id, &c) in self.counts.iter().enumerate() {
                if c > 0 {
                    writeln!(w, "{id}\t{c}")?;
                }
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Loads what [`TokenCounts::save`] wrote; malformed content is a [`CorpusError::Parse`]
    /// naming the line.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| CorpusError::io(path, e))?;
        let parse = |line: usize, message: String| CorpusError::Parse {
            path: path.to_path_buf(),
            line,
            message,
        };
        if is_json(path) {
            let t: Self = serde_json::from_reader(BufReader::new(file))
                .map_err(|e| parse(e.line(), format!("malformed counts JSON: {e}")))?;
            let sum = t.counts.iter().try_fold(0u64, |a, &c| a.checked_add(c));
            if sum != Some(t.total) {
                return Err(parse(1, "total differs from the sum of the counts".into()));
            }
            return Ok(t);
        }
        let mut lines = BufReader::new(file).lines();
        let header = match lines.next() {
            None => {
                return Err(CorpusError::Empty {
                    path: path.to_path_buf(),
                })
            }
            Some(h) => h.map_err(|e| CorpusError::io(path, e))?,
        };
        let size = header
            .strip_prefix("vocab_size\t")
            .and_then(|n| n.trim().parse::<usize>().ok())
            .ok_or_else(|| parse(1, format!("expected `vocab_size<TAB>N`, got {header:?}")))?;
        if size > MAX_VOCAB {
            // Token ids are u32: a larger header is corrupt, and would allocate it all first.
            return Err(parse(
                1,
                format!("vocab_size {size} exceeds the 2^32 token ids"),
            ));
        }
        let mut counts = Self::new(size);
        for (i, line) in lines.enumerate() {
            let line_no = i + 2;
            let line = line.map_err(|e| CorpusError::io(path, e))?;
            if line.trim().is_empty() {
                continue;
            }
            let mut cols = line.split('\t');
            let id = cols.next().and_then(|s| s.trim().parse::<usize>().ok());
            let c = cols.next().and_then(|s| s.trim().parse::<u64>().ok());
            match (id, c, cols.next()) {
                (Some(id), Some(c), None) if id < size => {
                    let sum = counts.counts[id].checked_add(c);
                    match (sum, counts.total.checked_add(c)) {
                        (Some(a), Some(t)) => (counts.counts[id], counts.total) = (a, t),
                        _ => return Err(parse(line_no, "the counts overflow u64".into())),
                    }
                }
                (Some(id), Some(_), None) => {
                    return Err(parse(line_no, format!("id {id} >= vocab_size {size}")))
                }
                _ => {
                    return Err(parse(
                        line_no,
                        format!("expected `id<TAB>count`, got {line:?}"),
                    ))
                }
            }
        }
        Ok(counts)
    }
}

fn is_json(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json")
}
