//! The throughput tables of docs/gpu.md from what a lent GPU session brought back: the JSON
//! lines of `scripts/gpu_session.sh throughput` (ours beside PyTorch eager and transformers)
//! and `speed` (our step split by the CUDA settings).
//!
//! ```text
//! cargo run --release --example gpu_tables -- $FILES_AT/throughput.jsonl $FILES_AT/speed.jsonl \
//!     --out out/gpu_tables
//! ```
//!
//! Prints each table in Markdown and writes it to `<out>/<name>.{md,csv,json}`; the last line
//! printed is a JSON object with the paths written.

mod common;

use std::path::PathBuf;

use clap::Parser;
use lmsplit::bench_tables::{
    extraction_table, moments_table, parse_log, split_table, training_table,
};

#[derive(Parser, Debug)]
#[command(about = "Make the GPU throughput tables from the benchmarks' JSON lines")]
struct Args {
    /// Logs of JSON lines (throughput.jsonl, speed.jsonl, ...), read in order as one.
    #[arg(required = true)]
    logs: Vec<PathBuf>,
    /// Where the tables go.
    #[arg(long, default_value = "out/gpu_tables")]
    out: PathBuf,
}

fn main() -> std::process::ExitCode {
    common::quiet_on_broken_pipe();
    common::finish(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut text = String::new();
    for p in &args.logs {
        text += &std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        text.push('\n');
    }
    let (lines, other) = parse_log(&text);
    if lines.is_empty() {
        return Err(format!(
            "no benchmark line in {} ({other} other lines): expected the JSON lines of \
             train_step, extract or the peers",
            args.logs
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
        .into());
    }
    let mut written = Vec::new();
    for (name, table) in [
        ("training", training_table(&lines)),
        ("step_split", split_table(&lines)),
        ("extraction", extraction_table(&lines)),
        ("moments", moments_table(&lines)),
    ] {
        if table.rows().is_empty() {
            continue;
        }
        println!("{}", table.to_markdown());
        written.extend(table.write_all(&args.out, name)?);
    }
    println!(
        "{}",
        serde_json::json!({"lines": lines.len(), "other_lines": other, "written": written})
    );
    Ok(())
}
