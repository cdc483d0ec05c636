"""Benchmark of the analysis core: reading a sweep's rows, and bootstrap scaling-law fits.

    python benchmarks/bench_analysis.py                                 # full size
    python benchmarks/bench_analysis.py --rows 100000 --curves 10 --boot 200   # a quick check

1. Writes a synthetic sweep of --rows tidy rows in our layout (one Parquet file of
   --rows-per-file rows per member under <store>/bench/grid/rows/) and the same rows as Ray
   Tune trial folders (<tune>/trial_<hash>/result.json, one JSON line per reported result with
   keys such as "mse", "training_iteration", "config/model.depth").
2. Times reading all rows into one frame, side by side: ours through analysis.reading.store.read_rows
   (Polars: footer/schema checks, then one lazy scan) vs pandas reading every result.json
   (pd.read_json(lines=True) per file + pd.concat); prints the ratio. Polars reading the same
   JSON files is printed too, to separate the format from the library. Both read from the page
   cache (the files were just written).
3. Fits --curves synthetic saturating curves (8 x values x 5 seeds) with --boot bootstrap
   resamples each (analysis.fitting.fit.fit_scaling) and prints the total time.

Data go to a temporary folder under benchmarks/out/ (gitignored), removed at the end unless
--keep; a JSON summary is written to benchmarks/out/bench_analysis.json.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.fitting.fit import fit_scaling  # noqa: E402
from analysis.reading.store import read_rows  # noqa: E402
from icl_core.storage.store import ROW_SCHEMA, Store  # noqa: E402

SWEEP, STUDY = "bench", "grid"
STATS = ("mean", "median", "q25", "q75")
POSITIONS = 5
DEPTHS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
WIDTHS = (32, 64, 128, 256)
BATCH = 256


def member_config(i: int) -> dict:
    return {"model.depth": DEPTHS[i % len(DEPTHS)],
            "model.width": WIDTHS[(i // len(DEPTHS)) % len(WIDTHS)],
            "seed": i // (len(DEPTHS) * len(WIDTHS)), "train.batch_size": BATCH,
            "train.steps": 100_000, "task.dim": 5}


def pattern(n: int) -> dict[str, np.ndarray]:
    """The row layout of one member: steps x positions x statistics."""
    i = np.arange(n)
    per_step = len(STATS) * POSITIONS
    return {"step": (i // per_step + 1) * 1000, "statistic": np.array(STATS)[i % len(STATS)],
            "position": (i // len(STATS)) % POSITIONS * 5 + 4}


def member_table(i: int, h: str, layout: dict, rng: np.random.Generator) -> tuple[pa.Table, dict]:
    n = layout["step"].size
    cfg = member_config(i)
    level = 2.0 * cfg["model.depth"] ** -1.0 + 1e-4
    value = level * (layout["step"] / 1000.0) ** -0.5 * rng.lognormal(0.0, 0.1, n)
    fixed = {
        "sweep": [SWEEP] * n, "study": [STUDY] * n, "trial_id": [h] * n, "member": [0] * n,
        "config_hash": [h] * n, "seed": [cfg["seed"]] * n, "task_seed": [0] * n,
        "status": ["ok"] * n, "reason": [None] * n, "step": layout["step"],
        "metric": ["mse"] * n, "value": value, "statistic": layout["statistic"],
        "position": layout["position"], "prompt_len": [20] * n, "test_dist": ["train"] * n,
        "loop_iter": [None] * n, "infer_iter": [None] * n, "predictor": ["model"] * n,
    }
    table = pa.table(fixed, schema=ROW_SCHEMA)
    for name in ("model.depth", "model.width", "train.batch_size", "train.steps", "task.dim"):
        table = table.append_column(name, pa.array([cfg[name]] * n, pa.int64()))
    table = table.append_column("code_version", pa.array(["bench"] * n))
    return table, {"value": value, **cfg}


def tune_lines(h: str, layout: dict, data: dict) -> pl.DataFrame:
    """The same rows as Ray Tune reports them: one result per line, flattened config keys."""
    n = layout["step"].size
    return pl.DataFrame({
        "mse": data["value"], "metric": ["mse"] * n, "statistic": layout["statistic"],
        "position": layout["position"], "step": layout["step"],
        "training_iteration": np.arange(1, n + 1), "trial_id": [h] * n,
        "timestamp": 1_700_000_000 + np.arange(n), "time_total_s": np.arange(n) * 0.5,
        "done": [False] * (n - 1) + [True],
        **{f"config/{k}": [v] * n for k, v in data.items() if k != "value"},
    })


def write_data(root: Path, n_rows: int, rows_per_file: int) -> tuple[str, list[Path]]:
    store = Store(str(root / "store"))
    tune_dir = root / "tune" / "bench_experiment"
    n_files = max(1, n_rows // rows_per_file)
    layout = pattern(rows_per_file)
    rng = np.random.default_rng(0)
    results = []
    for i in range(n_files):
        h = f"{i:016x}"
        table, data = member_table(i, h, layout, rng)
        store.write_rows(store.rows_path(SWEEP, STUDY, h), table)
        trial = tune_dir / f"trial_{h}"
        trial.mkdir(parents=True, exist_ok=True)
        tune_lines(h, layout, data).write_ndjson(trial / "result.json")
        results.append(trial / "result.json")
    return store.uri, results


def timed(fn, repeat: int):
    best, out = math.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def read_pandas(files: list[Path]) -> pd.DataFrame:
    return pd.concat([pd.read_json(p, lines=True) for p in files], ignore_index=True)


def read_polars_json(files: list[Path]) -> pl.DataFrame:
    return pl.concat([pl.read_ndjson(p) for p in files], how="diagonal_relaxed")


def bench_fits(n_curves: int, n_boot: int) -> dict:
    rng = np.random.default_rng(1)
    x_grid = 2.0 ** np.arange(8)
    x, groups = np.tile(x_grid, 5), np.repeat(np.arange(5), x_grid.size)
    covered, t0 = 0, time.perf_counter()
    for i in range(n_curves):
        a, b, c = rng.uniform(1, 3), rng.uniform(0.5, 1.5), 10 ** rng.uniform(-3, -1.5)
        y = (c + a * x**-b) * np.exp(0.05 * rng.standard_normal(x.size))
        fit = fit_scaling(x, y, groups, form="saturating", n_boot=n_boot, seed=i)
        covered += fit.ci["b"][0] <= b <= fit.ci["b"][1]
    total = time.perf_counter() - t0
    return {"curves": n_curves, "boot": n_boot, "points_per_curve": int(x.size),
            "total_s": total, "per_curve_s": total / max(n_curves, 1),
            "b_ci_covers_truth": covered}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the store (1e6)")
    parser.add_argument("--rows-per-file", type=int, default=500, help="rows per member (500)")
    parser.add_argument("--curves", type=int, default=100, help="curves to fit (100)")
    parser.add_argument("--boot", type=int, default=1000, help="bootstrap resamples (1000)")
    parser.add_argument("--repeat", type=int, default=1, help="timed reads per reader (best of)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out"), help="output folder")
    parser.add_argument("--keep", action="store_true", help="keep the written data")
    args = parser.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bench_analysis_", dir=out))
    summary: dict = {"python": platform.python_version(), "polars": pl.__version__,
                     "pandas": pd.__version__, "pyarrow": pa.__version__,
                     "machine": platform.machine(), "args": vars(args)}
    try:
        t0 = time.perf_counter()
        uri, json_files = write_data(root, args.rows, args.rows_per_file)
        n_files = len(json_files)
        print(f"wrote {n_files} members x {args.rows_per_file} rows = "
              f"{n_files * args.rows_per_file:,} rows as Parquet and as Tune result.json "
              f"in {time.perf_counter() - t0:.1f} s ({root})", flush=True)
        parquet_mb = sum(p.stat().st_size for p in (root / "store").rglob("*.parquet")) / 1e6
        json_mb = sum(p.stat().st_size for p in json_files) / 1e6

        t_ours, (rows, coverage) = timed(lambda: read_rows(uri, SWEEP), args.repeat)
        t_pandas, frame = timed(lambda: read_pandas(json_files), args.repeat)
        t_pl_json, _ = timed(lambda: read_polars_json(json_files), args.repeat)
        assert rows.height == len(frame) == n_files * args.rows_per_file, (rows.height, len(frame))
        assert coverage.n_read == n_files and not coverage.skipped
        assert math.isclose(float(rows["value"].sum()), float(frame["mse"].sum()), rel_tol=1e-9)
        summary["read"] = {"files": n_files, "rows": rows.height, "parquet_MB": parquet_mb,
                           "json_MB": json_mb, "ours_polars_parquet_s": t_ours,
                           "pandas_result_json_s": t_pandas, "polars_result_json_s": t_pl_json,
                           "pandas_over_ours": t_pandas / t_ours}
        print(f"\nread {rows.height:,} rows from {n_files} files (best of {args.repeat}):")
        print(f"  ours   analysis.reading.store.read_rows (Polars, Parquet, {parquet_mb:7.1f} MB): "
              f"{t_ours:7.2f} s")
        print(f"  pandas read_json(lines=True) + concat (Tune, {json_mb:7.1f} MB): "
              f"{t_pandas:7.2f} s")
        print(f"  (polars read_ndjson + concat of the same result.json files:     "
              f"{t_pl_json:7.2f} s)")
        print(f"  ratio pandas / ours: {t_pandas / t_ours:.1f}x", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    fits = bench_fits(args.curves, args.boot)
    summary["fits"] = fits
    print(f"\nfit {fits['curves']} saturating curves ({fits['points_per_curve']} points, 5 seeds) "
          f"with {fits['boot']} bootstrap resamples each: {fits['total_s']:.1f} s total "
          f"({fits['per_curve_s']:.2f} s per curve; true b inside the 95% CI for "
          f"{fits['b_ci_covers_truth']}/{fits['curves']})")
    (out / "bench_analysis.json").write_text(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
