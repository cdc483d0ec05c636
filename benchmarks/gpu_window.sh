#!/usr/bin/env bash
# A lent GPU's window in one call (no Ray there; a call runs at most 10 minutes): first the
# CUDA tests that need neither Ray nor Polars (tests/test_cuda_graph.py: a replayed stack equals
# the eager body, float64 included; the machine has pytest), then issue 46's measurements
# (benchmarks/gpu_stacks.py, capped at STACKS_S seconds and at what is left of TOTAL; TOTAL is
# the whole call's wall, the archive included), then the evidence
# jobs `icl plan --gpu-minutes M` printed (benchmarks/gpu_evidence.sh), for what is left of
# TOTAL seconds:
#
#     icl plan --gpu-minutes 3 --seeds 5          # here: the jobs for the ~3 minutes left
#     TOTAL=560 OUT=$OUT bash benchmarks/gpu_window.sh reduced JOB [JOB ...]   # there
#
# STACKS_ARGS: more options for gpu_stacks.py (e.g. --compile, or --parts 4 for it alone;
# --ref .devref/ref_stack.py for a copy of the reference carried into the checkout; --parts 3
# for stack scaling alone, what a window after the first of 2026-11-28 needs, with
# STACKS_S=480, its two passes' caps; --device cpu --quick is the dry run on a CPU). Back
# here, with the files under FILES:
#
#     icl cost --add $FILES/stacks/stack.json $FILES/stacks/stack_paper.json --write \
#         --check evidence/reduced
#     rm -rf /tmp/store && mkdir /tmp/store && tar xzf $FILES/evidence/store.tgz -C /tmp/store
#     icl cost --check /tmp/store     # the window's studies, planned against measured
#     icl evidence --merge --from /tmp/store --preset reduced SWEEP/STUDY ... && icl verdicts --write
#     mkdir -p .window && cp $FILES/evidence/states.tgz .window/   # if it brought states back:
#                                    # the next window's cut members go on from them (STATES=,
#                                    # through this script's environment); else rm -f the old
# It writes at most 8 files (what a lent machine returns); more only when --compile's two JSON
# files, a GRAPH=1 gate's log and states.tgz all come back.
set -u
PRESET=${1:?usage: gpu_window.sh PRESET SWEEP:STUDIES:DEVICE:WORKERS[:SEEDS] ...}
shift
OUT=${OUT:-/tmp/gpu_window}
TOTAL=${TOTAL:-560}
STACKS_S=${STACKS_S:-360}
PY=${PY:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # paths from the caller's folder, before the cd
if [ -n "${STATES:-}" ] && [ -f "$STATES" ]; then
    export STATES; STATES=$(realpath "$STATES")
fi
cd "$(dirname "$0")/.."
start=$(date +%s)

echo "== gpu_window: $TOTAL s in all, measurements first (at most $STACKS_S s)"
if $PY -c "import pytest" 2>/dev/null; then
    echo "== CUDA tests (tests/test_cuda_graph.py)"
    timeout 180 $PY -m pytest -q -p no:cacheprovider -rfEs tests/test_cuda_graph.py \
        >"$OUT/cuda_tests.log" 2>&1
    status=$?
    tail -n 14 "$OUT/cuda_tests.log"
    # GRAPH=1 evidence needs the replay tests passed: they were, in this run of all of them,
    # where none was skipped for want of CUDA (-rs names each skip's reason)
    [ "$status" -eq 0 ] && ! grep -q "needs CUDA\|needs a CUDA" "$OUT/cuda_tests.log" \
        && export GRAPH_CHECKED=1
else
    echo "== CUDA tests skipped: no pytest here"
fi
# within what is left of TOTAL, whatever the tests took (timeout 0 would mean no limit)
cap=$(( TOTAL - ($(date +%s) - start) ))
[ "$cap" -lt "$STACKS_S" ] && STACKS_S=$cap
if [ "$STACKS_S" -le 0 ]; then
    echo "gpu_stacks: skipped, nothing left of TOTAL ${TOTAL}s"
else
    # shellcheck disable=SC2086  # STACKS_ARGS is a list of options
    timeout "$STACKS_S" $PY benchmarks/gpu_stacks.py --out "$OUT/stacks" ${STACKS_ARGS:-} \
        || echo "gpu_stacks: ended with status $? (124: its $STACKS_S s ran out; what it measured is above)"
fi

left=$(( TOTAL - ($(date +%s) - start) ))  # gpu_evidence.sh keeps its archive's time in it
if [ "$#" -eq 0 ]; then
    echo "== no evidence jobs given"
elif [ "$left" -lt 60 ]; then
    echo "== evidence skipped: $left s left of $TOTAL (give more TOTAL or a smaller STACKS_S)"
else
    echo "== evidence: $left s for $*"
    OUT="$OUT/evidence" LIMIT="$left" PY="$PY" bash benchmarks/gpu_evidence.sh "$PRESET" "$@"
    evidence_status=$?
fi
echo "== gpu_window done in $(( $(date +%s) - start )) s"
exit "${evidence_status:-0}"  # gpu_evidence.sh's: 1 where every trial of a job failed
