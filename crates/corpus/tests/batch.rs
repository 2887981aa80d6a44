//! The batcher: labels per objective position by position, deterministic shuffled order,
//! resuming at a cursor gives the identical continuation (MLM masks included).

// Position-by-position checks read best with explicit indices.
#![allow(clippy::needless_range_loop)]

use corpus::{
    pack_bert_windows, BatchCursor, Batcher, BatcherConfig, CorpusError, MaskingConfig, Objective,
    SpecialTokens, TokenBatch, TrainingData, IGNORE_LABEL,
};

const SP: SpecialTokens = SpecialTokens {
    pad: 0,
    unk: 100,
    cls: 101,
    sep: 102,
    mask: 103,
};
const VOCAB: usize = 30522;

/// 23 windows of varying length (max 16) built from synthetic sentences.
fn data() -> TrainingData {
    let mut out = TrainingData::new(16);
    for d in 0..23u32 {
        let s1: Vec<u32> = (0..1 + d % 6).map(|i| 1000 + 100 * d + i).collect();
        let s2: Vec<u32> = (0..2 + d % 5).map(|i| 5000 + 100 * d + i).collect();
        pack_bert_windows(&[s1, s2], &SP, 16, &mut out).unwrap();
    }
    assert_eq!(out.len(), 23);
    out
}

fn batcher(objective: Objective, seed: u64, drop_last: bool) -> Batcher {
    let cfg = BatcherConfig {
        batch_size: 4,
        seed,
        drop_last,
    };
    Batcher::new(data(), objective, cfg, SP, VOCAB).unwrap()
}

fn mlm() -> Objective {
    Objective::MaskedLm(MaskingConfig::default())
}

fn take(b: &Batcher, from: BatchCursor, n: usize) -> Vec<(BatchCursor, TokenBatch)> {
    b.iter_from(from)
        .unwrap()
        .take(n)
        .map(|r| r.unwrap())
        .collect()
}

#[test]
fn causal_and_bidirectional_labels_position_by_position() {
    let d = data();
    for objective in [Objective::CausalLm, Objective::BidirectionalLm] {
        let b = batcher(objective, 3, false);
        let order = b.epoch_order(0);
        let batch = b.batch(BatchCursor::default()).unwrap();
        assert_eq!((batch.batch_size, batch.seq_len), (4, 16));
        for r in 0..4 {
            let src = d.ids(order[r]);
            let n = src.len();
            let row = r * 16..(r + 1) * 16;
            let (ids, mask, labels) = (
                &batch.input_ids[row.clone()],
                &batch.attention_mask[row.clone()],
                &batch.labels[row],
            );
            for t in 0..16 {
                if t < n {
                    assert_eq!((ids[t], mask[t]), (src[t], 1));
                } else {
                    assert_eq!((ids[t], mask[t], labels[t]), (SP.pad, 0, IGNORE_LABEL));
                }
            }
            for t in 0..n {
                let want = match objective {
                    Objective::CausalLm if t + 1 < n => src[t + 1],
                    Objective::CausalLm => IGNORE_LABEL,
                    _ => src[t],
                };
                assert_eq!(labels[t], want, "{objective:?} row {r} position {t}");
            }
        }
    }
}

#[test]
fn mlm_batches_label_only_masked_positions() {
    let d = data();
    let b = batcher(mlm(), 5, false);
    let mut seen = 0;
    for (cursor, batch) in take(&b, BatchCursor::default(), b.batches_per_epoch() as usize) {
        let order = b.epoch_order(cursor.epoch);
        for r in 0..batch.batch_size {
            let src = d.ids(order[cursor.position as usize * 4 + r]);
            let mut n_labels = 0;
            for t in 0..16 {
                let (id, label) = (batch.input_ids[r * 16 + t], batch.labels[r * 16 + t]);
                if t >= src.len() {
                    assert_eq!((id, label), (SP.pad, IGNORE_LABEL));
                } else if label == IGNORE_LABEL {
                    assert_eq!(id, src[t]);
                } else {
                    assert_eq!(label, src[t]);
                    assert!(!SP.contains(src[t]));
                    n_labels += 1;
                }
            }
            assert!(n_labels >= 1, "every sequence has a masked position");
            seen += 1;
        }
    }
    assert_eq!(seen, 23, "one epoch visits every sequence once");
}

#[test]
fn target_share_is_the_share_of_maskable_positions_that_get_a_label() {
    assert_eq!(Objective::CausalLm.target_share(), 1.0);
    assert_eq!(Objective::BidirectionalLm.target_share(), 1.0);
    for p in [0.15, 0.4] {
        let objective = Objective::MaskedLm(MaskingConfig {
            mask_prob: p,
            ..MaskingConfig::default()
        });
        assert_eq!(objective.target_share(), p);
        let b = batcher(objective, 7, false);
        let (mut targets, mut maskable) = (0usize, 0usize);
        for (_, batch) in take(&b, BatchCursor::default(), b.batches_per_epoch() as usize) {
            targets += batch.n_targets();
            maskable += batch
                .input_ids
                .iter()
                .zip(&batch.labels)
                .filter(|(&id, &l)| l != IGNORE_LABEL || !SP.contains(id))
                .count();
        }
        // Each window masks round(p * n), at least one, of its n maskable positions: the pooled
        // share is p up to that rounding (under one position per window, 23 windows).
        let share = targets as f64 / maskable as f64;
        assert!((share - p).abs() < 23.0 / maskable as f64, "{share} vs {p}");
    }
}

#[test]
fn order_is_a_seeded_permutation_per_epoch() {
    let b = batcher(mlm(), 11, false);
    let e0 = b.epoch_order(0);
    let mut sorted = e0.clone();
    sorted.sort();
    assert_eq!(sorted, (0..23).collect::<Vec<_>>());
    assert_ne!(e0, b.epoch_order(1), "epochs reshuffle");
    assert_eq!(e0, batcher(mlm(), 11, false).epoch_order(0));
    assert_ne!(e0, batcher(mlm(), 12, false).epoch_order(0));
    assert_eq!(b.batches_per_epoch(), 6);
    assert_eq!(batcher(mlm(), 11, true).batches_per_epoch(), 5);
    // The last batch of an epoch holds the remainder, unless dropped.
    let last = b
        .batch(BatchCursor {
            epoch: 0,
            position: 5,
        })
        .unwrap();
    assert_eq!(last.batch_size, 3);
    assert_eq!(last.input_ids.len(), 3 * 16);
}

#[test]
fn same_seed_same_batches_and_resume_is_exact() {
    let a = batcher(mlm(), 42, true);
    let b = batcher(mlm(), 42, true);
    let run = take(&a, BatchCursor::default(), 17); // more than three epochs
    assert_eq!(run, take(&b, BatchCursor::default(), 17));
    assert_ne!(
        run.iter().map(|x| &x.1).collect::<Vec<_>>(),
        take(&batcher(mlm(), 43, true), BatchCursor::default(), 17)
            .iter()
            .map(|x| &x.1)
            .collect::<Vec<_>>()
    );
    assert_eq!(
        run[5].0,
        BatchCursor {
            epoch: 1,
            position: 0
        }
    );
    // Save the cursor after 8 batches, serialize it, resume on a fresh batcher.
    let mut it = a.iter_from(BatchCursor::default()).unwrap();
    for _ in 0..8 {
        it.next().unwrap().unwrap();
    }
    let saved = serde_json::to_string(&it.cursor()).unwrap();
    let cursor: BatchCursor = serde_json::from_str(&saved).unwrap();
    assert_eq!(
        cursor,
        BatchCursor {
            epoch: 1,
            position: 3
        }
    );
    assert_eq!(take(&b, cursor, 9), run[8..].to_vec());
    // Random access agrees with streaming.
    assert_eq!(b.batch(cursor).unwrap(), run[8].1);
    assert!(matches!(
        b.batch(BatchCursor {
            epoch: 0,
            position: 5
        }),
        Err(CorpusError::InvalidArgument(_))
    ));
}

#[test]
fn segment_ids_follow_the_windows() {
    let d = data();
    let b = batcher(mlm(), 1, false);
    let cursor = BatchCursor {
        epoch: 2,
        position: 1,
    };
    let segs = b.segment_ids(cursor).unwrap();
    let order = b.epoch_order(2);
    for r in 0..4 {
        let i = order[4 + r];
        let want = d.segments(i);
        assert_eq!(&segs[r * 16..r * 16 + want.len()], want);
        assert!(segs[r * 16 + want.len()..(r + 1) * 16]
            .iter()
            .all(|&s| s == 0));
    }
}

#[test]
fn bad_configurations_are_errors() {
    let cfg = BatcherConfig {
        batch_size: 0,
        seed: 0,
        drop_last: false,
    };
    assert!(matches!(
        Batcher::new(data(), mlm(), cfg, SP, VOCAB),
        Err(CorpusError::InvalidArgument(_))
    ));
    let cfg = BatcherConfig {
        batch_size: 4,
        ..cfg
    };
    assert!(matches!(
        Batcher::new(TrainingData::new(16), mlm(), cfg, SP, VOCAB),
        Err(CorpusError::NotEnoughData(_))
    ));
    let big = BatcherConfig {
        batch_size: 64,
        drop_last: true,
        ..cfg
    };
    assert!(matches!(
        Batcher::new(data(), mlm(), big, SP, VOCAB),
        Err(CorpusError::NotEnoughData(_))
    ));
}
