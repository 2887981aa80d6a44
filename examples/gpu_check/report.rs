//! Check results: one line per check in a table, the JSON report, errors as sentences.

use std::error::Error;

use serde_json::{json, Value};

use crate::common::sentence;

/// The error type of the checks: anything that prints as a sentence.
pub type BoxError = Box<dyn Error>;

/// Which side of its bound a measured value must lie on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    /// The value must be at most this (differences, counts).
    AtMost(f64),
    /// The value must be at least this (cosine similarities).
    AtLeast(f64),
}

impl Bound {
    /// Whether `v` satisfies the bound (NaN never does).
    fn holds(self, v: f64) -> bool {
        match self {
            Bound::AtMost(b) => v <= b,
            Bound::AtLeast(b) => v >= b,
        }
    }

    /// `<=` or `>=`.
    fn symbol(self) -> &'static str {
        match self {
            Bound::AtMost(_) => "<=",
            Bound::AtLeast(_) => ">=",
        }
    }

    /// The bound's number.
    fn value(self) -> f64 {
        match self {
            Bound::AtMost(b) | Bound::AtLeast(b) => b,
        }
    }
}

/// One comparison: what was measured, against which bound, and whether it held.
#[derive(Debug, Clone)]
pub struct Check {
    /// `group/subject/aspect`, e.g. `grad/gpt/tiny/f32`.
    pub name: String,
    /// What the value is, in words (printed in the table).
    pub metric: &'static str,
    /// The measured value (NaN when it could not be measured).
    pub value: f64,
    /// The bound it must satisfy.
    pub bound: Bound,
    /// Where the worst case was, or the error that stopped the measurement.
    pub detail: String,
}

impl Check {
    /// A measured check.
    pub fn new(name: impl Into<String>, metric: &'static str, value: f64, bound: Bound) -> Self {
        Self {
            name: name.into(),
            metric,
            value,
            bound,
            detail: String::new(),
        }
    }

    /// The same check with a note on where its worst case was.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    /// A check that could not be measured: it fails and carries the error as a sentence.
    pub fn failed(name: impl Into<String>, error: &dyn Error) -> Self {
        Self::new(name, "ran without an error", f64::NAN, Bound::AtMost(0.0))
            .with_detail(sentence(error))
    }

    /// Whether the value satisfies the bound.
    pub fn pass(&self) -> bool {
        self.bound.holds(self.value)
    }
}

/// Runs a group of checks; an error becomes one failed check named `name`, so one broken
/// model or style does not hide the results of the others.
pub fn guarded(name: &str, f: impl FnOnce() -> Result<Vec<Check>, BoxError>) -> Vec<Check> {
    f().unwrap_or_else(|e| vec![Check::failed(name, e.as_ref())])
}

/// A number for the table: plain decimals between 0.01 and 100 (cosines keep six decimals),
/// scientific notation otherwise, `-` for NaN.
fn number(v: f64) -> String {
    if v.is_nan() {
        "-".to_string()
    } else if v == 0.0 {
        "0".to_string()
    } else if (0.01..100.0).contains(&v.abs()) {
        format!("{v:.6}")
    } else {
        format!("{v:.3e}")
    }
}

/// A bound for the table: `0`, plain decimals between 0.01 and 1000, else `1e-4` style.
fn bound_text(b: f64) -> String {
    if b == 0.0 || (0.01..1000.0).contains(&b.abs()) {
        format!("{b}")
    } else {
        format!("{b:e}")
    }
}

/// Prints the table: name, metric, measured value, bound, PASS/FAIL, detail.
pub fn print_table(checks: &[Check]) {
    let w = checks
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let m = checks
        .iter()
        .map(|c| c.metric.len())
        .max()
        .unwrap_or(6)
        .max(6);
    println!(
        "{:<w$}  {:<m$}  {:>10}  {:<11}  result  detail",
        "check", "metric", "measured", "bound"
    );
    for c in checks {
        println!(
            "{:<w$}  {:<m$}  {:>10}  {} {:<8}  {:<6}  {}",
            c.name,
            c.metric,
            number(c.value),
            c.bound.symbol(),
            bound_text(c.bound.value()),
            if c.pass() { "PASS" } else { "FAIL" },
            c.detail
        );
    }
}

/// The JSON report: `meta` (device, seed, ...), every check, the failed ones by name, and the
/// notices (skipped parts).
pub fn to_json(meta: Value, checks: &[Check], notices: &[String]) -> Value {
    let rows: Vec<Value> = checks.iter().map(row).collect();
    let failed: Vec<&str> = failed(checks);
    json!({
        "meta": meta,
        "passed": failed.is_empty(),
        "n_checks": checks.len(),
        "failed": failed,
        "notices": notices,
        "checks": rows,
    })
}

/// One check as JSON (a value that is not finite is written as text: `NaN`).
fn row(c: &Check) -> Value {
    let value = if c.value.is_finite() {
        json!(c.value)
    } else {
        json!(c.value.to_string())
    };
    let kind = match c.bound {
        Bound::AtMost(_) => "at_most",
        Bound::AtLeast(_) => "at_least",
    };
    json!({
        "name": c.name,
        "metric": c.metric,
        "value": value,
        "bound": c.bound.value(),
        "bound_kind": kind,
        "result": if c.pass() { "PASS" } else { "FAIL" },
        "detail": c.detail,
    })
}

/// The names of the checks that failed.
pub fn failed(checks: &[Check]) -> Vec<&str> {
    checks
        .iter()
        .filter(|c| !c.pass())
        .map(|c| c.name.as_str())
        .collect()
}
