#!/usr/bin/env bash
# Builds the CUDA set that a session lent a GPU carries, and packs it into .gpu/ (docs/gpu.md):
#
#   scripts/gpu_pack.sh                     build (--features cuda, CUDA 13.0 and the target dir
#                                           under $HOME/.cache from ../shared/tools/cuda-env.sh),
#                                           strip, xz, the shared data, a copy in the cache
#   PACK_SKIP_BUILD=1 scripts/gpu_pack.sh   pack what CARGO_TARGET_DIR's release build holds
#
# Out: .gpu/bin/<name>.xz for gpu_check, reproduce, two_tower and the train_step, extract and
# moments benches (the newest build of each bench: older hashed builds stay in deps/), the CUPTI
# tracer libcupti_trace.so (tools/cupti_trace, built by $CXX, default c++, against the CUPTI of
# the CUDA 13.0 wheels, which the build installs into cuda-env's venv when it lacks it) and that
# libcupti.so.13 beside it (both in $CARGO_TARGET_DIR/cupti_trace/),
# .gpu/data.tar.xz (the inputs the protocols read, unpacked there as ../shared/data), and the
# same in LMSPLIT_GPU_CACHE ($HOME/.cache/lmsplit-gpu) with COMMIT, the commit built (unknown
# with PACK_SKIP_BUILD). lmd_table is built (its CUDA path must compile) but not packed: its
# checkpoints cannot travel.
# STRIP names the strip program (strip).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(--example gpu_check --example reproduce --example two_tower --example lmd_table
  --bench train_step --bench extract --bench moments)
built="gpu_check reproduce two_tower train_step extract moments"
packed="$built libcupti_trace.so libcupti.so.13"
files=()
# The CUPTI tracer (seconds to build): a shared library the driver loads through
# CUDA_INJECTION64_PATH, its libstdc++ linked in (the GPU machine's may be older) and its run
# path its own folder, where the pack puts the libcupti it was built against.
tracer() {
  local cu=${CUDA_ROOT:?CUDA_ROOT: the CUDA 13.0 wheels (cuda-env.sh sets it)}
  if [ ! -e "$cu/include/cupti.h" ] || [ ! -e "$cu/lib/libcupti.so.13" ]; then
    "${LMSPLIT_CUDA_HOME:-$HOME/.cache/lmsplit-cuda13}/venv/bin/pip" install -q \
      "nvidia-cuda-cupti==13.0.85" || { echo "gpu_pack: could not install CUPTI" >&2; exit 1; }
  fi
  local dir=$CARGO_TARGET_DIR/cupti_trace
  mkdir -p "$dir"
  # shellcheck disable=SC2016
  "${CXX:-c++}" -std=c++17 -O2 -Wall -Wextra -shared -fPIC -fvisibility=hidden \
    -static-libstdc++ -static-libgcc -I"$cu/include" -Itools/cupti_trace \
    tools/cupti_trace/cupti_trace.cpp tools/cupti_trace/profile.cpp \
    -L"$cu/lib" -l:libcupti.so.13 -Wl,--exclude-libs,ALL,--disable-new-dtags,-rpath,'$ORIGIN' \
    -o "$dir/libcupti_trace.so" || { echo "gpu_pack: the CUPTI tracer did not build" >&2; exit 1; }
  cp "$cu/lib/libcupti.so.13" "$dir/"
}
if [ -z "${PACK_SKIP_BUILD:-}" ]; then
  # shellcheck source=/dev/null
  source ../shared/tools/cuda-env.sh
  # One build: its progress and diagnostics on stderr as usual, and on stdout the binaries
  # cargo names (not the newest file by name: a test binary of lmd's tests/moments.rs is also
  # deps/moments-<hash>).
  json=$(cargo build --release --features cuda "${targets[@]}" \
    --message-format=json-render-diagnostics)
  while read -r f; do files+=("$f"); done < <(printf '%s\n' "$json" | python3 -c '
import json, sys
want = sys.argv[1].split()
found = {}
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and m.get("executable") and t.get("name") in want \
            and set(t.get("kind", [])) & {"example", "bench"}:
        found[t["name"]] = m["executable"]
for n in want:
    print(found.get(n, ""))
' "$built")
  : "${CARGO_TARGET_DIR:?CARGO_TARGET_DIR: the target dir of the CUDA build (cuda-env.sh sets it)}"
  tracer
  files+=("$CARGO_TARGET_DIR/cupti_trace/libcupti_trace.so" "$CARGO_TARGET_DIR/cupti_trace/libcupti.so.13")
else
  : "${CARGO_TARGET_DIR:?CARGO_TARGET_DIR: the target dir of the CUDA build (cuda-env.sh sets it)}"
  T=$CARGO_TARGET_DIR/release
  [ -d "$T/deps" ] || { echo "gpu_pack: no release build in $CARGO_TARGET_DIR" >&2; exit 1; }
  # Without a build here, the newest build of each bench by name (a later test binary of the
  # same name in this target dir would be taken for it).
  newest() {
    find "$T/deps" -maxdepth 1 -type f -name "$1-*" ! -name '*.d' -printf '%T@ %p\n' |
      sort -n | tail -1 | cut -d' ' -f2-
  }
  files=("$T/examples/gpu_check" "$T/examples/reproduce" "$T/examples/two_tower")
  for b in train_step extract moments; do files+=("$(newest $b)"); done
  files+=("$CARGO_TARGET_DIR/cupti_trace/libcupti_trace.so" "$CARGO_TARGET_DIR/cupti_trace/libcupti.so.13")
fi
i=0
for n in $packed; do
  f=${files[$i]:-}
  [ -n "$f" ] && [ -f "$f" ] || { echo "gpu_pack: no binary of $n (${f:-none built})" >&2; exit 1; }
  i=$((i + 1))
done
if [ -d .git ] && ! grep -qx '/.gpu/' .git/info/exclude 2>/dev/null; then
  mkdir -p .git/info && echo /.gpu/ >> .git/info/exclude
fi
mkdir -p .gpu/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in "${files[@]}"; do
  n=$(basename "$f" | sed 's/-[0-9a-f]*$//')
  cp "$f" "$tmp/$n"
  # NVIDIA's library goes as it came.
  [ "$n" = libcupti.so.13 ] || "${STRIP:-strip}" "$tmp/$n"
  # Written aside, then renamed: a cut pack leaves no truncated binary to carry.
  xz -6 -T0 -c "$tmp/$n" > ".gpu/bin/$n.xz.tmp"
  mv ".gpu/bin/$n.xz.tmp" ".gpu/bin/$n.xz"
done
repo=$(pwd)
(cd ../shared && tar -cJf "$repo/.gpu/data.tar.xz.tmp" data/wikitext-2/train.txt \
  data/wikitext-103-valid-test/wiki.*.tokens data/bert-base-uncased \
  data/ud-english-ewt/en_ewt-ud-train.conllu)
mv .gpu/data.tar.xz.tmp .gpu/data.tar.xz
cache=${LMSPLIT_GPU_CACHE:-$HOME/.cache/lmsplit-gpu}
mkdir -p "$cache"
# No COMMIT while the copy is under way: a cut copy must not pass for the set it names.
rm -f "$cache/COMMIT"
cp -r .gpu/bin .gpu/data.tar.xz "$cache/"
head=$(git describe --always --dirty 2>/dev/null || echo none)
# Only a build here knows what it built from.
if [ -z "${PACK_SKIP_BUILD:-}" ]; then
  echo "$head" > "$cache/COMMIT"
else
  echo "unknown: packed from an earlier build (HEAD $head)" > "$cache/COMMIT"
fi
du -sh .gpu
ls -la .gpu/bin
