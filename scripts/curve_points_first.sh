#!/usr/bin/env bash
# Trains one run of the `cpu` protocol with its agreement-curve points first: phase 1 only as far
# as its K-th snapshot (`--stop-at-snapshot K`: a checkpoint there, exit 75), then the heads of
# every snapshot written so far (`--curve-so-far`: 1/8 first, each snapshot's heads cached in the
# run folder as soon as they are scored), then the rest of the run (phase 1 to its end, its heads,
# its record; the snapshot heads are read back, not trained again). Resumable at every step:
# stop it with `kill -TERM -- -PGID` (its process group; under setsid, the script's PID) and
# start it again with the same arguments.
#
#   BIN=$HOME/runs/bin/reproduce OUT=$HOME/runs/curves-bert RAYON_NUM_THREADS=1 \
#     setsid nohup scripts/curve_points_first.sh bert-s0 3 >> $HOME/runs/logs/bert-s0.log 2>&1 &
#
# K: the snapshot to stop phase 1 at (the protocols write them at 1/8, 1/4 and 1/2 of phase 1, so
# 3 stops phase 1 at its half). Why: a run's own order trains its end heads before its snapshot
# heads, so on a 2-core VM the curve's first points come hours after their weights were written.
# `reproduce --curve-so-far scored` (another process, any time) draws the curve so far.
# Tests: tests/curve_points_first.rs.
set -u
: "${BIN:?BIN: the reproduce binary (a build copied out of the checkout)}" "${OUT:?OUT: the study folder}"
[ $# -eq 2 ] || { echo "usage: BIN=... OUT=... $0 RUN K" >&2; exit 2; }
run=$1 k=$2
snaps="$OUT/$run/phase1/snapshots"
# Sets n to the number of snapshots written.
count() { n=0; for f in "$snaps"/step-*.safetensors; do [ -e "$f" ] && n=$((n + 1)); done; }
say() { echo "=== $(date -u +%FT%TZ) $run: $*"; }
args=(--protocol cpu --device cpu --out "$OUT" --only "$run" --quiet)
count
if [ "$n" -lt "$k" ]; then
  say "phase 1 to its snapshot $k"
  # A stop of the whole group (kill -TERM -- -PGID) reaches the binary itself, which stops after
  # its checkpoint: the script notes it, waits for that exit and goes no further.
  stopping=
  trap 'stopping=1' TERM INT
  "$BIN" "${args[@]}" --stop-at-snapshot "$k"
  rc=$?
  trap - TERM INT
  count
  say "phase 1 stopped at $n snapshots, exit $rc"
  [ -z "$stopping" ] && [ "$n" -ge "$k" ] || exit "$rc"
fi
say "heads of its snapshots"
"$BIN" "${args[@]}" --curve-so-far || { rc=$?; say "curve so far exit $rc"; exit $rc; }
say "the rest of the run"
"$BIN" "${args[@]}"
rc=$?
say "exit $rc"
exit $rc
