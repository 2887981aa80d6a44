//! Process-level: `scripts/gpu_measure.sh`, the one script a session lent a GPU runs, on
//! stand-ins for the CUDA binaries (`gpu_check`, the `train_step` one-shot, `reproduce`, the
//! CUPTI tracer) and the PyTorch peers (shell and Python scripts that compute nothing), in a copy
//! of the script with its own `.gpu/` and `../shared/`. It must run every step in order, record
//! a failing or hanging step and go on, keep to its time boxes and its session's deadline, stop
//! the GPT run with one SIGTERM and read the updates it did, and bring back at most 8 files under
//! 16 MiB: a session that overruns or brings back nothing costs its device time.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Every stand-in appends its command line to `$CALLS`, so that the test sees the order.
/// The `train_step` one-shot: fails with `lstm_bf16` off (a switch this build lacks), hangs with
/// `attention` off when `$HANG` is set, writes 40 MiB with `gelu` off when `$SPEW` is; under
/// the tracer (`CUDA_INJECTION64_PATH`, which must name the unpacked tracer) writes the profile
/// the tracer would (13 synchronisations for BERT, one short); prints the one-shot's JSON line
/// (half the rate with every kernel off).
const FAKE_TRAIN_STEP: &str = r#"#!/usr/bin/env bash
echo "train_step $TRAIN_STEP_ONESHOT ${LMSPLIT_CUDA_KERNELS:-} ${CUDA_INJECTION64_PATH:+traced}" >> "$CALLS"
[ "$TRAIN_STEP_DEVICE $TRAIN_STEP_DTYPE $TRAIN_STEP_BATCH" = "cuda bf16 64" ] || exit 4
case ${LMSPLIT_CUDA_KERNELS:-} in
  off:lstm_bf16) echo "no CUDA kernel \"lstm_bf16\"" >&2; exit 1 ;;
  off:attention) [ -n "${HANG:-}" ] && exec sleep 30 ;;
  off:gelu) [ -n "${SPEW:-}" ] && head -c $((40 << 20)) /dev/urandom ;;
esac
[ -n "${SLOW:-}" ] && sleep "$SLOW"
if [ -n "${CUDA_INJECTION64_PATH:-}" ]; then
  [ -f "$CUDA_INJECTION64_PATH" ] || exit 3
  syncs=14; [ "${TRAIN_STEP_ONESHOT%%/*}" = bert ] && syncs=13
  printf '{"tool":"cupti","window":"%s","window_found":true,"syncs":'$syncs',"steps":%s,"span_ns":300000000,"busy_ns":240000000,"busy_share":0.8,"kernel_count":3000,"kernel_ns":230000000,"memcpy_count":3,"memcpy_ns":6000000,"memset_count":3,"memset_ns":3000000,"incomplete":0,"dropped":0,"kernels":[{"name":"sm90_gemm|bf16","count":900,"total_ns":150000000,"mean_ns":166666},{"name":"softmax_nll_fwd","count":3,"total_ns":80000000,"mean_ns":26666666}]}\n' \
    "$LMSPLIT_CUPTI_WINDOW" "$LMSPLIT_CUPTI_STEPS" > "$LMSPLIT_CUPTI_OUT"
fi
tps=100000; [ "${LMSPLIT_CUDA_KERNELS:-}" = off ] && tps=50000
echo "warming up"
echo "{\"style\":\"${TRAIN_STEP_ONESHOT%%/*}\",\"tokens_per_s\":$tps,\"mfu\":0.0346,\"s_per_step\":0.0819,\"forward_s\":0.02,\"backward_s\":0.05,\"update_s\":0.0119,\"model_gflop_per_token\":0.341}"
"#;

/// `gpu_check --device cuda ... --out DIR`: its report with one failed check.
const FAKE_GPU_CHECK: &str = r#"#!/usr/bin/env bash
echo "gpu_check $*" >> "$CALLS"
out=${@: -1}
mkdir -p "$out"
echo '{"passed":false,"n_checks":98,"failed":["train/gpt/wide/bf16"],"notices":[],"checks":[]}' > "$out/gpu_check.json"
echo "train/gpt/wide/bf16 ... FAIL"
exit 1
"#;

/// `reproduce train --protocol gpu --out DIR --only gpt-s0 --device cuda`: lays out the run,
/// logs 10 updates a line every few milliseconds after a moment's start-up, and on SIGTERM
/// writes its checkpoint's state (the updates done), says so as the real run does, and exits
/// 75; a second SIGTERM kills it before its checkpoint. Its manifest keeps step 0, as a real
/// one does until phase 1 ends.
const FAKE_REPRODUCE: &str = r#"#!/usr/bin/env bash
echo "reproduce $*" >> "$CALLS"
run=$5/$7
mkdir -p "$run/phase1"
echo '{"version":1,"stage":"Phase1","step":0}' > "$run/manifest.json"
step=0
term() {
  # As the real run's handler: a second SIGTERM while the checkpoint is written kills it.
  trap - TERM
  echo term >> "$run/signals"
  sleep 0.2
  mkdir -p "$run/phase1/checkpoint"
  echo "{\"step\":$step,\"tokens\":$((step * 8192)),\"elapsed_s\":$((step / 20))}" > "$run/phase1/checkpoint/state.json"
  echo "stopped on request after update $step; checkpoint written to $run/phase1/checkpoint: run the same command again to resume" >&2
  exit 75
}
trap term TERM
sleep 0.3
while [ $step -lt 1000000 ]; do
  step=$((step + 10))
  echo "{\"grad_norm\":1.0,\"loss\":5.0,\"lr\":0.001,\"step\":$step,\"tokens\":$((step * 8192)),\"tokens_per_s\":163840.0,\"total_steps\":24415}" >> "$run/phase1/metrics.jsonl"
  sleep 0.005
done
exit 0
"#;

/// A PyTorch peer: its timed rate and, with `--profile`, the profile torch.profiler would write.
const FAKE_PEER: &str = r#"import json, os, sys
args = sys.argv[1:]
with open(os.environ["CALLS"], "a") as f:
    f.write(" ".join(["peer", os.path.basename(sys.argv[0])] + args) + "\n")
style = args[args.index("--style") + 1] if "--style" in args else "elmo"
steps = int(args[args.index("--profile-steps") + 1])
p = {"tool": "torch.profiler", "window": f"{steps} profiled steps", "window_found": True,
     "syncs": 0, "steps": steps, "span_ns": 60000000, "busy_ns": 57000000, "busy_share": 0.95,
     "kernel_count": 900, "kernel_ns": 56000000, "memcpy_count": 0, "memcpy_ns": 0,
     "memset_count": 3, "memset_ns": 1000000, "incomplete": 0, "dropped": 0,
     "kernels": [{"name": "flash_fwd", "count": 72, "total_ns": 20000000, "mean_ns": 277777}]}
with open(args[args.index("--profile") + 1], "w") as f:
    json.dump(p, f)
print(json.dumps({"style": style, "tokens_per_s": 300000.0, "s_per_step": 0.0273,
                  "profile_busy_share": 0.95}))
"#;

/// A checkout holding the script, the summary, stand-in peers and a `.gpu/` of stand-ins,
/// beside a `shared/` with the data file `setup` looks for (so it unpacks no data).
struct Session {
    _tmp: tempfile::TempDir,
    repo: PathBuf,
    out: PathBuf,
    work: PathBuf,
    calls: PathBuf,
}

fn session() -> Session {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    fs::create_dir_all(repo.join("scripts")).unwrap();
    fs::create_dir_all(repo.join(".gpu/bin")).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for f in ["gpu_measure.sh", "gpu_summary.py"] {
        fs::copy(root.join("scripts").join(f), repo.join("scripts").join(f)).unwrap();
    }
    for f in ["peer_two_tower_gpt.py", "peer_two_tower_elmo.py"] {
        fs::write(repo.join("scripts").join(f), FAKE_PEER).unwrap();
    }
    pack_binary(&repo, "train_step", FAKE_TRAIN_STEP);
    pack_binary(&repo, "gpu_check", FAKE_GPU_CHECK);
    pack_binary(&repo, "reproduce", FAKE_REPRODUCE);
    pack_binary(&repo, "libcupti_trace.so", "the tracer");
    pack_binary(&repo, "libcupti.so.13", "CUPTI");
    let data = tmp.path().join("shared/data/wikitext-2");
    fs::create_dir_all(&data).unwrap();
    fs::write(data.join("train.txt"), "text").unwrap();
    let (out, work, calls) = (
        tmp.path().join("out"),
        tmp.path().join("work"),
        tmp.path().join("calls.txt"),
    );
    Session {
        _tmp: tmp,
        repo,
        out,
        work,
        calls,
    }
}

/// Packs `script` as `.gpu/bin/<name>.xz` of `repo`, as the pack packs a CUDA binary.
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

/// One step record of steps.jsonl.
#[derive(Debug)]
struct Step {
    name: String,
    status: String,
    rc: i64,
    seconds: f64,
    boxed: f64,
}

impl Session {
    /// The whole script, with extra environment variables; its output and wall time.
    fn run(&self, env: &[(&str, &str)]) -> (Output, Duration) {
        let t = Instant::now();
        let o = Command::new("bash")
            .arg(self.repo.join("scripts/gpu_measure.sh"))
            .env("OUT", &self.out)
            .env("WORK", &self.work)
            .env("CALLS", &self.calls)
            .env("POLL_S", "0.05")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (o, t.elapsed())
    }

    fn steps(&self) -> Vec<Step> {
        fs::read_to_string(self.work.join("steps.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                Step {
                    name: v["step"].as_str().unwrap().into(),
                    status: v["status"].as_str().unwrap().into(),
                    rc: v["rc"].as_i64().unwrap(),
                    seconds: v["seconds"].as_f64().unwrap(),
                    boxed: v["box"].as_f64().unwrap(),
                }
            })
            .collect()
    }

    fn calls(&self) -> Vec<String> {
        fs::read_to_string(&self.calls)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn summary(&self) -> String {
        fs::read_to_string(self.out.join("summary.md")).unwrap()
    }
}

/// The steps of a session with time for all of them, in the order the script promises.
fn every_step() -> Vec<String> {
    let mut v = vec!["setup".to_string(), "gpu_check".into()];
    for s in ["gpt", "bert", "elmo"] {
        v.push(format!("profile/ours/{s}"));
    }
    for s in ["gpt", "bert", "elmo"] {
        v.push(format!("torch/{s}"));
    }
    for s in ["gpt", "bert", "elmo"] {
        v.push(format!("train_step/{s}/on"));
        v.push(format!("train_step/{s}/off"));
    }
    // This session's switches before the older ones.
    for (s, new) in [
        ("gpt", "attention update"),
        ("bert", "attention update"),
        ("elmo", "lstm_bf16 update"),
    ] {
        v.extend(new.split(' ').map(|k| format!("train_step/{s}/{k}")));
    }
    for (s, old) in [
        ("gpt", "softmax layer_norm gelu nll adamw"),
        ("bert", "softmax layer_norm gelu nll adamw"),
        ("elmo", "lstm layer_norm gelu nll adamw"),
    ] {
        v.extend(old.split(' ').map(|k| format!("train_step/{s}/{k}")));
    }
    v.push("gpt_run".into());
    v
}

#[test]
fn the_session_runs_every_step_in_order_and_records_a_failing_one_and_goes_on() {
    let s = session();
    let (o, _) = s.run(&[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let steps = s.steps();
    let names: Vec<&str> = steps.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, every_step());
    for st in &steps {
        let want = match st.name.as_str() {
            "gpu_check" | "train_step/elmo/lstm_bf16" => ("failed", 1),
            "gpt_run" => ("ok", 75),
            _ => ("ok", 0),
        };
        assert_eq!((st.status.as_str(), st.rc), want, "{st:?}");
    }
    // The stand-ins ran in that order, with the environment each step names.
    let calls = s.calls();
    assert!(calls[0].starts_with("gpu_check --device cuda --no-minilm"));
    assert_eq!(calls[1], "train_step gpt/base_2tower/3  traced");
    assert_eq!(calls[3], "train_step elmo/base_2tower/3  traced");
    assert!(
        calls[4].starts_with("peer peer_two_tower_gpt.py --style gpt --shape base --batch 64")
            && calls[4].contains("--steps 10 --profile"),
        "{}",
        calls[4]
    );
    assert!(calls[6].contains("--shape base_2tower") && calls[6].contains("--steps 4"));
    assert_eq!(calls[7], "train_step gpt/base_2tower/5 on ");
    assert_eq!(calls[8], "train_step gpt/base_2tower/5 off ");
    assert_eq!(calls[12], "train_step elmo/base_2tower/3 off ");
    assert_eq!(calls[13], "train_step gpt/base_2tower/5 off:attention ");
    assert_eq!(
        calls.last().unwrap(),
        &format!(
            "reproduce train --protocol gpu --out {}/gpt-run --only gpt-s0 --device cuda",
            s.work.display()
        )
    );
    let summary = s.summary();
    for row in [
        "| `train_step/elmo/lstm_bf16` | failed | 1 |",
        "97 of 98 checks PASS; FAIL: `train/gpt/wide/bf16`.",
        // Ours with all kernels on, and PyTorch at three times the rate.
        "| GPT | all on | 100,000 | 3.5% | 81.9 | 20.0 | 50.0 | 11.9 | 1.00× | 3.00× |",
        "| BERT | all off | 50,000 | 3.5% | 81.9 | 20.0 | 50.0 | 11.9 | 0.50× | 6.00× |",
        "| ELMo | off:lstm_bf16 | – |",
        "| GPT | PyTorch eager | 300,000 | 10.3% | 27.3 |",
        // The profiles, per step: 300 ms of span over 3 steps, 80% busy.
        "| GPT | ours (CUPTI) | sync:-14:-13 | 80.0% | 100.0 | 76.7 | 3.00 | 1,000 | 2 |",
        // 13 synchronisations where the one-shot makes 14: flagged.
        "| BERT | ours (CUPTI) | sync:-14:-13 (⚠ 13 synchronisations, not 14) | 80.0% |",
        "| ELMo | PyTorch (torch.profiler) | 3 profiled steps | 95.0% | 20.0 |",
        "| `sm90_gemm\\|bf16` | 300 | 166.7 | 50.00 | 65.2% |",
    ] {
        assert!(summary.contains(row), "{row}\nnot in\n{summary}");
    }
}

#[test]
fn the_gpt_run_is_stopped_by_one_sigterm_at_its_updates_and_its_checkpoint_read() {
    let s = session();
    let (o, _) = s.run(&[("STYLES", "gpt"), ("SWITCHES_GPT", "attention")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run = s.work.join("gpt-run/gpt-s0");
    assert_eq!(
        fs::read_to_string(run.join("signals")).unwrap(),
        "term\n",
        "one SIGTERM, not a second (which kills the real run before its checkpoint)"
    );
    let state: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(run.join("phase1/checkpoint/state.json")).unwrap(),
    )
    .unwrap();
    let done = state["step"].as_u64().unwrap();
    assert!(done >= 2000, "stopped at {done}, before the 2,000 updates");
    let r: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(s.work.join("gpt_run.json")).unwrap()).unwrap();
    assert_eq!(r["stop"], "updates");
    assert_eq!(r["rc"], 75);
    assert_eq!(r["checkpoint_step"].as_u64(), Some(done));
    assert_eq!(r["said_step"].as_u64(), Some(done));
    assert_eq!(r["manifest_step"], 0);
    assert_eq!(r["total_steps"], 24415);
    // The summary reports the checkpoint's updates (the manifest says 0 until phase 1 ends) and
    // a projection for the protocol's 24,415 updates.
    let summary = s.summary();
    let row = summary
        .lines()
        .skip_while(|l| !l.starts_with("| updates done"))
        .nth(2)
        .unwrap_or_else(|| panic!("no run row in {summary}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(cells[1].replace(',', ""), done.to_string(), "{row}");
    assert_eq!(cells[2], "75");
    assert_eq!(cells[7], "24,415");
    let projected: f64 = cells[8].parse().unwrap_or_else(|_| panic!("{row}"));
    assert!(projected > 0.0, "{row}");
}

#[test]
fn a_hanging_step_is_cut_at_its_box_and_the_session_goes_on() {
    let s = session();
    let (o, _) = s.run(&[
        ("HANG", "1"),
        ("TRAIN_STEP_S", "1"),
        ("STYLES", "gpt bert"),
        ("GPT_RUN_UPDATES", "50"),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let steps = s.steps();
    for name in ["train_step/gpt/attention", "train_step/bert/attention"] {
        let st = steps.iter().find(|x| x.name == name).unwrap();
        assert_eq!((st.status.as_str(), st.rc, st.boxed), ("timeout", 124, 1.0));
        assert!(st.seconds < 3.0, "{st:?}: not cut at its box");
    }
    // The steps after them ran.
    let after = steps
        .iter()
        .skip_while(|x| x.name != "train_step/bert/attention")
        .skip(1);
    assert!(after.clone().count() > 5);
    assert!(after.clone().all(|x| x.status == "ok" || x.rc == 1));
}

#[test]
fn a_session_short_of_time_skips_steps_keeps_the_runs_time_and_still_packs() {
    let s = session();
    // 6 s in all, 2 promised to the run, 1 to its stop and 1 to the pack, each one-shot 0.4 s.
    let (o, took) = s.run(&[
        ("SESSION_S", "6"),
        ("GPT_RUN_S", "2"),
        ("PACK_S", "1"),
        ("STOP_S", "1"),
        ("MIN_STEP_S", "1"),
        ("SLOW", "0.4"),
        ("GPT_RUN_UPDATES", "1000000"),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let steps = s.steps();
    assert_eq!(steps.len(), every_step().len(), "every step recorded");
    let skipped: Vec<&Step> = steps.iter().filter(|x| x.status == "skipped").collect();
    assert!(!skipped.is_empty(), "{steps:?}");
    // The older switches go first: when any step of the sweep was skipped, the last ones were.
    let sweep: Vec<&Step> = steps
        .iter()
        .filter(|x| x.name.starts_with("train_step/"))
        .collect();
    assert_eq!(sweep.last().unwrap().status, "skipped");
    // The run had its promised time, cut by its box (no updates to reach), and was stopped.
    let run = steps.iter().find(|x| x.name == "gpt_run").unwrap();
    assert_eq!((run.status.as_str(), run.rc), ("ok", 75), "{run:?}");
    let r: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(s.work.join("gpt_run.json")).unwrap()).unwrap();
    assert_eq!(r["stop"], "box");
    assert!(
        took < Duration::from_secs(6 + 4),
        "the session took {took:?}"
    );
    assert!(s.out.join("summary.md").is_file());
    assert!(s
        .summary()
        .contains("| `train_step/elmo/adamw` | skipped |"));
}

#[test]
fn what_comes_back_is_at_most_eight_plain_files_under_16_mib() {
    let s = session();
    // The gelu-off one-shots each write 40 MiB of output.
    let (o, _) = s.run(&[("SPEW", "1")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let log = fs::metadata(s.work.join("logs/train_step_gpt_gelu.out")).unwrap();
    assert!(log.len() > 40 << 20);
    let mut total = 0;
    let mut names = Vec::new();
    for e in fs::read_dir(&s.out).unwrap() {
        let e = e.unwrap();
        assert!(
            e.file_type().unwrap().is_file(),
            "{:?} is not a file",
            e.path()
        );
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
            "{name}"
        );
        total += e.metadata().unwrap().len();
        names.push(name);
    }
    names.sort();
    assert_eq!(
        names,
        ["measure.log", "measure.tar.xz", "steps.jsonl", "summary.md"]
    );
    assert!(total < 16 << 20, "{total} bytes come back");
    // The tar holds every step's log (cut), the profiles and the run's state.
    let listing = Command::new("tar")
        .arg("-tJf")
        .arg(s.out.join("measure.tar.xz"))
        .output()
        .unwrap();
    let listing = String::from_utf8(listing.stdout).unwrap();
    for f in [
        "./logs/train_step_gpt_gelu.out",
        "./logs/gpt_run.err",
        "./profile/ours-elmo.json",
        "./profile/torch-gpt.json",
        "./gpu_check.json",
        "./gpt_run.json",
        "./gpt_run-phase1_checkpoint_state.json",
    ] {
        assert!(listing.lines().any(|l| l == f), "{f} not in {listing}");
    }
}
