//! Loading: zip-format `pytorch_model.bin`, llama2.c folders, and typed errors naming the file.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use lmd::encoder::{load, Encoder, LoadOptions, Pooling};
use lmd::LmdError;

fn shared(rel: &str) -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/")).join(rel);
    assert!(p.exists(), "missing shared data {}", p.display());
    p
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn pytorch_bin_checkpoint_matches_transformers() {
    let enc = load(
        shared("data/hf-tiny-random/BertForSequenceClassification"),
        &LoadOptions::default(),
    )
    .unwrap();
    let dir = fixture("hf-tiny-bert-reference");
    let exp =
        candle_core::safetensors::load(dir.join("expected.safetensors"), &Device::Cpu).unwrap();
    let ids = enc
        .tokenize(&["hello world", "the cat sat on the mat"], 10)
        .unwrap();
    let exp_ids = exp["input_ids"]
        .to_dtype(DType::U32)
        .unwrap()
        .to_vec2::<u32>()
        .unwrap();
    for (a, b) in ids.iter().zip(&exp_ids) {
        assert_eq!(a.as_slice(), &b[..a.len()]);
    }
    let e = enc.embed_ids(&ids, 10, Pooling::MaskedMean).unwrap();
    let d: f32 = (e - &exp["mean"])
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar()
        .unwrap();
    assert!(
        d < 1e-4,
        "pytorch_model.bin BERT differs from transformers by {d:e}"
    );
}

/// Copies a fixture into a temp dir so a test can break one file.
fn copy_fixture(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(fixture(name)).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, tmp.path().join(f.file_name().unwrap())).unwrap();
    }
    tmp
}

fn edit_config(dir: &Path, key: &str, value: serde_json::Value) {
    let p = dir.join("config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v[key] = value;
    std::fs::write(p, v.to_string()).unwrap();
}

#[test]
fn unknown_model_type_names_the_config() {
    let tmp = copy_fixture("bert");
    edit_config(tmp.path(), "model_type", "t5".into());
    match load(tmp.path(), &LoadOptions::default()) {
        Err(LmdError::UnknownModelType {
            path, model_type, ..
        }) => {
            assert_eq!(model_type, "t5");
            assert_eq!(path, tmp.path().join("config.json"));
        }
        other => panic!("expected UnknownModelType, got {:?}", other.err()),
    }
}

#[test]
fn malformed_config_is_a_typed_error() {
    let tmp = copy_fixture("bert");
    std::fs::write(
        tmp.path().join("config.json"),
        "{\"model_type\": \"bert\", \"hidden_size\": ",
    )
    .unwrap();
    assert!(matches!(
        load(tmp.path(), &LoadOptions::default()),
        Err(LmdError::ModelConfig { .. })
    ));
}

#[test]
fn missing_and_truncated_weights_name_the_file() {
    let tmp = copy_fixture("bert");
    let st = tmp.path().join("model.safetensors");
    let bytes = std::fs::read(&st).unwrap();
    std::fs::write(&st, &bytes[..bytes.len() / 2]).unwrap();
    match load(tmp.path(), &LoadOptions::default()) {
        Err(LmdError::Weights { path, .. }) => assert_eq!(path, st),
        other => panic!("expected Weights error, got {:?}", other.err()),
    }
    std::fs::remove_file(&st).unwrap();
    assert!(matches!(
        load(tmp.path(), &LoadOptions::default()),
        Err(LmdError::Weights { .. })
    ));
    // A config that asks for more layers than the file holds: the missing tensor is named.
    let tmp = copy_fixture("bert");
    edit_config(tmp.path(), "num_hidden_layers", 3.into());
    match load(tmp.path(), &LoadOptions::default()) {
        Err(LmdError::Weights { message, .. }) => assert!(message.contains("layer.2"), "{message}"),
        other => panic!("expected Weights error, got {:?}", other.err()),
    }
}

#[test]
fn tokenizer_larger_than_vocabulary_is_rejected() {
    // The weights' embedding has as many rows as config.vocab_size, so shrink both consistently
    // by pointing the config at fewer rows: the load must fail on the tokenizer check or the
    // embedding shape, each naming a file.
    let tmp = copy_fixture("bert");
    let st = tmp.path().join("model.safetensors");
    let mut ts = candle_core::safetensors::load(&st, &Device::Cpu).unwrap();
    let emb = ts["embeddings.word_embeddings.weight"]
        .narrow(0, 0, 50)
        .unwrap();
    ts.insert("embeddings.word_embeddings.weight".into(), emb);
    candle_core::safetensors::save(&ts, &st).unwrap();
    edit_config(tmp.path(), "vocab_size", 50.into());
    match load(tmp.path(), &LoadOptions::default()) {
        Err(LmdError::VocabMismatch {
            path,
            model: 50,
            tokenizer,
        }) => {
            assert_eq!(path, tmp.path().join("tokenizer.json"));
            assert!(tokenizer > 50);
        }
        other => panic!("expected VocabMismatch, got {:?}", other.err()),
    }
}

#[test]
fn missing_folder_contents_name_the_config() {
    let tmp = tempfile::tempdir().unwrap();
    match load(tmp.path(), &LoadOptions::default()) {
        Err(LmdError::ModelConfig { path, .. }) => assert_eq!(path, tmp.path().join("config.json")),
        other => panic!("expected ModelConfig, got {:?}", other.err()),
    }
}

/// stories260K: the real pretrained llama2.c model. Teacher-forced on its documented greedy
/// output, the argmax of hidden · Eᵀ (E read straight from the file) predicts the next token.
#[test]
fn llama2c_stories260k_predicts_its_own_story() {
    let dir = shared("data/stories260K");
    let enc = load(&dir, &LoadOptions::default()).unwrap();
    assert_eq!(
        (enc.width(), enc.max_tokens(), enc.natural_pooling()),
        (64, 512, Pooling::LastToken)
    );
    let story = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
    let ids = enc.tokenize(&[story], 512).unwrap().remove(0);
    assert_eq!(ids[0], 1, "BOS first");
    let (x, m) = lmd::encoder::pad_batch(std::slice::from_ref(&ids), &Device::Cpu).unwrap();
    let h = enc.hidden_states(&x, &m).unwrap().squeeze(0).unwrap();
    let bytes = std::fs::read(dir.join("stories260K.bin")).unwrap();
    let emb: Vec<f32> = bytes[28..28 + 4 * 512 * 64]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let emb = Tensor::from_vec(emb, (512, 64), &Device::Cpu).unwrap();
    let pred = h
        .matmul(&emb.t().unwrap())
        .unwrap()
        .argmax(1)
        .unwrap()
        .to_vec1::<u32>()
        .unwrap();
    let hits = (1..ids.len()).filter(|&i| pred[i - 1] == ids[i]).count();
    let frac = hits as f64 / (ids.len() - 1) as f64;
    assert!(
        frac > 0.8,
        "next-token accuracy {frac} on the model's own greedy story"
    );
    // Decoder embeddings: last token differs from the mean, both finite.
    let e = enc
        .embed(&[story, "The dog"], 64, Pooling::LastToken)
        .unwrap();
    assert_eq!(e.dims(), &[2, 64]);
}

#[test]
fn truncated_llama2c_file_is_a_typed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let src = shared("data/stories260K");
    let bytes = std::fs::read(src.join("stories260K.bin")).unwrap();
    std::fs::write(tmp.path().join("m.bin"), &bytes[..bytes.len() - 100]).unwrap();
    std::fs::copy(src.join("tok512.bin"), tmp.path().join("tok512.bin")).unwrap();
    match load(tmp.path(), &LoadOptions::default()) {
        Err(LmdError::Weights { path, message }) => {
            assert_eq!(path, tmp.path().join("m.bin"));
            assert!(message.contains("truncated"), "{message}");
        }
        other => panic!("expected Weights error, got {:?}", other.err()),
    }
}

/// The vocabulary-file fallbacks tokenize as the folder's own `tokenizer.json`.
#[test]
fn vocab_file_tokenizers_match_tokenizer_json() {
    use lmd::encoder::TextTokenizer;
    let text = "The Valkyria Chronicles III, released in January 2011 — naïve café!";
    for (dir, files, roberta) in [
        (
            "models/all-MiniLM-L6-v2",
            &[
                ("vocab.txt", "vocab.txt"),
                ("tokenizer_config.json", "tokenizer_config.json"),
            ][..],
            false,
        ),
        (
            "data/gpt2",
            &[
                ("vocab.json", "vocab.json"),
                ("gpt2-merges.txt", "merges.txt"),
            ][..],
            false,
        ),
    ] {
        let src = shared(dir);
        let json = TextTokenizer::from_hf_dir(&src, roberta).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        for (from, to) in files {
            std::fs::copy(src.join(from), tmp.path().join(to)).unwrap();
        }
        let vocab = TextTokenizer::from_hf_dir(tmp.path(), roberta).unwrap();
        assert_eq!(vocab.path(), tmp.path().join(files[0].1));
        let a = json.encode_batch(&[text], 64).unwrap();
        let b = vocab.encode_batch(&[text], 64).unwrap();
        assert_eq!(a, b, "{dir}");
        assert!(a[0].len() > 10);
        // Truncation at T counts special tokens.
        assert_eq!(vocab.encode_batch(&[text], 5).unwrap()[0].len(), 5);
    }
}

#[test]
fn resolve_takes_folders_and_names_what_it_cannot_find() {
    let dir = shared("models/all-MiniLM-L6-v2");
    assert_eq!(lmd::encoder::resolve(dir.to_str().unwrap()).unwrap(), dir);
    if !cfg!(feature = "hub") {
        match lmd::encoder::resolve("no-such-org/no-such-model") {
            Err(LmdError::ModelSource { spec, .. }) => {
                assert_eq!(spec, "no-such-org/no-such-model")
            }
            other => panic!("expected ModelSource, got {other:?}"),
        }
    }
}

/// llama2.c's tokenizer (tok512.bin) gives the ids of SentencePiece on tok512.model, byte
/// fallback included (fixture from scripts/parity_fixtures.py).
#[test]
fn llama2c_tokenizer_matches_sentencepiece() {
    let enc = load(shared("data/stories260K"), &LoadOptions::default()).unwrap();
    let p = fixture("stories260k-tokens").join("expected.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    for (t, ids) in v["texts"]
        .as_array()
        .unwrap()
        .iter()
        .zip(v["ids"].as_array().unwrap())
    {
        let want: Vec<u32> = ids
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let got = enc.tokenize(&[t.as_str().unwrap()], 512).unwrap().remove(0);
        assert_eq!(got, want, "{t}");
    }
}
