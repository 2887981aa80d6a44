//! States from files, word-piece alignment, and the encoder's per-layer states.

use std::path::PathBuf;

use corpus::{ParsedSentence, Tokenizer, Upos};
use probe::{
    align_words, pool_words, write_states, LayerStates, PiecePooling, ProbeError, StateSource,
    StatesFile,
};
use report::Progress;

fn shared(rel: &str) -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/")).join(rel);
    assert!(p.exists(), "missing shared data {}", p.display());
    p
}

fn sentence(words: &[&str]) -> ParsedSentence {
    let n = words.len();
    ParsedSentence {
        words: words.iter().map(|w| w.to_string()).collect(),
        tags: vec![Upos::Noun; n],
        heads: (0..n).map(|i| if i == 0 { 0 } else { 1 }).collect(),
        deprels: vec!["dep".into(); n],
    }
}

#[test]
fn states_files_round_trip_and_bad_files_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let lens = [3usize, 2];
    let mut s = LayerStates::zeros(2, 4, &lens).unwrap();
    for (k, &len) in lens.iter().enumerate() {
        for l in 0..2 {
            let v: Vec<f32> = (0..len * 4)
                .map(|i| (100 * l + 10 * k + i) as f32)
                .collect();
            s.set_sentence(k, l, &v).unwrap();
        }
    }
    let path = dir.path().join("states.safetensors");
    write_states(&path, &s).unwrap();
    let f = StatesFile::open(&path).unwrap();
    assert_eq!((f.n_layers(), f.width(), f.n_words()), (2, 4, 5));
    let back = f
        .states(
            &[sentence(&["a", "b", "c"]), sentence(&["d", "e"])],
            &Progress::silent(),
        )
        .unwrap();
    assert_eq!(back, s);
    assert_eq!(back.word(1, 1, 1), [114.0, 115.0, 116.0, 117.0]);
    // Sentences with other word counts than the file's rows.
    let err = f
        .states(&[sentence(&["a", "b"])], &Progress::silent())
        .unwrap_err();
    assert!(
        matches!(&err, ProbeError::StatesFile { path: p, .. } if p == &path),
        "{err}"
    );

    // A missing layer, a stray tensor, a wrong rank: each a StatesFile error.
    let write = |name: &str, tensors: Vec<(&str, Vec<usize>)>| {
        let p = dir.path().join(name);
        let data: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
            .into_iter()
            .map(|(n, shape)| {
                let k: usize = shape.iter().product();
                (n.to_string(), shape, vec![0u8; 4 * k])
            })
            .collect();
        let views: Vec<(String, safetensors::tensor::TensorView)> = data
            .iter()
            .map(|(n, s, b)| {
                (
                    n.clone(),
                    safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                        .unwrap(),
                )
            })
            .collect();
        std::fs::write(&p, safetensors::serialize(views, None).unwrap()).unwrap();
        p
    };
    let cases = [
        write(
            "gap.safetensors",
            vec![("layer_0", vec![5, 4]), ("layer_2", vec![5, 4])],
        ),
        write(
            "stray.safetensors",
            vec![("layer_0", vec![5, 4]), ("hidden", vec![5, 4])],
        ),
        write("rank.safetensors", vec![("layer_0", vec![5, 4, 1])]),
        write(
            "shapes.safetensors",
            vec![("layer_0", vec![5, 4]), ("layer_1", vec![5, 3])],
        ),
    ];
    for p in cases {
        match StatesFile::open(&p) {
            Err(ProbeError::StatesFile { path, message }) => {
                assert_eq!(path, p, "{message}")
            }
            other => panic!("{}: {other:?}", p.display()),
        }
    }
    std::fs::write(dir.path().join("junk.safetensors"), b"not safetensors").unwrap();
    assert!(StatesFile::open(dir.path().join("junk.safetensors")).is_err());
}

/// Each word's pieces in the sentence are the pieces of the word tokenized alone (BERT-style
/// tokenizers never merge across spaces), and a split word has several.
fn check_alignment(tok: &Tokenizer, words: &[&str]) -> usize {
    let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    let a = align_words(tok, &words, 0).unwrap();
    let mut split = 0;
    for (w, pieces) in words.iter().zip(&a.pieces) {
        let alone = tok.encode(w, false).unwrap().ids;
        let got: Vec<u32> = pieces.iter().map(|&p| a.ids[p]).collect();
        assert_eq!(got, alone, "word {w:?}");
        assert!(pieces.windows(2).all(|p| p[1] == p[0] + 1));
        split += usize::from(pieces.len() > 1);
    }
    split
}

#[test]
fn words_align_to_the_pieces_of_a_trained_wordpiece_tokenizer() {
    let texts = [
        "the cat sat on the mat",
        "the dog ate the bone",
        "a cat and a dog",
    ];
    let tok = Tokenizer::train_wordpiece(texts.into_iter(), 60, true).unwrap();
    let split = check_alignment(&tok, &["the", "tone", "date", ",", "mango", "donate"]);
    assert!(split >= 2, "the test needs words the tokenizer splits");
}

#[test]
fn words_align_to_minilm_pieces_and_pool_by_mean_or_first() {
    let tok = Tokenizer::from_file(shared("models/all-MiniLM-L6-v2/tokenizer.json")).unwrap();
    let words = [
        "Hewitt",
        "'s",
        "probes",
        "ca",
        "n't",
        "disambiguate",
        "unaffable",
        "parsers",
        ".",
    ];
    let split = check_alignment(&tok, &words);
    assert!(split >= 3, "only {split} words split");
    // [CLS] and [SEP] belong to no word.
    let owned: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    let a = align_words(&tok, &owned, 0).unwrap();
    assert_eq!(a.pieces[0][0], 1);
    assert_eq!(*a.pieces.last().unwrap().last().unwrap(), a.ids.len() - 2);
    // Pooling: piece p's state is [p, 10 p]; a word's mean is the mean of its pieces.
    let h = 2;
    let rows: Vec<f32> = (0..a.ids.len())
        .flat_map(|p| [p as f32, 10.0 * p as f32])
        .collect();
    let mean = pool_words(&rows, h, &a, PiecePooling::Mean);
    let first = pool_words(&rows, h, &a, PiecePooling::First);
    for (w, pieces) in a.pieces.iter().enumerate() {
        let m = pieces.iter().sum::<usize>() as f32 / pieces.len() as f32;
        assert_eq!(&mean[w * h..(w + 1) * h], [m, 10.0 * m]);
        assert_eq!(
            &first[w * h..(w + 1) * h],
            [pieces[0] as f32, 10.0 * pieces[0] as f32]
        );
    }
}

#[test]
fn minilm_layers_end_with_the_encoders_last_layer() {
    use lmd::encoder::{load, pad_batch, Encoder, LoadOptions};
    let dir = shared("models/all-MiniLM-L6-v2");
    let opts = LoadOptions::default();
    let layers = probe::EncoderLayers::load(&dir, &opts, PiecePooling::Mean).unwrap();
    assert_eq!(layers.n_layers(), 7);
    let sents = [
        sentence(&[
            "Hewitt",
            "and",
            "Manning",
            "probe",
            "unaffable",
            "parsers",
            ".",
        ]),
        sentence(&["Short", "one"]),
    ];
    let states = layers.states(&sents, &Progress::silent()).unwrap();
    assert_eq!(
        (states.n_layers(), states.width(), states.n_words()),
        (7, 384, 9)
    );
    // The lmd encoder's last hidden layer, pooled the same way, is layer 6.
    let enc = load(&dir, &opts).unwrap();
    for (k, s) in sents.iter().enumerate() {
        let a = align_words(layers.tokenizer(), &s.words, k).unwrap();
        let (ids, mask) = pad_batch(std::slice::from_ref(&a.ids), enc.device()).unwrap();
        let h = enc.hidden_states(&ids, &mask).unwrap();
        let rows: Vec<f32> = h.flatten_all().unwrap().to_vec1().unwrap();
        let want = pool_words(&rows, 384, &a, PiecePooling::Mean);
        let got = states.sentence(k, 6);
        let err = want
            .iter()
            .zip(got)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(err < 1e-4, "sentence {k}: max difference {err}");
        // Layer 0 is non-contextual in the words: "one" gets the same vector whatever the rest
        // of the sentence (same position).
    }
    let other = [sentence(&["Tall", "one"])];
    let o = layers.states(&other, &Progress::silent()).unwrap();
    assert_eq!(o.word(0, 0, 1), states.word(1, 0, 1));
    assert_ne!(o.word(0, 6, 1), states.word(1, 6, 1));
}
