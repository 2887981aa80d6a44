#!/usr/bin/env bash
# What a session lent a GPU runs there (docs/gpu.md), in steps that each fit the device tool's
# 10-minute call. Runs in the repository root on the GPU machine, with the carried folder .gpu/:
#   .gpu/bin/<name>.xz   xz-compressed, stripped `--features cuda` builds of gpu_check, reproduce,
#                        train_step, extract and moments (see docs/gpu.md for the build)
#   .gpu/data.tar.xz     the shared inputs the protocols read (WikiText-2 train, WikiText-103
#                        valid/test, the bert-base-uncased tokenizer, UD EWT train)
#
#   scripts/gpu_session.sh setup          unpack; put the data where this checkout's ../shared is
#   scripts/gpu_session.sh check          gpu_check on the device            -> $OUT/gpu_check.*
#   scripts/gpu_session.sh throughput     train_step and extract one-shots beside PyTorch
#                                                                             -> $OUT/throughput.jsonl
#                                         then `moments`
#   scripts/gpu_session.sh moments        LMD's moments one-shot: twelve 768-wide models, 8,192
#                                         rows a batch, on the host's cores (faer) and through
#                                         the device (cuBLAS f64), and the device's f64 GEMM
#                                         alone (not yet timed)        -> $OUT/moments.jsonl
#   scripts/gpu_session.sh speed          train_step one-shots of ELMo and GPT at peer_small
#                                         (the cpu protocol's towers, V 8192, B 16 x 128, bf16),
#                                         with the step's forward / backward / update split,
#                                         with cudarc's event tracking off and on
#                                         (LMSPLIT_CUDA_EVENTS), the memory pool kept and
#                                         released (LMSPLIT_CUDA_POOL); GPT at base_2tower B 64
#                                         ours, ours without our CUDA kernels, both defaults;
#                                         BERT there with and without our kernels
#                                         -> $OUT/speed.jsonl
#   scripts/gpu_session.sh sanitize       gpu_check's two-tower checks at the tiny shapes, 2 steps,
#                                         under compute-sanitizer's memcheck, initcheck and
#                                         synccheck (SANITIZE_TOOLS), each cut at
#                                         SANITIZE_TIMEOUT (150) s: out-of-bounds accesses, reads
#                                         of memory never written (the kernels' uninitialised
#                                         outputs), shuffles with lanes missing
#                                         -> $OUT/sanitize.txt, $OUT/sanitize-TOOL.txt
#   scripts/gpu_session.sh profile        GPT and ELMo (PROFILE_STYLES) train_step one-shots at
#                                         base_2tower B 64, bf16, 5 steps, under Nsight Systems
#                                         (nsys on PATH or NSYS), and its per-kernel summary;
#                                         says so and fails where the machine has no nsys
#                                         -> $OUT/profile_STYLE.txt, $OUT/profile.txt
#   scripts/gpu_session.sh study ONLY     reproduce --protocol cpu --only ONLY (resumable; extra
#                                         flags in STUDY_FLAGS, e.g. --no-emergence; stopped with
#                                         SIGTERM, i.e. a checkpoint, after STUDY_TIMEOUT seconds,
#                                         540 unless set: an outer `timeout` would stop only this
#                                         script, not the run; output in study-ONLY.{json,err}
#                                         with commas in ONLY written as _)
#   scripts/gpu_session.sh fetch LABEL... runs' folders with the final phase-1 weights but no
#                                         other weights, checkpoints or snapshots (all the
#                                         tables read, the snapshot heads' scores included), xz
#                                         in parts of 15 MiB (a file that comes back holds at
#                                         most 16 MiB), a page of parts a call (what one call
#                                         brings back: page_out): FETCH_PAGE=K brings page K of
#                                         the pack that page 0 made (an ELMo run's 88 MB of
#                                         weights take two calls)
#                                         -> $OUT/fetch.tar.xz.partNN
#   scripts/gpu_session.sh snapshot LABEL STEP...
#                                         the snapshots at STEP... of LABEL, so that the CPU can
#                                         train the heads a cut call left unfinished there: on
#                                         the warm machine that trained LABEL, packed as they
#                                         are (seconds); on a fresh one, phase 1 again from its
#                                         start up to the last of them, then stopped (the GPU
#                                         repeats a run bit for bit); a page a call as fetch:
#                                         SNAP_PAGE=K brings page K (two BERT snapshots or
#                                         three GPT ones fit page 0; an ELMo snapshot, 88 MB,
#                                         takes two pages); the phase-1 log of the training
#                                         that wrote them comes beside them, which the run
#                                         there must find repeating its own before it adopts
#                                         them (a fresh machine of another kind, or other
#                                         kernels, LMSPLIT_CUDA_KERNELS, reach another model)
#                                         -> $OUT/snap.tar.xz.partNN
#   scripts/gpu_session.sh pack           the study's tables and run records -> $OUT/study.tar.xz
#   scripts/gpu_session.sh runs [K]       the runs themselves (records, log-probabilities, final
#                                         weights, heads' scores), xz in parts of 15 MiB: call K
#                                         brings page K -> $OUT/runs.tar.xz.partNN
# Every call carries .gpu afresh, which removes what `setup` unpacked there: the steps that run
# a binary unpack it first when it is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
BIN=.gpu/run
STUDY=${STUDY:-$HOME/runs/cpu-paper}
export LD_LIBRARY_PATH=$(python3 -c "import glob,os,site;print(':'.join(sorted({os.path.dirname(p) for s in site.getsitepackages() for p in glob.glob(s+'/nvidia/**/lib*.so*',recursive=True)})))"):${LD_LIBRARY_PATH:-}

setup() {
  mkdir -p $BIN
  for f in .gpu/bin/*.xz; do
    b=$BIN/$(basename "$f" .xz)
    [ -x "$b" ] || { xz -dc "$f" > "$b" && chmod +x "$b"; }
  done
  # The runs record absolute data paths: make the compile-time ../shared resolve here too, so
  # that run folders brought back read the same as ones trained beside the checkout.
  local shared
  shared=$(cd .. && pwd)/shared
  if [ ! -e "$shared/data/wikitext-2/train.txt" ]; then
    mkdir -p "$shared" && tar -xJf .gpu/data.tar.xz -C "$shared"
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
}

ensure_setup() {
  setup >/dev/null   # idempotent: unpacks only what is missing
}

check() {
  ensure_setup
  $BIN/gpu_check --device cuda --no-minilm --fixtures crates/lmd/tests/fixtures \
    --out "$OUT/gpu_check" 2>&1 | tee "$OUT/gpu_check.txt"
}

throughput() {
  ensure_setup
  local log=$OUT/throughput.jsonl
  for dtype in bf16 f32; do
    for style in gpt bert elmo; do
      steps=20; [ $style = elmo ] && steps=5
      TRAIN_STEP_ONESHOT=$style/base_2tower/$steps TRAIN_STEP_DEVICE=cuda \
        TRAIN_STEP_DTYPE=$dtype TRAIN_STEP_BATCH=64 $BIN/train_step | tail -1 | tee -a "$log"
    done
    python3 scripts/peer_two_tower_gpt.py --style gpt --shape base --batch 64 --device cuda \
      --dtype $dtype --steps 20 | tail -1 | tee -a "$log"
    python3 scripts/peer_two_tower_gpt.py --style bert --shape base --batch 64 --device cuda \
      --dtype $dtype --steps 20 | tail -1 | tee -a "$log"
    python3 scripts/peer_two_tower_elmo.py --shape base_2tower --batch 64 --device cuda \
      --dtype $dtype --steps 5 | tail -1 | tee -a "$log"
  done
  # The CPU protocol's shape (peer_small at batch 16) on the GPU: what a protocol run costs.
  for style in gpt bert elmo; do
    TRAIN_STEP_ONESHOT=$style/peer_small/20 TRAIN_STEP_DEVICE=cuda TRAIN_STEP_DTYPE=bf16 \
      $BIN/train_step | tail -1 | tee -a "$log"
  done
  local bert=/tmp/bert-base-random texts
  texts=$(cd .. && pwd)/shared/data/wikitext-2/train.txt
  [ -d $bert ] || python3 scripts/peer_extract.py --random-bert $bert \
    --tokenizer "$(cd .. && pwd)/shared/data/bert-base-uncased/bert_base_uncased.json"
  for dtype in bf16 f32; do
    EXTRACT_ONESHOT=20 EXTRACT_MODEL=$bert EXTRACT_TEXTS=$texts EXTRACT_DEVICE=cuda \
      EXTRACT_DTYPE=$dtype EXTRACT_BATCH=32 $BIN/extract 2>/dev/null | tail -1 | tee -a "$log"
    python3 scripts/peer_extract.py --model $bert --texts "$texts" --dtype $dtype --batch 32 \
      | tail -1 | tee -a "$log"
  done
  moments
}

moments() {
  ensure_setup
  # LMD's moments: 8192 rows of twelve 768-wide models a batch, on the host's cores and through
  # the device's tensor path
  MOMENTS_ONESHOT=3 MOMENTS_N=8192 LMD_BENCH_D=9216 MOMENTS_DEVICE=cuda $BIN/moments \
    | tail -1 | tee -a "$OUT/moments.jsonl"
}

speed() {
  ensure_setup
  # each line: cudarc's event tracking off/on and the memory pool kept/released (on, release:
  # the defaults before 27 Nov)
  one() { # style shape steps batch events pool [kernels]
    TRAIN_STEP_ONESHOT=$1/$2/$3 TRAIN_STEP_BATCH=$4 TRAIN_STEP_DEVICE=cuda TRAIN_STEP_DTYPE=bf16 \
      LMSPLIT_CUDA_EVENTS=$5 LMSPLIT_CUDA_POOL=$6 LMSPLIT_CUDA_KERNELS=${7:-on} $BIN/train_step \
      | tail -1 | tee -a "$OUT/speed.jsonl"
  }
  for style in elmo gpt; do
    one $style peer_small 20 16 off keep
    one $style peer_small 20 16 on keep
    one $style peer_small 20 16 off release
    one $style peer_small 20 16 on release
  done
  one gpt base_2tower 10 64 off keep
  one gpt base_2tower 10 64 off keep off
  one gpt base_2tower 10 64 on release
  # BERT leans hardest on the LayerNorm, softmax and GELU kernels: the same A/B
  one bert base_2tower 10 64 off keep
  one bert base_2tower 10 64 off keep off
}

sanitize() {
  ensure_setup
  local tool rc verdict
  for tool in ${SANITIZE_TOOLS:-memcheck initcheck synccheck}; do
    timeout "${SANITIZE_TIMEOUT:-150}" compute-sanitizer --tool "$tool" --error-exitcode 3 \
      --print-limit 20 $BIN/gpu_check --device cuda --no-encoders --shapes tiny --steps 2 \
      --out "$OUT/sanitize-$tool" >"$OUT/sanitize-$tool.txt" 2>&1
    rc=$?
    case $rc in
      0) verdict="clean, every check passed" ;;
      3) verdict="the sanitizer reported errors" ;;
      1) verdict="no sanitizer error, but a check failed" ;;
      124) verdict="cut at ${SANITIZE_TIMEOUT:-150} s" ;;
      *) verdict="did not run to the end" ;;
    esac
    echo "sanitize $tool: exit $rc, $verdict" | tee -a "$OUT/sanitize.txt"
    [ $rc = 0 ] || tail -n 25 "$OUT/sanitize-$tool.txt"
  done
}

profile() {
  # Kernel by kernel: where a step's time goes on the device (Nsight Systems, when the machine
  # has it; NSYS names it elsewhere).
  ensure_setup
  local nsys=${NSYS:-$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys \
    /usr/local/cuda/bin/nsys 2>/dev/null | head -1)}
  if [ -z "$nsys" ] || [ ! -x "$nsys" ]; then
    echo "profile: no nsys on this machine (PATH, /opt/nvidia/nsight-systems, /usr/local/cuda)" |
      tee "$OUT/profile.txt"
    return 1
  fi
  local style rep
  for style in ${PROFILE_STYLES:-gpt elmo}; do
    rep=/tmp/profile_$style
    TRAIN_STEP_ONESHOT=$style/base_2tower/5 TRAIN_STEP_DEVICE=cuda TRAIN_STEP_DTYPE=bf16 \
      TRAIN_STEP_BATCH=64 timeout "${PROFILE_TIMEOUT:-200}" "$nsys" profile --trace=cuda \
      --sample=none --cpuctxsw=none --force-overwrite=true -o $rep $BIN/train_step \
      >"$OUT/profile_$style.log" 2>&1
    echo "profile $style: exit $?" | tee -a "$OUT/profile.txt"
    # The kernels' summary (named gpukernsum before nsys 2023).
    "$nsys" stats --report cuda_gpu_kern_sum --format table $rep.nsys-rep >"$OUT/profile_$style.txt" 2>&1 ||
      "$nsys" stats --report gpukernsum --format table $rep.nsys-rep >"$OUT/profile_$style.txt" 2>&1
    head -n 30 "$OUT/profile_$style.txt"
  done
}

study() {
  ensure_setup
  # Files that come back have plain names: no commas.
  local tag=${1//,/_}
  # The run's own timeout is the stop that checkpoints: a `timeout` around this script would
  # signal only the script (GNU timeout puts its child in a process group of its own).
  # shellcheck disable=SC2086
  timeout --preserve-status -s TERM "${STUDY_TIMEOUT:-540}" $BIN/reproduce --protocol cpu --out "$STUDY" \
    --only "$1" ${STUDY_FLAGS:-} --quiet >"$OUT/study-$tag.json" 2>>"$OUT/study-$tag.err"
  local rc=$?
  tail -c 3000 "$OUT/study-$tag.err"
  return $rc
}

# The files of the runs (or study folders) under $STUDY named by the arguments that a later
# analysis reads: records, log-probabilities, heads' and snapshots' scores, metrics and the
# final phase-1 weights (the word groups read the shared embedding); not the optimiser states,
# the phase-1 weight snapshots or the heads' weights, which are large and only resume training.
run_files() {
  (cd "$STUDY" && find "$@" -type f ! -name '*.lock' ! -name '*.tmp' ! -name '*.safetensors' |
    grep -v -e '/checkpoint/' -e '/snapshots/'
    find "$@" -path '*/phase1/checkpoint/weights.safetensors')
}

# Copies page K of the pack DIR/NAME.partNN into $OUT and says what is left. A page is the
# next parts in order, as many as one call brings back: at most 8 files, PAGE_MIB (64) MiB
# together. HINT is the command that brings the next page.
page_out() {
  local name=$1 dir=$2 k=$3 hint=$4
  local parts=("$dir/$name".part*) cap=$((${PAGE_MIB:-64} << 20))
  local page=0 used=0 n=0 first=-1 last=-1 i size
  for i in "${!parts[@]}"; do
    size=$(stat -c %s "${parts[$i]}")
    if [ $n -gt 0 ] && { [ $((used + size)) -gt $cap ] || [ $n -ge 8 ]; }; then
      page=$((page + 1)) used=0 n=0
    fi
    used=$((used + size)) n=$((n + 1))
    if [ "$page" = "$k" ]; then
      [ $first -lt 0 ] && first=$i
      last=$i
    fi
  done
  if [ $first -lt 0 ]; then
    echo "$name: no page $k: the pack has pages 0 to $page" >&2
    return 1
  fi
  echo "$name: ${#parts[@]} parts in all, pages 0 to $page; this call brings page $k (parts $first to $last)"
  [ "$k" -lt $page ] && echo "$name: more left: $hint"
  for i in $(seq $first $last); do cp "${parts[$i]}" "$OUT/"; done
  ls -la "$OUT"
}

# Fails saying how to make it when DIR holds no pack NAME (a later page asked of a fresh machine).
have_pack() {
  [ -e "$2/$1.part00" ] && return 0
  echo "$1: no pack on this machine (a fresh one?): run $3 first" >&2
  return 1
}

fetch() {
  local k=${FETCH_PAGE:-0} dir=${FETCH_PACK_DIR:-/tmp/fetch-pack}
  if [ "$k" = 0 ]; then
    local l
    for l in "$@"; do
      [ -d "$STUDY/$l" ] || { echo "fetch: no run $l in $STUDY" >&2; return 1; }
    done
    rm -rf "$dir" && mkdir -p "$dir"
    run_files "$@" | (cd "$STUDY" && tar -cf - -T -) | xz -6 -T0 |
      split -b "${FETCH_PART_MB:-15}M" -d -a 2 - "$dir/fetch.tar.xz.part" ||
      { echo "fetch: packing failed" >&2; rm -rf "$dir"; return 1; }
  fi
  have_pack fetch.tar.xz $dir "fetch with FETCH_PAGE=0" &&
    page_out fetch.tar.xz $dir "$k" "FETCH_PAGE=$((k + 1)) fetch $*"
}

snapshot() {
  local k=${SNAP_PAGE:-0} dir=${SNAP_PACK_DIR:-/tmp/snap-pack} all="$*"
  if [ "$k" = 0 ]; then
    snapshot_pack "$dir" "$@" || return 1
  fi
  have_pack snap.tar.xz $dir "snapshot with SNAP_PAGE=0" &&
    page_out snap.tar.xz $dir "$k" "SNAP_PAGE=$((k + 1)) snapshot $all"
}

# The snapshots at STEP... of LABEL (training up to the last of them when they are not there),
# with the phase-1 log of the training that wrote them beside them as step-<LAST>.metrics.jsonl
# (a run here adopts them only when that log repeats its own: experiment::brought_snapshots),
# packed into DIR/snap.tar.xz.partNN.
snapshot_pack() {
  local dir=$1 label=$2 f last=0 s
  shift 2
  local files=()
  for s in "$@"; do
    files+=("$label/phase1/snapshots/step-$(printf %07d "$s").safetensors")
    [ "$s" -gt "$last" ] && last=$s
  done
  # Snapshots are written in order: the last one there means every earlier one is.
  f=$label/phase1/snapshots/step-$(printf %07d "$last").safetensors
  # On the warm machine that trained the run the snapshots are all there: pack them (seconds).
  if [ ! -f "$STUDY/$f" ]; then
    STUDY_TIMEOUT=${STUDY_TIMEOUT:-300} study "$label" &
    local pid=$!
    while [ ! -f "$STUDY/$f" ] && kill -0 $pid 2>/dev/null; do sleep 0.5; done
    # SIGTERM to this step's own `timeout`, which passes it on to its run (a checkpoint).
    pkill -TERM -P $pid timeout
    wait $pid
  fi
  for f in "${files[@]}"; do
    [ -f "$STUDY/$f" ] || { echo "no snapshot $f" >&2; return 1; }
  done
  rm -rf "$dir" && mkdir -p "$dir"
  local log=$label/phase1/metrics.jsonl
  local beside=$label/phase1/snapshots/step-$(printf %07d "$last").metrics.jsonl
  (cd "$STUDY" && tar -cf - --transform="s|^$log\$|$beside|" "$log" "${files[@]}") | xz -1 -T0 |
    split -b "${SNAP_PART_MB:-15}M" -d -a 2 - "$dir/snap.tar.xz.part"
}

pack() {
  (cd "$STUDY" && find . -maxdepth 2 \( -name '*.md' -o -name '*.csv' -o -name '*.png' \
    -o -name 'study.json' -o -name 'run.json' -o -name 'emergence.json' \
    -o -name '*scoring_set.json' \) -print0 | tar --null -cJf - -T -) >"$OUT/study.tar.xz"
  ls -la "$OUT"
}

runs() {
  # The whole study, as `fetch` brings runs (run_files).
  local k=${1:-0} dir=/tmp/runs-pack
  # Page 0 packs afresh (a study trained since must not get an older pack back).
  if [ "$k" = 0 ] || [ ! -e "$dir/done" ]; then
    rm -rf "$dir" && mkdir -p "$dir"
    run_files . | (cd "$STUDY" && tar -cf - -T -) | xz -6 -T0 |
      split -b 15M -d -a 2 - "$dir/runs.tar.xz.part" ||
      { echo "runs: packing failed" >&2; rm -rf "$dir"; return 1; }
    touch "$dir/done"
  fi
  page_out runs.tar.xz $dir "$k" "runs $((k + 1))"
}

"$@"
