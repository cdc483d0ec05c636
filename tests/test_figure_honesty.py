"""Figures that cannot overclaim: trivial predictors drawn wherever their rows exist (and
nothing, no failure, where they do not), "not testable at this scale" on panels whose model does
not clear the learned-regime bar, fits at a bound or of the wrong sign drawn as unresolved,
coinciding baselines kept apart, censored markers per model, human titles."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest

from analysis.figures import FIGURES
from analysis.fit import B_MAX, fit_scaling
from analysis.plotting import (
    LOOKS,
    NOT_LEARNED_LABEL,
    baseline_line,
    draw_fit,
    fit_label,
    style,
)
from analysis.regenerate import fit_rows, write_fit_report

DEPTHS = (1, 2, 4, 8)
# docs/REPRODUCTION.md, Figs 2 and 10 at cpu scale: seed-median query MSE per depth
TRANSFORMER = (0.17, 0.056, 0.051, 0.11)
BASECONV = (0.83, 0.78, 0.78, 0.93)
SEED_FACTORS = (0.9, 1.0, 1.1)
VAR_Y = 3.0
LEVELS = {"ols_float32": 4.2e-14, "ols_float64": 2.0e-31, "gd_float32": 4.2e-14,
          "gd_float64": 3.6e-31}
TRIVIAL = {"zero": VAR_Y, "prompt_mean": 1.1 * VAR_Y, "ridge": 1e-12}


def ls_mixer_rows(trivial: bool = True) -> pl.DataFrame:
    """ls_mixer_depth-like rows: 2 mixers x 4 depths x 3 seeds, the four statistics over
    prompts, OLS/GD (GD at two iteration counts) and, optionally, the trivial predictors."""
    rows = []
    scale = {"median": 1.0, "q25": 0.5, "q75": 2.0, "mean": 1.5}
    for mixer, curve in (("attention", TRANSFORMER), ("baseconv", BASECONV)):
        for depth, level in zip(DEPTHS, curve, strict=True):
            for seed, f in enumerate(SEED_FACTORS):
                base = {"sweep": "depth_scaling", "study": "ls_mixer_depth",
                        "config_hash": f"{mixer}{depth}s{seed}", "seed": seed, "status": "ok",
                        "model.depth": depth, "model.mixer": mixer, "model.layer_norm": True,
                        "task.name": "linear_regression", "task.dim": 3, "dtype": "float32",
                        "metric": "mse", "position": 10, "test_dist": "train", "step": 3000,
                        "infer_iter": None}
                values = {"model": level * f, **LEVELS}
                if trivial:
                    values.update(TRIVIAL)
                for predictor, value in values.items():
                    for stat, k in scale.items():
                        it = 3000 if predictor.startswith("gd") else None
                        rows.append({**base, "predictor": predictor, "statistic": stat,
                                     "value": value * k, "infer_iter": it})
                        if it:  # an earlier GD iterate: not the reference
                            rows.append({**base, "predictor": predictor, "statistic": stat,
                                         "value": 1.0, "infer_iter": 10})
    return pl.DataFrame(rows, schema_overrides={"infer_iter": pl.Int64},
                        infer_schema_length=None)


def dashes(line) -> tuple:
    """The line's dash pattern (get_linestyle() says only '--' for any custom pattern)."""
    return line._unscaled_dash_pattern


def texts(ax) -> list[str]:
    """The panel's texts, line wrapping undone."""
    return [" ".join(t.get_text().split()) for t in ax.texts]


def legend_labels(ax) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend else []


@pytest.fixture(scope="module")
def mixer_summary(tmp_path_factory):
    out = tmp_path_factory.mktemp("mixer")
    return FIGURES["precision_depth"](ls_mixer_rows(), out, name="precision_depth", n_boot=60)


def test_trivial_predictors_are_drawn_with_their_values(mixer_summary):
    (ax,) = mixer_summary["axes"]
    labels = legend_labels(ax)
    assert "zero predictor = 3" in labels and "prompt mean = 3.3" in labels
    assert "ridge (solves the task: not a bar) = 1e-12" in labels  # least squares: a reference
    assert mixer_summary["references"]["prompt_mean"] == pytest.approx(3.3)
    grey = {line.get_label(): line for line in ax.get_lines()}
    zero, mean = grey["zero predictor = 3"], grey["prompt mean = 3.3"]
    assert dashes(zero) != dashes(mean) and zero.get_marker() != mean.get_marker()


def test_a_model_at_the_trivial_level_is_not_testable_on_the_panel(mixer_summary):
    (ax,) = mixer_summary["axes"]
    notes = " ".join(texts(ax))
    assert ("baseconv, LN on: not testable at this scale (median: best 0.26x zero; needs <= "
            "0.1x)") in notes
    assert "attention, LN on: not testable" not in notes  # 0.051 = 0.017x the zero predictor
    regime = mixer_summary["regime"]
    attention = regime.filter(pl.col("hue") == "attention, LN on")
    assert attention["learned"].all() and not regime.filter(
        pl.col("hue") == "baseconv, LN on")["learned"].any()
    assert NOT_LEARNED_LABEL in legend_labels(ax)


def test_fits_of_the_wrong_sign_or_at_a_bound_are_labelled_unresolved(mixer_summary):
    (ax,) = mixer_summary["axes"]
    fit_labels = [t for t in legend_labels(ax) if t.startswith("fit ")]
    assert len(fit_labels) == 2
    for fit, label in zip(mixer_summary["fits"], fit_labels, strict=True):
        assert fit.status != "ok"  # U-shaped curves: no law of the claimed sign
        assert label.endswith(f"unresolved ({fit.status})") and "[" not in label  # no CI
    assert mixer_summary["fits"][0].status == "at bound b=20"  # attention: 0.17 -> 0.051 -> 0.11


def test_coinciding_baselines_stay_apart_and_state_their_values(mixer_summary):
    (ax,) = mixer_summary["axes"]
    lines = {line.get_label(): line for line in ax.get_lines()}
    ols = lines["OLS float32 = 4.2e-14"]
    gd = lines["GD float32 (3000 it.) = 4.2e-14"]  # the same level as OLS float32
    assert dashes(ols) != dashes(gd) and ols.get_marker() != gd.get_marker()
    ols_x = set(np.asarray(ols.get_xdata())[ols.get_markevery()])
    gd_x = set(np.asarray(gd.get_xdata())[gd.get_markevery()])
    assert ols_x and gd_x and not ols_x & gd_x  # markers at different places along the line
    marks = [set(look.marks) for look in LOOKS.values()]
    assert all(not a & b for i, a in enumerate(marks) for b in marks[i + 1:] if a and b)


def test_title_is_human(mixer_summary):
    (ax,) = mixer_summary["axes"]
    assert ax.get_title() == ("Liu et al. Figs 2, 10: least squares vs depth, Transformer vs "
                              "BaseConv (float32)")


def test_old_store_without_trivial_rows_draws_nothing_and_does_not_fail(tmp_path):
    summary = FIGURES["precision_depth"](ls_mixer_rows(trivial=False), tmp_path,
                                         name="precision_depth", n_boot=20)
    (ax,) = summary["axes"]
    labels = legend_labels(ax)
    assert not any(t.startswith(("zero", "prompt mean", "ridge")) for t in labels)
    assert NOT_LEARNED_LABEL not in labels
    assert not any("not testable" in t for t in texts(ax))
    assert summary["regime"]["learned"].null_count() == summary["regime"].height
    depth = FIGURES["depth"](ls_mixer_rows(trivial=False).filter(
        pl.col("model.mixer") == "attention"), tmp_path, name="depth", n_boot=20)
    assert depth["paths"][0].exists()


def test_fit_at_the_bound_is_drawn_unresolved_and_reported(tmp_path):
    x = np.tile([1.0, 2.0, 4.0, 8.0], 3)
    y = np.where(x < 2, 1.0, 0.05) * np.repeat([0.9, 1.0, 1.1], 4)  # a step: b runs to B_MAX
    fit = fit_scaling(x, y, np.repeat([0, 1, 2], 4), form="saturating", n_boot=50)
    fit.claim_sign = 1
    assert fit.params["b"] == pytest.approx(B_MAX, rel=1e-3)
    assert fit.status.startswith("at bound b=20")
    style()
    fig, ax = plt.subplots()
    line = draw_fit(ax, fit, (1, 8), label=fit_label(fit, "fit attention"))
    assert line.get_label() == f"fit attention: unresolved ({fit.status})"
    assert line.get_linestyle() == ":" and not ax.collections  # no confident band
    plt.close(fig)
    paths = write_fit_report(tmp_path, fit_rows("s", "t", "f", {"fits": [fit]}))
    report = pl.read_parquet(paths[0])
    assert report["status"][0] == fit.status
    assert f"| {fit.status} |" in paths[1].read_text()


def test_wrong_sign_fit_is_unresolved():
    x = np.tile([1.0, 2.0, 4.0, 8.0, 16.0], 3)
    y = 0.1 * x ** 0.5 * np.repeat([0.95, 1.0, 1.05], 5)  # error grows with depth
    fit = fit_scaling(x, y, np.repeat([0, 1, 2], 5), form="power", n_boot=50)
    fit.claim_sign = 1
    assert fit.status.startswith("wrong sign (b = -0.5")
    assert fit_label(fit).endswith(f"unresolved ({fit.status})")


def test_baseline_line_skips_non_positive_levels_on_log_axes():
    style()
    fig, ax = plt.subplots()
    ax.set_yscale("log")
    assert baseline_line(ax, "zero", 0.0) is None
    assert baseline_line(ax, "zero", 2.0).get_label() == "zero predictor = 2"
    plt.close(fig)


# --------------------------------------------------------------------- sparse retrieval


def retrieval_rows(trivial: float | None = 0.95) -> pl.DataFrame:
    """str-like rows: three architectures over N, 2 seeds, test curves (mean statistic)
    reaching 0.3 for the transformer only; the others are censored at the same cap."""
    rows = []
    for arch, speed in (("attention_mlp", 1.0), ("ffn", 0.0), ("bigru", 0.0)):
        for n in (10, 20, 40):
            for seed in (0, 1):
                base = {"sweep": "sample_complexity", "study": "str_1",
                        "config_hash": f"{arch}{n}s{seed}", "seed": seed, "status": "ok",
                        "model.name": arch, "task.n_points": n, "train.batch_size": 10,
                        "eval.stop_below": None, "metric": "mse", "statistic": "mean",
                        "test_dist": "train", "position": n, "infer_iter": None,
                        "loop_iter": None}
                for step in (10, 100, 1000):
                    err = 1.0 / (1.0 + speed * step * 40.0 / n)
                    rows.append({**base, "step": step, "predictor": "model", "value": err})
                    if trivial is not None:
                        rows.append({**base, "step": step, "predictor": "no_retrieval",
                                     "value": trivial})
    return pl.DataFrame(rows, schema_overrides={"infer_iter": pl.Int64, "loop_iter": pl.Int64,
                                                "eval.stop_below": pl.Float64})


def test_censored_markers_differ_per_model_and_thresholds_say_mean(tmp_path):
    summary = FIGURES["str_sample_complexity"](retrieval_rows(), tmp_path,
                                               name="str_sample_complexity", n_boot=50,
                                               thresholds=(0.7, 0.3))
    assert summary["paths"][0].exists()
    assert set(summary["not_testable"]) == {0.7}  # 0.7 > 0.5 x no-retrieval 0.95
    assert "0.74x no retrieval" in summary["not_testable"][0.7][1]


def test_censored_markers_offset_and_marked_per_model(tmp_path, monkeypatch):
    import analysis.figures_retrieval as fr

    seen = {}
    real = fr.save

    def keep(fig, out_dir, name):
        seen["fig"] = fig
        return real(fig, out_dir, name)

    monkeypatch.setattr(fr, "save", keep)
    fr.str_sample_complexity_figure(retrieval_rows(trivial=None), tmp_path, n_boot=20,
                                    thresholds=(0.3,))
    ax = seen["fig"].axes[0]
    assert ax.get_title() == "samples to mean test MSE ≤ 0.3"
    censored = [c for c in ax.collections if len(c.get_offsets())]
    xs = [tuple(np.round(c.get_offsets()[:, 0], 6)) for c in censored]
    assert len(censored) == 2 and xs[0] != xs[1]  # FFN and GRU censored at the same cap
    paths = [c.get_paths()[0] for c in censored]
    assert not np.allclose(paths[0].vertices.shape, paths[1].vertices.shape) or not \
        np.allclose(paths[0].vertices, paths[1].vertices)  # different marker shapes
    handles, labels = ax.get_legend_handles_labels()
    assert any(label.startswith("FFN") for label in labels)
    ffn = next(h for h, label in zip(handles, labels, strict=True) if label.startswith("FFN"))
    assert ffn.get_marker() == fr.ARCH_MARKERS["ffn"]  # legend marker = the data's marker
    assert not any("not testable" in t.get_text() for t in ax.texts)  # no trivial rows
    plt.close(seen["fig"])
