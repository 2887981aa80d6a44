//! Shared set-up of the facade's integration tests: tiny runs on the embedded synthetic corpus.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use lmsplit::experiment::{
    CorpusSpec, Result, RunOptions, RunSpec, ScoredRun, ScoringSpec, Workspace,
};
use lmsplit::towers::{Preset, Style};

/// A tiny GPT run on 120 synthetic documents: seconds on a CPU.
pub fn tiny_spec(seed: u64) -> RunSpec {
    let mut corpus = CorpusSpec::synthetic(120, 0);
    corpus.train_vocab = 256;
    let mut r = RunSpec::new(Style::gpt(), Preset::Tiny, corpus).with_seed(seed);
    r.phase1.budget_tokens = 6_000;
    r.phase1.seq_len = 32;
    r.phase1.batch_size = 8;
    r.phase1.eval_batches = 2;
    r.phase1.eval_every = 8;
    r.heads.max_budget_tokens = 2_560;
    r.heads.eval_every = 4;
    r.heads.patience = 2;
    r.retest_heads = false;
    r
}

/// The quiet CPU options of the tests.
pub fn quiet() -> RunOptions {
    RunOptions {
        progress: lmsplit::experiment::Progress::silent(),
        ..RunOptions::default()
    }
}

/// The data of `spec` in `root/data`, its scoring set, and the run in `root/<dir>`.
pub fn run_in(spec: &RunSpec, root: &Path, dir: &str) -> Result<ScoredRun> {
    let ws = Workspace::open(&spec.corpus, root.join("data"))?;
    let set = ws.scoring_set(&spec.style, &ScoringSpec::new(32))?;
    ws.ensure_run(spec, &root.join(dir), &set, &quiet())
}

/// The path of an example binary built by `cargo test` next to this test's executable.
pub fn example_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let bin = dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} is missing: `cargo test` builds the examples first",
        bin.display()
    );
    bin
}

/// A path under the shared data folder (`../shared` beside the checkout); panics naming it when
/// it is missing, so a test never passes without its inputs.
pub fn shared(rel: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared")
        .join(rel);
    assert!(p.exists(), "shared test input {} is missing", p.display());
    p
}

/// The `two_tower` arguments of a small GPT run (seconds on a CPU) into `out`, with an optional
/// tokenizer file (else a vocabulary trained in `out/data/`).
pub fn small_gpt_run_args(out: &Path, tokenizer: Option<&Path>) -> Vec<String> {
    [
        "--style",
        "gpt",
        "--corpus",
        "synthetic",
        "--documents",
        "150",
        "--train-vocab",
        "256",
        "--budget-tokens",
        "40000",
        "--heads-max-tokens",
        "4000",
        "--seq-len",
        "32",
        "--batch-size",
        "8",
        "--seed",
        "5",
        "--out",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([out.display().to_string()])
    .chain(
        tokenizer
            .into_iter()
            .flat_map(|t| ["--tokenizer".into(), t.display().to_string()]),
    )
    .collect()
}

/// A folder copied elsewhere, e.g. a run folder as one brought back from another machine.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        match e.file_type().unwrap().is_dir() {
            true => copy_dir(&e.path(), &dest),
            false => {
                std::fs::copy(e.path(), dest).unwrap();
            }
        }
    }
}

/// A temporary folder holding a stand-in `reproduce` (a bash script that logs its calls to
/// `$CALLS`), that log and a study folder: what the tests of the shell drivers in `scripts/`
/// run against.
pub struct ScriptRig {
    _tmp: tempfile::TempDir,
    /// The call log (`$CALLS`).
    pub calls: PathBuf,
    /// The stand-in binary (`$BIN`).
    pub bin: PathBuf,
    /// The study folder (`$OUT`).
    pub out: PathBuf,
}

impl ScriptRig {
    /// A rig whose `reproduce` is the bash script `fake`.
    pub fn new(fake: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let bin = tmp.path().join("reproduce");
        std::fs::write(&bin, fake).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (calls, out) = (tmp.path().join("calls"), tmp.path().join("study"));
        Self {
            _tmp: tmp,
            calls,
            bin,
            out,
        }
    }

    /// `scripts/<name>` of the checkout.
    pub fn script(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scripts")
            .join(name)
    }

    /// A `bash scripts/<name> args...` command with the rig's `BIN`, `OUT` and `CALLS`.
    pub fn command(&self, name: &str, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new("bash");
        c.arg(Self::script(name))
            .args(args)
            .env("BIN", &self.bin)
            .env("OUT", &self.out)
            .env("CALLS", &self.calls);
        c
    }

    /// Runs `scripts/<name>` to its end with `env` added; its output and the calls logged.
    pub fn run(
        &self,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> (std::process::Output, Vec<String>) {
        let out = self
            .command(name, args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (out, self.logged())
    }

    /// The calls logged so far, one a line.
    pub fn logged(&self) -> Vec<String> {
        let calls = std::fs::read_to_string(&self.calls).unwrap_or_default();
        calls.lines().map(|l| l.to_string()).collect()
    }

    /// The arguments the drivers pass to `reproduce` for the runs `only`.
    pub fn call(&self, only: &str) -> String {
        format!(
            "--protocol cpu --device cpu --out {} --only {only} --quiet",
            self.out.display()
        )
    }
}
