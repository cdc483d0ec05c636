#!/usr/bin/env bash
# The GPU paths in one short run on a bare CUDA machine (first run on a lent H100, 2026-11-26;
# results in docs/COST.md "Measured on a GPU"):
#
#     OUT=/tmp/gpu_check bash benchmarks/gpu_check.sh
#
# Needs torch with CUDA and the project's packages importable (PYTHONPATH or an install).
#   1. the CUDA tests (tests/test_stacked.py: stacked training equals one-after-another on CUDA;
#      `--stack auto` stacks on CUDA only);
#   2. the quick start's sweep file at `smoke` on an embedded Ray that sees the GPU: every
#      member planned a fractional GPU share, rows written from CUDA (device_type, float64
#      construction study included), and a re-run that trains nothing (resume);
#   3. determinism on the GPU: one float64 member trained twice, identical numbers;
#   4. `paper`-preset steps (benchmarks/paper_step.py): ms/step and peak memory beside the cost
#      and memory models' estimates.
# Each part has its own time limit, so one hang does not lose the rest; logs under $OUT.
set -u
OUT=${OUT:-/tmp/gpu_check}
WORK=${WORK:-/tmp/gpu_check_work}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1 RAY_AUTH_MODE=${RAY_AUTH_MODE:-token}
PY=${PY:-python3}
PARTS=${PARTS:-1234}  # which of parts 1-4 to run
part() { echo; echo "== $* ($(date +%T))"; }
want() { [[ $PARTS == *$1* ]]; }

part "0. machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY -c "import torch, ray, polars, optuna; print('torch', torch.__version__, torch.cuda.get_device_name(0), '| ray', ray.__version__, '| polars', polars.__version__, '| optuna', optuna.__version__)"

if want 1; then
part "1. CUDA tests"
timeout 180 $PY -m pytest -q -p no:cacheprovider tests/test_stacked.py 2>&1 | tail -4

fi
if want 2; then
part "2. smoke sweep on the GPU (embedded Ray), then a re-run"
rm -rf "$WORK/store"
timeout 300 $PY sweeps/depth_scaling.py --preset smoke --storage "$WORK/store" --no-figures \
    > "$OUT/smoke.log" 2>&1
echo "rc $?"; grep -iE "GPU|planned|members|ok|error|failed" "$OUT/smoke.log" | head -30
timeout 120 $PY sweeps/depth_scaling.py --preset smoke --storage "$WORK/store" --no-figures \
    > "$OUT/smoke_rerun.log" 2>&1
echo "re-run rc $?"; tail -5 "$OUT/smoke_rerun.log"
timeout 60 $PY - "$WORK/store" <<'EOF'
import sys
import polars as pl
from analysis.reading.store import read_rows
rows, _ = read_rows(sys.argv[1], "depth_scaling")
pl.Config.set_tbl_rows(40)
print(rows.group_by("study", "device_type", "dtype").agg(
    pl.col("config_hash").n_unique().alias("members"), pl.col("device_name").first()).sort("study"))
EOF

fi
if want 3; then
part "3. float64 on the GPU, twice"
timeout 120 $PY - "$WORK" cuda <<'EOF'
import sys
import polars as pl
from analysis.reading.store import read_rows
from icl_core.running.trial import TrialSpec, run_trial
from icl_core.spec.config import resolve_member
member = resolve_member({"task": {"name": "linear_regression", "dim": 5, "n_points": 10},
                         "model": {"name": "transformer", "width": 32, "depth": 2, "heads": 2},
                         "train": {"steps": 50, "batch_size": 32, "report_every": 25},
                         "eval": {"n_prompts": 200}, "dtype": "float64", "device": sys.argv[2],
                         "seed": 3})
frames = []
for i in range(2):
    path = f"{sys.argv[1]}/f64_{i}"
    print(run_trial(TrialSpec("gpu_check", "f64", path, [member.to_dict()])))
    rows, _ = read_rows(path, "gpu_check", "f64")
    frames.append(rows.sort("metric", "step", "position", nulls_last=True)
                  .select("device_type", "dtype", "metric", "step", "position", "value"))
print(frames[0].select("device_type", "dtype").unique(), frames[0].height, "rows")
print("identical:", frames[0].equals(frames[1]))
EOF

fi
if want 4; then
part "4. paper-preset steps"
for study in "depth_scaling least_squares" "deep_optimizers transformer_depth" \
             "sample_complexity str_1" "algoformer loops"; do
    set -- $study
    timeout 90 $PY benchmarks/paper_step.py "$1" --study "$2" --preset paper --steps 20 --limit 2 2>&1 | tail -4
done
fi
part "done"
