"""Pre-registered scaling forecasts: seal a prediction before the run, score it after.

    icl forecast seal --storage results --sweep depth_scaling \\
        --study least_squares --x model.depth --metric mse --at 12 16 [--id depth16]
    icl forecast score --storage results --sweep depth_scaling --study least_squares

    path, doc = seal(storage, sweep, study, x="model.depth", metric="mse", at=[12, 16])
    scores = score(storage, sweep, study)        # Scores: .points, .coverage, .tampered, ...

Seal (analysis.forecasts.seal). From the study's finished rows (analysis.reading.store.read_rows; one
measured value per member: analysis.forecasts.points) every form of analysis.fitting.fit is fitted to
the members that exist and the lowest-AIC one is kept (`compare_forms`); its seed bootstrap
(`fit_scaling`, `--n-boot` refits on resampled seeds) gives the 90% interval at each named x
not yet run. The interval is for what will be measured there, the median over the study's
number of seeds per x: each bootstrap curve plus the median of that many log residuals of the
fit drawn with replacement, 5th to 95th percentile (`curve_lo` / `curve_hi` keep the band of
the law alone). The forecast (points, form, parameters, ΔAIC per form, the config hashes of the
members used, created time) is written as sorted-key JSON with a SHA-256 `content_hash` over
every other field to `<storage>/<sweep>/<study>/forecasts/<id>.json`, created with O_EXCL: a
sealed forecast is never rewritten (sealing an id twice: exit 2). A point that already has rows
is refused (exit 2): that would not be a forecast.

Measures. `--metric mse` (any row metric): each member's final evaluation at its query
position (`--statistic` over test prompts, `--predictor`, `--test-dist`). `--metric n_star
--threshold T`: the samples a member needs to reach T on its recorded `--curve-metric` curve,
right-censored at the run's cap when never reached (analysis.fitting.sample_complexity).

Score (analysis.forecasts.score). Every forecast's hash is checked first: a file whose hash does
not match (or that cannot be read, or renamed) is reported as tampered and never scored. Where a
point's rows now exist, the truth is the median over its seeds (bounded when censored); per
point the log error log10(measured / predicted) and whether the interval covered the truth;
across the decided points the empirical coverage. A censored truth is a miss only when the
interval lies wholly beyond its known bound (wholly below the cap of a right-censored n*),
covered when the interval holds every value it may take, else "censored, consistent" (not in
the coverage). Points without rows are pending. Prints the table and writes
`forecasts/score.md` and the figure `forecasts/forecasts.png|pdf` (analysis.forecasts.figure).
Local (or shared-filesystem) storage only: O_EXCL needs a POSIX filesystem.
"""

from __future__ import annotations

from analysis.forecasts.score import Scores, judge, score, score_forecast
from analysis.forecasts.seal import (
    LEVEL,
    ForecastError,
    build_forecast,
    content_hash,
    forecast_dir,
    seal,
    verify,
)
from icl_core.spec.adaptive import N_STAR, Measure

__all__ = ["LEVEL", "N_STAR", "ForecastError", "Measure", "Scores", "build_forecast",
           "content_hash", "forecast_dir", "judge", "score", "score_forecast", "seal", "verify"]

if __name__ == "__main__":  # the command moved to the face: `icl forecast seal|score`
    from icl_core.old_paths import run_moved_command

    run_moved_command("analysis.forecasts.forecast")
