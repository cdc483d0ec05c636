"""Regenerate a sweep's figures and fit reports from its stored rows (the command line:
`icl regenerate`, icl.commands.regenerate).

What it needs of each study (its figure and figure arguments, grid axes, the plan of each
preset) comes from the study's manifest, `<storage>/<sweep>/<study>/study.json`, which a sweep
run writes beside the rows (icl_core.running.study_report.study_manifest); analysis never imports the
orchestration. Stores written before manifests existed (or rows written without a sweep run):
`icl regenerate --from-sweeps` reads the studies from the sweep files instead (the face passes
`lookup`, icl.catalog.study_manifests, to `regenerate`).
Output per study: <out>/<sweep>/<study>/<figure>.png|.pdf, fits.parquet and fits.md.
A study with no registered figure gets "no figure registered for <sweep>/<study>" and still a
fit report: the final query MSE against the study's one grid axis (besides seed), compared
across forms by AIC, when there is such an axis. With --preset, the coverage line counts the
trials the plan expects (and names those without a row file). Exit status 2 when there are no
results (the message names the command producing them).
"""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path

import polars as pl
import pyarrow.fs as pafs

from analysis.figures.registry import CATEGORICAL_FIGURES, FIGURE_COLUMNS, FIGURES
from analysis.fitting.fit import Fit, compare_forms
from analysis.reading.coverage import expected_hashes
from analysis.reading.frames import cell_regime, final_eval, member_counts
from analysis.reading.regime import LEARNED_ERROR_RATIO, LEARNED_R2_GAP, THRESHOLD_RATIO
from analysis.reading.store import (
    MissingArtifact,
    MissingResults,
    locate,
    missing_message,
    read_rows,
)
from icl_core.storage.store import ROW_SCHEMA, read_manifest

logger = logging.getLogger(__name__)
FALLBACK = "icl regenerate --from-sweeps"  # the same command, studies read from sweeps/


TUNE = "tune"  # Ray Tune's own folder in a sweep's (icl_core.running.plans), not a study


def _folders(loc, folder: str) -> list[str]:
    selector = pafs.FileSelector(folder, allow_not_found=True)
    return sorted(info.path.rstrip("/").rsplit("/", 1)[-1]
                  for info in loc.fs.get_file_info(selector)
                  if info.type == pafs.FileType.Directory)


def study_manifests(storage: str, sweep: str, study: str | None = None, preset: str | None = None,
                    lookup=None) -> list[dict]:
    """The manifests of a sweep's studies (the named one only), in the sweep file's order.

    Read from the store; with `lookup(sweep, preset) -> [manifest, ...]` (the fallback for
    stores without manifests: the face passes the sweep files' own) from it instead.
    Nothing stored for the sweep (or the named study): MissingResults; with `lookup`, an
    unknown study is a ValueError naming the valid ones."""
    loc = locate(storage)
    if lookup is not None:
        manifests = lookup(sweep, preset)
    else:
        # a sweep's folder: its studies, and Tune's state of a run of the file alone (tune/)
        folders = [name for name in _folders(loc, f"{loc.root}/{sweep}") if name != TUNE]
        found = {name: read_manifest(loc.fs, loc.study_dir(sweep, name)) for name in folders}
        manifests = sorted((m for m in found.values() if m), key=lambda m: m["order"])
        bare = [name for name, m in found.items() if m is None and (not study or name == study)]
        why = (f"no study manifest (study.json) under {loc.redacted}: rows written before manifests "
               f"existed, or without a sweep run; {FALLBACK} {sweep} [same options] reads the "
               f"studies from sweeps/{sweep}.py")
        if bare and (study or not manifests):
            raise ValueError(f"{sweep}: {', '.join(bare)}: {why}")
        for name in bare:
            logger.warning(f"[{sweep}/{name}] skipped: {why}")
        if not manifests:
            raise MissingResults(missing_message(sweep, study, loc.uri, storage=storage))
    if study:
        chosen = [m for m in manifests if m["study"] == study]
        if not chosen and lookup is None:  # not run into this store (or not a study)
            raise MissingResults(missing_message(sweep, study, loc.uri, storage=storage))
        if not chosen:
            valid = ", ".join(m["study"] for m in manifests)
            raise ValueError(f"--study: unknown {study!r}; valid choices: {valid}")
        return chosen
    return manifests


def _scalar(value) -> bool:
    return isinstance(value, (int, float, str)) and not isinstance(value, bool)


def fit_rows(sweep: str, study: str, figure: str | None, summary: dict) -> list[dict]:
    """Tidy fit rows of one figure: its scalar summary values plus each fit's own row."""
    base = {"sweep": sweep, "study": study, "figure": figure}
    base.update({k: v for k, v in summary.items() if _scalar(v)})
    base.update({f"trials_{k}": v for k, v in summary.get("coverage", {}).items()})
    fits: list[Fit] = summary.get("fits") or ([summary["fit"]] if summary.get("fit") else [])
    return [{**base, **fit.to_row()} for fit in fits] or [{**base, "form": None}]


def markdown_table(frame: pl.DataFrame) -> str:
    """A GitHub Markdown table (floats in 4 significant digits)."""
    def cell(v) -> str:
        if isinstance(v, float):
            return "nan" if math.isnan(v) else f"{v:.4g}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * frame.width]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join(lines) + "\n"


MD_COLUMNS = ("sweep", "study", "figure", "form", "status", "estimates", "rms_log_residual", "n_points",
              "excluded", "decades", "aic", "delta_aic", "holdout_x", "holdout_log_error",
              "n_boot", "converged", "fit_notes")


def _estimates(row: dict) -> str:
    """'b = 1.3 [1.21, 1.39]; a = 2 [1.9, 2.1]' from a fit row's value/_lo/_hi columns."""
    parts = []
    for name in ("b", "b1", "b2", "a", "c", "d"):
        if row.get(name) is None:
            continue
        lo, hi = row.get(f"{name}_lo"), row.get(f"{name}_hi")
        ci = "" if lo is None or math.isnan(lo) else f" [{lo:.4g}, {hi:.4g}]"
        parts.append(f"{name} = {row[name]:.4g}{ci}")
    return "; ".join(parts)


def regime_markdown(regime: pl.DataFrame | None) -> str:
    """The figure's learned-regime table (analysis.reading.regime) as a fits.md section ("" when
    there is none or the rows hold no trivial predictor)."""
    if not isinstance(regime, pl.DataFrame) or regime.height == 0 or \
            regime["learned"].null_count() == regime.height:
        return ""
    shown = regime.drop([c for c in ("raw_bar", "model_min", "model_max")
                         if c in regime.columns])
    return ("\n## Learned regime\n\nA cell is judged only if the model clears the best trivial "
            f"predictor: error <= {LEARNED_ERROR_RATIO:g}x its error, R² >= its R² + "
            f"{LEARNED_R2_GAP:g}; a threshold claim (samples to reach error t): t <= "
            f"{THRESHOLD_RATIO:g}x its error (analysis.reading.regime); on a task with a floor, the "
            "same bar on the excess over it (analysis.reading.regime); otherwise: not testable at "
            "this scale (reach: whether any predictor can clear the bar)."
            "\n\n" + markdown_table(shown))


def write_fit_report(out_dir: Path, rows: list[dict], regime: pl.DataFrame | None = None
                     ) -> list[Path]:
    """fits.parquet (every column) and fits.md (a readable subset, then the learned-regime
    table when given) in out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = pl.DataFrame(rows, strict=False, infer_schema_length=None)
    parquet, md = out_dir / "fits.parquet", out_dir / "fits.md"
    frame.write_parquet(parquet)
    shown = pl.DataFrame(
        [{"estimates": _estimates(r), **{k: r.get(k) for k in MD_COLUMNS if k in r}}
         for r in rows], strict=False, infer_schema_length=None,
    )
    shown = shown.select([c for c in MD_COLUMNS if c in shown.columns])
    first = rows[0]
    title = f"# Fits: {first['sweep']}/{first['study']}\n\n"
    method = ("Huber (delta = 1e-3) fits of log y, 95% bootstrap CIs over seeds (B = n_boot); "
              "AIC = n log(RSS/n) + 2k on log residuals; held-out: the largest x predicted "
              "from the rest (mean log(y_pred / y)). status: \"ok\", or why the fit is "
              "unresolved (an exponent at the fitter's bound, the wrong sign for the claim, "
              "a CI that is nan or spans 0: analysis.fitting.fit.fit_status); an unresolved fit is "
              "not a law. All columns: fits.parquet.\n\n")
    trials = ", ".join(f"{k.removeprefix('trials_')} {first[k]}" for k in first
                       if k.startswith("trials_"))
    if trials:
        method += f"Trials: {trials}.\n\n"
    md.write_text(title + method + markdown_table(shown) + regime_markdown(regime))
    return [parquet, md]


def describe(summary: dict) -> str:
    """'b = 1.29 [1.25, 1.33], c = 3.1e-07 [..]' or the figure's note."""
    fit: Fit | None = summary.get("fit")
    if fit is None:
        return summary.get("note") or "no fit"
    text = fit.label() if fit.status == "ok" else f"unresolved ({fit.status}): {fit.label()}"
    if len(summary.get("fits") or []) > 1:
        text = f"{fit.form} (best of {len(summary['fits'])} forms by AIC): {text}"
    if "c" in fit.ci:
        lo, hi = fit.ci["c"]
        text += f" [{lo:.1e}, {hi:.1e}]"
    return text + f" (rms log residual {fit.rms_log_residual:.3f})"


def grid_axis(study: dict, rows: pl.DataFrame) -> str | None:
    """The study's one numeric grid axis besides seed (None if there is not exactly one);
    `study`: its manifest (zipped axes, lists of keys, never count)."""
    axes = [k for k in study["grid"] if isinstance(k, str) and k not in ("seed", "task_seed")
            and k in rows.columns and rows.schema[k].is_numeric()]
    return axes[0] if len(axes) == 1 else None


def generic_fits(rows: pl.DataFrame, study: dict, n_boot: int = 1000, seed: int = 0) -> dict:
    """No figure: the final query MSE (per-prompt median) of ok members against the study's
    grid axis, one point per (axis value, seed), compared across forms by AIC (the claim: the
    error falls as the axis grows), and the learned-regime table per axis value."""
    ok, excluded = member_counts(rows)
    summary: dict = {"fits": [], "ok": ok, "excluded": excluded, "paths": []}
    axis = grid_axis(study, rows)
    if axis is None:
        summary["note"] = "no fit: the study has no single numeric grid axis besides seed"
        return summary
    every = final_eval(rows)
    summary["regime"] = cell_regime(every.filter(pl.col(axis).is_not_null()), [axis])
    final = every.filter((pl.col("predictor") == "model") & (pl.col("statistic") == "median"))
    points = final.group_by(axis, "seed").agg(pl.col("value").median()).drop_nulls()
    summary["axis"] = axis
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            summary["fits"] = compare_forms(points[axis].to_numpy(), points["value"].to_numpy(),
                                            points["seed"].to_numpy(), n_boot=n_boot, seed=seed)
        for fit in summary["fits"]:
            fit.claim_sign = 1  # the claim of a grid axis: the error falls as it grows
        summary["note"] = "; ".join(str(w.message) for w in caught)
        summary["fit"] = summary["fits"][0]
    except (ValueError, RuntimeError) as exc:
        summary["note"] = f"no fit of mse vs {axis}: {exc}"
    return summary


def study_columns(study: dict) -> list[str]:
    """The columns regenerate reads of a study: its figure's (FIGURE_COLUMNS), its grid axes
    and the columns its figure arguments name; for a study without a figure the fixed row
    columns and its grid axes (`generic_fits`)."""
    figure = study["figure"]
    keys = [k for key in study["grid"] for k in (key if isinstance(key, list) else [key])]
    if figure in FIGURES:  # "scale": evidence keeps the scale its rows are at (titles)
        return [*FIGURE_COLUMNS[figure], *keys, *_figure_arg_columns(study), "scale"]
    return [*ROW_SCHEMA.names, *keys]


def _figure_arg_columns(study: dict) -> list[str]:
    """Column names among the figure's arguments (e.g. x="model.depth", hue=[...])."""
    out = []
    for value in study.get("figure_args", {}).values():
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str):
                out.append(v)
    return out


def regenerate(sweep: str, study: str | None = None, storage: str = "results",
               out: str = "figures", n_boot: int = 1000, preset: str | None = None,
               lookup=None, scale: str | None = None) -> list[dict]:
    """Figures and fit reports of one sweep (one study, or every study with results).

    preset: count the trials the plan of that preset expects (coverage); optional.
    scale: the scale the rows are at (e.g. "reduced: d = 4, inputs N(0, I)"), shown in
    every figure's title (a `scale` column the titles read, `study_title`).
    lookup: where the studies come from when not from the store's manifests (see
    `study_manifests`)."""
    check_name(sweep)
    summaries, missing, unreadable = [], [], []
    for s in study_manifests(storage, sweep, study, preset, lookup):
        name, figure = s["study"], s["figure"]
        label = f"{sweep}/{name}"
        expected = expected_hashes(s, preset)
        try:
            rows, coverage = read_rows(storage, sweep, name, expected,
                                       columns=study_columns(s),
                                       categorical=figure in CATEGORICAL_FIGURES)
        except MissingResults:
            if study:
                raise
            missing.append(name)
            continue
        logger.info(coverage.line(label))
        if scale:
            rows = rows.with_columns(pl.lit(scale).alias("scale"))
        if coverage.missing:
            logger.info(f"[{label}] no row file for {len(coverage.missing)} planned trial(s): "
                        f"{', '.join(coverage.missing[:10])}")
        out_dir = Path(out) / sweep / name
        if figure in FIGURES:
            try:
                summary = FIGURES[figure](rows, out_dir, name=figure, n_boot=n_boot,
                                          storage=locate(storage).uri, **s["figure_args"])
            except MissingArtifact as exc:  # a weight-space figure on a store of rows only
                if study:
                    raise
                logger.warning(f"[{label}] {figure} figure skipped: {exc}")
                unreadable.append(exc)
                continue
        else:
            why = f" (figure {figure!r} is not one of: {', '.join(FIGURES)})" if figure else ""
            logger.info(f"no figure registered for {label}{why}")
            summary = generic_fits(rows, s, n_boot=n_boot)
        summary.update(sweep=sweep, study=name, figure=figure, coverage=coverage.to_dict())
        summary["report"] = write_fit_report(out_dir, fit_rows(sweep, name, figure, summary),
                                             summary.get("regime"))
        first = summary["paths"][0] if summary["paths"] else summary["report"][1]
        logger.info(f"{first}: {describe(summary)}; {summary.get('excluded', 0)} "
                    "members excluded")
        summaries.append(summary)
    if unreadable and not summaries and not missing:
        raise unreadable[0]
    if missing and not summaries:
        raise MissingResults(missing_message(sweep, None, locate(storage).uri, storage=storage))
    for name in missing:
        logger.warning(f"[{sweep}/{name}] skipped: no results")
    return summaries


def check_name(sweep: str) -> None:
    """A sweep is named (a Python identifier, as its file in the sweeps package is), never
    given as a path: refused before anything is read or imported by that name."""
    if not isinstance(sweep, str) or not sweep.isidentifier():
        raise ValueError(f"sweep: {sweep!r} is not a sweep name (the name of a file in the "
                         "sweeps package, e.g. depth_scaling, not a path)")


def stored_sweeps(storage: str) -> list[str]:
    """Sweeps with a folder in the store; "_"-named folders are the store's own (a pool of
    several sweep files keeps its Tune state in `_pool/`), never a sweep's."""
    loc = locate(storage)
    return [name for name in _folders(loc, loc.root) if not name.startswith("_")]


if __name__ == "__main__":  # the command moved to the face: `icl regenerate`
    from icl_core.old_paths import run_moved_command

    run_moved_command("analysis.regenerate")
