//! Our CUDA kernels (`src/ops/<op>/*.cu`), compiled for the host by the system C++ compiler with
//! a shim for CUDA's qualifiers, thread indices, intrinsics and warp shuffles
//! (`src/ops/host_shim.h`), and run by a harness beside each source (`src/ops/<op>/harness*.cpp`):
//! their
//! arithmetic and indexing checked on every machine, not only on a lent GPU, under
//! AddressSanitizer and UBSan (an access out of bounds aborts: checked with a bound check
//! loosened by one in the LayerNorm and LSTM kernels). (On CUDA the same sources are compiled
//! by nvcc, `build.rs`; `gpu_check` compares the device with the CPU.)

use std::path::Path;
use std::process::Command;

/// Each kernel source's op folder (`src/ops/<op>/<source>.cu`).
fn op_of(source: &str) -> &'static str {
    match source {
        "fused_lstm_seq" => "lstm_seq",
        "adamw" | "adamw_multi" => "adamw",
        "softmax_nll" => "nll",
        "layer_norm" => "layer_norm",
        "softmax" => "softmax",
        "gelu" => "gelu",
        "attention" => "attention",
        "linear" => "linear",
        other => panic!("no op folder for the kernel source {other}"),
    }
}

/// Builds the harness `src/ops/<op>/<harness>.cpp` around the kernel source `cu` into `exe`;
/// panics with the compiler's log when it fails.
fn build(harness: &str, cu: &Path, exe: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let built = Command::new(&cxx)
        .args(["-std=c++20", "-O1", "-pthread"])
        // Every access of a kernel in bounds of the buffers the harness gives it (exactly the
        // sizes the op allocates), every launch past the end bounded: AddressSanitizer aborts
        // at the first overflow, UBSan at undefined arithmetic.
        .args(["-fsanitize=address,undefined", "-fno-sanitize-recover=all"])
        .args(["-fno-omit-frame-pointer", "-o"])
        .arg(exe)
        .arg(format!("-DCU_SOURCE=\"{}\"", cu.display()))
        // The shim and the kernels' shared headers.
        .arg(format!("-I{}", root.join("src/ops").display()))
        .arg(root.join(format!("src/ops/{harness}.cpp")))
        .output()
        .unwrap_or_else(|e| {
            panic!("this test needs a C++ compiler ({cxx}; set CXX to another): {e}")
        });
    assert!(
        built.status.success(),
        "{cxx} could not build the host harness {harness}:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
}

/// Builds the harness `src/ops/<op>/<harness>.cpp` around `src/ops/<op>/<source>.cu`, runs it,
/// and returns its report; panics with the compiler's log or the report when either fails.
fn run_harness(harness: &str, source: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join(harness.replace('/', "_"));
    let op = op_of(source);
    build(
        harness,
        &root.join(format!("src/ops/{op}/{source}.cu")),
        &exe,
    );
    let run = Command::new(&exe).output().unwrap();
    let report = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{source}.cu does not match: {report}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    report
}

#[test]
fn the_lstm_cuda_kernels_compiled_for_the_host_match_f64_finite_differences() {
    let report = run_harness("lstm_seq/harness_seq", "fused_lstm_seq");
    assert!(report.contains("gradients non-zero"), "{report}");
}

#[test]
fn the_adamw_cuda_kernel_compiled_for_the_host_equals_the_cpu_update_bit_for_bit() {
    let report = run_harness("adamw/harness_adamw", "adamw");
    assert!(report.starts_with("0 of 3003 values differ"), "{report}");
}

#[test]
fn the_layer_norm_cuda_kernels_compiled_for_the_host_match_f64_finite_differences() {
    let report = run_harness("layer_norm/harness", "layer_norm");
    assert!(report.contains("worst gradient error"), "{report}");
}

#[test]
fn the_softmax_cuda_kernel_compiled_for_the_host_matches_f64() {
    let report = run_harness("softmax/harness", "softmax");
    assert!(report.contains("masked entry 0"), "{report}");
}

#[test]
fn the_gelu_cuda_kernels_compiled_for_the_host_match_f64() {
    let report = run_harness("gelu/harness", "gelu");
    assert!(report.contains("over 1001 points"), "{report}");
}

#[test]
fn the_softmax_nll_cuda_kernels_compiled_for_the_host_match_f64_finite_differences() {
    let report = run_harness("nll/harness", "softmax_nll");
    assert!(report.contains("worst gradient error"), "{report}");
}

#[test]
fn the_lstm_chains_cuda_kernels_compiled_for_the_host_match_f64_in_f32_and_bf16() {
    let report = run_harness("lstm_seq/harness_chains", "fused_lstm_seq");
    assert!(report.contains("0 outputs not finite"), "{report}");
}

/// Fused attention's kernels against f64 and central differences (causal, padding at the end
/// and the start, a fully masked row, T 37 and 128, bf16); then the same harness around copies
/// of `attention.cu` with one planted defect each, every one of which it must reject: the
/// backward's −D term dropped in the key rows, the bias left out of the forward scores, and a
/// staging loop one element too long (AddressSanitizer's read past qkv).
#[test]
fn the_attention_cuda_kernels_compiled_for_the_host_match_f64_finite_differences() {
    let planted = [
        (
            "no_d",
            "dsr[i] = pij * (g - rowsum[i]);",
            "dsr[i] = pij * g;",
        ),
        (
            "no_bias",
            "s[c] = acc * scale + bias_b[(long long)i * t + j];",
            "s[c] = acc * scale;",
        ),
        (
            "overrun",
            "e < t * hd; e += blockDim.x) {\n    int j = e / hd",
            "e <= t * hd; e += blockDim.x) {\n    int j = e / hd",
        ),
    ];
    planted_defects_fail(
        "attention/harness",
        "attention",
        &["bf16.cuh", "warp.cuh"],
        &planted,
        || {
            let report = run_harness("attention/harness", "attention");
            assert!(report.contains("masked row 0"), "{report}");
            assert!(report.contains("bf16: 0 of"), "{report}");
            // The shared memory the op gives a block (fused_attention_cuda.rs's test holds the
            // same).
            assert!(
                report.contains(
                    "forward 38016 (f32) 21632 (bf16), backward 43776 (f32) 27392 (bf16)"
                ),
                "{report}"
            );
        },
    );
}

/// The one-pass clipping and AdamW kernels against a long-double norm and the CPU's update bit
/// for bit (clipping active, inactive, off; a gradient holding infinity writes nothing); the
/// harness also proves its checks catch a norm summed in f32, an update an ulp off and an
/// element left out. Then the same harness around copies of `adamw_multi.cu` with one planted
/// defect each, every one of which it must reject: a sum loop one element too long
/// (AddressSanitizer), the squares summed in f32, the clip factor ignored, an off-by-one in
/// the chunk's parameter search, and the guard against a norm that is not finite dropped.
#[test]
fn the_adamw_multi_cuda_kernels_compiled_for_the_host_equal_the_cpu_update_bit_for_bit() {
    let planted = [
        (
            "overrun",
            "j < end; j += WARP_LANES) {\n    double x",
            "j <= end; j += WARP_LANES) {\n    double x",
        ),
        (
            "f32_sum",
            "    double x = g[j];\n    s += x * x;",
            "    float x = g[j];\n    s += (float)(x * x);",
        ),
        (
            "no_clip",
            "const float grad_scale = (float)norm_clip[1];",
            "const float grad_scale = 1.0f;",
        ),
        ("row_search", "+ 5] <= c)", "+ 5] < c)"),
        (
            "no_guard",
            "if (c >= chunks || !(norm_clip[0] < INFINITY)) return;",
            "if (c >= chunks) return;",
        ),
    ];
    planted_defects_fail(
        "adamw/harness_adamw_multi",
        "adamw_multi",
        &["warp.cuh"],
        &planted,
        || {
            let report = run_harness("adamw/harness_adamw_multi", "adamw_multi");
            assert_eq!(
                report
                    .matches(" 0 of 3710 elements differ from adamw_elem")
                    .count(),
                3,
                "{report}"
            );
            assert!(
                report.contains("infinity: norm inf, 0 elements written"),
                "{report}"
            );
            assert!(
                report.contains("planted defects caught: 3 of 3"),
                "{report}"
            );
        },
    );
}

/// The fused Linear's bias broadcast and two-pass column sums (the bias gradient) against b and
/// double-precision sums, in f32 and bf16, the same bits on a second run; then around copies of
/// `linear.cu` with one planted defect each, every one of which the harness must reject: a sum
/// loop one row too long (a row counted twice, and AddressSanitizer's read past dy) and the
/// ragged last chunk of rows left out.
#[test]
fn the_linear_cuda_kernels_compiled_for_the_host_match_f64_column_sums() {
    let planted = [
        ("overrun", "r < end; r++", "r <= end; r++"),
        (
            "no_ragged",
            "long long parts = (rows + chunk - 1) / chunk;",
            "long long parts = rows / chunk;",
        ),
    ];
    planted_defects_fail("linear/harness", "linear", &["bf16.cuh"], &planted, || {
        let report = run_harness("linear/harness", "linear");
        assert!(report.contains("0 of 15059 entries off"), "{report}");
    });
}

/// Builds the harness `src/ops/<op>/<harness>.cpp` around copies of `<source>.cu`, one
/// per planted defect (`(name, from, to)`: `from`, found exactly once, replaced by `to`; the
/// headers the source includes copied beside them), while `check` runs the real harness, and
/// requires every planted copy to fail.
fn planted_defects_fail(
    harness: &str,
    source: &str,
    headers: &[&str],
    planted: &[(&str, &str, &str)],
    check: impl FnOnce(),
) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let op = op_of(source);
    let text = std::fs::read_to_string(root.join(format!("src/ops/{op}/{source}.cu"))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for header in headers {
        std::fs::copy(root.join("src/ops").join(header), dir.path().join(header)).unwrap();
    }
    let run_planted = |name: &str, from: &str, to: &str| -> (bool, String) {
        assert_eq!(
            text.matches(from).count(),
            1,
            "{name}: {from:?} not once in {source}.cu"
        );
        let cu = dir.path().join(format!("{name}.cu"));
        std::fs::write(&cu, text.replace(from, to)).unwrap();
        let exe = dir.path().join(name);
        build(harness, &cu, &exe);
        let run = Command::new(&exe).output().unwrap();
        (
            run.status.success(),
            String::from_utf8_lossy(&run.stdout).into_owned(),
        )
    };
    std::thread::scope(|s| {
        let runs: Vec<_> = planted
            .iter()
            .map(|&(name, from, to)| s.spawn(move || (name, run_planted(name, from, to))))
            .collect();
        check();
        for r in runs {
            let (name, (passed, report)) = r.join().unwrap();
            assert!(!passed, "the planted defect {name} passed: {report}");
        }
    });
}
