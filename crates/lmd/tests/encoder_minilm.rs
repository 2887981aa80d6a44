//! The real pretrained all-MiniLM-L6-v2 (BERT, 6 layers, width 384) from `../shared/models`:
//! parity with transformers' masked-mean embeddings, semantic sanity, and how pooling modes and
//! padding relate.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, IndexOp, Tensor};
use lmd::encoder::{load, pool, Encoder, LoadOptions, LoadedEncoder, Pooling};
use lmd::LmdError;

fn minilm() -> LoadedEncoder {
    let p = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/models/all-MiniLM-L6-v2"
    ));
    assert!(p.is_dir(), "missing shared model folder {}", p.display());
    load(&p, &LoadOptions::default()).unwrap()
}

fn max_abs(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar()
        .unwrap()
}

fn cosine(e: &Tensor, i: usize, j: usize) -> f32 {
    let a = e.i(i).unwrap();
    let b = e.i(j).unwrap();
    let dot = (&a * &b)
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let na = a
        .sqr()
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
        .sqrt();
    let nb = b
        .sqr()
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
        .sqrt();
    dot / (na * nb)
}

#[test]
fn minilm_matches_transformers_masked_mean() {
    let enc = minilm();
    assert_eq!((enc.width(), enc.max_tokens()), (384, 512));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/minilm-reference");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("texts.json")).unwrap()).unwrap();
    let texts: Vec<&str> = v["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let t = v["t"].as_u64().unwrap() as usize;
    let exp =
        candle_core::safetensors::load(dir.join("expected.safetensors"), &Device::Cpu).unwrap();
    let ids = enc.tokenize(&texts, t).unwrap();
    let exp_ids = exp["input_ids"]
        .to_dtype(DType::U32)
        .unwrap()
        .to_vec2::<u32>()
        .unwrap();
    for (ours, theirs) in ids.iter().zip(&exp_ids) {
        assert_eq!(ours.as_slice(), &theirs[..ours.len()]);
        assert!(
            theirs[ours.len()..].iter().all(|&x| x == 0),
            "ids shorter than transformers'"
        );
    }
    let e = enc.embed(&texts, t, Pooling::MaskedMean).unwrap();
    let d = max_abs(&e, &exp["mean"]);
    assert!(
        d < 1e-4,
        "MiniLM masked mean differs from transformers by {d:e}"
    );
    // Paraphrases closer than an unrelated sentence.
    assert!(
        cosine(&e, 0, 1) > cosine(&e, 0, 2) + 0.3,
        "{} vs {}",
        cosine(&e, 0, 1),
        cosine(&e, 0, 2)
    );
}

#[test]
fn pooling_modes_relate_and_padding_changes_nothing() {
    let enc = minilm();
    let texts = [
        "A man is eating food.",
        "Some rain fell on the quiet old town last night.",
        "Hi",
    ];
    let t = 20;
    let ids = enc.tokenize(&texts, t).unwrap();
    let lens: Vec<f32> = ids.iter().map(|s| s.len() as f32).collect();
    assert!(
        lens.iter().all(|&l| l as usize <= t) && lens[2] == 3.0,
        "{lens:?}"
    );
    let mean = enc.embed_ids(&ids, t, Pooling::MaskedMean).unwrap();
    let paper = enc.embed_ids(&ids, t, Pooling::PaperDivideByT).unwrap();
    // PaperDivideByT = MaskedMean × (real tokens / T).
    let ratio = Tensor::from_vec(
        lens.iter().map(|l| l / t as f32).collect::<Vec<_>>(),
        (3, 1),
        &Device::Cpu,
    )
    .unwrap();
    assert!(max_abs(&paper, &mean.broadcast_mul(&ratio).unwrap()) < 1e-5);
    // Cls and LastToken read single positions of the hidden states.
    let cls = enc.embed_ids(&ids, t, Pooling::Cls).unwrap();
    let last = enc.embed_ids(&ids, t, Pooling::LastToken).unwrap();
    for (i, s) in ids.iter().enumerate() {
        let one = enc
            .embed_ids(std::slice::from_ref(s), t, Pooling::MaskedMean)
            .unwrap();
        // A padded batch equals the unpadded single-sentence run.
        assert!(
            max_abs(&one, &mean.i(i..i + 1).unwrap()) < 1e-4,
            "padding changed sentence {i}"
        );
        let (x, m) = lmd::encoder::pad_batch(std::slice::from_ref(s), &Device::Cpu).unwrap();
        let h = enc.hidden_states(&x, &m).unwrap();
        assert!(max_abs(&cls.i(i..i + 1).unwrap(), &h.i((.., 0, ..)).unwrap()) < 1e-4);
        let k = s.len() - 1;
        assert!(max_abs(&last.i(i..i + 1).unwrap(), &h.i((.., k, ..)).unwrap()) < 1e-4);
        let direct = pool(&h, &m, t, Pooling::MaskedMean).unwrap();
        assert!(max_abs(&direct, &h.mean(1).unwrap()) < 1e-5);
    }
}

#[test]
fn t_above_positions_is_a_typed_error() {
    let enc = minilm();
    match enc.tokenize(&["x"], 513) {
        Err(LmdError::SequenceTooLong {
            t: 513,
            max: 512,
            path,
        }) => {
            assert!(path.ends_with("all-MiniLM-L6-v2"))
        }
        other => panic!("expected SequenceTooLong, got {other:?}"),
    }
}

/// Half precision keeps the padding mask finite (candle's BERT mask, built from f32::MIN,
/// turns into NaN there): a padded bf16 batch stays finite and close to f32.
#[test]
fn bf16_padded_batch_is_finite_and_close_to_f32() {
    let p = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/models/all-MiniLM-L6-v2"
    ));
    let opts = LoadOptions {
        device: Device::Cpu,
        dtype: DType::BF16,
    };
    let half = load(&p, &opts).unwrap();
    let full = minilm();
    let texts = [
        "A man is eating food.",
        "Hi",
        "The stock market fell sharply today.",
    ];
    let a = half.embed(&texts, 16, Pooling::MaskedMean).unwrap();
    let b = full.embed(&texts, 16, Pooling::MaskedMean).unwrap();
    assert_eq!(a.dtype(), DType::F32);
    for i in 0..3 {
        let (x, y) = (a.i(i).unwrap(), b.i(i).unwrap());
        let dot = (&x * &y)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let nx = x
            .sqr()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            .sqrt();
        let ny = y
            .sqr()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            .sqrt();
        assert!(
            dot / (nx * ny) > 0.99,
            "bf16 vs f32 cosine {} for text {i}",
            dot / (nx * ny)
        );
    }
}
