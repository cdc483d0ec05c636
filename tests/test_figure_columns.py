"""Every figure declares the columns it reads (analysis.figures.FIGURE_COLUMNS, from each
figure module's COLUMNS), and regenerate reads only those: each figure drawn from a real smoke
store read through its declared columns (strings as Categorical where regenerate reads them so,
CATEGORICAL_FIGURES) is the figure drawn from every column."""

from __future__ import annotations

import math
import sys

import matplotlib
import numpy as np
import polars as pl
import pytest

from analysis.figures.registry import CATEGORICAL_FIGURES, FIGURE_COLUMNS, FIGURES, figure_columns
from analysis.reading.frames import SHARED_COLUMNS
from analysis.reading.store import read_rows
from analysis.regenerate import study_columns
from icl import catalog
from icl_core.running.trial import TrialSpec, run_trial


def studies_by_figure() -> dict[str, tuple[str, object]]:
    """One (sweep, study) per figure: the one with the fewest smoke members."""
    out = {}
    for name in catalog.sweep_names():
        sweep = catalog.load_sweep(name)
        for study in sweep.studies:
            if getattr(study, "figure", None) not in FIGURES:
                continue
            n = len(study.members("smoke"))
            if study.figure not in out or n < out[study.figure][2]:
                out[study.figure] = (name, study, n)
    return {figure: (sweep, study) for figure, (sweep, study, _) in out.items()}


def test_every_figure_module_declares_its_columns():
    assert set(FIGURE_COLUMNS) == set(FIGURES)
    for name, fn in FIGURES.items():
        func = getattr(fn, "func", fn)
        assert isinstance(sys.modules[func.__module__].COLUMNS, tuple), name
        columns = FIGURE_COLUMNS[name]
        assert set(SHARED_COLUMNS) <= set(columns) and len(columns) < 45, name
    # a partial's arguments are columns too (x, hue, facet of mse_vs_axis)
    assert {"model.mlp_ratio", "model.mixer"} <= set(figure_columns(FIGURES["multiply_mlp"]))
    # a study's grid axes and figure arguments are read with its figure's columns
    manifest = {"figure": "multiply_mlp", "grid": ["model.mlp_ratio", ["seed", "task.q"]],
                "figure_args": {"hue": ["model.width"]}}
    assert {"task.q", "model.width"} <= set(study_columns(manifest))


def same(a, b, where: str = "") -> None:
    """Summary values compared: frames (Categorical read as String, rows in any order),
    numbers (NaN equal), containers and dataclasses recursively; drawing objects skipped."""
    if isinstance(a, (matplotlib.artist.Artist, matplotlib.figure.Figure)) or where.endswith(
            "paths"):
        return
    if isinstance(a, pl.DataFrame):
        assert isinstance(b, pl.DataFrame) and a.columns == b.columns, where

        def plain(f):
            f = f.with_columns(pl.col(pl.Categorical).cast(pl.String))
            keys = [c for c, t in f.schema.items() if t.is_numeric() or t == pl.String]
            return f.sort(keys, nulls_last=True) if keys else f
        assert plain(a).equals(plain(b)), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, np.asarray(b), equal_nan=a.dtype.kind == "f"), where
    elif isinstance(a, float):
        assert (math.isnan(a) and math.isnan(b)) or a == b, where
    elif hasattr(a, "__dict__") and type(a).__module__.startswith("analysis"):
        same(vars(a), vars(b), where)
    else:
        assert a == b, where


@pytest.mark.slow
@pytest.mark.parametrize("figure", sorted(FIGURES))
def test_a_figure_from_its_declared_columns_is_the_figure_from_all(figure, tmp_path):
    sweep, study = studies_by_figure()[figure]
    storage = str(tmp_path / "store")
    run_trial(TrialSpec(sweep, study.name, storage,
                        [m.to_dict() for m in study.members("smoke")]))
    (manifest,) = [m for m in catalog.study_manifests(sweep) if m["study"] == study.name]
    wide, _ = read_rows(storage, sweep, study.name)
    narrow, _ = read_rows(storage, sweep, study.name, columns=study_columns(manifest),
                          categorical=figure in CATEGORICAL_FIGURES)
    assert narrow.width < wide.width
    fn, args = FIGURES[figure], manifest["figure_args"]
    full = fn(wide, tmp_path / "wide", name=figure, n_boot=20, storage=storage, **args)
    thin = fn(narrow, tmp_path / "thin", name=figure, n_boot=20, storage=storage, **args)
    same(thin, full, figure)
