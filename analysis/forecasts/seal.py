"""Sealing a forecast (see analysis.forecasts.forecast for the commands and the method): the stable
JSON and its content hash, the fit of the study's rows (the lowest-AIC form of analysis.fitting.fit
with its seed bootstrap), the 90% interval of what will be measured at each named x, and the
exclusive (O_EXCL) write to <storage>/<sweep>/<study>/forecasts/<id>.json.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import warnings
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl

from analysis.fitting.fit import DEFAULT_FORMS, Fit, compare_forms, fit_scaling
from analysis.fitting.forms import FORMS
from analysis.forecasts.points import exact, member_values, study_rows
from analysis.reading.store import locate
from icl_core.spec.adaptive import Measure
from icl_core.storage.store import redacted

FOLDER = "forecasts"
LEVEL = 0.9
FORMAT = 1
ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

__all__ = ["FOLDER", "LEVEL", "ForecastError", "build_forecast", "content_hash", "forecast_dir",
           "seal", "verify", "write_sealed"]


class ForecastError(ValueError):
    """A forecast that cannot be sealed (too few points, a point already run, a bad id)."""


# ----------------------------------------------------------------------- stable JSON, hash


def _clean(value):
    """JSON-ready: numpy scalars to Python, non-finite floats to None, tuples to lists."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_clean(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def content_hash(doc: dict) -> str:
    """SHA-256 of the sorted-key compact JSON of every field but `content_hash`."""
    body = {k: v for k, v in doc.items() if k != "content_hash"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def verify(doc: dict) -> bool:
    """Whether a forecast's stored hash matches its content."""
    try:
        return isinstance(doc, dict) and doc.get("content_hash") == content_hash(doc)
    except (TypeError, ValueError):
        return False


def forecast_dir(storage: str, sweep: str, study: str) -> Path:
    """<storage>/<sweep>/<study>/forecasts (a local or shared-filesystem path)."""
    loc = locate(storage)
    if not loc.local:
        raise ForecastError(f"forecasts need a local or shared-filesystem storage path (O_EXCL), "
                            f"got {redacted(storage)!r}")
    return Path(f"{loc.root}/{sweep}/{study}") / FOLDER


# ------------------------------------------------------------------------------- sealing


def _choose(used: pl.DataFrame, forms: Sequence[str], n_boot: int, seed: int
            ) -> tuple[Fit, dict[str, float], list[str]]:
    """The lowest-AIC form among the resolved fits (analysis.fitting.fit.fit_status "ok": no break at
    the data edge, no exponent or bootstrap refits at the fitter's bounds), with its seed
    bootstrap; the lowest-AIC fit with a note when none is resolved. Forms are ranked by AIC
    first (no bootstrap) and bootstrapped in that order until one is resolved. Returns the fit,
    ΔAIC per form, warnings and notes."""
    x, y, g = used["x"].to_numpy(), used["lo"].to_numpy(), used["seed"].to_numpy()
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ranked = compare_forms(x, y, g, forms=forms, n_boot=0, seed=seed)
        fits = []
        for candidate in ranked:
            fit = fit_scaling(x, y, g, form=candidate.form, n_boot=n_boot, seed=seed)
            fit.delta_aic = candidate.delta_aic
            fits.append(fit)
            if fit.status == "ok":
                break
            notes.append(f"{fit.form} not chosen: unresolved ({fit.status})")
    chosen = fits[-1] if fits[-1].status == "ok" else fits[0]
    if chosen.status != "ok":
        notes.append(f"no form resolved: the lowest-AIC one ({chosen.form}) is used")
    return chosen, {f.form: f.delta_aic for f in ranked}, [str(w.message) for w in caught] + notes


def _intervals(fit: Fit, used: pl.DataFrame, at: np.ndarray, n_seeds: int, level: float,
               seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi) of the median of n_seeds new seeds at `at` (bootstrap curve + the median of
    n_seeds resampled log residuals), and the band of the law alone (curve_lo, curve_hi)."""
    form = FORMS[fit.form]
    lx, ly = np.log(used["x"].to_numpy()), np.log(used["lo"].to_numpy())
    residuals = ly - form.log_model(form.from_params(fit.params), lx)[0]
    curves = form.log_model(fit.boot_theta, np.log(at))[0]  # (B, K)
    rng = np.random.default_rng(seed)
    draws = rng.choice(residuals, size=(*curves.shape, n_seeds), replace=True)
    predicted = curves + np.median(draws, axis=-1)
    tail = 50.0 * (1.0 - level)
    lo, hi = np.exp(np.percentile(predicted, [tail, 100.0 - tail], axis=0))
    curve_lo, curve_hi = fit.predict_band(at, level)
    return lo, hi, curve_lo, curve_hi


def _check_points(rows: pl.DataFrame, x: str, at: Sequence[float]) -> np.ndarray:
    points = np.asarray(sorted({float(v) for v in at}), dtype=float)
    if points.size == 0 or not np.all(np.isfinite(points) & (points > 0)):
        raise ForecastError(f"--at needs positive finite x values, got {list(at)}")
    run = rows[x].drop_nulls().cast(pl.Float64).unique().to_numpy() if x in rows.columns \
        else np.empty(0)
    taken = [float(p) for p in points if np.any(np.isclose(run, p, rtol=1e-9, atol=0.0))]
    if taken:
        raise ForecastError(f"{x} = {', '.join(f'{p:g}' for p in taken)} already has rows: "
                            f"that would not be a forecast")
    return points


def _inputs(used: pl.DataFrame, members: pl.DataFrame) -> dict:
    per_x = used.group_by("x").agg(pl.col("lo").median().alias("median"),
                                   pl.len().alias("n_seeds")).sort("x")
    return {"config_hashes": sorted(used["config_hash"].to_list()),
            "censored_config_hashes": sorted(set(members["config_hash"]) -
                                             set(used["config_hash"])),
            "points": per_x.to_dicts()}


def build_forecast(rows: pl.DataFrame, x: str, measure: Measure, at: Sequence[float],
                   forecast_id: str, sweep: str, study: str,
                   forms: Sequence[str] = DEFAULT_FORMS, level: float = LEVEL,
                   n_boot: int = 1000, seed: int = 0, created: str | None = None) -> dict:
    """The sealed forecast document (with its content hash) from a study's rows; no I/O."""
    points = _check_points(rows, x, at)
    members = member_values(rows, x, measure)
    used = exact(members)
    if used["x"].n_unique() < 2 or used["seed"].n_unique() < 2:
        raise ForecastError(f"a forecast needs >= 2 measured x values and >= 2 seeds, got "
                            f"{used['x'].n_unique()} x and {used['seed'].n_unique()} seeds")
    try:
        fit, deltas, notes = _choose(used, forms, n_boot, seed)
    except ValueError as exc:
        raise ForecastError(f"no law could be fitted: {exc}") from exc
    if fit.boot_theta is None or len(fit.boot_theta) == 0:
        raise ForecastError("no bootstrap refits (n_boot = 0?): no interval to seal")
    n_seeds = int(round(float(used.group_by("x").len()["len"].median())))
    lo, hi, curve_lo, curve_hi = _intervals(fit, used, points, n_seeds, level, seed)
    predicted = fit.predict(points)
    doc = {
        "format": FORMAT, "id": forecast_id, "sweep": sweep, "study": study, "x": x,
        "measure": measure.to_dict(), "level": level,
        "created": created or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "fit": {"form": fit.form, "formula": FORMS[fit.form].formula, "params": fit.params,
                "ci95": fit.ci, "delta_aic": deltas, "aic": fit.aic, "n_points": fit.n_points,
                "rms_log_residual": fit.rms_log_residual, "n_boot": fit.n_boot, "seed": seed,
                "status": fit.status, "notes": fit.notes + notes, "holdout": fit.holdout,
                "x_range": fit.x_range, "n_seeds_per_x": n_seeds},
        "inputs": _inputs(used, members),
        "points": [{"x": p, "predicted": v, "lo": a, "hi": b, "curve_lo": c, "curve_hi": d}
                   for p, v, a, b, c, d in zip(points, predicted, lo, hi, curve_lo, curve_hi,
                                               strict=True)],
    }
    doc = _clean(doc)
    doc["content_hash"] = content_hash(doc)
    return doc


def write_sealed(path: Path, doc: dict) -> None:
    """Create `path` exclusively (O_EXCL) and write the forecast; FileExistsError if sealed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, sort_keys=True, indent=1, allow_nan=False) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def seal(storage: str, sweep: str, study: str, x: str, metric: str | Measure,
         at: Sequence[float], forecast_id: str | None = None,
         forms: Sequence[str] = DEFAULT_FORMS, level: float = LEVEL, n_boot: int = 1000,
         seed: int = 0, preset: str | None = None) -> tuple[Path, dict]:
    """Fit the study's rows, seal a forecast at `at`; returns (path, document). Raises
    ForecastError (cannot be sealed), FileExistsError (the id is sealed already),
    MissingResults (no rows)."""
    measure = metric if isinstance(metric, Measure) else Measure(metric)
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    forecast_id = forecast_id or (f"{measure.metric}-{x}-" + created.replace(":", "")
                                  .replace("+0000", "Z").replace("+00:00", "Z"))
    if not ID_PATTERN.match(forecast_id):
        raise ForecastError(f"forecast id {forecast_id!r}: letters, digits, '.', '_', '-' only")
    path = forecast_dir(storage, sweep, study) / f"{forecast_id}.json"
    if path.exists():
        raise FileExistsError(f"forecast {forecast_id!r} is sealed already ({path}); a sealed "
                              f"forecast is never rewritten: choose another --id")
    rows = study_rows(storage, sweep, study, preset)  # `preset`: its members alone
    doc = build_forecast(rows, x, measure, at, forecast_id, sweep, study, forms, level, n_boot,
                         seed, created)
    write_sealed(path, doc)
    return path, doc
