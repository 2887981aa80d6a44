//! The CoNLL-U reader on inline files and on UD English EWT dev.

use std::io::Cursor;
use std::path::PathBuf;

use corpus::{ConlluReader, CorpusError, TaggedSentence, Upos};

const SMALL: &str = "# newdoc id = x
# text = I can't go.
1-2\tcan't\t_\t_\t_\t_\t_\t_\t_\t_
1\tI\tI\tPRON\tPRP\t_\t3\tnsubj\t_\t_
2\tca\tcan\tAUX\tMD\t_\t3\taux\t_\t_
3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t_\t_
4\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\tSpaceAfter=No
4.1\tgone\tgo\tVERB\tVBN\t_\t_\t_\t4:conj\t_
5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_

# text = Hello world
1\tHello\thello\tINTJ\tUH\t_\t0\troot\t_\t_
2\tworld\tworld\tNOUN\tNN\t_\t1\tvocative\t_\t_";

fn read(text: &str) -> Vec<Result<TaggedSentence, CorpusError>> {
    ConlluReader::new(Cursor::new(text.as_bytes().to_vec()), "inline.conllu").collect()
}

#[test]
fn reads_words_and_tags_skipping_ranges_and_empty_nodes() {
    let sents: Vec<TaggedSentence> = read(SMALL).into_iter().map(Result::unwrap).collect();
    assert_eq!(sents.len(), 2);
    assert_eq!(sents[0].words, ["I", "ca", "n't", "go", "."]);
    use Upos::*;
    assert_eq!(sents[0].tags, [Pron, Aux, Part, Verb, Punct]);
    // The last sentence has no trailing blank line and still counts.
    assert_eq!(sents[1].words, ["Hello", "world"]);
    assert_eq!(sents[1].tags, [Intj, Noun]);
}

#[test]
fn malformed_lines_name_file_and_line() {
    let cases = [
        ("1\tdog\tdog\tNOUN\n", 1, "columns"),
        ("# c\n1\tdog\tdog\tNOUNY\tNN\t_\t0\troot\t_\t_\n", 2, "UPOS"),
        ("x\tdog\tdog\tNOUN\tNN\t_\t0\troot\t_\t_\n", 1, "ID"),
        ("1-x\tdog\tdog\tNOUN\tNN\t_\t0\troot\t_\t_\n", 1, "ID"),
        (
            "1\ta\ta\tDET\tDT\t_\t2\tdet\t_\t_\n3\tdog\tdog\tNOUN\tNN\t_\t0\troot\t_\t_\n",
            2,
            "sequence",
        ),
        ("\n\n1\t\t_\tNOUN\tNN\t_\t0\troot\t_\t_\n", 3, "FORM"),
    ];
    for (text, want_line, needle) in cases {
        let results = read(text);
        let err = results
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| panic!("no error for {text:?}"));
        match &err {
            CorpusError::Parse {
                path,
                line,
                message,
            } => {
                assert_eq!(path, &PathBuf::from("inline.conllu"));
                assert_eq!(*line, want_line, "{text:?}: {err}");
                assert!(message.contains(needle), "{text:?}: {err}");
            }
            e => panic!("unexpected error {e}"),
        }
        assert!(err
            .to_string()
            .starts_with(&format!("inline.conllu:{want_line}:")));
    }
}

#[test]
fn invalid_utf8_empty_and_missing_files_are_typed_errors() {
    let mut bytes = b"1\tdo\xffg\tdog\tNOUN\tNN\t_\t0\troot\t_\t_\n".to_vec();
    let res: Vec<_> = ConlluReader::new(Cursor::new(bytes.clone()), "bad.conllu").collect();
    assert!(matches!(
        res[0],
        Err(CorpusError::InvalidUtf8 { line: 1, .. })
    ));
    // The reader stops after an error.
    bytes.extend_from_slice(b"\n1\tok\tok\tNOUN\tNN\t_\t0\troot\t_\t_\n");
    let res: Vec<_> = ConlluReader::new(Cursor::new(bytes), "bad.conllu").collect();
    assert_eq!(res.len(), 1);

    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.conllu");
    std::fs::write(&empty, "# only a comment\n\n").unwrap();
    assert!(matches!(
        corpus::read_conllu(&empty),
        Err(CorpusError::Empty { .. })
    ));
    assert!(matches!(
        corpus::read_conllu(dir.path().join("missing.conllu")),
        Err(CorpusError::Io { .. })
    ));
}

/// Counts verified independently with awk on the file: 2,001 sentences, 25,147 words (integer
/// IDs), 3,075 PUNCT and 4,210 NOUN; the first sentence is "From the AP comes this story :".
#[test]
fn ewt_dev_counts() {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu"
    ));
    assert!(path.exists(), "missing shared data file {}", path.display());
    let sents = corpus::read_conllu(&path).unwrap();
    assert_eq!(sents.len(), 2001);
    let words: usize = sents.iter().map(TaggedSentence::len).sum();
    assert_eq!(words, 25_147);
    let count = |t: Upos| {
        sents
            .iter()
            .flat_map(|s| &s.tags)
            .filter(|&&x| x == t)
            .count()
    };
    assert_eq!(count(Upos::Punct), 3075);
    assert_eq!(count(Upos::Noun), 4210);
    assert_eq!(sents[0].text(), "From the AP comes this story:");
    assert_eq!(sents[0].words.join(" "), "From the AP comes this story :");
    // Streaming gives the same sentences.
    let streamed: Vec<_> = ConlluReader::open(&path)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(streamed, sents);
}

fn read_trees(text: &str) -> Vec<Result<corpus::ParsedSentence, CorpusError>> {
    corpus::ConlluTreeReader::new(Cursor::new(text.as_bytes().to_vec()), "trees.conllu").collect()
}

#[test]
fn tree_reader_gives_heads_and_deprels_skipping_ranges_and_empty_nodes() {
    let sents: Vec<_> = read_trees(SMALL).into_iter().map(Result::unwrap).collect();
    assert_eq!(sents.len(), 2);
    let s = &sents[0];
    assert_eq!(s.words, ["I", "ca", "n't", "go", "."]);
    // The range line `1-2` and the empty node `4.1` (whose own HEAD is `_`) are not words:
    // the heads are those of the five words, numbered as in the file.
    assert_eq!(s.heads, [3, 3, 4, 0, 4]);
    assert_eq!(s.deprels, ["nsubj", "aux", "advmod", "root", "punct"]);
    assert_eq!(s.root(), Some(3));
    assert_eq!(sents[1].heads, [0, 1]);
    assert_eq!(sents[1].deprels, ["root", "vocative"]);
    // The words and tags are those of the tagged reader.
    let tagged: Vec<TaggedSentence> = read(SMALL).into_iter().map(Result::unwrap).collect();
    let from_trees: Vec<TaggedSentence> = sents.into_iter().map(|s| s.into_tagged()).collect();
    assert_eq!(tagged, from_trees);
}

#[test]
fn bad_trees_are_parse_errors_naming_file_and_line() {
    let w = |id: usize, head: &str| format!("{id}\tw{id}\tw\tNOUN\tNN\t_\t{head}\tdep\t_\t_\n");
    let cases = [
        // A head past the end of its sentence: the error names that word's line.
        (
            format!(
                "# c\n{}{}{}\n{}",
                w(1, "2"),
                w(2, "0"),
                w(3, "7"),
                w(1, "0")
            ),
            4,
            "outside",
        ),
        // The same in the last sentence without a trailing blank line.
        (format!("{}{}", w(1, "0"), w(2, "3")), 2, "outside"),
        (format!("{}{}", w(1, "0"), w(2, "_")), 2, "HEAD"),
        (format!("{}{}", w(1, "0"), w(2, "2")), 2, "own HEAD"),
        (format!("{}{}", w(1, "0"), w(2, "0")), 2, "roots"),
        (
            format!("{}{}{}", w(1, "0"), w(2, "3"), w(3, "2")),
            2,
            "cycle",
        ),
        ("1\ta\ta\tDET\tDT\t_\t0\t_\t_\t_\n".to_string(), 1, "DEPREL"),
    ];
    for (text, want_line, needle) in cases {
        let err = read_trees(&text)
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| panic!("no error for {text:?}"));
        match &err {
            CorpusError::Parse {
                path,
                line,
                message,
            } => {
                assert_eq!(path, &PathBuf::from("trees.conllu"));
                assert_eq!(*line, want_line, "{text:?}: {err}");
                assert!(message.contains(needle), "{text:?}: {err}");
            }
            e => panic!("unexpected error {e}"),
        }
        assert!(err
            .to_string()
            .starts_with(&format!("trees.conllu:{want_line}:")));
    }
    // The tagged reader does not look at heads: the same text reads without error.
    let text = format!("{}{}", w(1, "0"), w(2, "9"));
    assert!(read(&text).into_iter().all(|r| r.is_ok()));
}

/// Heads of EWT dev: every sentence has one root and a tree over its words (the reader checks);
/// 2,001 sentences as the tagged reader gives them.
#[test]
fn ewt_dev_trees() {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu"
    ));
    assert!(path.exists(), "missing shared data file {}", path.display());
    let trees = corpus::read_conllu_trees(&path).unwrap();
    assert_eq!(trees.len(), 2001);
    let tagged = corpus::read_conllu(&path).unwrap();
    for (t, s) in trees.iter().zip(&tagged) {
        assert_eq!(t.words, s.words);
        assert_eq!(t.heads.len(), t.len());
        assert_eq!(t.deprels[t.root().unwrap()], "root");
    }
    // The first sentence, "From the AP comes this story :", as in the file.
    assert_eq!(trees[0].heads, [3, 3, 4, 0, 6, 4, 4]);
}
