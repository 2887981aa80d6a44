//! Our CUDA kernels (`src/*.cu`), compiled for the host by the system C++ compiler with a shim
//! for CUDA's qualifiers, thread indices, intrinsics and warp shuffles
//! (`tests/host_cuda/shim.h`), and run by a harness per source (`tests/host_cuda/*.cpp`): their
//! arithmetic and indexing checked on every machine, not only on a lent GPU, under
//! AddressSanitizer and UBSan (an access out of bounds aborts: checked with a bound check
//! loosened by one in the LayerNorm and LSTM kernels). (On CUDA the same sources are compiled
//! by nvcc, `build.rs`; `gpu_check` compares the device with the CPU.)

use std::path::Path;
use std::process::Command;

/// Builds `tests/host_cuda/<harness>.cpp` around `src/<source>.cu`, runs it, and returns its
/// report; panics with the compiler's log or the report when either fails.
fn run_harness(harness: &str, source: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join(harness);
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let cu = root.join(format!("src/{source}.cu"));
    let built = Command::new(&cxx)
        .args(["-std=c++20", "-O1", "-pthread"])
        // Every access of a kernel in bounds of the buffers the harness gives it (exactly the
        // sizes the op allocates), every launch past the end bounded: AddressSanitizer aborts
        // at the first overflow, UBSan at undefined arithmetic.
        .args(["-fsanitize=address,undefined", "-fno-sanitize-recover=all"])
        .args(["-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(format!("-DCU_SOURCE=\"{}\"", cu.display()))
        .arg(root.join(format!("tests/host_cuda/{harness}.cpp")))
        .output()
        .unwrap_or_else(|e| {
            panic!("this test needs a C++ compiler ({cxx}; set CXX to another): {e}")
        });
    assert!(
        built.status.success(),
        "{cxx} could not build the host harness {harness}:\n{}",
        String::from_utf8_lossy(&built.stderr)
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
    let report = run_harness("lstm_seq_kernels", "fused_lstm_seq");
    assert!(report.contains("gradients non-zero"), "{report}");
}

#[test]
fn the_adamw_cuda_kernel_compiled_for_the_host_equals_the_cpu_update_bit_for_bit() {
    let report = run_harness("adamw", "adamw");
    assert!(report.starts_with("0 of 3003 values differ"), "{report}");
}

#[test]
fn the_layer_norm_cuda_kernels_compiled_for_the_host_match_f64_finite_differences() {
    let report = run_harness("layer_norm", "layer_norm");
    assert!(report.contains("worst gradient error"), "{report}");
}

#[test]
fn the_softmax_cuda_kernel_compiled_for_the_host_matches_f64() {
    let report = run_harness("softmax", "softmax");
    assert!(report.contains("masked entry 0"), "{report}");
}

#[test]
fn the_gelu_cuda_kernels_compiled_for_the_host_match_f64() {
    let report = run_harness("gelu", "gelu");
    assert!(report.contains("over 1001 points"), "{report}");
}

#[test]
fn the_softmax_nll_cuda_kernels_compiled_for_the_host_match_f64_finite_differences() {
    let report = run_harness("softmax_nll", "softmax_nll");
    assert!(report.contains("worst gradient error"), "{report}");
}
