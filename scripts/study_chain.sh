#!/usr/bin/env bash
# Trains runs of the `cpu` protocol one after another in the background, each a resumable
# `reproduce --only <run>` call (with its snapshot heads unless STUDY_FLAGS has --no-emergence),
# and stops at the first that fails, so that a restart resumes where it stopped:
#
#   BIN=$HOME/runs/bin/reproduce-cpu OUT=$HOME/runs/curves \
#     setsid nohup scripts/study_chain.sh elmo_released-s0 gpt-s0 ... >> $HOME/runs/logs/curves.log 2>&1 &
#
# BIN: a release build of examples/reproduce copied out of the checkout (a rebuild must not
# change the binary under a running chain); OUT: the study folder (outside the checkout).
# TABLES (optional): runs separated by commas whose tables one more call makes once every run
# of the chain has finished: `reproduce --only TABLES` writes them to OUT/subset-<runs joined
# by +>. It trains nothing when every run of TABLES has finished; a run of TABLES that has not
# (one left to another machine) it would train here, so leave such a run out of both.
# Two chains side by side: on a 2-core VM two full-BiLSTM runs trained as one single-thread
# chain each (RAYON_NUM_THREADS=1) made 6% more tokens/s together than one two-thread chain,
# the LSTM's per-step products being too small to share two cores well. Leave TABLES off then
# (each chain's TABLES step would train the other's run) and make the tables once both finish.
# Priority: a chain started with setsid is its own session, and under the kernel's autogroup
# scheduling (kernel.sched_autogroup_enabled = 1, as on the build VMs) `nice` or `renice` on it
# does not yield the CPU to work in other sessions (builds, tests); the session's autogroup
# nice does: `echo 15 > /proc/<pid of reproduce>/autogroup`, and 0 to restore it.
set -u
: "${BIN:?BIN: the reproduce binary}" "${OUT:?OUT: the study folder}"
[ $# -gt 0 ] || { echo "usage: BIN=... OUT=... [TABLES=a,b,...] $0 RUN..." >&2; exit 2; }
step() { # LABEL, then the --only list
  echo "=== $(date -u +%FT%TZ) $1"
  # shellcheck disable=SC2086
  "$BIN" --protocol cpu --device cpu --out "$OUT" --only "$2" ${STUDY_FLAGS:-} --quiet
  rc=$?
  echo "=== $(date -u +%FT%TZ) $1 exit $rc"
  [ $rc -eq 0 ] || exit $rc
}
for run in "$@"; do step "$run" "$run"; done
[ -z "${TABLES:-}" ] || step "tables of $TABLES" "$TABLES"
echo "=== $(date -u +%FT%TZ) chain done"
