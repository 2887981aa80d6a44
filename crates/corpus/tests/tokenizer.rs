//! Tokenizer wrapper: loading (old and new tokenizer.json, vocab.txt), known ids, special
//! tokens, training, saving, offsets.

mod shared_data;

use corpus::{CorpusError, Tokenizer};

#[test]
fn bert_json_without_model_type_loads_and_gives_known_ids() {
    let tok = shared_data::bert();
    assert_eq!(tok.vocab_size(), 30522);
    assert_eq!(tok.padded_vocab_size(8), 30528);
    assert_eq!(tok.padded_vocab_size(1), 30522);
    let e = tok.encode("Hello world", false).unwrap();
    assert_eq!(e.ids, vec![7592, 2088]);
    assert_eq!(e.offsets, vec![(0, 5), (6, 11)]);
    let e = tok.encode("Hello world", true).unwrap();
    assert_eq!(e.ids, vec![101, 7592, 2088, 102]);
    let sp = tok.special_tokens().unwrap();
    assert_eq!(
        (sp.pad, sp.unk, sp.cls, sp.sep, sp.mask),
        (0, 100, 101, 102, 103)
    );
    assert!(sp.contains(103) && !sp.contains(7592));
}

#[test]
fn vocab_txt_gives_the_same_ids_as_tokenizer_json() {
    let json = shared_data::bert();
    let txt = Tokenizer::from_vocab_txt(shared_data::bert_vocab(), true).unwrap();
    let text = "The Valkyria series , Sega's tactical role @-@ playing game ; Café naïve \
                unaffable tokenization 3 @.@ 14 <unk> 日本";
    let a = json.encode(text, true).unwrap();
    let b = txt.encode(text, true).unwrap();
    assert_eq!(a.ids, b.ids);
    assert_eq!(a.offsets, b.offsets);
    assert_eq!(
        txt.special_tokens().unwrap(),
        json.special_tokens().unwrap()
    );
    // Accents stripped and lower-cased: "café" and "cafe" are the same pieces.
    assert_eq!(
        txt.encode("Café", false).unwrap().ids,
        txt.encode("cafe", false).unwrap().ids
    );
    // Cased vocabulary handling keeps the case: "Hello" is not in the uncased vocab as is.
    let cased = Tokenizer::from_vocab_txt(shared_data::bert_vocab(), false).unwrap();
    assert_ne!(cased.encode("Hello", false).unwrap().ids, vec![7592]);
    // load() dispatches on the extension.
    let loaded = Tokenizer::load(shared_data::bert_vocab()).unwrap();
    assert_eq!(
        loaded.encode(text, false).unwrap().ids,
        txt.encode(text, false).unwrap().ids
    );
}

#[test]
fn first_piece_and_batch_encoding() {
    let tok = shared_data::bert();
    // "tokenization" = token ##ization: its first piece is "token".
    let token = tok.token_to_id("token").unwrap();
    assert_eq!(tok.first_piece("tokenization"), Some(token));
    assert_eq!(tok.first_piece("Hello"), Some(7592));
    assert_eq!(tok.first_piece("   "), None);
    let texts = ["hello world", "the cat sat", ""];
    let batch = tok.encode_batch(&texts, false).unwrap();
    let ids = tok.encode_ids_batch(&texts, false).unwrap();
    for (i, t) in texts.iter().enumerate() {
        assert_eq!(batch[i].ids, tok.encode(t, false).unwrap().ids);
        assert_eq!(ids[i], batch[i].ids);
    }
    assert!(batch[2].is_empty());
}

#[test]
fn gpt2_truncation_is_cleared_and_it_has_no_bert_specials() {
    let path = shared_data::path("gpt2/tokenizer.json");
    let tok = Tokenizer::from_file(&path).unwrap();
    assert_eq!(tok.vocab_size(), 50257);
    let long = "word ".repeat(200);
    let long = long.trim_end();
    // As stored, the file truncates to 50 tokens; the wrapper does not.
    let raw = tokenizers::Tokenizer::from_file(&path).unwrap();
    assert_eq!(raw.encode(long, false).unwrap().get_ids().len(), 50);
    assert_eq!(tok.encode(long, false).unwrap().len(), 200);
    assert_eq!(
        tok.encode("Hello world", false).unwrap().ids,
        vec![15496, 995]
    );
    match tok.special_tokens() {
        Err(CorpusError::MissingSpecialToken(t)) => assert_eq!(t, "[PAD]"),
        other => panic!("expected MissingSpecialToken, got {other:?}"),
    }
}

#[test]
fn model_type_is_inferred_for_bpe_and_rejected_when_unknowable() {
    // The GPT-2 file with its model "type" removed must still load as BPE.
    let text = std::fs::read_to_string(shared_data::path("gpt2/tokenizer.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["model"].as_object_mut().unwrap().remove("type");
    let tok = Tokenizer::from_json_str(&json.to_string()).unwrap();
    assert_eq!(
        tok.encode("Hello world", false).unwrap().ids,
        vec![15496, 995]
    );

    let bad = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
        "normalizer":null,"pre_tokenizer":null,"post_processor":null,"decoder":null,
        "model":{"something":1}}"#;
    assert!(matches!(
        Tokenizer::from_json_str(bad),
        Err(CorpusError::Tokenizer(_))
    ));
    assert!(matches!(
        Tokenizer::from_json_str("not json"),
        Err(CorpusError::Tokenizer(_))
    ));
    let missing = Tokenizer::from_file("/nonexistent/tokenizer.json");
    assert!(matches!(missing, Err(CorpusError::Io { .. })));
}

#[test]
fn train_wordpiece_save_and_reload() {
    let docs = shared_data::wikitext2_docs("valid", 6);
    let texts: Vec<String> = docs.into_iter().map(|d| d.text).collect();
    let tok = Tokenizer::train_wordpiece(texts.iter(), 600, true).unwrap();
    assert!(
        tok.vocab_size() <= 600 && tok.vocab_size() > 300,
        "{}",
        tok.vocab_size()
    );
    let sp = tok.special_tokens().unwrap();
    assert_eq!(sp.ids(), [0, 1, 2, 3, 4]);
    let e = tok.encode("The game was released", true).unwrap();
    assert_eq!(e.ids.first(), Some(&sp.cls));
    assert_eq!(e.ids.last(), Some(&sp.sep));
    assert!(e.ids.len() > 4 && !e.ids[1..e.ids.len() - 1].contains(&sp.unk));
    // Every trained piece decodes back to the lower-cased words.
    let plain = tok.encode("The game was released", false).unwrap();
    assert_eq!(
        tok.decode(&plain.ids, true).unwrap(),
        "the game was released"
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wp.json");
    tok.save(&path).unwrap();
    let back = Tokenizer::from_file(&path).unwrap();
    assert_eq!(back.vocab_size(), tok.vocab_size());
    for t in texts.iter().take(2) {
        assert_eq!(
            back.encode(t, true).unwrap().ids,
            tok.encode(t, true).unwrap().ids
        );
    }
    assert!(matches!(
        Tokenizer::train_wordpiece(["a b c"].iter(), 5, true),
        Err(CorpusError::InvalidArgument(_))
    ));
}

#[test]
fn memoized_encoding_equals_plain_encoding() {
    let tok = shared_data::bert();
    let texts = [
        "Café  naïve\tRésumé\r\nZoë \u{301}x e\u{301}",
        "日本語のテキスト and 中文 mixed",
        "ab\u{0C}cd ef\u{0B}gh ij\u{85}kl mn\u{A0}op qr\u{3000}st",
        "[MASK] [CLS]x y[SEP] [UNK] the the the",
        "",
        "don't stop!!! ... (yes) @-@ 3 @.@ 14 <unk>",
    ];
    let plain = tok.encode_ids_batch(&texts, false).unwrap();
    // A tiny capacity empties the memo between calls; a large one keeps it.
    for cap in [2, 1000] {
        let mut memo = corpus::ChunkMemo::new(cap);
        for _ in 0..2 {
            assert_eq!(tok.encode_ids_memo(&texts, &mut memo).unwrap(), plain);
        }
    }
    let docs = shared_data::wikitext2_docs("valid", 2);
    let lines: Vec<&str> = docs.iter().flat_map(|d| d.text.lines()).collect();
    let mut memo = corpus::ChunkMemo::default();
    assert_eq!(
        tok.encode_ids_memo(&lines, &mut memo).unwrap(),
        tok.encode_ids_batch(&lines, false).unwrap()
    );
}

/// The `tokenizers` trainer alone numbers its `##c` pieces in hash-map order and breaks ties
/// between merges by those numbers (huggingface/tokenizers issue 1794): without the numbering
/// beforehand this fails within one process.
#[test]
fn wordpiece_training_is_deterministic() {
    let docs = shared_data::wikitext2_docs("valid", 6);
    let texts: Vec<String> = docs.into_iter().map(|d| d.text).collect();
    let vocab = |t: &Tokenizer| -> Vec<Option<String>> {
        (0..t.vocab_size() as u32)
            .map(|i| t.id_to_token(i))
            .collect()
    };
    let trained = Tokenizer::train_wordpiece(texts.iter(), 600, true).unwrap();
    let first = vocab(&trained);
    // The continuation pieces numbered before training are ordinary pieces: the only added
    // (special) tokens are BERT's five.
    let dir = tempfile::tempdir().unwrap();
    trained.save(dir.path().join("t.json")).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("t.json")).unwrap()).unwrap();
    let added: Vec<&str> = json["added_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["content"].as_str().unwrap())
        .collect();
    assert_eq!(added, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]);
    assert!(first.contains(&Some("##e".to_string())));
    for _ in 0..4 {
        let again = vocab(&Tokenizer::train_wordpiece(texts.iter(), 600, true).unwrap());
        assert_eq!(again, first);
    }
}
