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
set -u
: "${BIN:?BIN: the reproduce binary}" "${OUT:?OUT: the study folder}"
[ $# -gt 0 ] || { echo "usage: BIN=... OUT=... $0 RUN..." >&2; exit 2; }
for run in "$@"; do
  echo "=== $(date -u +%FT%TZ) $run"
  # shellcheck disable=SC2086
  "$BIN" --protocol cpu --device cpu --out "$OUT" --only "$run" ${STUDY_FLAGS:-} --quiet
  rc=$?
  echo "=== $(date -u +%FT%TZ) $run exit $rc"
  [ $rc -eq 0 ] || exit $rc
done
echo "=== $(date -u +%FT%TZ) chain done"
