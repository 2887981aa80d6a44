#!/usr/bin/env bash
# The one device script of a session lent a GPU (docs/gpu.md): at most 7 minutes on an H200,
# everything it brings back under 16 MiB in four files. Runs in the repository root on the GPU
# machine, with the carried folder .gpu/ that scripts/gpu_pack.sh makes:
#   .gpu/bin/<name>.xz   xz-compressed `--features cuda` builds of gpu_check, reproduce and the
#                        train_step bench (and the others the pack holds), the CUPTI tracer
#                        libcupti_trace.so and its libcupti.so.13
#   .gpu/data.tar.xz     the shared inputs the protocols read
#
#   scripts/gpu_measure.sh          every step below, in order, then the summary and the pack
#   scripts/gpu_measure.sh setup    unpack the binaries into .gpu/run; the data where this
#                                   checkout's ../shared is (what the runs' paths name)
#   scripts/gpu_measure.sh summary  the summary of what $WORK holds, again (no device)
#
# The steps, each cut at its time box (timeout; 124 or 137: "timeout"), each recorded as one
# line of steps.jsonl (name, status ok / failed / timeout / skipped, exit code, seconds, box);
# a failing step is recorded and the next one runs:
#   setup                     as above
#   gpu_check                 the device against the CPU (--no-minilm)           CHECK_S 90
#   profile/ours/STYLE        the train_step one-shot at base_2tower, B 64, bf16, PROFILE_STEPS
#                             (3) timed steps, under the CUPTI tracer; its window, sync:-14:-13
#                             for 3 steps, is exactly the timed steps             PROFILE_S 60
#   torch/STYLE               the PyTorch peer at the same shape: its timed steps (PEER_STEPS
#                             10, ELMo 4), then PROFILE_STEPS steps under torch.profiler PEER_S 90
#   train_step/STYLE/KERNELS  the one-shot (TRAIN_STEPS 5, ELMo 3) with all our kernels on, all
#                             off, then each switch off alone (LMSPLIT_CUDA_KERNELS=off:NAME;
#                             SWITCHES_GPT, SWITCHES_BERT, SWITCHES_ELMO): first on and off for
#                             every style, then this session's switches, then the older ones,
#                             so that a session short of time loses the older first TRAIN_STEP_S 45
#   gpt_run                   `reproduce train --protocol gpu --only gpt-s0 --device cuda` from
#                             scratch: once the phase-1 log reaches GPT_RUN_UPDATES (2000)
#                             updates (or the session's time runs out) one SIGTERM, which
#                             checkpoints and exits 75; the updates done (the checkpoint's
#                             state.json, the manifest's step once phase 1 is over), the rates,
#                             and phase 1's minutes projected for the protocol's budget
# Every step's box is also cut to what is left of SESSION_S (400 s) less what later steps are
# promised: GPT_RUN_S (120) for the run, STOP_S (20) for its stop (then SIGKILL), PACK_S (15)
# for the summary and the pack; a step with under MIN_STEP_S (5) left is skipped.
#
# Out ($OUT, default out/gpu): summary.md (Markdown: the steps, gpu_check, tokens/s, MFU and
# PyTorch / ours per style and switch, the profiles' GPU-busy shares and top kernels, the run;
# scripts/gpu_summary.py), steps.jsonl, measure.log and measure.tar.xz (every step's output,
# each cut to its last LOG_KIB (256) KiB, the profiles, gpu_check.json, the run's log, state
# and manifest; left out when over PACK_MIB (12) MiB). Work files in $WORK
# (/tmp/lmsplit-gpu-measure, emptied first).
set -uo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
WORK=${WORK:-/tmp/lmsplit-gpu-measure}
BIN=.gpu/run
SESSION_S=${SESSION_S:-400}
PACK_S=${PACK_S:-15}
GPT_RUN_S=${GPT_RUN_S:-120}
MIN_STEP_S=${MIN_STEP_S:-5}
CHECK_S=${CHECK_S:-90}
PROFILE_S=${PROFILE_S:-60}
PEER_S=${PEER_S:-90}
TRAIN_STEP_S=${TRAIN_STEP_S:-45}
SETUP_S=${SETUP_S:-120}
PROFILE_STEPS=${PROFILE_STEPS:-3}
PEER_STEPS=${PEER_STEPS:-10}
TRAIN_STEPS=${TRAIN_STEPS:-5}
GPT_RUN_UPDATES=${GPT_RUN_UPDATES:-2000}
STOP_S=${STOP_S:-20}
POLL_S=${POLL_S:-0.5}
STYLES=${STYLES:-gpt bert elmo}
# This session's switches, then the older ones (crates/towers/src/cuda_switch.rs).
NEW_SWITCHES=${NEW_SWITCHES:-attention update lstm_bf16}
SWITCHES_GPT=${SWITCHES_GPT:-attention update softmax layer_norm gelu nll adamw}
SWITCHES_BERT=${SWITCHES_BERT:-attention update softmax layer_norm gelu nll adamw}
SWITCHES_ELMO=${SWITCHES_ELMO:-lstm_bf16 update lstm layer_norm gelu nll adamw}
# What the steps before the run leave for it, its stop and the pack.
RESERVE=$((GPT_RUN_S + STOP_S + PACK_S))
LD_LIBRARY_PATH=$(python3 -c "import glob,os,site;print(':'.join(sorted({os.path.dirname(p) for s in site.getsitepackages() for p in glob.glob(s+'/nvidia/**/lib*.so*',recursive=True)})))" 2>/dev/null):${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH

now_us() { echo "${EPOCHREALTIME/./}"; }
T0=$(now_us)

# Seconds (two decimals) since $1 (microseconds).
since() {
  local us=$(($(now_us) - $1))
  printf '%d.%02d' $((us / 1000000)) $((us % 1000000 / 10000))
}

# Whole seconds left of the session once $1 seconds are kept for later steps.
left_s() { echo $((SESSION_S - ($(now_us) - T0) / 1000000 - $1)); }

# A step's name as a file name (the device tool brings back letters, digits, '.', '_', '-').
safe() { echo "$1" | tr '/:,' '___'; }

# record NAME STATUS RC SECONDS BOX: one line of steps.jsonl, and one of measure.log.
record() {
  printf '{"step":"%s","status":"%s","rc":%s,"seconds":%s,"box":%s}\n' "$@" >>"$WORK/steps.jsonl"
  printf '%-34s %-8s rc %-4s %8s s  (box %s s)\n' "$@" | tee -a "$WORK/measure.log"
}

# run_step NAME BOX RESERVE CMD...: CMD cut at BOX seconds, or at what is left of the session
# less RESERVE; its stdout and stderr in logs/NAME.{out,err}.
run_step() {
  local name=$1 box=$2 reserve=$3
  shift 3
  local left log t rc status
  left=$(left_s "$reserve")
  if [ "$left" -lt "$MIN_STEP_S" ]; then
    record "$name" skipped 0 0 "$box"
    return 0
  fi
  [ "$box" -gt "$left" ] && box=$left
  log=$WORK/logs/$(safe "$name")
  t=$(now_us)
  timeout -k 5 "$box" "$@" >"$log.out" 2>"$log.err"
  rc=$?
  case $rc in
    0) status=ok ;;
    124 | 137) status=timeout ;;
    *) status=failed ;;
  esac
  record "$name" $status $rc "$(since "$t")" "$box"
}

setup() {
  mkdir -p $BIN
  local f b
  for f in .gpu/bin/*.xz; do
    b=$BIN/$(basename "$f" .xz)
    [ -e "$b" ] || { xz -dc "$f" >"$b.tmp" && chmod +x "$b.tmp" && mv "$b.tmp" "$b"; } || return 1
  done
  # The runs read their data at the compile-time ../shared: make it resolve here too.
  local shared
  shared=$(cd .. && pwd)/shared
  if [ ! -e "$shared/data/wikitext-2/train.txt" ]; then
    mkdir -p "$shared" && tar -xJf .gpu/data.tar.xz -C "$shared" || return 1
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
}

# ONESHOT=(env ...): the train_step one-shot's environment for STYLE at base_2tower, B 64,
# bf16, STEPS timed steps (more variables and the binary follow it).
oneshot() {
  ONESHOT=(env TRAIN_STEP_ONESHOT="$1/base_2tower/$2" TRAIN_STEP_DEVICE=cuda
    TRAIN_STEP_DTYPE=bf16 TRAIN_STEP_BATCH=64)
}

profiles() {
  local style tracer window
  tracer=$(pwd)/$BIN/libcupti_trace.so
  # The timed steps, counted from the one-shot's last synchronisation (tools/cupti_trace/profile.h).
  window=sync:-$((4 * PROFILE_STEPS + 2)):-$((4 * PROFILE_STEPS + 1))
  for style in $STYLES; do
    oneshot "$style" "$PROFILE_STEPS"
    run_step "profile/ours/$style" "$PROFILE_S" "$RESERVE" "${ONESHOT[@]}" \
      CUDA_INJECTION64_PATH="$tracer" LMSPLIT_CUPTI_OUT="$WORK/profile/ours-$style.json" \
      LMSPLIT_CUPTI_WINDOW="$window" LMSPLIT_CUPTI_STEPS="$PROFILE_STEPS" "$BIN/train_step"
  done
}

peers() {
  local style steps
  for style in $STYLES; do
    steps=$PEER_STEPS
    [ "$style" = elmo ] && steps=$(((PEER_STEPS + 2) / 3))
    local common=(--batch 64 --device cuda --dtype bf16 --steps "$steps"
      --profile "$WORK/profile/torch-$style.json" --profile-steps "$PROFILE_STEPS")
    case $style in
      elmo) run_step "torch/$style" "$PEER_S" "$RESERVE" \
        python3 scripts/peer_two_tower_elmo.py --shape base_2tower "${common[@]}" ;;
      *) run_step "torch/$style" "$PEER_S" "$RESERVE" \
        python3 scripts/peer_two_tower_gpt.py --style "$style" --shape base "${common[@]}" ;;
    esac
  done
}

# The switches of STYLE.
switches_of() {
  case $1 in
    gpt) echo "$SWITCHES_GPT" ;;
    bert) echo "$SWITCHES_BERT" ;;
    elmo) echo "$SWITCHES_ELMO" ;;
  esac
}

is_new() { case " $NEW_SWITCHES " in *" $1 "*) return 0 ;; esac; return 1; }

sweep() {
  local style sw steps round
  one() { # style kernels
    steps=$TRAIN_STEPS
    [ "$1" = elmo ] && steps=$(((TRAIN_STEPS + 1) / 2))
    local value=$2
    case $2 in on | off) ;; *) value=off:$2 ;; esac
    oneshot "$1" "$steps"
    run_step "train_step/$1/$2" "$TRAIN_STEP_S" "$RESERVE" "${ONESHOT[@]}" \
      LMSPLIT_CUDA_KERNELS="$value" "$BIN/train_step"
  }
  for style in $STYLES; do one "$style" on; one "$style" off; done
  for round in new old; do
    for style in $STYLES; do
      for sw in $(switches_of "$style"); do
        local kind=old
        is_new "$sw" && kind=new
        [ $kind = $round ] && one "$style" "$sw"
      done
    done
  done
}

# The phase-1 step of the last line of LOG that has one ("step":N), or 0.
log_step() {
  [ -f "$1" ] || { echo 0; return; }
  local s
  s=$(tail -n 4 "$1" | grep -o '"step":[0-9]*' | tail -1 | cut -d: -f2)
  echo "${s:-0}"
}

gpt_run() {
  local name=gpt_run dir=$WORK/gpt-run left box
  # Its box ends where its stop (STOP_S at most) and the pack still fit the session.
  left=$(left_s $((PACK_S + STOP_S)))
  box=$left
  if [ "$left" -lt "$MIN_STEP_S" ]; then
    record $name skipped 0 0 "$GPT_RUN_S"
    return 0
  fi
  # From scratch: a checkpoint left by an earlier call would resume, not time the first updates.
  rm -rf "$dir"
  local log=$WORK/logs/$name metrics=$dir/gpt-s0/phase1/metrics.jsonl
  local t pid step=0 first_step=0 first_us=0 stop_us rc reason=updates
  t=$(now_us)
  "$BIN/reproduce" train --protocol gpu --out "$dir" --only gpt-s0 --device cuda \
    >"$log.out" 2>"$log.err" &
  pid=$!
  while :; do
    if ! kill -0 $pid 2>/dev/null; then reason=exited; break; fi
    step=$(log_step "$metrics")
    if [ "$step" -gt 0 ] && [ "$first_us" = 0 ]; then first_us=$(now_us) first_step=$step; fi
    [ "$step" -ge "$GPT_RUN_UPDATES" ] && break
    if [ $((($(now_us) - t) / 1000000)) -ge "$box" ]; then reason=box; break; fi
    sleep "$POLL_S"
  done
  stop_us=$(now_us)
  # One SIGTERM (a second one would kill it: the run's handler lets only the first through):
  # the run checkpoints at its next update and exits 75.
  [ $reason = exited ] || kill -TERM $pid 2>/dev/null
  local waited=0
  while kill -0 $pid 2>/dev/null && [ $waited -lt $((STOP_S * 10)) ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  kill -0 $pid 2>/dev/null && kill -KILL $pid
  wait $pid
  rc=$?
  local status=ok
  case $reason:$rc in
    updates:75 | box:75) ;;
    *) status=failed ;;
  esac
  python3 - "$dir/gpt-s0" "$log.err" "$metrics" >"$WORK/gpt_run.json" <<EOF
import json, re, sys
run, err, metrics = sys.argv[1:]
def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}
state, manifest = load(run + "/phase1/checkpoint/state.json"), load(run + "/manifest.json")
said = re.findall(r"stopped on request after update (\d+)", open(err, errors="replace").read())
last = {}
try:
    for line in open(metrics):
        if '"tokens_per_s"' in line:
            last = json.loads(line)
except (OSError, ValueError):
    pass
print(json.dumps({
    "updates_asked": $GPT_RUN_UPDATES, "stop": "$reason", "rc": $rc,
    "manifest_step": manifest.get("step"), "checkpoint_step": state.get("step"),
    "said_step": int(said[-1]) if said else None, "log_step": $step,
    "first_log_step": $first_step, "seconds_to_stop": ($stop_us - $t) / 1e6,
    "seconds_to_first_log": ($first_us - $t) / 1e6 if $first_us else None,
    "seconds_logged": ($stop_us - $first_us) / 1e6 if $first_us else None,
    "checkpoint_tokens": state.get("tokens"), "checkpoint_elapsed_s": state.get("elapsed_s"),
    "total_steps": last.get("total_steps") or state.get("total_steps"),
    "log_tokens_per_s": last.get("tokens_per_s"),
}))
EOF
  record $name $status $rc "$(since "$t")" "$box"
}

# Brings back at most four files, under 16 MiB together: the summary, the step records, the
# log and one xz'd tar of the rest.
pack() {
  mkdir -p "$OUT"
  local keep=$WORK/pack f
  rm -rf "$keep" && mkdir -p "$keep/logs"
  for f in "$WORK"/logs/*; do
    [ -f "$f" ] && tail -c "$((${LOG_KIB:-256} * 1024))" "$f" >"$keep/logs/$(basename "$f")"
  done
  cp -r "$WORK/profile" "$keep/" 2>/dev/null
  cp "$WORK/gpt_run.json" "$WORK/gpu_check/gpu_check.json" "$keep/" 2>/dev/null
  for f in phase1/metrics.jsonl phase1/checkpoint/state.json manifest.json; do
    [ -f "$WORK/gpt-run/gpt-s0/$f" ] && tail -c 1048576 "$WORK/gpt-run/gpt-s0/$f" \
      >"$keep/gpt_run-$(safe "$f")"
  done
  tar -C "$keep" -cJf "$OUT/measure.tar.xz" . 2>/dev/null
  if [ "$(stat -c %s "$OUT/measure.tar.xz" 2>/dev/null || echo 0)" -gt $((${PACK_MIB:-12} << 20)) ]; then
    echo "pack: measure.tar.xz over ${PACK_MIB:-12} MiB: left out" | tee -a "$WORK/measure.log"
    rm -f "$OUT/measure.tar.xz"
  fi
  cp "$WORK/summary.md" "$WORK/steps.jsonl" "$OUT/" 2>/dev/null
  tail -c 1048576 "$WORK/measure.log" >"$OUT/measure.log"
}

summary() {
  python3 scripts/gpu_summary.py "$WORK" >"$WORK/summary.md.tmp" 2>>"$WORK/measure.log" &&
    mv "$WORK/summary.md.tmp" "$WORK/summary.md" ||
    echo "summary: scripts/gpu_summary.py failed" | tee -a "$WORK/measure.log"
}

all() {
  rm -rf "$WORK"
  mkdir -p "$WORK/logs" "$WORK/profile"
  : >"$WORK/steps.jsonl"
  run_step setup "$SETUP_S" "$RESERVE" bash scripts/gpu_measure.sh setup
  run_step gpu_check "$CHECK_S" "$RESERVE" "$BIN/gpu_check" --device cuda \
    --no-minilm --fixtures crates/lmd/tests/fixtures --out "$WORK/gpu_check"
  profiles
  peers
  sweep
  gpt_run
  summary
  pack
  echo "session: $(since "$T0") s; $OUT:" && ls -la "$OUT"
  [ -f "$WORK/summary.md" ] && cat "$WORK/summary.md"
  return 0
}

case ${1:-all} in
  all) all ;;
  setup) setup ;;
  summary) summary && cat "$WORK/summary.md" ;;
  *) echo "gpu_measure: no step $1 (all, setup, summary)" >&2; exit 2 ;;
esac
