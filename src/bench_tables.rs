//! The GPU throughput tables of docs/gpu.md, made from the JSON lines that a lent session's
//! `scripts/gpu_session.sh throughput` and `speed` steps bring back: the `train_step` and
//! `extract` one-shots (ours) and the PyTorch and transformers peers (`scripts/peer_*.py`) on
//! the same shapes, and the moments' accumulation of LMD (`MOMENTS_ONESHOT`). Ours and a peer are paired by style, shape, batch and dtype; the peer's
//! MFU uses our model FLOPs per token and the peak that our line's own MFU implies, so that
//! both columns count the same work against the same device.

use report::{Cell, Table};
use serde_json::Value;

/// One line of a throughput log, as far as the tables read it.
#[derive(Debug, Clone, PartialEq)]
pub enum BenchLine {
    /// Our two-tower training step (`TRAIN_STEP_ONESHOT`).
    Ours(Value),
    /// A PyTorch two-tower training step (`peer_two_tower_*.py`).
    Peer(Value),
    /// Our encoder extraction (`EXTRACT_ONESHOT`).
    OursExtract(Value),
    /// transformers' extraction (`peer_extract.py`).
    PeerExtract(Value),
    /// The moments' accumulation (`MOMENTS_ONESHOT`), on the host and through a device.
    Moments(Value),
}

impl BenchLine {
    /// The line's kind from its fields; `None` for a line of another kind (or not JSON).
    pub fn parse(line: &str) -> Option<BenchLine> {
        let v: Value = serde_json::from_str(line.trim()).ok()?;
        let has = |k: &str| v.get(k).is_some();
        Some(if has("moments_d") {
            BenchLine::Moments(v)
        } else if has("model_gflop_per_token") && has("tokens_per_s") {
            BenchLine::Ours(v)
        } else if has("tokens_per_s") && has("threads") {
            BenchLine::Peer(v)
        } else if has("peer") && has("seq_per_s") {
            BenchLine::PeerExtract(v)
        } else if has("seq_per_s") {
            BenchLine::OursExtract(v)
        } else {
            return None;
        })
    }
}

/// The lines of a log that the tables read, in order, and how many others it held.
pub fn parse_log(text: &str) -> (Vec<BenchLine>, usize) {
    let (mut lines, mut other) = (Vec::new(), 0);
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        match BenchLine::parse(l) {
            Some(b) => lines.push(b),
            None => other += 1,
        }
    }
    (lines, other)
}

fn text(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::String(s)) => s.to_lowercase(),
        Some(x) if !x.is_null() => x.to_string(),
        _ => String::new(),
    }
}

fn num(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

/// The shape as both sides name it (the GPT/BERT peer says `base` for `base_2tower`).
fn shape(v: &Value) -> String {
    match text(v, "shape").as_str() {
        "base" => "base_2tower".into(),
        "large" => "large_2tower".into(),
        s => s.into(),
    }
}

/// (style, shape, batch, dtype) of a training line, lower case.
fn key(v: &Value) -> (String, String, String, String) {
    (
        text(v, "style"),
        shape(v),
        text(v, "batch"),
        text(v, "dtype"),
    )
}

fn count(x: f64) -> Cell {
    Cell::Text(format!("{x:.0}"))
}

fn percent(x: f64) -> Cell {
    Cell::Text(format!("{:.2}%", 100.0 * x))
}

/// A peer's MFU; above 100% in f32 it ran on TF32 tensor cores (cuDNN's LSTM does), whose
/// peak the f32 one is not.
fn peer_mfu(mfu: f64, dtype: &str) -> Cell {
    match (mfu > 1.0, dtype) {
        (true, "f32") => Cell::Text(format!("{:.2}% (TF32)", 100.0 * mfu)),
        _ => percent(mfu),
    }
}

fn or_empty(x: Option<Cell>) -> Cell {
    x.unwrap_or(Cell::Empty)
}

/// The kernels a line ran without (`cuda_kernels_off`), or `all on`.
fn kernels(v: &Value) -> String {
    match v.get("cuda_kernels_off").and_then(Value::as_array) {
        Some(off) if !off.is_empty() => {
            let names: Vec<&str> = off.iter().filter_map(Value::as_str).collect();
            format!("off: {}", names.join(", "))
        }
        Some(_) => "all on".into(),
        None => String::new(),
    }
}

/// The columns that name one of our training lines, in both tables.
const RUN_COLUMNS: [&str; 5] = ["style", "shape", "batch", "dtype", "kernels"];

/// A table whose first columns are [`RUN_COLUMNS`], then `rest`.
fn run_table(rest: &[&str]) -> Table {
    Table::new(
        RUN_COLUMNS
            .iter()
            .chain(rest)
            .map(|c| c.to_string())
            .collect(),
    )
}

/// The [`RUN_COLUMNS`] cells of our line `o`, then `rest`.
fn run_row(o: &Value, rest: Vec<Cell>) -> Vec<Cell> {
    let (style, shape, batch, dtype) = key(o);
    let mut row: Vec<Cell> = vec![
        style.into(),
        shape.into(),
        batch.into(),
        dtype.into(),
        kernels(o).into(),
    ];
    row.extend(rest);
    row
}

/// Whether our line ran with the device settings every run uses (no cudarc events, the pool
/// kept; or a log from before either was recorded), not one of `speed`'s A/B settings.
fn default_settings(o: &Value) -> bool {
    let events = o.get("event_tracking").and_then(Value::as_bool);
    let pool = num(o, "pool_release_threshold");
    events != Some(true) && pool.is_none_or(|x| x >= u64::MAX as f64)
}

/// Our training lines beside the peer's of the same style, shape, batch and dtype: tokens/s,
/// model TFLOP/s and MFU each, and how many times faster the peer is. Lines of ours with
/// `speed`'s other device settings (events on, pool released) are left to [`split_table`].
pub fn training_table(lines: &[BenchLine]) -> Table {
    let mut t = run_table(&[
        "ours tokens/s",
        "ours TFLOP/s",
        "ours MFU",
        "PyTorch tokens/s",
        "PyTorch MFU",
        "PyTorch / ours",
    ])
    .with_title("Two-tower training step beside PyTorch eager (same device, same call)")
    .with_note(
        "model FLOPs per token from train_step.rs (matrix products and attention, forward × 3); \
         the peer's MFU counts the same FLOPs against the peak our line's MFU implies",
    );
    for l in lines {
        let BenchLine::Ours(o) = l else { continue };
        if !default_settings(o) {
            continue;
        }
        let peer = lines.iter().rev().find_map(|p| match p {
            BenchLine::Peer(p) if key(p) == key(o) => Some(p),
            _ => None,
        });
        let ours = num(o, "tokens_per_s").unwrap_or(f64::NAN);
        let flops = num(o, "model_gflop_per_token").unwrap_or(f64::NAN) * 1e9;
        // The device's peak in TFLOP/s, as our line's MFU was taken against it.
        let peak = match (num(o, "model_tflop_per_s"), num(o, "mfu")) {
            (Some(t), Some(m)) if m > 0.0 => Some(t / m),
            _ => None,
        };
        let theirs = peer.and_then(|p| num(p, "tokens_per_s"));
        let dtype = key(o).3;
        let their_mfu = theirs
            .zip(peak)
            .map(|(x, pk)| peer_mfu(flops * x / 1e12 / pk, &dtype));
        t.push_row(run_row(
            o,
            vec![
                count(ours),
                Cell::Text(format!("{:.2}", flops * ours / 1e12)),
                or_empty(num(o, "mfu").map(percent)),
                or_empty(theirs.map(count)),
                or_empty(their_mfu),
                or_empty(theirs.map(|x| Cell::Text(format!("{:.1}x", x / ours)))),
            ],
        ));
    }
    t
}

/// Where each of our training steps spends its time: forward, backward, the rest (clipping,
/// AdamW, the loss read back), per step, with the CUDA settings of the line (`speed`); and,
/// where the line has them (one-shots since 27 Nov), the update's gradient norm and AdamW,
/// each timed alone.
pub fn split_table(lines: &[BenchLine]) -> Table {
    let mut t = run_table(&[
        "events",
        "pool threshold",
        "tokens/s",
        "ms/step",
        "forward ms",
        "backward ms",
        "update ms",
        "grad norm ms",
        "AdamW ms",
    ])
    .with_title("Our training step, split (each part timed alone between synchronisations)");
    let ms =
        |v: &Value, k: &str| or_empty(num(v, k).map(|s| Cell::Text(format!("{:.1}", s * 1e3))));
    for l in lines {
        let BenchLine::Ours(o) = l else { continue };
        let pool = match num(o, "pool_release_threshold") {
            Some(x) if x >= u64::MAX as f64 => "kept".to_string(),
            Some(x) => format!("{x:.0}"),
            None => String::new(),
        };
        t.push_row(run_row(
            o,
            vec![
                text(o, "event_tracking").into(),
                pool.into(),
                or_empty(num(o, "tokens_per_s").map(count)),
                ms(o, "s_per_step"),
                ms(o, "forward_s"),
                ms(o, "backward_s"),
                ms(o, "update_s"),
                ms(o, "grad_norm_s"),
                ms(o, "adamw_s"),
            ],
        ));
    }
    t
}

/// Our encoder extraction beside transformers', paired by dtype.
pub fn extraction_table(lines: &[BenchLine]) -> Table {
    let mut t = Table::new(
        [
            "dtype",
            "batch",
            "ours sequences/s",
            "ours GFLOP/s",
            "transformers sequences/s",
            "transformers / ours",
        ]
        .map(String::from)
        .to_vec(),
    )
    .with_title("Encoder extraction (bert-base-sized, T 128, masked mean)");
    for l in lines {
        let BenchLine::OursExtract(o) = l else {
            continue;
        };
        let dtype = text(o, "dtype");
        let peer = lines.iter().rev().find_map(|p| match p {
            BenchLine::PeerExtract(p) if text(p, "dtype") == dtype => num(p, "seq_per_s"),
            _ => None,
        });
        let ours = num(o, "seq_per_s").unwrap_or(f64::NAN);
        t.push_row(vec![
            dtype.into(),
            text(o, "batch").into(),
            Cell::Text(format!("{ours:.0}")),
            or_empty(num(o, "gflop_per_s").map(|g| Cell::Text(format!("{g:.0}")))),
            or_empty(peer.map(count)),
            or_empty(peer.map(|x| Cell::Text(format!("{:.1}x", x / ours)))),
        ]);
    }
    t
}

/// The moments' accumulation of LMD: useful GFLOP/s (n · D · (D + 1) a batch) on the host's
/// cores (faer) and through the device's tensor path (the batch's Gram there, read back), beside
/// the device's f64 GEMM alone on the same shape.
pub fn moments_table(lines: &[BenchLine]) -> Table {
    let mut t = Table::new(
        [
            "D",
            "rows a batch",
            "host threads",
            "host GFLOP/s",
            "device",
            "tensor path GFLOP/s",
            "device f64 GEMM GFLOP/s",
        ]
        .map(String::from)
        .to_vec(),
    )
    .with_title("LMD's moments accumulation (useful flops n · D · (D + 1) a batch)");
    let rate = |v: &Value, k: &str| or_empty(num(v, k).map(|g| Cell::Text(format!("{g:.0}"))));
    for l in lines {
        let BenchLine::Moments(m) = l else { continue };
        t.push_row(vec![
            text(m, "moments_d").into(),
            text(m, "n").into(),
            text(m, "threads").into(),
            rate(m, "host_gflop_per_s"),
            text(m, "device").into(),
            rate(m, "tensor_gflop_per_s"),
            rate(m, "device_dgemm_gflop_per_s"),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as the one-shots and peers print them (fields trimmed to those read).
    const LOG: &str = r#"
{"style":"Gpt","shape":"base_2tower","batch":64,"seq":128,"device":"Cuda(CudaDevice(DeviceId(1)))","dtype":"BF16","tokens_per_s":20000.0,"s_per_step":0.4096,"cuda_kernels_off":[],"event_tracking":false,"pool_release_threshold":18446744073709551615,"forward_s":0.1,"backward_s":0.25,"update_s":0.0596,"grad_norm_s":0.0088,"adamw_s":0.0053,"model_gflop_per_token":0.341,"model_tflop_per_s":6.82,"mfu":0.006893}
{"shape": "base", "batch": 64, "seq": 128, "device": "cuda", "dtype": "bf16", "tokens_per_s": 130000.0, "s_per_step": 0.063, "threads": null, "style": "gpt"}
{"style":"Gpt","shape":"base_2tower","batch":64,"seq":128,"dtype":"BF16","tokens_per_s":18000.0,"s_per_step":0.455,"cuda_kernels_off":["lstm","nll"],"model_gflop_per_token":0.341,"model_tflop_per_s":6.138,"mfu":0.0062037}
{"shape": "base_2tower", "batch": 64, "seq": 128, "device": "cuda", "dtype": "f32", "tokens_per_s": 64357.0, "threads": null, "style": "elmo"}
{"seq_per_s":2074.0,"gflop_per_s":46000.0,"batches":20,"batch":32,"dtype":"bf16"}
{"peer": "transformers", "dtype": "bf16", "batch": 32, "seq_per_s": 3742.0}
{"batches":3,"device":"Cuda(CudaDevice(DeviceId(1)))","device_dgemm_gflop_per_s":51234.5,"host_gflop_per_s":412.7,"moments_d":9216,"n":8192,"tensor_gflop_per_s":2871.2,"threads":16}
{"style":"Gpt","shape":"base_2tower","batch":64,"seq":128,"dtype":"BF16","tokens_per_s":9000.0,"s_per_step":0.9,"cuda_kernels_off":[],"event_tracking":true,"pool_release_threshold":0,"model_gflop_per_token":0.341,"model_tflop_per_s":3.07,"mfu":0.0031}
warning: something else
"#;

    #[test]
    fn ours_and_the_peer_pair_by_style_shape_batch_and_dtype() {
        let (lines, other) = parse_log(LOG);
        assert_eq!((lines.len(), other), (8, 1));
        let t = training_table(&lines);
        assert_eq!(
            t.rows().len(),
            2,
            "one row per line of ours on the runs' device settings"
        );
        // The A/B line (events on, pool released) is in the split table only.
        assert_eq!(split_table(&lines).rows().len(), 3);
        assert_eq!(split_table(&lines).rows()[2][6], Cell::Text("0".into()));
        let row = &t.rows()[0];
        let cell = |i: usize| match &row[i] {
            Cell::Text(s) => s.clone(),
            c => format!("{c:?}"),
        };
        assert_eq!(
            (cell(0), cell(1), cell(2), cell(3)),
            (
                "gpt".into(),
                "base_2tower".into(),
                "64".into(),
                "bf16".into()
            )
        );
        assert_eq!(cell(4), "all on");
        assert_eq!(
            (cell(5), cell(6), cell(7)),
            ("20000".into(), "6.82".into(), "0.69%".into())
        );
        // The peak our MFU implies: 6.82 / 0.006893 = 989.4 TFLOP/s; the peer's 130k tokens/s
        // of 0.341 GFLOP each is 44.33 TFLOP/s, 4.48% of it.
        assert_eq!(
            (cell(8), cell(9), cell(10)),
            ("130000".into(), "4.48%".into(), "6.5x".into())
        );
        // The second line of ours names the kernels it ran without.
        let off = &t.rows()[1][4];
        assert_eq!(off, &Cell::Text("off: lstm, nll".into()));
        // Beyond the f32 peak the peer ran on TF32 tensor cores.
        assert_eq!(peer_mfu(1.3162, "f32"), Cell::Text("131.62% (TF32)".into()));
        assert_eq!(peer_mfu(1.3162, "bf16"), Cell::Text("131.62%".into()));
        // The f32 ELMo peer has no line of ours: it is not in the table.
        let md = t.to_markdown();
        assert!(!md.contains("64357"), "{md}");
    }

    #[test]
    fn the_split_and_the_extraction_read_their_fields() {
        let (lines, _) = parse_log(LOG);
        let s = split_table(&lines);
        let r = &s.rows()[0];
        assert_eq!(r[6], Cell::Text("kept".into()));
        assert_eq!(
            (&r[8], &r[9], &r[10], &r[11]),
            (
                &Cell::Text("409.6".into()),
                &Cell::Text("100.0".into()),
                &Cell::Text("250.0".into()),
                &Cell::Text("59.6".into())
            )
        );
        assert_eq!(
            (&r[12], &r[13]),
            (&Cell::Text("8.8".into()), &Cell::Text("5.3".into()))
        );
        // A line from before the update's split leaves its cells empty.
        assert_eq!(
            (&s.rows()[1][12], &s.rows()[1][13]),
            (&Cell::Empty, &Cell::Empty)
        );
        let m = moments_table(&lines);
        assert_eq!(m.rows().len(), 1);
        assert_eq!(
            (
                &m.rows()[0][0],
                &m.rows()[0][3],
                &m.rows()[0][5],
                &m.rows()[0][6]
            ),
            (
                &Cell::Text("9216".into()),
                &Cell::Text("413".into()),
                &Cell::Text("2871".into()),
                &Cell::Text("51234".into())
            )
        );
        // Neither a training nor an extraction line.
        assert_eq!(split_table(&lines).rows().len(), 3);
        let e = extraction_table(&lines);
        assert_eq!(e.rows().len(), 1);
        assert_eq!(e.rows()[0][4], Cell::Text("3742".into()));
        assert_eq!(e.rows()[0][5], Cell::Text("1.8x".into()));
    }
}
