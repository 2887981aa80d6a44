#!/usr/bin/env bash
# Trains one run of the `cpu` protocol with its agreement-curve points first.
#
#   K (one number): phase 1 only as far as its K-th snapshot (`--stop-at-snapshot K`: a
#     checkpoint there, exit 75), then the heads of every snapshot written so far
#     (`--curve-so-far`: 1/8 first, each snapshot's heads cached in the run folder as soon as
#     they are scored), then the rest of the run (phase 1 to its end, its heads, its record; the
#     snapshot heads are read back, not trained again).
#   K1,K2,... (a list): the points one at a time, in that order: for each Ki, phase 1 as far as
#     its Ki-th snapshot, then that snapshot's heads alone (`--curve-so-far Ki`); then the heads
#     of the other snapshots (`--curve-so-far`) and the rest of the run. Each point of the list
#     is scored before phase 1 goes on to the next, so that a lost machine loses at most one.
#   A third argument `only`: the points of the list and nothing after them: no other
#     snapshot's heads, no rest of the run (a pair that needs one point more, say). One K then
#     goes as a list of one: phase 1 to its snapshot and that snapshot's heads alone.
#
# Resumable at every step: stop it with `kill -TERM -- -PGID` (its process group; under setsid,
# the script's PID) and start it again with the same arguments (a step already done trains
# nothing again).
#
#   BIN=$HOME/runs/bin/reproduce OUT=$HOME/runs/curves-bert RAYON_NUM_THREADS=1 \
#     setsid nohup scripts/curve_points_first.sh bert-s0 3 >> $HOME/runs/logs/bert-s0.log 2>&1 &
#
# The protocols write the snapshots at 1/8, 1/4 and 1/2 of phase 1, so K = 3 stops phase 1 at its
# half and 2,3 gives the 1/4 point, then the 1/2 point. Why: a run's own order trains its end
# heads before its snapshot heads, so on a 2-core VM the curve's first points come hours after
# their weights were written. `reproduce --curve-so-far scored` (another process, any time) draws
# the curve so far. Tests: tests/curve_points_first.rs.
set -u
: "${BIN:?BIN: the reproduce binary (a build copied out of the checkout)}" "${OUT:?OUT: the study folder}"
usage() { echo "usage: BIN=... OUT=... $0 RUN K|K1,K2,... [only]" >&2; exit 2; }
[ $# -eq 2 ] || { [ $# -eq 3 ] && [ "$3" = only ]; } || usage
[[ $2 =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || usage
run=$1
only=${3:-}
IFS=, read -ra ks <<< "$2"
snaps="$OUT/$run/phase1/snapshots"
# Sets n to the number of snapshots written.
count() { n=0; for f in "$snaps"/step-*.safetensors; do [ -e "$f" ] && n=$((n + 1)); done; }
say() { echo "=== $(date -u +%FT%TZ) $run: $*"; }
args=(--protocol cpu --device cpu --out "$OUT" --only "$run" --quiet)
# A stop of the whole group (kill -TERM -- -PGID) reaches the binary itself, which stops after
# its checkpoint: the script notes it, waits for that exit and goes no further.
stopping=
trap 'stopping=1' TERM INT
# Phase 1 as far as snapshot $1, unless the run holds it already.
phase1_to() {
  count
  [ "$n" -lt "$1" ] || return 0
  say "phase 1 to its snapshot $1"
  "$BIN" "${args[@]}" --stop-at-snapshot "$1"
  rc=$?
  count
  say "phase 1 stopped at $n snapshots, exit $rc"
  [ -z "$stopping" ] && [ "$n" -ge "$1" ] || exit "$rc"
}
# One call of the binary with the extra arguments given, its failure (or a stop) the script's.
step() {
  "$BIN" "${args[@]}" "$@"
  rc=$?
  [ -z "$stopping" ] && [ "$rc" -eq 0 ] || { say "exit $rc"; exit "$rc"; }
}
if [ ${#ks[@]} -eq 1 ] && [ -z "$only" ]; then
  phase1_to "${ks[0]}"
else
  for k in "${ks[@]}"; do
    phase1_to "$k"
    say "heads of its snapshot $k"
    step --curve-so-far "$k"
  done
fi
[ -z "$only" ] || { say "exit 0 (only the points asked for)"; exit 0; }
say "heads of its snapshots"
step --curve-so-far
say "the rest of the run"
step
say "exit 0"
