//! Parity with Hugging Face transformers: tiny random checkpoints written by
//! `scripts/parity_fixtures.py` (fixed seeds) with their token ids and last hidden states.
//! Every architecture must reproduce the tokenization exactly and the hidden states of the real
//! (unpadded) positions to 1e-4 in f32.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use lmd::encoder::{load, Encoder, LoadOptions};

fn fixture(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    assert!(
        p.is_dir(),
        "missing fixture {} (run scripts/parity_fixtures.py)",
        p.display()
    );
    p
}

fn texts(dir: &Path) -> (Vec<String>, usize) {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("texts.json")).unwrap()).unwrap();
    let texts = v["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    (texts, v["t"].as_u64().unwrap() as usize)
}

fn rows(t: &Tensor) -> Vec<Vec<u32>> {
    t.to_dtype(DType::U32).unwrap().to_vec2::<u32>().unwrap()
}

/// Loads the fixture, checks ids and hidden states against transformers.
fn check(name: &str) {
    let dir = fixture(name);
    let enc = load(&dir, &LoadOptions::default()).unwrap();
    let exp =
        candle_core::safetensors::load(dir.join("expected.safetensors"), &Device::Cpu).unwrap();
    let (texts, t) = texts(&dir);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let ids = enc.tokenize(&refs, t).unwrap();
    let exp_ids = rows(&exp["input_ids"]);
    let exp_mask = rows(&exp["attention_mask"]);
    for (i, (ours, theirs)) in ids.iter().zip(&exp_ids).enumerate() {
        let n = exp_mask[i].iter().filter(|&&m| m == 1).count();
        assert_eq!(
            ours.as_slice(),
            &theirs[..n],
            "{name}: token ids of text {i}"
        );
    }
    let ids_t = exp["input_ids"].to_dtype(DType::U32).unwrap();
    let mask = exp["attention_mask"].to_dtype(DType::F32).unwrap();
    let h = enc.hidden_states(&ids_t, &mask).unwrap();
    let want = &exp["hidden"];
    assert_eq!(h.dims(), want.dims(), "{name}: hidden shape");
    // Only real positions: padded positions are ignored by every pooling.
    let m = mask.unsqueeze(2).unwrap();
    let diff = (h - want)
        .unwrap()
        .broadcast_mul(&m)
        .unwrap()
        .abs()
        .unwrap();
    let max = diff
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let scale = want
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(
        scale > 0.1,
        "{name}: reference hidden states are degenerate"
    );
    assert!(max < 1e-4, "{name}: max |ours - transformers| = {max:e}");
}

#[test]
fn bert_matches_transformers() {
    check("bert");
}

#[test]
fn roberta_matches_transformers() {
    check("roberta");
}

#[test]
fn xlm_roberta_matches_transformers() {
    check("xlm-roberta");
}

#[test]
fn electra_matches_transformers() {
    check("electra");
}

#[test]
fn distilbert_matches_transformers() {
    check("distilbert");
}

#[test]
fn albert_matches_transformers() {
    check("albert");
}

#[test]
fn gpt2_matches_transformers() {
    check("gpt2");
}

#[test]
fn longformer_sliding_window_matches_transformers() {
    // Windows 4 and 6 (one side 2 and 3) over up to 12 tokens: the band matters.
    check("longformer");
}

#[test]
fn deberta_v2_matches_transformers() {
    // Relative positions log-bucketed into 8 buckets over 12 tokens, p2c + c2p attention.
    check("deberta-v2");
}

#[test]
fn deberta_v1_matches_transformers() {
    // max_relative_positions = 8 < 12 tokens: the clamp of relative distances is exercised.
    check("deberta");
}

#[test]
fn xlnet_matches_transformers() {
    check("xlnet");
}
