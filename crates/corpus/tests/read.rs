//! Streaming readers: every format, WikiText-2 and WikiText-103 layouts, and typed errors that
//! name the file and line.

mod shared_data;

use std::io::Cursor;
use std::path::{Path, PathBuf};

use corpus::{read_documents, CorpusError, Document, Documents, Format};

fn from_str(text: &str, format: Format) -> corpus::Result<Vec<Document>> {
    Documents::from_reader("mem.txt", Cursor::new(text.as_bytes().to_vec()), format)?.collect()
}

fn texts(docs: &[Document]) -> Vec<&str> {
    docs.iter().map(|d| d.text.as_str()).collect()
}

#[test]
fn plain_documents_are_separated_by_blank_lines() {
    let docs = from_str(
        "\n\nfirst line\r\nsecond line\n\n \n\nthird\n",
        Format::Plain,
    )
    .unwrap();
    assert_eq!(texts(&docs), ["first line\nsecond line", "third"]);
    assert_eq!(docs[0].index, 0);
    assert_eq!(docs[1].index, 1);
    assert_eq!(docs[0].source.line, 3);
    assert_eq!(docs[1].source.line, 8);
    assert_eq!(docs[1].source.path, PathBuf::from("mem.txt"));
    assert_eq!(docs[1].source.to_string(), "mem.txt:8");
}

#[test]
fn lines_format_gives_one_document_per_non_blank_line() {
    let docs = from_str("a b\n\n  c  \nd", Format::Lines).unwrap();
    assert_eq!(texts(&docs), ["a b", "c", "d"]);
    assert_eq!(
        docs.iter().map(|d| d.source.line).collect::<Vec<_>>(),
        [1, 3, 4]
    );
}

#[test]
fn wikitext_titles_start_documents_and_subheadings_do_not() {
    let text = " \n = Alpha = \n \n Para one . \n \n = = Sub = = \n \n Para two . \n = = = Deep = = = \n x \n = Beta = \n \n Only . \n";
    let docs = from_str(text, Format::WikiText).unwrap();
    assert_eq!(texts(&docs), ["Para one .\nPara two .\nx", "Only ."]);
    assert_eq!(docs[0].title.as_deref(), Some("Alpha"));
    assert_eq!(docs[1].title.as_deref(), Some("Beta"));
    assert_eq!(docs[0].source.line, 4);
    assert_eq!(docs[1].source.line, 13);
}

#[test]
fn a_byte_order_mark_hides_neither_a_first_title_nor_a_first_record() {
    let docs = from_str(
        "\u{feff} = Alpha = \n Para one . \n = Beta = \n Two . \n",
        Format::WikiText,
    );
    let docs = docs.unwrap();
    assert_eq!(texts(&docs), ["Para one .", "Two ."]);
    assert_eq!(docs[0].title.as_deref(), Some("Alpha"));
    let docs = from_str("\u{feff}{\"text\": \"one\"}\n", Format::jsonl()).unwrap();
    assert_eq!(texts(&docs), ["one"]);
}

/// Number of ` = Title = ` lines in a WikiText file, counted independently of the reader.
fn count_titles(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap();
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter(|l| l.starts_with(" = ") && !l.starts_with(" = = ") && l.ends_with(" = "))
        .count()
}

#[test]
fn wikitext_2_and_103_have_one_document_per_title() {
    for rel in [
        "wikitext-2/valid.txt",
        "wikitext-103-valid-test/wiki.valid.tokens",
    ] {
        let p = shared_data::path(rel);
        let mut n = 0;
        for (i, doc) in Documents::open(&p, Format::WikiText).unwrap().enumerate() {
            let doc = doc.unwrap();
            assert_eq!(doc.index, i);
            assert!(doc.title.is_some(), "{rel}: document {i} without a title");
            assert!(!doc.text.is_empty());
            assert!(
                !doc.text.contains(" = = "),
                "{rel}: sub-heading kept in document {i}"
            );
            n += 1;
        }
        assert_eq!(n, count_titles(&p), "{rel}");
    }
    let first = &shared_data::wikitext2_docs("train", 1)[0];
    assert_eq!(first.title.as_deref(), Some("Valkyria Chronicles III"));
    assert!(first
        .text
        .starts_with("Senjō no Valkyria 3 : <unk> Chronicles"));
    assert_eq!(first.source.line, 4);
}

#[test]
fn folder_reads_txt_files_in_sorted_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b.txt"), "bee\n\nbuzz\n").unwrap();
    std::fs::write(dir.path().join("a.txt"), "\nant\n").unwrap();
    std::fs::write(dir.path().join("c.md"), "not read").unwrap();
    std::fs::write(dir.path().join("d.txt"), "\n \n").unwrap();
    let docs = read_documents(dir.path(), Format::Folder).unwrap();
    assert_eq!(texts(&docs), ["ant", "bee\nbuzz"]);
    assert_eq!(docs[0].source.path, dir.path().join("a.txt"));
    assert_eq!(docs[0].source.line, 2);
    assert_eq!(docs[1].index, 1);
    assert_eq!(Format::guess(dir.path()), Format::Folder);
}

#[test]
fn jsonl_reads_the_configured_field() {
    let text = "{\"text\": \"one\", \"id\": 1}\n\n{\"text\": \"two\\nlines\"}\n";
    let docs = from_str(text, Format::jsonl()).unwrap();
    assert_eq!(texts(&docs), ["one", "two\nlines"]);
    assert_eq!(docs[1].source.line, 3);
    let docs = from_str("{\"body\": \"x\"}", Format::parse("jsonl:body").unwrap()).unwrap();
    assert_eq!(texts(&docs), ["x"]);
}

fn expect_parse(result: corpus::Result<Vec<Document>>, want_line: usize, want: &str) {
    match result {
        Err(CorpusError::Parse {
            path,
            line,
            message,
        }) => {
            assert_eq!(path, PathBuf::from("mem.txt"));
            assert_eq!(line, want_line);
            assert!(message.contains(want), "{message}");
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn jsonl_errors_name_the_line() {
    expect_parse(
        from_str("{\"text\": \"a\"}\n{\"text\": \n", Format::jsonl()),
        2,
        "malformed JSON",
    );
    expect_parse(
        from_str("{\"text\": \"a\"}\n\n{\"txt\": \"b\"}\n", Format::jsonl()),
        3,
        "missing field",
    );
    expect_parse(
        from_str("{\"text\": 5}", Format::jsonl()),
        1,
        "not a string",
    );
}

#[test]
fn invalid_utf8_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.txt");
    std::fs::write(&p, b"good line\n\nalso good\nbad \xff\xfe byte\nmore\n").unwrap();
    for format in [Format::Plain, Format::Lines, Format::WikiText] {
        let mut docs = Documents::open(&p, format.clone()).unwrap();
        let err = docs.find_map(|d| d.err()).expect("an error");
        match err {
            CorpusError::InvalidUtf8 { path, line } => {
                assert_eq!(path, p);
                assert_eq!(line, 4);
            }
            other => panic!("{format:?}: expected InvalidUtf8, got {other:?}"),
        }
        assert!(docs.next().is_none(), "the reader stops after an error");
    }
    let msg = read_documents(&p, Format::Plain).unwrap_err().to_string();
    assert!(msg.contains("bad.txt:4"), "{msg}");
}

#[test]
fn empty_inputs_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "\n  \n\n").unwrap();
    for format in [
        Format::Plain,
        Format::Lines,
        Format::WikiText,
        Format::jsonl(),
    ] {
        match read_documents(&empty, format) {
            Err(CorpusError::Empty { path }) => assert_eq!(path, empty),
            other => panic!("expected Empty, got {other:?}"),
        }
    }
    // A WikiText file with titles only has no text either.
    std::fs::write(&empty, " = A = \n = = B = = \n").unwrap();
    assert!(matches!(
        read_documents(&empty, Format::WikiText),
        Err(CorpusError::Empty { .. })
    ));
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    assert!(matches!(
        read_documents(&sub, Format::Folder),
        Err(CorpusError::Empty { .. })
    ));
    assert!(matches!(
        read_documents(dir.path().join("missing.txt"), Format::Plain),
        Err(CorpusError::Io { .. })
    ));
    assert!(matches!(
        Documents::open(&sub, Format::Plain),
        Err(CorpusError::InvalidArgument(_))
    ));
}

#[test]
fn format_names_and_guesses() {
    assert_eq!(Format::parse("wikitext").unwrap(), Format::WikiText);
    assert_eq!(Format::parse("lines").unwrap(), Format::Lines);
    assert!(matches!(
        Format::parse("csv"),
        Err(CorpusError::InvalidArgument(_))
    ));
    assert_eq!(
        Format::guess(Path::new("x/wiki.valid.tokens")),
        Format::WikiText
    );
    assert_eq!(Format::guess(Path::new("x/data.jsonl")), Format::jsonl());
    assert_eq!(Format::guess(Path::new("x/input.txt")), Format::Plain);
}
