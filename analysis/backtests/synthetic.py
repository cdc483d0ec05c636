"""Synthetic back-tests with a known truth: the calibration check of the forecast intervals
(analysis.backtests.interval) against the two naive forecasters, in seconds, no training.

    rows = synthetic_backtests(n_laws=100, seed=0)      # rows of backtest_grids, + law, sigma
    summarize(rows)                                     # per method: coverage, errors, scores

Each law is drawn at random: `power` y = x^-b (b in [0.3, 1.5]); `saturating` y = c + x^-b,
the floor c making 10-80% of y at the largest x; `broken_power` (analysis.fitting.forms, its
sharpness) with slopes b1 in [0.2, 1.0], b2 = b1 + [-0.4, 1.0] and the break inside the
held-in x. Each has 4-8 x values (x = 2, 4, 8, ...), 3-5 seeds per x, and independent
log-normal seed noise, sigma in [0.03, 0.3] (ln units). The back-tests are those of
analysis.backtests.interval (the largest x held out; the two largest where there are >= 6),
scored against the measured median over seeds at the held-out x.
"""

from __future__ import annotations

import math

import numpy as np

from analysis.backtests.interval import LEVEL, SeriesGrid, backtest_grids, summarize
from analysis.fitting.forms import BREAK_F

LAWS = ("power", "saturating", "broken_power")
N_X = (4, 5, 6, 7, 8)
SEEDS = (3, 4, 5)

__all__ = ["LAWS", "draw_law", "summarize", "synthetic_backtests"]


def draw_law(kind: str, x: np.ndarray, rng) -> tuple[np.ndarray, str]:
    """The law's y at x, and its description."""
    if kind == "power":
        b = rng.uniform(0.3, 1.5)
        return x ** -b, f"x^-{b:.2f}"
    if kind == "saturating":
        b, share = rng.uniform(0.3, 1.5), rng.uniform(0.1, 0.8)
        c = share / (1 - share) * x[-1] ** -b
        return c + x ** -b, f"{c:.3g} + x^-{b:.2f}"
    b1 = rng.uniform(0.2, 1.0)
    b2 = b1 + rng.uniform(-0.4, 1.0)
    d = math.exp(rng.uniform(math.log(x[1]), math.log(x[-3])))
    y = x ** -b1 * (1 + (x / d) ** (1 / BREAK_F)) ** (-(b2 - b1) * BREAK_F)
    return y, f"x^-{b1:.2f} -> x^-{b2:.2f} at {d:.3g}"


def synthetic_backtests(n_laws: int = 100, seed: int = 0, level: float = LEVEL) -> list[dict]:
    """Back-test rows (analysis.backtests.interval.backtest_grids) of `n_laws` random laws,
    each row with its law kind, formula and noise sigma."""
    rng = np.random.default_rng(seed)
    specs = [(rng.choice(N_X), rng.choice(SEEDS), LAWS[i % len(LAWS)]) for i in range(n_laws)]
    grids, metas = [], []
    for n_x in N_X:
        for n_seeds in SEEDS:
            group = [kind for k, s, kind in specs if k == n_x and s == n_seeds]
            if not group:
                continue
            x = 2.0 ** np.arange(1, n_x + 1)
            xi = np.repeat(np.arange(n_x), n_seeds)
            ys, meta = [], []
            for kind in group:
                truth, formula = draw_law(kind, x, rng)
                sigma = rng.uniform(0.03, 0.3)
                ys.append(truth[xi] * np.exp(sigma * rng.normal(size=xi.size)))
                meta.append({"law": kind, "formula": formula, "sigma": sigma,
                             "n_x": int(n_x), "seeds": int(n_seeds)})
            grids.append(SeriesGrid(x, xi, np.array(ys)))
            metas.append(meta)
    # one pool, as a store's studies are (the extrapolation prior: interval.backtest_grids)
    return [{**meta[row["series"]], **row}
            for meta, rows in zip(metas, backtest_grids(grids, level), strict=True)
            for row in rows]


if __name__ == "__main__":  # the command moved to the face: `icl backtest --synthetic`
    from icl_core.old_paths import run_moved_command

    run_moved_command("analysis.backtests.synthetic")
