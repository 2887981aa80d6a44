//! Result tables written as CSV (RFC 4180), Markdown and JSON.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::{ReportError, Result};

/// Default number of decimals printed for [`Cell::Num`] in Markdown.
pub const DEFAULT_PRECISION: usize = 4;

/// The most decimals a table prints (Rust's formatting takes precisions up to `u16::MAX`).
const MAX_PRECISION: u64 = u16::MAX as u64;

/// One cell of a [`Table`].
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// Free text.
    Text(String),
    /// A real number (printed to the table's precision in Markdown, in full in CSV and JSON).
    Num(f64),
    /// An integer (counts, sizes, seeds).
    Int(i64),
    /// No value (an empty CSV field, a blank Markdown cell, JSON `null`).
    Empty,
}

impl From<&str> for Cell {
    fn from(s: &str) -> Self {
        Cell::Text(s.to_string())
    }
}

impl From<String> for Cell {
    fn from(s: String) -> Self {
        Cell::Text(s)
    }
}

impl From<&String> for Cell {
    fn from(s: &String) -> Self {
        Cell::Text(s.clone())
    }
}

impl From<f64> for Cell {
    fn from(x: f64) -> Self {
        Cell::Num(x)
    }
}

impl From<f32> for Cell {
    fn from(x: f32) -> Self {
        Cell::Num(x as f64)
    }
}

impl From<i64> for Cell {
    fn from(x: i64) -> Self {
        Cell::Int(x)
    }
}

impl From<i32> for Cell {
    fn from(x: i32) -> Self {
        Cell::Int(x as i64)
    }
}

impl From<u32> for Cell {
    fn from(x: u32) -> Self {
        Cell::Int(x as i64)
    }
}

impl From<usize> for Cell {
    fn from(x: usize) -> Self {
        // Saturate instead of wrapping: a count above i64::MAX is not a realistic table entry.
        Cell::Int(i64::try_from(x).unwrap_or(i64::MAX))
    }
}

impl<T: Into<Cell>> From<Option<T>> for Cell {
    fn from(x: Option<T>) -> Self {
        x.map_or(Cell::Empty, Into::into)
    }
}

impl Cell {
    /// The cell as a CSV field body (before quoting): numbers in full (shortest round-trip form).
    fn raw_text(&self) -> String {
        match self {
            Cell::Text(s) => s.clone(),
            Cell::Num(x) => format_full(*x),
            Cell::Int(i) => i.to_string(),
            Cell::Empty => String::new(),
        }
    }

    /// The cell as Markdown text with `precision` decimals for reals.
    fn markdown_text(&self, precision: usize) -> String {
        match self {
            Cell::Text(s) => escape_markdown(s),
            Cell::Num(x) => format_fixed(*x, precision),
            Cell::Int(i) => i.to_string(),
            Cell::Empty => String::new(),
        }
    }

    /// The cell as JSON: NaN and infinities become `null` (JSON has no such numbers).
    fn to_json(&self) -> Value {
        match self {
            Cell::Text(s) => Value::String(s.clone()),
            Cell::Num(x) => serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number),
            Cell::Int(i) => Value::from(*i),
            Cell::Empty => Value::Null,
        }
    }

    /// The inverse of [`Cell::to_json`] (integers become [`Cell::Int`], other numbers [`Cell::Num`]).
    fn from_json(v: &Value) -> Result<Cell> {
        Ok(match v {
            Value::Null => Cell::Empty,
            Value::String(s) => Cell::Text(s.clone()),
            Value::Number(n) => match n.as_i64() {
                Some(i) if !n.is_f64() => Cell::Int(i),
                _ => Cell::Num(n.as_f64().ok_or_else(|| {
                    ReportError::invalid(format!("table cell {n} is not representable as f64"))
                })?),
            },
            other => {
                return Err(ReportError::invalid(format!(
                    "table cell must be a string, number or null, got {other}"
                )))
            }
        })
    }

    fn is_numeric(&self) -> bool {
        matches!(self, Cell::Num(_) | Cell::Int(_))
    }
}

/// Shortest text that parses back to the same f64; `NaN`, `inf`, `-inf` for non-finite values.
fn format_full(x: f64) -> String {
    if x.is_nan() {
        "NaN".to_string()
    } else {
        format!("{x}")
    }
}

/// `precision` decimals; scientific notation where fixed notation would hide the value
/// (|x| ≥ 1e6, or 0 < |x| < 10^-precision).
fn format_fixed(x: f64, precision: usize) -> String {
    if !x.is_finite() {
        return format_full(x);
    }
    let a = x.abs();
    let tiny = 10f64.powi(-(precision as i32));
    if a >= 1e6 || (a > 0.0 && a < tiny) {
        format!("{x:.precision$e}")
    } else {
        format!("{x:.precision$}")
    }
}

fn escape_markdown(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// RFC 4180: quote a field containing a comma, quote, CR or LF; double inner quotes.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A rectangular table with a header row, an optional title and note.
///
/// Rows shorter than the header are printed padded with empty cells; [`Table::write_all`]
/// refuses a table whose rows do not all have the header's length (use [`Table::try_push_row`]
/// to catch that at insertion).
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<Cell>>,
    title: Option<String>,
    note: Option<String>,
    precision: usize,
}

impl Table {
    /// An empty table with column names `header`.
    pub fn new(header: Vec<String>) -> Self {
        Table {
            header,
            rows: Vec::new(),
            title: None,
            note: None,
            precision: DEFAULT_PRECISION,
        }
    }

    /// A labelled matrix as a table: header `[corner, col_labels...]`, one row per row label
    /// with the row-major `values` (e.g. a correlation matrix of runs, `corner` = "run").
    pub fn matrix(
        corner: impl Into<String>,
        row_labels: &[String],
        col_labels: &[String],
        values: &[f64],
    ) -> Result<Table> {
        let (r, c) = (row_labels.len(), col_labels.len());
        if values.len() != r * c {
            return Err(ReportError::invalid(format!(
                "matrix values have length {}, expected {r} x {c} = {}",
                values.len(),
                r * c
            )));
        }
        let mut header = vec![corner.into()];
        header.extend(col_labels.iter().cloned());
        let mut t = Table::new(header);
        for (i, name) in row_labels.iter().enumerate() {
            let mut row = vec![Cell::Text(name.clone())];
            row.extend(values[i * c..(i + 1) * c].iter().map(|&v| Cell::Num(v)));
            t.rows.push(row);
        }
        Ok(t)
    }

    /// Set the title (a Markdown heading, the JSON `title`, not part of the CSV).
    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Set a note printed under the Markdown table and stored in the JSON `note`
    /// (e.g. "rows = target, columns = basis").
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// Decimals printed for [`Cell::Num`] in Markdown (default [`DEFAULT_PRECISION`]).
    pub fn with_precision(mut self, precision: usize) -> Self {
        self.precision = precision;
        self
    }

    /// Append a row (see the type's docs for rows of the wrong length).
    pub fn push_row(&mut self, row: Vec<Cell>) -> &mut Self {
        self.rows.push(row);
        self
    }

    /// Append a row, refusing one whose length differs from the header's.
    pub fn try_push_row(&mut self, row: Vec<Cell>) -> Result<&mut Self> {
        if row.len() != self.header.len() {
            return Err(ReportError::invalid(format!(
                "row has {} cells, header has {} columns",
                row.len(),
                self.header.len()
            )));
        }
        Ok(self.push_row(row))
    }

    /// Column names.
    pub fn header(&self) -> &[String] {
        &self.header
    }

    /// The rows, in insertion order.
    pub fn rows(&self) -> &[Vec<Cell>] {
        &self.rows
    }

    /// The title, if set.
    pub fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }

    /// The note, if set.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// Check that every row has the header's length.
    pub fn validate(&self) -> Result<()> {
        match self.rows.iter().position(|r| r.len() != self.header.len()) {
            None => Ok(()),
            Some(i) => Err(ReportError::invalid(format!(
                "row {i} has {} cells, header has {} columns",
                self.rows[i].len(),
                self.header.len()
            ))),
        }
    }

    /// Row `row` padded to the header's width (a longer row keeps its extra cells).
    fn padded(&self, row: &[Cell]) -> Vec<Cell> {
        let n = self.header.len().max(row.len());
        (0..n)
            .map(|j| row.get(j).cloned().unwrap_or(Cell::Empty))
            .collect()
    }

    /// CSV per RFC 4180 (CRLF line ends, quoted fields where needed); header first,
    /// numbers in full precision. Title and note are not part of the CSV.
    pub fn to_csv(&self) -> String {
        let mut out = String::new();
        let line = |cells: Vec<String>| cells.join(",") + "\r\n";
        out.push_str(&line(self.header.iter().map(|h| csv_field(h)).collect()));
        for row in &self.rows {
            let cells = self.padded(row);
            out.push_str(&line(
                cells.iter().map(|c| csv_field(&c.raw_text())).collect(),
            ));
        }
        out
    }

    /// A GitHub-flavoured Markdown table: `### title`, the table (numeric columns
    /// right-aligned, columns padded to equal width), then the note as a paragraph.
    pub fn to_markdown(&self) -> String {
        let ncols = self
            .rows
            .iter()
            .map(Vec::len)
            .chain(std::iter::once(self.header.len()))
            .max()
            .unwrap_or(0);
        let head: Vec<String> = (0..ncols)
            .map(|j| {
                self.header
                    .get(j)
                    .map_or(String::new(), |h| escape_markdown(h))
            })
            .collect();
        let body: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                (0..ncols)
                    .map(|j| {
                        r.get(j)
                            .map_or(String::new(), |c| c.markdown_text(self.precision))
                    })
                    .collect()
            })
            .collect();
        let layout = MarkdownColumns {
            numeric: (0..ncols).map(|j| self.is_numeric_column(j)).collect(),
            width: column_widths(&head, &body),
        };
        let mut out = String::new();
        if let Some(t) = &self.title {
            let _ = writeln!(out, "### {t}\n");
        }
        out.push_str(&layout.row(&head));
        out.push_str(&layout.rule());
        for r in &body {
            out.push_str(&layout.row(r));
        }
        if let Some(n) = &self.note {
            let _ = writeln!(out, "\n{n}");
        }
        out
    }

    /// A column is numeric when it has at least one number and no text.
    fn is_numeric_column(&self, j: usize) -> bool {
        let mut any = false;
        for c in self.rows.iter().filter_map(|r| r.get(j)) {
            match c {
                Cell::Text(_) => return false,
                c if c.is_numeric() => any = true,
                _ => {}
            }
        }
        any
    }

    /// `{"title", "note", "precision", "header": [..], "rows": [[..], ..]}`; reals in full
    /// precision, empty and non-finite cells as `null`; `precision` is the Markdown decimals.
    pub fn to_json(&self) -> Value {
        json!({
            "title": self.title,
            "note": self.note,
            "precision": self.precision,
            "header": self.header,
            "rows": self
                .rows
                .iter()
                .map(|r| Value::Array(r.iter().map(Cell::to_json).collect()))
                .collect::<Vec<_>>(),
        })
    }

    /// Read back what [`Table::to_json`] wrote (non-finite reals come back as [`Cell::Empty`]).
    pub fn from_json(v: &Value) -> Result<Table> {
        let header = v
            .get("header")
            .and_then(Value::as_array)
            .ok_or_else(|| ReportError::invalid("table JSON has no `header` array"))?
            .iter()
            .map(|h| {
                h.as_str().map(str::to_string).ok_or_else(|| {
                    ReportError::invalid("table JSON header entries must be strings")
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut t = Table::new(header);
        t.title = v.get("title").and_then(Value::as_str).map(str::to_string);
        t.note = v.get("note").and_then(Value::as_str).map(str::to_string);
        // Tables written before `precision` was saved read with the default.
        if let Some(p) = v.get("precision").filter(|p| !p.is_null()) {
            t.precision = p.as_u64().filter(|&p| p <= MAX_PRECISION).ok_or_else(|| {
                ReportError::invalid(format!(
                    "table JSON precision must be a whole number of decimals up to \
                         {MAX_PRECISION}, got {p}"
                ))
            })? as usize;
        }
        let rows = v
            .get("rows")
            .and_then(Value::as_array)
            .ok_or_else(|| ReportError::invalid("table JSON has no `rows` array"))?;
        for r in rows {
            let cells = r
                .as_array()
                .ok_or_else(|| ReportError::invalid("table JSON rows must be arrays"))?
                .iter()
                .map(Cell::from_json)
                .collect::<Result<Vec<_>>>()?;
            t.rows.push(cells);
        }
        Ok(t)
    }

    /// Write `dir/stem.csv`, `dir/stem.md` and `dir/stem.json` (creating `dir`), returning the
    /// three paths in that order. Fails on ragged rows (see [`Table::validate`]).
    pub fn write_all(&self, dir: &Path, stem: &str) -> Result<Vec<PathBuf>> {
        self.validate()?;
        if stem.is_empty() || stem.contains(['/', '\\']) {
            return Err(ReportError::invalid(format!(
                "file stem {stem:?} must be a non-empty plain file name"
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| ReportError::io(dir, e))?;
        let json = serde_json::to_string_pretty(&self.to_json())
            .map_err(|e| ReportError::invalid(format!("table not serialisable: {e}")))?;
        let outputs = [
            ("csv", self.to_csv()),
            ("md", self.to_markdown()),
            ("json", json + "\n"),
        ];
        let mut paths = Vec::with_capacity(3);
        for (ext, text) in outputs {
            let path = dir.join(format!("{stem}.{ext}"));
            files::write_atomic(&path, text.as_bytes())?;
            paths.push(path);
        }
        Ok(paths)
    }
}

/// The widest cell of each column (header included), at least 3 (a Markdown rule's `---`).
fn column_widths(head: &[String], body: &[Vec<String>]) -> Vec<usize> {
    (0..head.len())
        .map(|j| {
            body.iter()
                .map(|r| r[j].chars().count())
                .chain(std::iter::once(head[j].chars().count()))
                .max()
                .unwrap_or(0)
                .max(3)
        })
        .collect()
}

/// How a Markdown table's columns are laid out: numbers right-aligned, every column padded to
/// its width.
struct MarkdownColumns {
    numeric: Vec<bool>,
    width: Vec<usize>,
}

impl MarkdownColumns {
    /// `| a | b |` with each cell padded (numbers on the left, text on the right).
    fn row(&self, cells: &[String]) -> String {
        let mut s = String::from("|");
        for (j, c) in cells.iter().enumerate() {
            let pad = " ".repeat(self.width[j] - c.chars().count());
            let _ = match self.numeric[j] {
                true => write!(s, " {pad}{c} |"),
                false => write!(s, " {c}{pad} |"),
            };
        }
        s.push('\n');
        s
    }

    /// The rule under the header: `---:` for numeric columns (right-aligned), `---` else.
    fn rule(&self) -> String {
        let mut s = String::from("|");
        for (j, &w) in self.width.iter().enumerate() {
            let _ = match self.numeric[j] {
                true => write!(s, " {}: |", "-".repeat(w - 1)),
                false => write!(s, " {} |", "-".repeat(w)),
            };
        }
        s.push('\n');
        s
    }
}
