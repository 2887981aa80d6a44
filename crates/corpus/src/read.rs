//! Streaming document readers: plain text, one document per line, the WikiText layout, a folder
//! of `.txt` files and JSONL.
//!
//! Files are read line by line (`read_until`), so only the current document is held in memory and
//! every error names the file and the 1-based line where it happened.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::error::{CorpusError, Result};

/// How a corpus file (or folder) is laid out (in JSON by its lowercase name).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Plain text; documents are separated by one or more blank lines.
    Plain,
    /// Plain text; every non-blank line is a document.
    Lines,
    /// WikiText: a ` = Title = ` line starts a document; ` = = Sub = = ` headings do not (they
    /// are dropped from the text, as is the title, which goes to [`Document::title`]).
    WikiText,
    /// A folder of `.txt` files read in sorted order; every file is one document.
    Folder,
    /// JSON Lines; every line is an object whose string field `field` holds one document.
    Jsonl {
        /// Name of the text field (usually `"text"`).
        field: String,
    },
}

impl Format {
    /// JSONL with the usual `text` field.
    pub fn jsonl() -> Self {
        Self::Jsonl {
            field: "text".into(),
        }
    }

    /// Guesses the format from a path: a folder is [`Format::Folder`], `*.jsonl` is JSONL,
    /// `*.tokens` or a path mentioning `wikitext` is WikiText, anything else is [`Format::Plain`].
    pub fn guess(path: &Path) -> Self {
        let name = path.to_string_lossy().to_lowercase();
        if path.is_dir() {
            Self::Folder
        } else if name.ends_with(".jsonl") {
            Self::jsonl()
        } else if name.ends_with(".tokens") || name.contains("wikitext") {
            Self::WikiText
        } else {
            Self::Plain
        }
    }

    /// The command-line name that [`Format::parse`] reads back.
    pub fn name(&self) -> String {
        match self {
            Self::Plain => "plain".into(),
            Self::Lines => "lines".into(),
            Self::WikiText => "wikitext".into(),
            Self::Folder => "folder".into(),
            Self::Jsonl { field } => format!("jsonl:{field}"),
        }
    }

    /// Parses a command-line name: `plain`, `lines`, `wikitext`, `folder`, `jsonl` or
    /// `jsonl:<field>`.
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "plain" => Self::Plain,
            "lines" => Self::Lines,
            "wikitext" => Self::WikiText,
            "folder" => Self::Folder,
            "jsonl" => Self::jsonl(),
            other => match other.strip_prefix("jsonl:") {
                Some(field) if !field.is_empty() => Self::Jsonl {
                    field: field.to_string(),
                },
                _ => {
                    return Err(CorpusError::InvalidArgument(format!(
                        "unknown corpus format {other:?} (plain, lines, wikitext, folder, jsonl[:field])"
                    )))
                }
            },
        })
    }
}

impl std::str::FromStr for Format {
    type Err = CorpusError;
    fn from_str(name: &str) -> Result<Self> {
        Self::parse(name)
    }
}

/// Where a document came from: its file and the 1-based line of its first text line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DocSource {
    /// The file.
    pub path: PathBuf,
    /// 1-based line number of the document's first line.
    pub line: usize,
}

impl std::fmt::Display for DocSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.path.display(), self.line)
    }
}

/// One document of a corpus.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Document {
    /// 0-based position of the document in the corpus (stable: the reading order).
    pub index: usize,
    /// Its text; lines (paragraphs) are joined with `'\n'`, surrounding whitespace trimmed.
    pub text: String,
    /// The WikiText title, when the format has one.
    pub title: Option<String>,
    /// Where it came from.
    pub source: DocSource,
}

/// Reads one file line by line, tracking the line number and checking UTF-8.
struct LineReader {
    path: PathBuf,
    reader: Box<dyn BufRead + Send>,
    line: usize,
    buf: Vec<u8>,
}

impl LineReader {
    fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| CorpusError::io(path, e))?;
        Ok(Self::new(
            path.to_path_buf(),
            Box::new(BufReader::new(file)),
        ))
    }

    fn new(path: PathBuf, reader: Box<dyn BufRead + Send>) -> Self {
        Self {
            path,
            reader,
            line: 0,
            buf: Vec::new(),
        }
    }

    /// The next line without its `\n` / `\r\n`, with its 1-based number; `None` at the end.
    fn next_line(&mut self) -> Option<Result<(usize, String)>> {
        self.buf.clear();
        match self.reader.read_until(b'\n', &mut self.buf) {
            Ok(0) => None,
            Ok(_) => {
                self.line += 1;
                while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
                    self.buf.pop();
                }
                // A UTF-8 byte-order mark is not text: it would hide a first WikiText title
                // and break a first JSONL record.
                if self.line == 1 && self.buf.starts_with(b"\xEF\xBB\xBF") {
                    self.buf.drain(..3);
                }
                let line = self.line;
                Some(match std::str::from_utf8(&self.buf) {
                    Ok(s) => Ok((line, s.to_string())),
                    Err(_) => Err(CorpusError::InvalidUtf8 {
                        path: self.path.clone(),
                        line,
                    }),
                })
            }
            Err(e) => Some(Err(CorpusError::io(&self.path, e))),
        }
    }
}

/// A WikiText title line ` = Title = ` (exactly one `=` on each side); returns the title.
fn wikitext_title(line: &str) -> Option<&str> {
    let t = line.trim();
    let inner = t.strip_prefix("= ")?.strip_suffix(" =")?;
    if inner.starts_with('=') || inner.ends_with('=') || inner.trim().is_empty() {
        return None;
    }
    Some(inner.trim())
}

/// Any WikiText heading line (title or ` = = Sub = = `).
fn is_wikitext_heading(line: &str) -> bool {
    let t = line.trim();
    t.len() >= 3 && t.starts_with("= ") && t.ends_with(" =")
}

/// A document being assembled.
#[derive(Default)]
struct Pending {
    text: String,
    title: Option<String>,
    first_line: Option<usize>,
}

impl Pending {
    fn push_line(&mut self, line_no: usize, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        if self.first_line.is_none() {
            self.first_line = Some(line_no);
        }
        if !self.text.is_empty() {
            self.text.push('\n');
        }
        self.text.push_str(line);
    }

    fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

/// A streaming iterator of the documents of a corpus.
///
/// Yields `Result<Document>`; after the first error it stops. A corpus with no document at all
/// yields one [`CorpusError::Empty`].
pub struct Documents {
    format: Format,
    root: PathBuf,
    /// Files still to open (folder format), in reverse order.
    files: Vec<PathBuf>,
    current: Option<LineReader>,
    pending: Pending,
    next_index: usize,
    done: bool,
}

impl Documents {
    /// Opens a corpus file (or folder for [`Format::Folder`]).
    pub fn open(path: impl AsRef<Path>, format: Format) -> Result<Self> {
        let path = path.as_ref();
        let mut files = Vec::new();
        let current = if format == Format::Folder {
            let entries = std::fs::read_dir(path).map_err(|e| CorpusError::io(path, e))?;
            for entry in entries {
                let p = entry.map_err(|e| CorpusError::io(path, e))?.path();
                if p.is_file() && p.extension().is_some_and(|e| e == "txt") {
                    files.push(p);
                }
            }
            files.sort();
            files.reverse();
            None
        } else {
            if path.is_dir() {
                return Err(CorpusError::InvalidArgument(format!(
                    "{} is a folder: use the folder format",
                    path.display()
                )));
            }
            Some(LineReader::open(path)?)
        };
        Ok(Self::with_reader(
            path.to_path_buf(),
            format,
            files,
            current,
        ))
    }

    /// Reads a corpus from any buffered reader; `name` is the path shown in errors and sources.
    /// [`Format::Folder`] is not available here (it needs a folder).
    pub fn from_reader(
        name: impl Into<PathBuf>,
        reader: impl BufRead + Send + 'static,
        format: Format,
    ) -> Result<Self> {
        if format == Format::Folder {
            return Err(CorpusError::InvalidArgument(
                "the folder format needs a folder path".into(),
            ));
        }
        let name = name.into();
        let current = LineReader::new(name.clone(), Box::new(reader));
        Ok(Self::with_reader(name, format, Vec::new(), Some(current)))
    }

    fn with_reader(
        root: PathBuf,
        format: Format,
        files: Vec<PathBuf>,
        current: Option<LineReader>,
    ) -> Self {
        Self {
            format,
            root,
            files,
            current,
            pending: Pending::default(),
            next_index: 0,
            done: false,
        }
    }

    /// Emits the pending document if it has text.
    fn take_pending(&mut self, path: &Path) -> Option<Document> {
        let pending = std::mem::take(&mut self.pending);
        if pending.is_empty() {
            return None;
        }
        let doc = Document {
            index: self.next_index,
            text: pending.text,
            title: pending.title,
            source: DocSource {
                path: path.to_path_buf(),
                line: pending.first_line.unwrap_or(1),
            },
        };
        self.next_index += 1;
        Some(doc)
    }

    /// Advances until a document is complete; `Ok(None)` at the end of all input.
    fn advance(&mut self) -> Result<Option<Document>> {
        loop {
            if self.current.is_none() {
                match self.files.pop() {
                    Some(p) => self.current = Some(LineReader::open(&p)?),
                    None => return Ok(None),
                }
            }
            let reader = self.current.as_mut().expect("opened above");
            let path = reader.path.clone();
            let Some(next) = reader.next_line() else {
                // End of this file: whatever is pending is a document.
                self.current = None;
                if let Some(doc) = self.take_pending(&path) {
                    return Ok(Some(doc));
                }
                continue;
            };
            let (line_no, line) = next?;
            match &self.format {
                Format::Plain => {
                    if line.trim().is_empty() {
                        if let Some(doc) = self.take_pending(&path) {
                            return Ok(Some(doc));
                        }
                    } else {
                        self.pending.push_line(line_no, &line);
                    }
                }
                Format::Lines => {
                    self.pending.push_line(line_no, &line);
                    if let Some(doc) = self.take_pending(&path) {
                        return Ok(Some(doc));
                    }
                }
                Format::Folder => self.pending.push_line(line_no, &line),
                Format::WikiText => {
                    if let Some(title) = wikitext_title(&line) {
                        let done = self.take_pending(&path);
                        self.pending.title = Some(title.to_string());
                        if done.is_some() {
                            return Ok(done);
                        }
                    } else if !is_wikitext_heading(&line) {
                        self.pending.push_line(line_no, &line);
                    }
                }
                Format::Jsonl { field } => {
                    if line.trim().is_empty() {
                        continue;
                    }
                    let text = jsonl_text(&line, field).map_err(|message| CorpusError::Parse {
                        path: path.clone(),
                        line: line_no,
                        message,
                    })?;
                    self.pending.push_line(line_no, &text);
                    if let Some(doc) = self.take_pending(&path) {
                        return Ok(Some(doc));
                    }
                }
            }
        }
    }
}

/// The string field `field` of one JSON object line.
fn jsonl_text(line: &str, field: &str) -> std::result::Result<String, String> {
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("malformed JSON: {e}"))?;
    match value.get(field) {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("field {field:?} is not a string")),
        None => Err(format!("missing field {field:?}")),
    }
}

impl Iterator for Documents {
    type Item = Result<Document>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.advance() {
            Ok(Some(doc)) => Some(Ok(doc)),
            Ok(None) => {
                self.done = true;
                (self.next_index == 0).then(|| {
                    Err(CorpusError::Empty {
                        path: self.root.clone(),
                    })
                })
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Reads every document of a corpus into memory (for small corpora and tests).
pub fn read_documents(path: impl AsRef<Path>, format: Format) -> Result<Vec<Document>> {
    Documents::open(path, format)?.collect()
}
