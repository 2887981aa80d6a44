//! A streaming CoNLL-U reader: words (FORM, column 2) and UPOS (column 4) of every sentence.
//!
//! Comment lines (`# ...`), multiword-token ranges (`1-2`) and empty nodes (`1.1`) are skipped;
//! a blank line ends a sentence. Malformed lines give [`CorpusError::Parse`] with the file and
//! the 1-based line number.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::{TaggedSentence, Upos};
use crate::error::{CorpusError, Result};

/// Iterator over the sentences of a CoNLL-U stream; it holds one sentence in memory at a time.
pub struct ConlluReader<R> {
    reader: R,
    path: PathBuf,
    line_no: usize,
    buf: Vec<u8>,
    done: bool,
}

impl ConlluReader<BufReader<File>> {
    /// Opens a CoNLL-U file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| CorpusError::io(path, e))?;
        Ok(Self::new(BufReader::new(file), path))
    }
}

impl<R: BufRead> ConlluReader<R> {
    /// Reads from any buffered reader; `path` is only used to name the source in errors.
    pub fn new(reader: R, path: impl Into<PathBuf>) -> Self {
        Self {
            reader,
            path: path.into(),
            line_no: 0,
            buf: Vec::new(),
            done: false,
        }
    }

    fn parse_error(&self, message: impl Into<String>) -> CorpusError {
        CorpusError::Parse {
            path: self.path.clone(),
            line: self.line_no,
            message: message.into(),
        }
    }

    /// Reads the next sentence, `Ok(None)` at the end of the stream.
    fn next_sentence(&mut self) -> Result<Option<TaggedSentence>> {
        let mut sentence = TaggedSentence::default();
        loop {
            self.buf.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| CorpusError::io(&self.path, e))?;
            if n == 0 {
                // End of stream: a last sentence without a trailing blank line still counts.
                return Ok((!sentence.is_empty()).then_some(sentence));
            }
            self.line_no += 1;
            let line = std::str::from_utf8(&self.buf).map_err(|_| CorpusError::InvalidUtf8 {
                path: self.path.clone(),
                line: self.line_no,
            })?;
            let line = line.trim_end_matches(['\n', '\r']);
            if line.trim().is_empty() {
                if sentence.is_empty() {
                    continue; // tolerate repeated blank lines
                }
                return Ok(Some(sentence));
            }
            if line.starts_with('#') {
                continue;
            }
            let cols: Vec<&str> = line.split('\t').collect();
            if cols.len() != 10 {
                return Err(self.parse_error(format!(
                    "expected 10 tab-separated columns, found {}",
                    cols.len()
                )));
            }
            let id = cols[0];
            if id.contains('-') || id.contains('.') {
                // Multiword-token ranges and empty nodes carry no UPOS of a surface word.
                let ok = id
                    .split(['-', '.'])
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
                if !ok {
                    return Err(self.parse_error(format!("malformed ID {id:?}")));
                }
                continue;
            }
            let id: usize = id
                .parse()
                .map_err(|_| self.parse_error(format!("malformed ID {id:?}")))?;
            if id != sentence.len() + 1 {
                return Err(self.parse_error(format!(
                    "word ID {id} out of sequence (expected {})",
                    sentence.len() + 1
                )));
            }
            let form = cols[1];
            if form.is_empty() {
                return Err(self.parse_error("empty FORM"));
            }
            let tag: Upos = cols[3]
                .parse()
                .map_err(|_| self.parse_error(format!("unknown UPOS {:?}", cols[3])))?;
            sentence.words.push(form.to_string());
            sentence.tags.push(tag);
        }
    }
}

impl<R: BufRead> Iterator for ConlluReader<R> {
    type Item = Result<TaggedSentence>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_sentence() {
            Ok(Some(s)) => Some(Ok(s)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                // After an error the stream position is inside a sentence: stop.
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Reads every sentence of a CoNLL-U file; an empty file gives [`CorpusError::Empty`].
pub fn read_conllu(path: impl AsRef<Path>) -> Result<Vec<TaggedSentence>> {
    let path = path.as_ref();
    let sentences = ConlluReader::open(path)?.collect::<Result<Vec<_>>>()?;
    if sentences.is_empty() {
        return Err(CorpusError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(sentences)
}
