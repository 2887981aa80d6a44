//! MLM masking: rates (15%, 80/10/10) on a large sample, specials and PAD never touched,
//! labels only at masked positions.

// Position-by-position checks read best with explicit indices.
#![allow(clippy::needless_range_loop)]

use corpus::{mask_sequence, CorpusError, MaskingConfig, SpecialTokens, IGNORE_LABEL};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const SP: SpecialTokens = SpecialTokens {
    pad: 0,
    unk: 100,
    cls: 101,
    sep: 102,
    mask: 103,
};
const VOCAB: usize = 30522;

/// `[CLS] w… [SEP] w… [SEP] [PAD]…` with `n` words in 128 positions.
fn window(n: usize, offset: u32) -> Vec<u32> {
    let mut ids = vec![SP.cls];
    for i in 0..n {
        ids.push(1000 + ((i as u32 * 7 + offset) % 5000));
        if i == n / 2 {
            ids.push(SP.sep);
        }
    }
    ids.push(SP.sep);
    ids.resize(128, SP.pad);
    ids
}

#[test]
fn rates_match_80_10_10_and_specials_are_never_chosen() {
    let cfg = MaskingConfig::default();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (mut chosen, mut as_mask, mut random, mut kept, mut eligible) = (0, 0, 0, 0, 0);
    for s in 0..2000 {
        let n = 20 + s % 100;
        let orig = window(n, s as u32);
        let mut ids = orig.clone();
        let mut labels = vec![0; 128];
        let k = mask_sequence(&mut ids, &mut labels, &SP, VOCAB, &cfg, &mut rng).unwrap();
        assert_eq!(k, ((0.15 * n as f64).round() as usize).max(1));
        eligible += n;
        for t in 0..128 {
            if SP.contains(orig[t]) {
                assert_eq!(ids[t], orig[t], "special or PAD changed at {t}");
                assert_eq!(labels[t], IGNORE_LABEL);
                continue;
            }
            if labels[t] == IGNORE_LABEL {
                assert_eq!(ids[t], orig[t], "unlabelled position changed");
                continue;
            }
            assert_eq!(labels[t], orig[t], "label is the original token");
            chosen += 1;
            if ids[t] == SP.mask {
                as_mask += 1;
            } else if ids[t] == orig[t] {
                kept += 1;
            } else {
                assert!(!SP.contains(ids[t]) && (ids[t] as usize) < VOCAB);
                random += 1;
            }
        }
        assert_eq!(labels.iter().filter(|&&l| l != IGNORE_LABEL).count(), k);
    }
    let f = |x: usize| x as f64 / chosen as f64;
    let rate = chosen as f64 / eligible as f64;
    assert!((rate - 0.15).abs() < 0.005, "mask rate {rate}");
    assert!((f(as_mask) - 0.8).abs() < 0.01, "[MASK] {}", f(as_mask));
    // A random replacement can hit the original token (1 in ~30k): ignore that.
    assert!((f(random) - 0.1).abs() < 0.01, "random {}", f(random));
    assert!((f(kept) - 0.1).abs() < 0.01, "kept {}", f(kept));
}

#[test]
fn at_least_one_position_and_edge_cases() {
    let cfg = MaskingConfig::default();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut ids = vec![SP.cls, 2000, SP.sep, SP.pad];
    let mut labels = vec![0; 4];
    assert_eq!(
        mask_sequence(&mut ids, &mut labels, &SP, VOCAB, &cfg, &mut rng).unwrap(),
        1
    );
    assert_eq!(labels, [IGNORE_LABEL, 2000, IGNORE_LABEL, IGNORE_LABEL]);
    // Nothing maskable: nothing chosen, all labels ignored.
    let mut ids = vec![SP.cls, SP.sep, SP.pad];
    let mut labels = vec![5; 3];
    assert_eq!(
        mask_sequence(&mut ids, &mut labels, &SP, VOCAB, &cfg, &mut rng).unwrap(),
        0
    );
    assert_eq!(labels, [IGNORE_LABEL; 3]);
    // Errors.
    let mut labels = vec![0; 2];
    assert!(matches!(
        mask_sequence(&mut ids, &mut labels, &SP, VOCAB, &cfg, &mut rng),
        Err(CorpusError::InvalidArgument(_))
    ));
    let bad = MaskingConfig {
        replace_mask: 0.9,
        replace_random: 0.2,
        ..cfg
    };
    assert!(bad.validate().is_err());
    assert!(MaskingConfig::default().validate().is_ok());
    // mask_sequence checks its rates itself: a NaN rate would otherwise mask one position.
    let mut ids = vec![SP.cls, 2000, 2001, SP.sep];
    let mut labels = vec![0; 4];
    for bad in [
        MaskingConfig {
            mask_prob: f64::NAN,
            ..cfg
        },
        MaskingConfig {
            replace_mask: f64::NAN,
            ..cfg
        },
        MaskingConfig {
            mask_prob: 3.0,
            ..cfg
        },
    ] {
        assert!(matches!(
            mask_sequence(&mut ids, &mut labels, &SP, VOCAB, &bad, &mut rng),
            Err(CorpusError::InvalidArgument(_))
        ));
    }
}
