//! Extraction: length-bucketed batches restore input order, streaming into joint moments equals
//! moments of the stacked embeddings, and the per-model store resumes exactly.

use lmd::encoder::{Encoder, Pooling};
use lmd::extract::{embed_into_moments, embed_texts, plan_batches, ExtractOptions};
use lmd::moments::Moments;
use lmd::store::EmbeddingStore;

mod fixture;

use fixture::{encoder as fixture, texts};

#[test]
fn batches_cover_every_sequence_within_budget() {
    let lengths = [5, 1, 9, 3, 9, 2, 7, 7, 4, 12];
    let batches = plan_batches(&lengths, 20, 3);
    let mut seen: Vec<usize> = batches.iter().flatten().copied().collect();
    seen.sort();
    assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
    for b in &batches {
        let longest = b.iter().map(|&i| lengths[i]).max().unwrap();
        assert!(b.len() <= 3);
        assert!(b.len() == 1 || b.len() * longest <= 20, "{b:?}");
    }
    // Longest first, so the one over-budget sequence (12) sits alone at the front.
    assert_eq!(batches[0], vec![9]);
}

#[test]
fn bucketed_extraction_keeps_input_order() {
    for name in ["bert", "gpt2"] {
        let enc = fixture(name);
        let texts = texts(23);
        let mut opts = ExtractOptions::new(10);
        opts.token_budget = 24;
        opts.progress = false;
        opts.pooling = Pooling::PaperDivideByT;
        let e = embed_texts(&enc, &texts, &opts).unwrap();
        assert_eq!((e.rows, e.width), (23, 32));
        for (i, t) in texts.iter().enumerate() {
            let one = enc
                .embed(&[t.as_str()], 10, Pooling::PaperDivideByT)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            let row = &e.data[i * 32..(i + 1) * 32];
            let d = one
                .iter()
                .zip(row)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(d < 1e-5, "{name}: row {i} differs by {d}");
        }
    }
}

#[test]
fn streaming_moments_equal_moments_of_stacked_embeddings() {
    let (a, b) = (fixture("bert"), fixture("distilbert"));
    let texts = texts(30);
    let mut opts = ExtractOptions::new(12);
    opts.progress = false;
    let names = vec!["bert".to_string(), "distilbert".to_string()];
    let mut streamed = Moments::new(names.clone(), vec![32, 32]).unwrap();
    let encs: [&dyn Encoder; 2] = [&a, &b];
    embed_into_moments(&encs, &texts, &opts, 7, &mut streamed).unwrap();
    let ea = embed_texts(&a, &texts, &opts).unwrap();
    let eb = embed_texts(&b, &texts, &opts).unwrap();
    let mut whole = Moments::new(names, vec![32, 32]).unwrap();
    whole.update(&[&ea.data, &eb.data]).unwrap();
    assert_eq!(streamed.n(), 30);
    let (m1, m2) = (streamed.mean().unwrap(), whole.mean().unwrap());
    assert!(m1.iter().zip(&m2).all(|(x, y)| (x - y).abs() < 1e-5));
    let (c1, c2) = (streamed.covariance().unwrap(), whole.covariance().unwrap());
    for i in 0..64 {
        for j in 0..64 {
            assert!((c1[(i, j)] - c2[(i, j)]).abs() < 1e-5);
        }
    }
}

#[test]
fn moments_refuse_encoders_in_another_order_than_their_models() {
    // Both fixtures are 32 wide, so only the names tell them apart.
    let (a, b) = (fixture("bert"), fixture("distilbert"));
    let mut opts = ExtractOptions::new(12);
    opts.progress = false;
    let names = vec!["bert".to_string(), "distilbert".to_string()];
    let mut m = Moments::new(names, vec![32, 32]).unwrap();
    let swapped: [&dyn Encoder; 2] = [&b, &a];
    let err = embed_into_moments(&swapped, &texts(5), &opts, 4, &mut m).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("encoder distilbert where the moments expect bert"),
        "{msg}"
    );
    assert_eq!(m.n(), 0, "nothing may be added before the refusal");
}

#[test]
fn store_resumes_finished_models_and_rejects_other_texts() {
    let enc = fixture("roberta");
    let tmp = tempfile::tempdir().unwrap();
    let store = EmbeddingStore::new(tmp.path());
    let texts = texts(9);
    let mut opts = ExtractOptions::new(8);
    opts.progress = false;
    let (first, reused) = store.get_or_embed(&enc, "train", &texts, &opts).unwrap();
    assert!(!reused);
    let path = store.path("roberta", "train", &opts);
    assert!(path.is_file());
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    let (again, reused) = store.get_or_embed(&enc, "train", &texts, &opts).unwrap();
    assert!(reused);
    assert_eq!(first.data, again.data);
    // Other texts (or another T) never reuse the file.
    let other = texts[1..].to_vec();
    assert!(store.load(&enc, "train", &other, &opts).unwrap().is_none());
    let (_, reused) = store.get_or_embed(&enc, "train", &other, &opts).unwrap();
    assert!(!reused);
}
