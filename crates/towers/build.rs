//! Under the `cuda` feature: our CUDA kernels (`src/ops/<op>/*.cu`: the LSTM op's `fused_lstm_seq`,
//! AdamW's `adamw`, LayerNorm's `layer_norm`, softmax's `softmax`, GELU's `gelu`, the output
//! layer's loss `softmax_nll`, the one-pass clipping and AdamW `adamw_multi`, fused attention
//! `attention`, the Linear layer's `linear`) compiled to PTX by the CUDA toolkit's nvcc at
//! build time, as candle-kernels compiles candle's, so that the binary needs no NVRTC at run
//! time and its PTX is of the toolkit it was built with (a driver rejects PTX newer than
//! itself). `CUDA_COMPUTE_CAP` (e.g. 90) picks the virtual architecture, default 75 (the oldest
//! CUDA 13 supports; the driver compiles it for newer GPUs); `NVCC` names the compiler, default
//! `nvcc` on the PATH.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// Our kernel sources, `src/ops/<op>/<name>.cu` as (op, name), each to `OUT_DIR/<name>.ptx`.
const KERNELS: [(&str, &str); 9] = [
    ("lstm_seq", "fused_lstm_seq"),
    ("adamw", "adamw"),
    ("layer_norm", "layer_norm"),
    ("softmax", "softmax"),
    ("gelu", "gelu"),
    ("nll", "softmax_nll"),
    ("adamw", "adamw_multi"),
    ("attention", "attention"),
    ("linear", "linear"),
];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    for (op, name) in KERNELS {
        println!("cargo::rerun-if-changed=src/ops/{op}/{name}.cu");
    }
    // Headers the kernels include (found through `-I src/ops`).
    println!("cargo::rerun-if-changed=src/ops/warp.cuh");
    println!("cargo::rerun-if-changed=src/ops/bf16.cuh");
    println!("cargo::rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo::rerun-if-env-changed=NVCC");
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let cap = env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "75".into());
    let nvcc = env::var("NVCC").unwrap_or_else(|_| "nvcc".into());
    for (op, name) in KERNELS {
        let run = Command::new(&nvcc)
            .args([
                "--ptx",
                "-O3",
                &format!("-arch=compute_{cap}"),
                "-I",
                "src/ops",
                "-o",
            ])
            .arg(out_dir.join(format!("{name}.ptx")))
            .arg(format!("src/ops/{op}/{name}.cu"))
            .output();
        match run {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!(
                "{nvcc} could not compile src/ops/{op}/{name}.cu:\n{}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => panic!(
                "the cuda feature needs the CUDA toolkit's nvcc ({nvcc}: {e}); \
                 `source ../shared/tools/cuda-env.sh` installs one"
            ),
        }
    }
}
