//! Process-level: the steps of `scripts/gpu_session.sh` that a lent GPU session runs once and
//! cannot redo, on a stand-in for the CUDA `reproduce` (a shell script that trains nothing),
//! in a copy of the script with its own `.gpu/` and `../shared/`. A step that brings back the
//! wrong files, or waits on the wrong process, costs the session's device time.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The stand-in `reproduce`: `--protocol cpu --out STUDY --only LABEL ...` lays out LABEL's run
/// folder as a finished run of the protocol would, writes the 1/2 snapshot after a moment, then
/// waits up to 5 s for SIGTERM (its record says whether one came) and exits 75, as a
/// checkpointed run does, or 0 when none came.
const FAKE_REPRODUCE: &str = r#"#!/usr/bin/env bash
out=$4; run=$out/$6
mkdir -p $run/phase1/checkpoint $run/phase1/snapshots $run/heads $run/emergence/step-0000488
for f in run.json logprobs.json phase1/metrics.jsonl phase1/checkpoint/weights.safetensors \
  phase1/checkpoint/optimizer.safetensors phase1/snapshots/step-0000488.safetensors \
  heads/metrics.jsonl heads/checkpoint.safetensors emergence/step-0000488/logprobs-1002.json \
  run.lock; do echo "$f" > $run/$f; done
trap 'echo term >> $run/signals; exit 75' TERM
sleep 0.3
echo weights > $run/phase1/snapshots/step-0001954.safetensors.tmp
mv $run/phase1/snapshots/step-0001954.safetensors.tmp $run/phase1/snapshots/step-0001954.safetensors
for _ in $(seq 50); do sleep 0.1; done
exit 0
"#;

/// A checkout holding only the script and `.gpu/bin/reproduce.xz`, beside a `shared/` with the
/// data file `setup` looks for (so it unpacks no data).
struct Session {
    _tmp: tempfile::TempDir,
    repo: PathBuf,
    study: PathBuf,
    out: PathBuf,
}

fn session() -> Session {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    fs::create_dir_all(repo.join("scripts")).unwrap();
    fs::create_dir_all(repo.join(".gpu/bin")).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gpu_session.sh");
    fs::copy(&script, repo.join("scripts/gpu_session.sh")).unwrap();
    pack_binary(&repo, "reproduce", FAKE_REPRODUCE);
    let data = tmp.path().join("shared/data/wikitext-2");
    fs::create_dir_all(&data).unwrap();
    fs::write(data.join("train.txt"), "text").unwrap();
    let (study, out) = (tmp.path().join("study"), tmp.path().join("out"));
    Session {
        _tmp: tmp,
        repo,
        study,
        out,
    }
}

/// Packs `script` as `.gpu/bin/<name>.xz` of `repo`, as the build packs a CUDA binary.
fn pack_binary(repo: &Path, name: &str, script: &str) {
    let plain = repo.join(format!("../{name}"));
    fs::write(&plain, script).unwrap();
    let xz = Command::new("xz")
        .arg("-c")
        .arg(&plain)
        .output()
        .expect("xz must be installed");
    fs::write(repo.join(format!(".gpu/bin/{name}.xz")), xz.stdout).unwrap();
}

impl Session {
    fn step(&self, args: &[&str]) -> Output {
        self.step_with(args, &[])
    }

    /// A step with extra environment variables; `fetch` and `snapshot` pack under the session's
    /// folder.
    fn step_with(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new("bash")
            .arg(self.repo.join("scripts/gpu_session.sh"))
            .args(args)
            .env("OUT", &self.out)
            .env("STUDY", &self.study)
            .env("STUDY_TIMEOUT", "30")
            .env("FETCH_PACK_DIR", self.repo.join("../fetch-pack"))
            .env("SNAP_PACK_DIR", self.repo.join("../snap-pack"))
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    /// The paths in the xz'd tar parts `out/<prefix>.partN`, in order.
    fn listing(&self, prefix: &str) -> BTreeSet<String> {
        self.untar(prefix, "-t")
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The text of `path` in the xz'd tar parts `out/<prefix>.partN`.
    fn file_in(&self, prefix: &str, path: &str) -> String {
        self.untar(prefix, &format!("-xO '{path}'"))
    }

    /// What `tar <args>` prints of the xz'd tar parts `out/<prefix>.partN`, in order.
    fn untar(&self, prefix: &str, args: &str) -> String {
        let mut parts: Vec<PathBuf> = fs::read_dir(&self.out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .collect();
        parts.sort();
        assert!(!parts.is_empty(), "no {prefix} parts in {:?}", self.out);
        let cat = parts
            .iter()
            .map(|p| format!("'{}'", p.display()))
            .collect::<Vec<_>>()
            .join(" ");
        let tar = Command::new("bash")
            .arg("-c")
            .arg(format!("cat {cat} | xz -dc | tar {args}"))
            .output()
            .unwrap();
        assert!(
            tar.status.success(),
            "{}",
            String::from_utf8_lossy(&tar.stderr)
        );
        String::from_utf8(tar.stdout).unwrap()
    }
}

fn set(paths: &[&str]) -> BTreeSet<String> {
    paths.iter().map(|p| p.to_string()).collect()
}

/// What `snapshot gpt-s1 STEP...` brings: the snapshots at `steps` and, beside them, the
/// phase-1 log of the training that wrote them, named after the last.
fn log_and_snapshots(steps: &[u64]) -> BTreeSet<String> {
    let last = steps.iter().max().unwrap();
    let mut files = set(&[&format!(
        "gpt-s1/phase1/snapshots/step-{last:07}.metrics.jsonl"
    )]);
    files.extend(
        steps
            .iter()
            .map(|s| format!("gpt-s1/phase1/snapshots/step-{s:07}.safetensors")),
    );
    files
}

#[test]
fn snapshot_stops_the_run_at_its_snapshot_and_brings_back_only_it_and_the_log() {
    let s = session();
    let o = s.step(&["snapshot", "gpt-s1", "1954"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(s.listing("snap.tar.xz.part"), log_and_snapshots(&[1954]));
    // Stopped by SIGTERM once the snapshot was there, not left to run out its time.
    let signals = fs::read_to_string(s.study.join("gpt-s1/signals")).unwrap();
    assert_eq!(signals.trim(), "term");
}

#[test]
fn snapshot_brings_every_snapshot_named_once_the_last_is_written() {
    let s = session();
    let o = s.step(&["snapshot", "gpt-s1", "1954", "488"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        s.listing("snap.tar.xz.part"),
        log_and_snapshots(&[488, 1954])
    );
    // It waited for the later one (written last), whatever the order named.
    let signals = fs::read_to_string(s.study.join("gpt-s1/signals")).unwrap();
    assert_eq!(signals.trim(), "term");
}

#[test]
fn snapshot_fails_naming_a_snapshot_the_run_never_made() {
    let s = session();
    let o = s.step(&["snapshot", "gpt-s1", "977"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no snapshot gpt-s1/phase1/snapshots/step-0000977.safetensors"),
        "{err}"
    );
    assert!(!s.out.join("snap.tar.xz.part0").exists());
}

#[test]
fn fetch_brings_what_the_tables_read_and_leaves_optimiser_states_snapshots_and_locks() {
    let s = session();
    let o = s.step(&["study", "gpt-s1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = s.step(&["fetch", "gpt-s1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        s.listing("fetch.tar.xz.part"),
        set(&[
            "gpt-s1/run.json",
            "gpt-s1/logprobs.json",
            "gpt-s1/phase1/metrics.jsonl",
            "gpt-s1/phase1/checkpoint/weights.safetensors",
            "gpt-s1/heads/metrics.jsonl",
            "gpt-s1/emergence/step-0000488/logprobs-1002.json",
        ])
    );
}

#[test]
fn fetch_of_a_run_that_is_not_there_fails_naming_it_and_brings_nothing() {
    let s = session();
    let o = s.step(&["study", "gpt-s1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A typo beside a real label: an empty or partial pack would pass for a fetch.
    let o = s.step(&["fetch", "gpt-s1", "gpt-s9"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("no run gpt-s9"),
        "{err}"
    );
    let parts = fs::read_dir(&s.out).map_or(0, |d| {
        d.filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("fetch")
        })
        .count()
    });
    assert_eq!(parts, 0);
}

#[test]
fn a_study_of_several_runs_writes_files_with_plain_names() {
    // The device tool brings back only names of letters, digits, '.', '_' and '-'.
    let s = session();
    let o = s.step(&["study", "gpt-s0,gpt-s1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(s.out.join("study-gpt-s0_gpt-s1.json").is_file());
    assert!(s.out.join("study-gpt-s0_gpt-s1.err").is_file());
}

/// Bytes that xz cannot shrink: a 64-bit xorshift stream.
fn incompressible(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The names of the fetch parts in `out`, sorted.
fn fetch_parts(s: &Session) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(&s.out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("fetch.tar.xz.part"))
        .collect();
    names.sort();
    names
}

#[test]
fn fetch_of_a_run_beyond_a_call_brings_what_fits_a_call_and_the_rest_on_the_next_page() {
    let s = session();
    let o = s.step(&["study", "gpt-s1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Weights of 5.5 MiB in parts of 1 MiB, 4 MiB a call: six parts, four on page 0 and two on
    // page 1.
    let weights = s.study.join("gpt-s1/phase1/checkpoint/weights.safetensors");
    fs::write(&weights, incompressible(5 << 20 | 1 << 19)).unwrap();
    let page = |k: &str| {
        s.step_with(
            &["fetch", "gpt-s1"],
            &[("FETCH_PART_MB", "1"), ("FETCH_PAGE", k), ("PAGE_MIB", "4")],
        )
    };
    let o = page("0");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout.contains("6 parts in all") && stdout.contains("FETCH_PAGE=1 fetch gpt-s1"),
        "{stdout}"
    );
    assert_eq!(
        fetch_parts(&s),
        ["00", "01", "02", "03"].map(|n| format!("fetch.tar.xz.part{n}"))
    );
    let o = page("1");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!stdout.contains("more left"), "{stdout}");
    // Both calls' parts together: the whole run as `fetch` brings it.
    assert_eq!(fetch_parts(&s).len(), 6);
    let listing = s.listing("fetch.tar.xz.part");
    assert!(listing.contains("gpt-s1/phase1/checkpoint/weights.safetensors"));
    assert!(listing.contains("gpt-s1/run.json"));
}

#[test]
fn a_page_holds_at_most_eight_files_however_small() {
    let s = session();
    let o = s.step(&["study", "gpt-s1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Ten parts of 1 MiB, far below 64 MiB together: eight come back a call, the device's
    // limit on files.
    let weights = s.study.join("gpt-s1/phase1/checkpoint/weights.safetensors");
    fs::write(&weights, incompressible(9 << 20 | 1 << 19)).unwrap();
    let o = s.step_with(&["fetch", "gpt-s1"], &[("FETCH_PART_MB", "1")]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("10 parts in all, pages 0 to 1"), "{stdout}");
    assert_eq!(fetch_parts(&s).len(), 8);
    // A page past the last one fails, naming the pages there are.
    let o = s.step_with(
        &["fetch", "gpt-s1"],
        &[("FETCH_PART_MB", "1"), ("FETCH_PAGE", "2")],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no page 2: the pack has pages 0 to 1"));
}

/// gpt-s1's phase 1 in the study as the machine that trained it left it: the 1/8 and 1/2
/// weight snapshots (their bytes from `bytes(step)`) and the log.
fn lay_out_snapshots(s: &Session, bytes: impl Fn(&str) -> Vec<u8>) {
    let snaps = s.study.join("gpt-s1/phase1/snapshots");
    fs::create_dir_all(&snaps).unwrap();
    for step in ["0000488", "0001954"] {
        fs::write(snaps.join(format!("step-{step}.safetensors")), bytes(step)).unwrap();
    }
    fs::write(s.study.join("gpt-s1/phase1/metrics.jsonl"), "log").unwrap();
}

#[test]
fn snapshots_beyond_a_call_come_back_in_pages() {
    let s = session();
    // Two snapshots of 2.5 MiB (an ELMo snapshot is 88 MB) in parts of 1 MiB, 4 MiB a call.
    lay_out_snapshots(&s, |_| incompressible(2 << 20 | 1 << 19));
    let page = |k: &str| {
        s.step_with(
            &["snapshot", "gpt-s1", "488", "1954"],
            &[("SNAP_PART_MB", "1"), ("SNAP_PAGE", k), ("PAGE_MIB", "4")],
        )
    };
    let o = page("0");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout.contains("pages 0 to 1") && stdout.contains("SNAP_PAGE=1 snapshot gpt-s1 488 1954"),
        "{stdout}"
    );
    let snap_parts = || {
        fs::read_dir(&s.out)
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_string_lossy().starts_with("snap.tar.xz.part")
            })
            .count()
    };
    assert_eq!(snap_parts(), 4);
    let o = page("1");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(snap_parts(), 6);
    assert_eq!(
        s.listing("snap.tar.xz.part"),
        log_and_snapshots(&[488, 1954])
    );
}

#[test]
fn sanitize_runs_each_tool_on_the_two_tower_checks_and_names_its_verdict() {
    let s = session();
    // A stand-in compute-sanitizer that logs its command line; initcheck "finds" an error.
    let tools = s.repo.join("../tools");
    fs::create_dir_all(&tools).unwrap();
    let fake = tools.join("compute-sanitizer");
    fs::write(
        &fake,
        "#!/usr/bin/env bash\necho \"$@\" >> \"$OUT/args.txt\"\n[ \"$2\" = initcheck ] && exit 3\nexit 0\n",
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&fake).status().unwrap();
    let path = format!("{}:{}", tools.display(), std::env::var("PATH").unwrap());
    let o = s.step_with(&["sanitize"], &[("PATH", &path)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let verdicts = fs::read_to_string(s.out.join("sanitize.txt")).unwrap();
    assert_eq!(
        verdicts.lines().collect::<Vec<_>>(),
        [
            "sanitize memcheck: exit 0, clean, every check passed",
            "sanitize initcheck: exit 3, the sanitizer reported errors",
            "sanitize synccheck: exit 0, clean, every check passed",
        ]
    );
    let args = fs::read_to_string(s.out.join("args.txt")).unwrap();
    for line in args.lines() {
        assert!(
            line.contains("--error-exitcode 3")
                && line.contains("gpu_check --device cuda --no-encoders --shapes tiny"),
            "{line}"
        );
    }
}

#[test]
fn profile_runs_each_style_under_nsys_and_brings_its_kernel_summary() {
    let s = session();
    // A stand-in nsys: `profile` logs its command line and environment, `stats` prints a table
    // named after the report it reads.
    let fake = s.repo.join("../nsys");
    fs::write(
        &fake,
        "#!/usr/bin/env bash\nif [ \"$1\" = stats ]; then echo \"kernels of $6\"; exit 0; fi\n\
         echo \"$TRAIN_STEP_ONESHOT $TRAIN_STEP_DTYPE $TRAIN_STEP_BATCH $*\" >> \"$OUT/args.txt\"\n",
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&fake).status().unwrap();
    let o = s.step_with(&["profile"], &[("NSYS", fake.to_str().unwrap())]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let args = fs::read_to_string(s.out.join("args.txt")).unwrap();
    let lines: Vec<_> = args.lines().collect();
    assert_eq!(lines.len(), 2, "{args}");
    for (line, style) in lines.iter().zip(["gpt", "elmo"]) {
        assert!(
            line.starts_with(&format!(
                "{style}/base_2tower/5 bf16 64 profile --trace=cuda"
            )) && line.contains(&format!("-o /tmp/profile_{style} .gpu/run/train_step")),
            "{line}"
        );
        let summary = fs::read_to_string(s.out.join(format!("profile_{style}.txt"))).unwrap();
        assert_eq!(
            summary.trim(),
            format!("kernels of /tmp/profile_{style}.nsys-rep")
        );
    }
    let verdicts = fs::read_to_string(s.out.join("profile.txt")).unwrap();
    assert_eq!(verdicts, "profile gpt: exit 0\nprofile elmo: exit 0\n");

    // Without nsys it says so, and fails.
    let o = s.step_with(&["profile"], &[("NSYS", "/nonexistent/nsys")]);
    assert!(!o.status.success());
    let said = fs::read_to_string(s.out.join("profile.txt")).unwrap();
    assert!(
        said.starts_with("profile: no nsys on this machine"),
        "{said}"
    );
}

#[test]
fn fetch_of_a_later_page_without_the_first_on_this_machine_fails_saying_so() {
    let s = session();
    let o = s.step_with(&["fetch", "gpt-s1"], &[("FETCH_PAGE", "1")]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("FETCH_PAGE=0 first"));
}

#[test]
fn snapshot_on_the_machine_that_trained_the_run_packs_its_snapshots_without_running_it() {
    let s = session();
    lay_out_snapshots(&s, |step| step.as_bytes().to_vec());
    let o = s.step(&["snapshot", "gpt-s1", "488", "1954"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        s.listing("snap.tar.xz.part"),
        log_and_snapshots(&[488, 1954])
    );
    // The stand-in was never started: it would have laid out the run and rewritten the log.
    assert!(!s.study.join("gpt-s1/run.json").exists());
    assert_eq!(
        fs::read_to_string(s.study.join("gpt-s1/phase1/metrics.jsonl")).unwrap(),
        "log"
    );
    // The run's log went beside the snapshots, under the last one's name.
    let beside = "gpt-s1/phase1/snapshots/step-0001954.metrics.jsonl";
    assert_eq!(s.file_in("snap.tar.xz.part", beside), "log");
}

#[test]
fn moments_runs_the_one_shot_on_the_device_and_keeps_only_its_result_line() {
    let s = session();
    // A stand-in moments bench: a progress line, then the one-shot's JSON line naming the
    // environment it was given.
    pack_binary(
        &s.repo,
        "moments",
        "#!/usr/bin/env bash\necho 'accumulating...'\n\
         echo \"{\\\"oneshot\\\":\\\"$MOMENTS_ONESHOT $MOMENTS_N $LMD_BENCH_D $MOMENTS_DEVICE\\\"}\"\n",
    );
    for _ in 0..2 {
        let o = s.step(&["moments"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let lines = fs::read_to_string(s.out.join("moments.jsonl")).unwrap();
    let want = "{\"oneshot\":\"3 8192 9216 cuda\"}\n";
    assert_eq!(lines, want.repeat(2), "each call appends its one line");
}
