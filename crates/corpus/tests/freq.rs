//! Token frequencies: counts, ranks, top-N, save/load and their errors.

mod shared_data;

use corpus::{CorpusError, Documents, Format, TokenCounts};

fn sample() -> TokenCounts {
    let mut c = TokenCounts::new(6);
    c.add(&[3, 1, 3, 5, 3, 1, 0]);
    c.add(&[5, 2]);
    c
}

#[test]
fn counts_ranks_and_top() {
    let c = sample();
    assert_eq!(c.counts(), &[1, 2, 1, 3, 0, 2]);
    assert_eq!(c.total(), 9);
    assert_eq!(c.vocab_used(), 5);
    assert_eq!(c.count(3), 3);
    assert_eq!(c.count(99), 0);
    // 3 (3×), then 1 and 5 (2×, by id), then 0 and 2 (1×), then 4 (never).
    assert_eq!(c.ids_by_frequency(), [3, 1, 5, 0, 2, 4]);
    assert_eq!(c.ranks(), [4, 2, 5, 1, 6, 3]);
    assert_eq!(c.top(2), [(3, 3), (1, 2)]);
    assert_eq!(c.top(100).len(), 5, "ids never seen are not in the top");
    let mut m = c.clone();
    m.merge(&TokenCounts::from_counts(vec![0, 0, 0, 0, 0, 0, 0, 4]));
    assert_eq!(m.total(), 13);
    assert_eq!(m.count(7), 4);
    assert_eq!(m.top(1), [(7, 4)]);
}

#[test]
fn save_and_load_json_and_tsv() {
    let c = sample();
    let dir = tempfile::tempdir().unwrap();
    for name in ["c.json", "c.tsv"] {
        let p = dir.path().join(name);
        c.save(&p).unwrap();
        assert_eq!(TokenCounts::load(&p).unwrap(), c, "{name}");
    }
    let tsv = std::fs::read_to_string(dir.path().join("c.tsv")).unwrap();
    assert!(tsv.starts_with("vocab_size\t6\n0\t1\n"), "{tsv}");
}

#[test]
fn load_errors_are_typed_and_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.tsv");
    let cases = [
        ("vocab_size\t4\n0\t2\n1\tx\n", 3),
        ("vocab_size\t4\n0\t2\n9\t1\n", 3),
        ("vocab_size\t4\n0\t2\t7\n", 2),
        ("size 4\n", 1),
        // More ids than u32 has: refused before allocating them.
        ("vocab_size\t1000000000000\n", 1),
        // Counts past u64: refused, not wrapped (or a panic in debug builds).
        ("vocab_size\t4\n0\t18446744073709551615\n1\t1\n", 3),
    ];
    for (content, want) in cases {
        std::fs::write(&p, content).unwrap();
        match TokenCounts::load(&p) {
            Err(CorpusError::Parse { line, path, .. }) => {
                assert_eq!((line, path.as_path()), (want, p.as_path()), "{content:?}")
            }
            other => panic!("{content:?}: expected Parse, got {other:?}"),
        }
    }
    std::fs::write(&p, "").unwrap();
    assert!(matches!(
        TokenCounts::load(&p),
        Err(CorpusError::Empty { .. })
    ));
    let j = dir.path().join("bad.json");
    std::fs::write(&j, "{\"counts\": [1, 2],\n \"total\": ").unwrap();
    assert!(matches!(
        TokenCounts::load(&j),
        Err(CorpusError::Parse { line: 2, .. })
    ));
    std::fs::write(&j, "{\"counts\": [1, 2], \"total\": 4}").unwrap();
    assert!(matches!(
        TokenCounts::load(&j),
        Err(CorpusError::Parse { .. })
    ));
    // A sum that wraps to the stated total is still refused.
    std::fs::write(&j, "{\"counts\": [18446744073709551615, 2], \"total\": 1}").unwrap();
    assert!(matches!(
        TokenCounts::load(&j),
        Err(CorpusError::Parse { .. })
    ));
}

#[test]
fn counting_documents_matches_encoding_them_one_by_one() {
    let tok = shared_data::bert();
    let docs = shared_data::wikitext2_docs("valid", 3);
    let (counts, summary) =
        TokenCounts::count_documents(tok, docs.iter().cloned().map(Ok), 7).unwrap();
    let mut expect = TokenCounts::new(tok.vocab_size());
    let mut words = 0;
    for d in &docs {
        expect.add(&tok.encode(&d.text, false).unwrap().ids);
        words += d.text.split_whitespace().count() as u64;
    }
    assert_eq!(counts, expect);
    assert_eq!(summary.documents, 3);
    assert_eq!(summary.words, words);
    assert_eq!(summary.tokens, expect.total());
    // WikiText's most frequent BERT token is "the" (1996) or "," (1010).
    let top = counts.top(1)[0].0;
    assert!(top == 1996 || top == 1010, "top token {top}");
    // Errors of the document stream come through.
    let p = shared_data::path("wikitext-2/valid.txt");
    let bad = Documents::open(&p, Format::jsonl()).unwrap();
    assert!(matches!(
        TokenCounts::count_documents(tok, bad, 8),
        Err(CorpusError::Parse { line: 2, .. })
    ));
}

#[test]
fn chunk_counting_equals_whole_text_encoding_on_tricky_text() {
    let tok = shared_data::bert();
    assert!(tok.is_space_separable());
    let gpt2 = corpus::Tokenizer::from_file(shared_data::path("gpt2/tokenizer.json")).unwrap();
    assert!(
        !gpt2.is_space_separable(),
        "byte-level BPE keeps the leading space"
    );
    // Accents, combining marks after a space, CJK, control characters (removed by BERT's
    // cleaning, joining their neighbours), no-break and ideographic spaces, literal specials,
    // emoji, over-long words, punctuation runs.
    let texts = [
        "Café  naïve\tRésumé\r\nZoë \u{301}x e\u{301}",
        "日本語のテキスト and 中文 mixed",
        "ab\u{0C}cd ef\u{0B}gh ij\u{85}kl mn\u{A0}op qr\u{3000}st",
        "[MASK] [CLS]x y[SEP] [UNK]",
        "emoji 🙂🙂 ok … ‘quotes’ «guillemets» — dash",
        &"a".repeat(150),
        "don't stop!!! ... (yes) @-@ 3 @.@ 14 <unk>",
    ];
    let docs: Vec<corpus::Result<corpus::Document>> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            Ok(corpus::Document {
                index: i,
                text: t.to_string(),
                title: None,
                source: corpus::DocSource {
                    path: "mem".into(),
                    line: i + 1,
                },
            })
        })
        .collect();
    let (counts, summary) = TokenCounts::count_documents(tok, docs, 3).unwrap();
    let mut expect = TokenCounts::new(tok.vocab_size());
    for t in texts {
        expect.add(&tok.encode(t, false).unwrap().ids);
    }
    assert_eq!(counts, expect);
    assert_eq!(summary.tokens, expect.total());
    // Other tokenizers count line by line.
    let docs = shared_data::wikitext2_docs("valid", 2);
    let (counts, _) = TokenCounts::count_documents(&gpt2, docs.iter().cloned().map(Ok), 5).unwrap();
    let mut expect = TokenCounts::new(gpt2.vocab_size());
    for line in docs.iter().flat_map(|d| d.text.lines()) {
        expect.add(&gpt2.encode(line, false).unwrap().ids);
    }
    assert_eq!(counts, expect);
}
