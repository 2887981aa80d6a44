//! Whether two metrics logs record one and the same training: the test that a weight snapshot
//! written by a second run of a training (phase 1 run again on another machine up to the
//! snapshot) is a point of the first. Training repeats bit for bit on the same arithmetic, so
//! every line the two logs share must carry the same numbers; other arithmetic (another kind
//! of GPU, other kernels) parts them within a few updates.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::metrics::read_lines;
use crate::{Result, TowersError};

/// The fields of a log line that the training's arithmetic decides (not its speed). All must
/// be equal but the gradient norm, which must agree within [`GRAD_NORM_RTOL`].
pub const DETERMINED_FIELDS: [&str; 6] = [
    "tokens",
    "loss",
    "grad_norm",
    "lr",
    "val_loss",
    "total_steps",
];

/// Relative tolerance on the logged gradient norm. Its squares are summed in f64, on a GPU in
/// an order that [`crate::clip_grad_norm`]'s code has changed (27 Nov 2026: one device-side sum
/// instead of a sum on the host), which moves its last digits (about 1e-16 relative) but not
/// the f32 clip factor; two different models differ by far more.
pub const GRAD_NORM_RTOL: f64 = 1e-12;

/// Whether `field` has the same value in two lines of the same training.
fn agree(field: &str, a: Option<&Value>, b: Option<&Value>) -> bool {
    match (field, a.and_then(Value::as_f64), b.and_then(Value::as_f64)) {
        ("grad_norm", Some(x), Some(y)) => (x - y).abs() <= GRAD_NORM_RTOL * x.abs().max(y.abs()),
        _ => a == b,
    }
}

/// The first field in which a second log departs from the reference.
#[derive(Debug, Clone, PartialEq)]
pub struct LogDifference {
    /// The update of the line.
    pub step: u64,
    /// The field ([`DETERMINED_FIELDS`]).
    pub field: String,
    /// Its value in the reference log.
    pub reference: Value,
    /// Its value in the other log.
    pub other: Value,
}

/// How a second log of a training agrees with the reference log ([`compare_logs`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LogAgreement {
    /// Lines (update or validation lines at one step) found in both logs.
    pub shared: usize,
    /// The first shared line whose numbers differ, if any.
    pub difference: Option<LogDifference>,
    /// The first update of a reference line that the other log lacks (`None`: it has them all).
    pub first_missing: Option<u64>,
}

impl LogAgreement {
    /// Whether the other log vouches for update `step` of the reference's training: it
    /// shares at least one line with the reference, departs from it nowhere, and repeats every
    /// reference line up to and including update `step`.
    pub fn repeats_up_to(&self, step: u64) -> bool {
        self.shared > 0 && self.difference.is_none() && self.first_missing.is_none_or(|m| m > step)
    }
}

/// The log's update lines (with `loss`) and validation lines (with `val_loss`), keyed by
/// (update, is validation); the first line of each key wins (a resumed training logs again
/// what it logged past its checkpoint, with the same numbers).
fn lines_by_step(path: &Path) -> Result<BTreeMap<(u64, bool), Value>> {
    let lines = read_lines::<Value>(path)?.ok_or_else(|| TowersError::Checkpoint {
        path: path.display().to_string(),
        msg: "no metrics log there".into(),
    })?;
    let mut by = BTreeMap::new();
    for v in lines {
        let Some(step) = v.get("step").and_then(Value::as_u64) else {
            continue;
        };
        let kind = match (v.get("loss").is_some(), v.get("val_loss").is_some()) {
            (true, _) => false,
            (false, true) => true,
            (false, false) => continue,
        };
        by.entry((step, kind)).or_insert(v);
    }
    Ok(by)
}

/// Compares the metrics log `other` with the `reference` log of the same training, line by
/// line at the updates both logged, in the [`DETERMINED_FIELDS`]; a [`TowersError::Checkpoint`]
/// naming the file where either log is missing.
pub fn compare_logs(reference: &Path, other: &Path) -> Result<LogAgreement> {
    let (a, b) = (lines_by_step(reference)?, lines_by_step(other)?);
    let mut agreement = LogAgreement {
        shared: 0,
        difference: None,
        first_missing: None,
    };
    for (key, ra) in &a {
        let Some(rb) = b.get(key) else {
            agreement.first_missing.get_or_insert(key.0);
            continue;
        };
        agreement.shared += 1;
        if agreement.difference.is_some() {
            continue;
        }
        let differs = DETERMINED_FIELDS
            .iter()
            .find(|f| ra.get(**f).is_some() && !agree(f, ra.get(**f), rb.get(**f)));
        if let Some(f) = differs {
            agreement.difference = Some(LogDifference {
                step: key.0,
                field: f.to_string(),
                reference: ra[*f].clone(),
                other: rb.get(*f).cloned().unwrap_or(Value::Null),
            });
        }
    }
    Ok(agreement)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{MetricsLog, METRICS_FILE};
    use serde_json::json;

    fn write(path: &Path, lines: &[Value]) {
        let mut log = MetricsLog::open(path).unwrap();
        for l in lines {
            log.log(l).unwrap();
        }
    }

    fn update(step: u64, loss: f64, rate: f64) -> Value {
        json!({"step": step, "tokens": step * 2048, "loss": loss, "grad_norm": 1.5,
               "lr": 1e-3, "tokens_per_s": rate, "total_steps": 40})
    }

    /// `update` with another gradient norm.
    fn with_norm(mut v: Value, norm: f64) -> Value {
        v["grad_norm"] = json!(norm);
        v
    }

    #[test]
    fn a_second_run_agrees_where_it_logged_and_stops_being_compared_where_it_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let (reference, other) = (dir.path().join(METRICS_FILE), dir.path().join("b.jsonl"));
        let full: Vec<Value> = (1..=4)
            .map(|k| update(10 * k, 5.0 - k as f64 / 10.0, 1000.0))
            .chain([json!({"step": 20, "val_loss": 4.7})])
            .collect();
        write(&reference, &full);
        // Run again to update 20 only, at another speed, with a line cut off by the stop, and
        // a gradient norm summed in another order (its last bit).
        let mut again: Vec<Value> = (1..=2)
            .map(|k| update(10 * k, 5.0 - k as f64 / 10.0, 5.0))
            .collect();
        again[1] = with_norm(again[1].clone(), f64::from_bits(1.5f64.to_bits() + 1));
        again.push(json!({"step": 20, "val_loss": 4.7}));
        write(&other, &again);
        std::fs::write(
            &other,
            std::fs::read_to_string(&other).unwrap() + "{\"step\": 30, \"lo",
        )
        .unwrap();
        let got = compare_logs(&reference, &other).unwrap();
        assert_eq!(got.shared, 3);
        assert_eq!(got.difference, None);
        assert_eq!(got.first_missing, Some(30));
        assert!(got.repeats_up_to(25));
        assert!(!got.repeats_up_to(30));
        // A log that shares no line vouches for nothing, however early the update.
        write(&dir.path().join("c.jsonl"), &[update(5, 5.0, 1.0)]);
        let none = compare_logs(&reference, &dir.path().join("c.jsonl")).unwrap();
        assert_eq!((none.shared, none.first_missing), (0, Some(10)));
        assert!(!none.repeats_up_to(5));
    }

    #[test]
    fn a_field_the_reference_did_not_log_yet_is_not_compared() {
        // Logs written before 27 Nov 2026 (bert-s1's phase 1) have no `total_steps`; the same
        // training run again by today's code logs it.
        let dir = tempfile::tempdir().unwrap();
        let (reference, other) = (dir.path().join(METRICS_FILE), dir.path().join("b.jsonl"));
        let mut old = update(10, 5.0, 1.0);
        old.as_object_mut().unwrap().remove("total_steps");
        write(&reference, &[old]);
        write(&other, &[update(10, 5.0, 3.0)]);
        let got = compare_logs(&reference, &other).unwrap();
        assert!(got.repeats_up_to(10));
        assert_eq!((got.shared, got.difference), (1, None));
    }

    #[test]
    fn the_first_differing_number_is_named_with_both_values() {
        let dir = tempfile::tempdir().unwrap();
        let (reference, other) = (dir.path().join(METRICS_FILE), dir.path().join("b.jsonl"));
        write(&reference, &[update(10, 5.0, 1.0), update(20, 4.5, 1.0)]);
        // The last digit of one loss: other arithmetic.
        write(
            &other,
            &[update(10, 5.0, 1.0), update(20, 4.500000000000001, 1.0)],
        );
        let got = compare_logs(&reference, &other).unwrap();
        let d = got.difference.clone().unwrap();
        assert_eq!((d.step, d.field.as_str()), (20, "loss"));
        assert_eq!(
            (d.reference, d.other),
            (json!(4.5), json!(4.500000000000001))
        );
        assert!(
            !got.repeats_up_to(10),
            "a log that departs anywhere is not the run's"
        );
        // A gradient norm a millionth apart: another model.
        let c = dir.path().join("c.jsonl");
        write(&c, &[with_norm(update(10, 5.0, 1.0), 1.5 * (1.0 + 1e-6))]);
        let d = compare_logs(&reference, &c).unwrap().difference.unwrap();
        assert_eq!((d.step, d.field.as_str()), (10, "grad_norm"));
        // A missing log is an error naming it.
        let err = compare_logs(&reference, &dir.path().join("none.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("none.jsonl") && err.contains("no metrics log"),
            "{err}"
        );
    }
}
