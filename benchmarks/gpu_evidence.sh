#!/usr/bin/env bash
# Spend a lent GPU machine's window on studies whose evidence is pending. Each job runs through
# benchmarks/run_without_ray.py (no Ray there), all jobs side by side under one time limit; what
# finished comes back as one archive of the store (a lent machine returns few, shallow files):
#
#     OUT=/tmp/window LIMIT=420 bash benchmarks/gpu_evidence.sh reduced \
#         deep_optimizers:scaleup,transformer_depth:cuda:8 depth_scaling:explicit_gradient:cpu:3
#
# LIMIT is the whole script's wall, its start and the archive included (a lent machine ends a
# command at its own limit, and what is not archived by then stays there): the jobs stop
# ARCHIVE_S (20) seconds before it. The jobs' output comes back as one jobs.log (a lent machine
# returns at most 8 files); the exit status is 1 when every trial of a job failed.
# A job is SWEEP:STUDY[,STUDY...]:DEVICE:WORKERS[:SEEDS] (DEVICE cuda stacks a study's seeds;
# cpu uses the machine's other cores; SEEDS: seeds 0..SEEDS-1 in place of the preset's). Members
# whose rows are committed in evidence/PRESET/ are skipped, and so are those finished in the
# store, so a second window goes on from an unpacked earlier archive (STORE=that folder). A
# trial the limit cut off goes on from its members' last checkpoints (run_without_ray.py keeps
# them in STORE): in a next call on the same machine, or, on another machine, from the
# states.tgz a call brings back beside store.tgz (the unfinished members' states of its jobs'
# studies, as many whole ones as fit STATES_MAX_MB, 15 MiB: a lent machine returns 16 MiB a
# file) given as STATES=that file (a state is resumed on the same GPU model, icl_core sources
# and torch; a state already in STORE, this machine's, is kept). `icl plan --gpu-minutes M`
# adds STATES=.window/states.tgz when that file is here:
#
#     mkdir -p .window && cp /tmp/window/states.tgz .window/    # carry [".window"] next time
# ALL=1: committed evidence is not skipped (`icl plan --gpu-minutes M --all`: studies afresh).
# INTERLEAVE=1: a study's stacks train at once in one process per study (each on its own CUDA
# stream) instead of a process per stack; give such a job WORKERS = its number of studies.
# GRAPH=1: each member's step a CUDA graph where its config allows (run_without_ray.py --graph:
# the same members and random streams; `icl plan --gpu-minutes M --graph` prints it), once the
# replay CUDA tests pass here (tests/test_cuda_graph.py; else the jobs run eagerly, said so).
# `icl plan --gpu-minutes M` picks the jobs for a window. Afterwards, on the developer's machine:
#
#     rm -rf /tmp/store && mkdir /tmp/store && tar xzf /tmp/window/store.tgz -C /tmp/store
#     icl evidence --merge --from /tmp/store --preset reduced SWEEP/STUDY ...
#     icl verdicts --write
# (`icl evidence --merge` refuses rows of another random stream, e.g. counter draws into
# evidence drawn by the generator)
set -u
PRESET=${1:?usage: gpu_evidence.sh PRESET SWEEP:STUDIES:DEVICE:WORKERS[:SEEDS] ...}
shift
OUT=${OUT:-/tmp/gpu_evidence}
STORE=${STORE:-/tmp/gpu_evidence_store}
LIMIT=${LIMIT:-420}
ARCHIVE_S=${ARCHIVE_S:-20}
STATES_MAX_MB=${STATES_MAX_MB:-15}
if [ -n "${STATES:-}" ] && [ -f "$STATES" ]; then
    STATES=$(realpath "$STATES")  # a path from the caller's folder; the script moves to the root
fi
GATE_S=${GATE_S:-150}
PY=${PY:-python3}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
start=$(date +%s)
mkdir -p "$OUT" "$STORE"
OUT=$(cd "$OUT" && pwd) && STORE=$(cd "$STORE" && pwd)  # the caller's folder, before the cd
LOGS=$(mktemp -d)
cd "$(dirname "$0")/.."

echo "== machine ($(date +%T)); preset $PRESET, limit ${LIMIT}s"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
    || echo "no nvidia-smi"
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"

if [ -n "${GRAPH:-}" ] && [ -z "${GRAPH_CHECKED:-}" ]; then
    # a replayed step must be shown equal to the eager one here, and a generator stack's
    # batches each member's own, before its rows (the same members' hashes) join the
    # evidence; gpu_window.sh runs these first and says so. Their time comes off LIMIT, so
    # the window stays the one planned.
    gate_start=$(date +%s)
    gate="(replayed or failed_capture or generator_stack or generator_draws) and not cpu"
    # passed only where some of them ran: on a machine without CUDA they are all skipped
    # at most GATE_S (icl plan --graph keeps as much of each call), and 30 s left for the jobs
    gate_s=$(( LIMIT - ARCHIVE_S - 30 ))
    [ "$gate_s" -gt "$GATE_S" ] && gate_s=$GATE_S
    [ "$gate_s" -lt 1 ] && gate_s=1
    if timeout "$gate_s" $PY -m pytest -q -p no:cacheprovider -rfE tests/test_cuda_graph.py \
            -k "$gate" >"$OUT/graph_tests.log" 2>&1 \
            && tail -n 1 "$OUT/graph_tests.log" | grep -q "[0-9] passed"; then
        echo "== GRAPH=1: the replay CUDA tests passed: $(tail -n 1 "$OUT/graph_tests.log")"
    else
        echo "== GRAPH=1 dropped: the replay CUDA tests did not pass here (or none ran); the" \
            "jobs run eagerly"
        tail -n 8 "$OUT/graph_tests.log"
        GRAPH=""
    fi
    echo "== the tests took $(( $(date +%s) - gate_start ))s of the ${LIMIT}s"
fi
if [ -n "${STATES:-}" ]; then
    if [ -f "$STATES" ] && tar xzf "$STATES" -C "$STORE" --skip-old-files; then
        # (a state already in STORE, this machine's, is kept)
        echo "== STATES: $(tar tzf "$STATES" | grep -c '\.pt$') members' states from $STATES" \
            "unpacked into the store: cut members go on from them"
    elif [ -f "$STATES" ]; then
        echo "== STATES=$STATES does not unpack (not a tar.gz, or cut short); cut members" \
            "start from their first step (a partial state is set aside with a warning)"
    else
        echo "== STATES=$STATES: no such file; cut members start from their first step"
    fi
fi
jobs_s=$(( LIMIT - ($(date +%s) - start) - ARCHIVE_S ))
[ "$jobs_s" -lt 0 ] && jobs_s=0  # the jobs stop at once: what an earlier call finished is archived
echo "== the jobs' time limit: ${jobs_s}s (of LIMIT ${LIMIT}s: ${ARCHIVE_S}s kept for the archive)"

pids=()
jobs_given=("$@")
for job in "$@"; do
    IFS=: read -r sweep studies device workers seeds <<<"$job"
    args=()
    [ -z "${ALL:-}" ] && args+=(--skip-evidence)
    [ -n "${INTERLEAVE:-}" ] && args+=(--interleave)
    [ -n "${GRAPH:-}" ] && args+=(--graph)
    [ -n "$seeds" ] && args+=(--seeds "$seeds")
    for study in ${studies//,/ }; do args+=(--study "$study"); done
    log="$LOGS/${sweep}_${device}.log"
    $PY benchmarks/run_without_ray.py "$sweep" --preset "$PRESET" "${args[@]}" \
        --storage "$STORE" --device "$device" --workers "$workers" --time-limit "$jobs_s" \
        >"$log" 2>&1 &
    pids+=($!)
    echo "started $job (pid $!) -> $log (a line per finished trial; jobs.log at the end)"
done
failed_jobs=()
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || failed_jobs+=("${jobs_given[$i]}")
done

echo "== done ($(date +%T))"
for log in "$LOGS"/*.log; do
    [ -e "$log" ] || continue  # no jobs given
    echo "-- $(basename "$log")"; tail -n 4 "$log"
    { echo "== $(basename "$log")"; cat "$log"; } >>"$OUT/jobs.log"
done
rm -rf "$LOGS"
find "$STORE" -name '*.tmp-*' -delete
# the rows first; the unfinished members' states (checkpoints/) apart, when they fit what a
# lent machine brings back (a 12 x 256 member with its Adam state alone: ~110 MB); they stay in
# STORE either way (a next call on this machine goes on from them)
tar czf "$OUT/store.tgz" --exclude='./*/*/checkpoints' -C "$STORE" .
finished=$(find "$STORE" -path '*/rows/*.parquet' | wc -l)
failed=$(find "$STORE" -path '*/failed/*.parquet' | wc -l)
echo "store: $finished members finished (ok or diverged), $failed failed;" \
    "$(du -h "$OUT/store.tgz" | cut -f1) archived in $(( $(date +%s) - start ))s of ${LIMIT}s"
# the states of the given jobs' studies only (a carried state of another study stays out: it
# would travel from window to window), whole files up to STATES_MAX_MB (uncompressed: weights
# and Adam moments hardly compress), written aside and moved into place once complete
rm -f "$OUT/states.tgz"  # an earlier call's, with the same OUT: not this one's states
cap=$(( STATES_MAX_MB * 1024 * 1024 )) total=0 left=0 states=()
for job in "${jobs_given[@]}"; do
    IFS=: read -r sweep studies _ <<<"$job"
    for study in ${studies//,/ }; do
        for state in "$STORE/$sweep/$study/checkpoints/"*.pt; do
            [ -e "$state" ] || continue
            size=$(stat -c %s "$state")
            if [ $(( total + size )) -le "$cap" ]; then
                states+=("./${state#"$STORE"/}") total=$(( total + size ))
            else
                left=$(( left + 1 ))
            fi
        done
    done
done
if [ "${#states[@]}" -gt 0 ] && printf '%s\n' "${states[@]}" \
        | tar czf "$OUT/states.tgz.part" -C "$STORE" -T - \
        && mv "$OUT/states.tgz.part" "$OUT/states.tgz"; then
    echo "states: ${#states[@]} unfinished members' states in states.tgz" \
        "($(du -k "$OUT/states.tgz" | cut -f1) kB): give it to the next window as STATES" \
        "(mkdir -p .window && cp .../states.tgz .window/; carry .window)"
elif [ "${#states[@]}" -gt 0 ]; then
    rm -f "$OUT/states.tgz.part"
    echo "states: not archived (tar failed); elsewhere the cut members start from their first step"
fi
[ "$left" -gt 0 ] && echo "states: $left more unfinished members' states over STATES_MAX_MB" \
    "($STATES_MAX_MB MiB) in all, not brought back; elsewhere they start from their first step"
if [ "${#failed_jobs[@]}" -gt 0 ]; then
    echo "== every trial failed in: ${failed_jobs[*]} (their output is in jobs.log)"
    exit 1
fi
