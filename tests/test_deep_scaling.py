"""The Wu scale-up figure's data (analysis.figures.deep_scaling.scaling_data): 1 - R² at the
training length against depth per width, or against width per depth where the grid has one
depth (the reduced preset), with the saturating fit of a planted law recovered."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from analysis.figures.deep_scaling import deep_scaling_figure, scaling_data

N_TRAIN = 6


def rows_for(depths, widths, law, seeds=(0, 1, 2)) -> pl.DataFrame:
    """Final r2 rows (pooled) of members (depth, width, seed) at k = 1..N_TRAIN: the model's
    1 - R² = law(depth, width) at k = N_TRAIN (x (N_TRAIN / k) ** 0.5 before), 1% seed noise;
    the prompt mean at R² 0.2 everywhere."""
    rng, out = np.random.default_rng(0), []
    for depth in depths:
        for width in widths:
            for seed in seeds:
                h = f"d{depth}w{width}s{seed}"
                noise = np.exp(0.01 * rng.normal())
                for k in range(1, N_TRAIN + 1):
                    err = law(depth, width) * noise * (N_TRAIN / k) ** 0.5
                    base = {"config_hash": h, "status": "ok", "metric": "r2", "step": 1000,
                            "statistic": "pooled", "position": k, "seed": seed,
                            "model.depth": depth, "model.width": width,
                            "task.n_points": N_TRAIN, "test_dist": "w0.0"}
                    out.append({**base, "predictor": "model", "value": 1 - err})
                    out.append({**base, "predictor": "prompt_mean", "value": 0.2})
    return pl.DataFrame(out)


def test_one_depth_many_widths_fits_against_width():
    law = lambda depth, width: 0.1 + 2.0 * width ** -0.8  # noqa: E731
    data = scaling_data(rows_for([2], [8, 16, 32, 64, 128], law), n_boot=20)
    assert (data.x, data.by) == ("model.width", "model.depth")
    [(depth, pts, fit)] = data.curves
    assert depth == 2 and pts["model.width"].unique().sort().to_list() == [8, 16, 32, 64, 128]
    assert fit.status == "ok" and data.curve_notes[0].startswith("depth 2: 1-R² = ")
    assert fit.params["b"] == pytest.approx(0.8, abs=0.1)


def test_many_depths_fit_against_depth_per_width(tmp_path):
    law = lambda depth, width: 0.05 + 0.25 * depth ** -1.0 * (32 / width)  # noqa: E731
    rows = rows_for([1, 2, 4, 8], [16, 32], law)
    data = scaling_data(rows, n_boot=20)
    assert (data.x, data.by) == ("model.depth", "model.width")
    assert [value for value, _, _ in data.curves] == [16, 32]
    out = deep_scaling_figure(rows, tmp_path, n_boot=20)
    assert out["best_depth"] == 8 and out["best_width"] == 32
    assert "width 16: 1-R² = " in out["note"]


def test_the_law_is_fitted_over_learned_widths_only():
    """Widths whose 1 - R² is above the prompt mean's (0.8) less the margin are not learned:
    the fit leaves them out (with 3 learned widths it recovers the law there; with 2 it says
    no law was tested, where a fit over every width would have 'resolved' on the step)."""
    law = lambda depth, width: 0.9 if width < 32 else 0.1 + 2.0 * width ** -0.8  # noqa: E731
    data = scaling_data(rows_for([2], [8, 16, 32, 64, 128], law), n_boot=20)
    [(_, pts, fit)] = data.curves
    assert pts["model.width"].n_unique() == 5  # every width is drawn
    assert fit.status == "ok" and fit.params["b"] == pytest.approx(0.8, abs=0.2)
    assert "fit over the learned widths [32, 64, 128]" in data.curve_notes[0]
    data = scaling_data(rows_for([2], [8, 16, 32, 64], law), n_boot=20)
    [(_, _, fit)] = data.curves
    assert fit is None
    assert data.curve_notes[0] == "depth 2: no law tested: 2 learned width(s), a law needs 3"
