//! BERT windows and causal blocks, checked position by position.

mod shared_data;

use corpus::{
    bert_windows, causal_blocks, pack_bert_windows, pack_causal_blocks, pad_sequence, CorpusError,
    SentenceSplitter, SpecialTokens, TrainingData,
};

const SP: SpecialTokens = SpecialTokens {
    pad: 0,
    unk: 100,
    cls: 101,
    sep: 102,
    mask: 103,
};

fn seq(start: u32, n: u32) -> Vec<u32> {
    (start..start + n).collect()
}

#[test]
fn windows_pack_sentences_and_split_segments_at_a_boundary() {
    // Budget of max_len 12 is 9 tokens: [s1 s2 s3] = 3 + 2 + 4 = 9 fit, s4 starts a new window.
    let sentences = vec![
        seq(1000, 3),
        seq(2000, 2),
        seq(3000, 4),
        seq(4000, 5),
        vec![],
    ];
    let mut out = TrainingData::new(12);
    pack_bert_windows(&sentences, &SP, 12, &mut out).unwrap();
    assert_eq!(out.len(), 2);
    // Balanced split of 3 | 2 + 4 is A = s1 s2 (5) vs B = s3 (4).
    assert_eq!(
        out.ids(0),
        [101, 1000, 1001, 1002, 2000, 2001, 102, 3000, 3001, 3002, 3003, 102]
    );
    assert_eq!(out.segments(0), [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]);
    // A lone sentence: [CLS] s [SEP], one segment.
    assert_eq!(out.ids(1), [101, 4000, 4001, 4002, 4003, 4004, 102]);
    assert_eq!(out.segments(1), [0; 7]);
    let (ids, mask) = pad_sequence(out.ids(1), 12, SP.pad);
    assert_eq!(ids, [101, 4000, 4001, 4002, 4003, 4004, 102, 0, 0, 0, 0, 0]);
    assert_eq!(mask, [1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0]);
}

#[test]
fn long_sentences_are_truncated_and_windows_never_exceed_max_len() {
    let sentences = vec![seq(10, 2), seq(100, 20), seq(500, 1)];
    let mut out = TrainingData::new(8);
    pack_bert_windows(&sentences, &SP, 8, &mut out).unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(out.ids(0), [101, 10, 11, 102]);
    assert_eq!(out.ids(1), [101, 100, 101, 102, 103, 104, 102]);
    assert_eq!(out.ids(2), [101, 500, 102]);
    assert!(matches!(
        pack_bert_windows(&sentences, &SP, 3, &mut TrainingData::new(8)),
        Err(CorpusError::InvalidArgument(_))
    ));
}

#[test]
fn causal_blocks_are_contiguous_with_separators_and_a_short_tail() {
    let docs = vec![seq(1, 3), vec![], seq(10, 4)];
    let mut out = TrainingData::new(3);
    pack_causal_blocks(&docs, 3, Some(99), &mut out).unwrap();
    let blocks: Vec<&[u32]> = out.iter().collect();
    assert_eq!(blocks, [&[1, 2, 3][..], &[99, 10, 11], &[12, 13]]);
    let mut plain = TrainingData::new(4);
    pack_causal_blocks(&docs, 4, None, &mut plain).unwrap();
    let blocks: Vec<&[u32]> = plain.iter().collect();
    assert_eq!(blocks, [&[1, 2, 3, 10][..], &[11, 12, 13]]);
}

#[test]
fn wikitext_windows_are_well_formed() {
    let tok = shared_data::bert();
    let docs = shared_data::wikitext2_docs("valid", 4);
    let splitter = SentenceSplitter::new();
    let data = bert_windows(tok, docs.iter().cloned().map(Ok), &splitter, 128).unwrap();
    assert_eq!(data.seq_len(), 128);
    assert!(data.len() > 20);
    let mut content = 0;
    for (i, w) in data.iter().enumerate() {
        assert!(w.len() <= 128 && w.len() >= 3);
        assert_eq!(w[0], SP.cls, "window {i}");
        assert_eq!(*w.last().unwrap(), SP.sep);
        let seps = w.iter().filter(|&&t| t == SP.sep).count();
        assert!(seps == 1 || seps == 2);
        assert!(!w.contains(&SP.pad) && !w.contains(&SP.mask) && !w[1..].contains(&SP.cls));
        let segs = data.segments(i);
        let first_sep = w.iter().position(|&t| t == SP.sep).unwrap();
        assert!(segs[..=first_sep].iter().all(|&s| s == 0));
        assert!(segs[first_sep + 1..].iter().all(|&s| s == 1));
        content += w.len() - 1 - seps;
    }
    // Windows are packed: on average well over half full.
    assert!(data.n_tokens() as f64 / data.len() as f64 > 64.0);
    // No token is lost unless a sentence was longer than 125 pieces.
    let mut expect = 0;
    for d in &docs {
        for s in splitter.split(&d.text) {
            expect += tok.encode(s, false).unwrap().len().min(125);
        }
    }
    assert_eq!(content, expect);
    // Documents are never mixed: windows of each document alone add up to the same count.
    let per_doc: usize = docs
        .iter()
        .map(|d| {
            bert_windows(tok, [Ok(d.clone())], &splitter, 128)
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(per_doc, data.len());
}

#[test]
fn wikitext_causal_blocks_concatenate_the_documents() {
    let tok = shared_data::bert();
    let docs = shared_data::wikitext2_docs("valid", 3);
    let data = causal_blocks(tok, docs.iter().cloned().map(Ok), 64, Some(SP.sep)).unwrap();
    let flat: Vec<u32> = data.iter().flatten().copied().collect();
    let mut expect = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        if i > 0 {
            expect.push(SP.sep);
        }
        for line in d.text.lines() {
            expect.extend(tok.encode(line, false).unwrap().ids);
        }
    }
    assert_eq!(flat, expect);
    assert!(data.iter().take(data.len() - 1).all(|b| b.len() == 64));
    assert!(data.ids(data.len() - 1).len() <= 64);
}
