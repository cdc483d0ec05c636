"""Does a refactor change behaviour? Snapshot, in one tree, every sweep member's config hash at
every preset and the float64 values of every smoke member's rows (trained alone and, where
members stack, stacked); then compare two snapshots exactly.

    python benchmarks/refactor_check.py snapshot after.json            # this tree
    git worktree add /tmp/base <ref>                                   # the tree before
    (cd /tmp/base && PYTHONPATH=$PWD python /path/to/benchmarks/refactor_check.py \\
        snapshot /tmp/before.json)
    python benchmarks/refactor_check.py compare /tmp/before.json after.json

`compare` exits 1 and names the first differences when any hash or value differs (NaN equals
NaN). Rows are keyed by study, config hash, metric, statistic, position, prompt length, test
distribution, loop / inference iteration, predictor and step; wall times and provenance are
not compared. The snapshot trains on the CPU without Ray (icl_core.trial.run_trial), so it
runs on any tree that has `icl_core.catalog` and `icl_core.trial` (the paths from before issue 31's
move into sub-packages, which icl_core.old_paths keeps importable, so that trees on both sides of
it compare). It takes a few minutes on 2
cores. Used for the house refactor (issue 18): config hashes of 156 study/preset cells and
3,868 members, and every smoke row in float64, identical before and after.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import sys
import tempfile

import pyarrow.parquet as pq
from icl_core.catalog import load_sweep, sweep_names
from icl_core.sweep import Study  # where both old and new trees export it
from icl_core.trial import TrialSpec, run_trial

PRESETS = ("smoke", "cpu", "gpu", "paper")
KEYS = ("study", "config_hash", "metric", "statistic", "position", "prompt_len", "test_dist",
        "loop_iter", "infer_iter", "predictor", "step")
FLOAT64 = {"dtype": "float64", "device": "cpu"}


def hashes() -> dict[str, list[str]]:
    """{sweep/study/preset: sorted member hashes} (a search: its points)."""
    out = {}
    for name in sweep_names():
        for study in load_sweep(name).studies:
            for preset in PRESETS:
                # a search with its preset's space (trees before Preset.space have none)
                search = study.for_preset(preset) if hasattr(study, "for_preset") else study
                members = (study.members(preset) if isinstance(study, Study)
                           else search.points(preset))
                out[f"{name}/{study.name}/{preset}"] = sorted(m.hash for m in members)
    return out


def values(storage: str) -> dict[str, float | None]:
    """Train every smoke member of every grid study in float64 (alone, then stacked) and
    return {path kind|row key: value}."""
    for name in sweep_names():
        for study in load_sweep(name).studies:
            if not isinstance(study, Study):
                continue
            members = [m.to_dict() for m in study.members("smoke", FLOAT64)]
            for member in members:
                run_trial(TrialSpec(name, study.name, f"{storage}/alone", [member],
                                    stack="never"))
            run_trial(TrialSpec(name, study.name, f"{storage}/stacked", members,
                                stack="always"))
            print(f"{name}/{study.name}: {len(members)} member(s)", file=sys.stderr, flush=True)
    out = {}
    for path in sorted(glob.glob(f"{storage}/*/**/rows/*.parquet", recursive=True)):
        kind = path[len(storage) + 1:].split("/", 1)[0]
        for row in pq.read_table(path).to_pylist():
            out[kind + "|" + "|".join(str(row.get(k)) for k in KEYS)] = row["value"]
    return out


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def compare(before: dict, after: dict, limit: int = 10) -> list[str]:
    """The differences between two snapshots, as lines (empty: identical)."""
    diffs = []
    for part in ("hashes", "values"):
        a, b = before[part], after[part]
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                diffs.append(f"{part}: {key} only in {'after' if key in b else 'before'}")
            elif not (a[key] == b[key] if part == "hashes" else same(a[key], b[key])):
                diffs.append(f"{part}: {key}: {a[key]!r} -> {b[key]!r}")
    return diffs[:limit] + ([f"... {len(diffs) - limit} more"] if len(diffs) > limit else [])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot", help="write this tree's hashes and float64 smoke values")
    snap.add_argument("out")
    cmp_ = sub.add_parser("compare", help="compare two snapshots exactly")
    cmp_.add_argument("before")
    cmp_.add_argument("after")
    args = parser.parse_args(argv)
    if args.command == "snapshot":
        with tempfile.TemporaryDirectory() as storage:
            snapshot = {"hashes": hashes(), "values": values(storage)}
        with open(args.out, "w") as f:
            json.dump(snapshot, f, sort_keys=True)
        print(f"{args.out}: {len(snapshot['hashes'])} study/preset cells, "
              f"{sum(map(len, snapshot['hashes'].values()))} member hashes, "
              f"{len(snapshot['values'])} row values")
        return 0
    with open(args.before) as f, open(args.after) as g:
        diffs = compare(json.load(f), json.load(g))
    print("\n".join(diffs) if diffs else "identical: every hash and every value")
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
