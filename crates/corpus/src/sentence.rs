//! Rule-based sentence splitting for BERT-style windows.
//!
//! Works on ordinary prose (`"He left. She stayed."`) and on WikiText's tokenized style, where
//! punctuation is a separate token (`"He left . She stayed ."`, `@-@`, `@.@`, `<unk>`). A line
//! break always ends a sentence. A `.` ends a sentence unless it belongs to a known
//! abbreviation (`Mr.`, `e.g.`, `U.S.`, also tokenized as `Mr .`), an initial (`J. R.`), or is
//! followed by a word starting in lower case; decimals (`3.14`, `3 @.@ 14`) never split.

use std::collections::HashSet;

/// Abbreviations (lower case, without the final `.`) after which a `.` does not end a sentence.
const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "ft", "gen", "col", "lt", "capt",
    "sgt", "cpt", "maj", "adm", "gov", "sen", "rep", "rev", "hon", "pres", "vs", "etc", "e.g",
    "i.e", "cf", "al", "approx", "ca", "c", "fig", "figs", "no", "nos", "vol", "vols", "pp", "p",
    "ed", "eds", "inc", "ltd", "co", "corp", "jan", "feb", "mar", "apr", "jun", "jul", "aug",
    "sep", "sept", "oct", "nov", "dec", "lit", "u.s", "u.k", "u.n", "a.m", "p.m", "b.c", "a.d",
    "ph.d", "d.c", "n.y",
];

/// Closing characters that may follow a sentence-final mark (`."`, `.)`).
fn is_closer(c: char) -> bool {
    matches!(c, '"' | '\'' | ')' | ']' | '}' | '”' | '’' | '»')
}

/// A sentence splitter with a configurable abbreviation list.
#[derive(Debug, Clone)]
pub struct SentenceSplitter {
    abbreviations: HashSet<String>,
}

impl Default for SentenceSplitter {
    fn default() -> Self {
        Self {
            abbreviations: ABBREVIATIONS.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// A whitespace-separated token of the text with its byte span.
#[derive(Debug, Clone, Copy)]
struct Tok<'a> {
    text: &'a str,
    start: usize,
    end: usize,
    /// A line break separates this token from the next one.
    newline_after: bool,
}

fn tokens(text: &str) -> Vec<Tok<'_>> {
    let mut out: Vec<Tok<'_>> = Vec::new();
    let mut start: Option<usize> = None;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if let Some(s) = start.take() {
                out.push(Tok {
                    text: &text[s..i],
                    start: s,
                    end: i,
                    newline_after: false,
                });
            }
            if c == '\n' {
                if let Some(last) = out.last_mut() {
                    last.newline_after = true;
                }
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push(Tok {
            text: &text[s..],
            start: s,
            end: text.len(),
            newline_after: false,
        });
    }
    out
}

impl SentenceSplitter {
    /// A splitter with the default abbreviation list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds abbreviations (given with or without the final `.`, any case).
    pub fn with_abbreviations<I, S>(mut self, extra: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for a in extra {
            let a = a.as_ref().trim_end_matches('.').to_lowercase();
            self.abbreviations.insert(a);
        }
        self
    }

    /// Is `word` (without its final `.`) an abbreviation or an initial?
    fn is_abbreviation(&self, word: &str) -> bool {
        let w = word.trim_start_matches(|c: char| !c.is_alphanumeric());
        if w.is_empty() {
            return false;
        }
        let mut chars = w.chars();
        let first = chars.next().expect("non-empty");
        // A single capital letter is an initial ("J. R. R. Tolkien").
        if chars.next().is_none() && first.is_uppercase() {
            return true;
        }
        self.abbreviations.contains(&w.to_lowercase())
    }

    /// Does a sentence end after token `i`?
    fn ends_sentence(&self, toks: &[Tok<'_>], i: usize) -> bool {
        let tok = toks[i];
        if tok.newline_after || i + 1 == toks.len() {
            return true;
        }
        let core = tok.text.trim_end_matches(is_closer);
        let Some(mark) = core.chars().last() else {
            return false;
        };
        if !matches!(mark, '.' | '!' | '?') {
            return false;
        }
        let next = toks[i + 1].text;
        // The next sentence must not start in lower case ("lit . valkyria", "e.g. the").
        if next.chars().next().is_some_and(|c| c.is_lowercase()) {
            return false;
        }
        if mark != '.' {
            return true;
        }
        let word = core.trim_end_matches('.');
        if word.is_empty() {
            // A detached "." (WikiText style): look at the word before it.
            return match i.checked_sub(1) {
                Some(p) if !toks[p].newline_after => !self.is_abbreviation(toks[p].text),
                _ => true,
            };
        }
        !self.is_abbreviation(word)
    }

    /// Splits `text` into sentences (trimmed slices of `text`, in order, none empty).
    pub fn split<'a>(&self, text: &'a str) -> Vec<&'a str> {
        self.split_spans(text)
            .into_iter()
            .map(|(s, e)| &text[s..e])
            .collect()
    }

    /// Byte spans `(start, end)` of the sentences of `text`.
    pub fn split_spans(&self, text: &str) -> Vec<(usize, usize)> {
        let toks = tokens(text);
        let mut out = Vec::new();
        let mut begin: Option<usize> = None;
        for i in 0..toks.len() {
            let b = *begin.get_or_insert(toks[i].start);
            if self.ends_sentence(&toks, i) {
                out.push((b, toks[i].end));
                begin = None;
            }
        }
        out
    }
}

/// Splits `text` into sentences with the default [`SentenceSplitter`].
pub fn split_sentences(text: &str) -> Vec<&str> {
    SentenceSplitter::default().split(text)
}
