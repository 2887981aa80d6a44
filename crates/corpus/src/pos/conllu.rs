//! A streaming CoNLL-U reader.
//!
//! [`ConlluReader`] gives the words (FORM, column 2) and UPOS (column 4) of every sentence;
//! [`ConlluTreeReader`] also gives the dependency tree, HEAD and DEPREL (columns 7 and 8), and
//! checks it (every head inside its sentence, one root, no cycle). Comment lines (`# ...`),
//! multiword-token ranges (`1-2`) and empty nodes (`1.1`) are skipped; a blank line ends a
//! sentence. Malformed lines give [`CorpusError::Parse`] with the file and the 1-based line
//! number (for a bad head: the line of the word whose head it is).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::{ParsedSentence, TaggedSentence, Upos};
use crate::error::{CorpusError, Result};

/// The line-level parser both readers share; `trees` says whether HEAD and DEPREL are read.
struct Lines<R> {
    reader: R,
    path: PathBuf,
    line_no: usize,
    buf: Vec<u8>,
    done: bool,
}

impl<R: BufRead> Lines<R> {
    fn new(reader: R, path: PathBuf) -> Self {
        Self {
            reader,
            path,
            line_no: 0,
            buf: Vec::new(),
            done: false,
        }
    }

    fn error_at(&self, line: usize, message: impl Into<String>) -> CorpusError {
        CorpusError::Parse {
            path: self.path.clone(),
            line,
            message: message.into(),
        }
    }

    fn parse_error(&self, message: impl Into<String>) -> CorpusError {
        self.error_at(self.line_no, message)
    }

    /// Reads the next sentence, `Ok(None)` at the end of the stream. Without `trees`, `heads`
    /// and `deprels` stay empty and columns 7 and 8 are not looked at.
    fn next_sentence(&mut self, trees: bool) -> Result<Option<ParsedSentence>> {
        let mut sentence = ParsedSentence::default();
        // The line of each word, to name it when its head turns out to be bad.
        let mut lines = Vec::new();
        loop {
            self.buf.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| CorpusError::io(&self.path, e))?;
            if n == 0 {
                // End of stream: a last sentence without a trailing blank line still counts.
                if sentence.is_empty() {
                    return Ok(None);
                }
                return self.finish(sentence, &lines, trees).map(Some);
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
                return self.finish(sentence, &lines, trees).map(Some);
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
                // Multiword-token ranges and empty nodes are not words of the basic tree.
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
            if trees {
                let head: usize = cols[6].parse().map_err(|_| {
                    self.parse_error(format!("malformed HEAD {:?} of word {id}", cols[6]))
                })?;
                if head == id {
                    return Err(self.parse_error(format!("word {id} is its own HEAD")));
                }
                if cols[7].is_empty() || cols[7] == "_" {
                    return Err(self.parse_error(format!("missing DEPREL of word {id}")));
                }
                sentence.heads.push(head);
                sentence.deprels.push(cols[7].to_string());
            }
            sentence.words.push(form.to_string());
            sentence.tags.push(tag);
            lines.push(self.line_no);
        }
    }

    /// Checks the tree of a complete sentence: heads inside it, exactly one root, no cycle.
    fn finish(&self, s: ParsedSentence, lines: &[usize], trees: bool) -> Result<ParsedSentence> {
        if !trees {
            return Ok(s);
        }
        let n = s.len();
        for (i, &h) in s.heads.iter().enumerate() {
            if h > n {
                return Err(self.error_at(
                    lines[i],
                    format!(
                        "HEAD {h} of word {} points outside its sentence of {n} words",
                        i + 1
                    ),
                ));
            }
        }
        let roots: Vec<usize> = (0..n).filter(|&i| s.heads[i] == 0).collect();
        if roots.len() != 1 {
            return Err(self.error_at(
                lines[roots.get(1).copied().unwrap_or(0)],
                format!("sentence has {} roots (HEAD 0), expected 1", roots.len()),
            ));
        }
        for (start, &line) in lines.iter().enumerate() {
            // With one root and heads in range, a walk of more than n steps is a cycle.
            let (mut w, mut steps) = (start + 1, 0);
            while w != 0 {
                w = s.heads[w - 1];
                steps += 1;
                if steps > n {
                    return Err(self.error_at(
                        line,
                        format!("the heads from word {} form a cycle", start + 1),
                    ));
                }
            }
        }
        Ok(s)
    }

    fn next_item(&mut self, trees: bool) -> Option<Result<ParsedSentence>> {
        if self.done {
            return None;
        }
        match self.next_sentence(trees) {
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

fn open(path: &Path) -> Result<BufReader<File>> {
    let file = File::open(path).map_err(|e| CorpusError::io(path, e))?;
    Ok(BufReader::new(file))
}

/// Iterator over the sentences (words and UPOS) of a CoNLL-U stream; it holds one sentence in
/// memory at a time. HEAD and DEPREL are not read: see [`ConlluTreeReader`].
pub struct ConlluReader<R> {
    lines: Lines<R>,
}

impl ConlluReader<BufReader<File>> {
    /// Opens a CoNLL-U file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        Ok(Self::new(open(path)?, path))
    }
}

impl<R: BufRead> ConlluReader<R> {
    /// Reads from any buffered reader; `path` is only used to name the source in errors.
    pub fn new(reader: R, path: impl Into<PathBuf>) -> Self {
        Self {
            lines: Lines::new(reader, path.into()),
        }
    }
}

impl<R: BufRead> Iterator for ConlluReader<R> {
    type Item = Result<TaggedSentence>;

    fn next(&mut self) -> Option<Self::Item> {
        self.lines
            .next_item(false)
            .map(|r| r.map(ParsedSentence::into_tagged))
    }
}

/// Iterator over the sentences of a CoNLL-U stream with their dependency trees (HEAD and
/// DEPREL of every word, checked); one sentence in memory at a time.
pub struct ConlluTreeReader<R> {
    lines: Lines<R>,
}

impl ConlluTreeReader<BufReader<File>> {
    /// Opens a CoNLL-U file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        Ok(Self::new(open(path)?, path))
    }
}

impl<R: BufRead> ConlluTreeReader<R> {
    /// Reads from any buffered reader; `path` is only used to name the source in errors.
    pub fn new(reader: R, path: impl Into<PathBuf>) -> Self {
        Self {
            lines: Lines::new(reader, path.into()),
        }
    }
}

impl<R: BufRead> Iterator for ConlluTreeReader<R> {
    type Item = Result<ParsedSentence>;

    fn next(&mut self) -> Option<Self::Item> {
        self.lines.next_item(true)
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

/// Reads every sentence of a CoNLL-U file with its dependency tree; an empty file gives
/// [`CorpusError::Empty`].
pub fn read_conllu_trees(path: impl AsRef<Path>) -> Result<Vec<ParsedSentence>> {
    let path = path.as_ref();
    let sentences = ConlluTreeReader::open(path)?.collect::<Result<Vec<_>>>()?;
    if sentences.is_empty() {
        return Err(CorpusError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(sentences)
}
