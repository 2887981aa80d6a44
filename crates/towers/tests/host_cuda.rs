//! The CUDA kernels of the whole-sequence LSTM op (`src/fused_lstm_seq.cu`), compiled for the
//! host by the system C++ compiler with a shim for CUDA's qualifiers and thread indices, and run
//! in the op's step loops (`tests/host_cuda/lstm_seq_kernels.cpp`): their arithmetic and
//! indexing checked against an f64 recurrence and its finite differences on every machine, not
//! only on a lent GPU. (On CUDA the same source is compiled by nvcc, `build.rs`; `gpu_check`'s `lstm/*`
//! compares the device with the CPU.)

use std::path::Path;
use std::process::Command;

#[test]
fn the_lstm_cuda_kernels_compiled_for_the_host_match_f64_finite_differences() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("lstm_seq_kernels");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let kernels = root.join("src/fused_lstm_seq.cu");
    let built = Command::new(&cxx)
        .args(["-std=c++17", "-O1", "-o"])
        .arg(&exe)
        .arg(format!("-DLSTM_SEQ_CU=\"{}\"", kernels.display()))
        .arg(root.join("tests/host_cuda/lstm_seq_kernels.cpp"))
        .output()
        .unwrap_or_else(|e| {
            panic!("this test needs a C++ compiler ({cxx}; set CXX to another): {e}")
        });
    assert!(
        built.status.success(),
        "{cxx} could not build the host harness:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "the kernels do not match: {stdout}");
    assert!(stdout.contains("gradients non-zero"), "{stdout}");
}
