"""The one separation test every claim uses: a percentile-bootstrap confidence interval of the
seed median (one side) or of the difference of two seed medians (two sides), over seeds,
at LEVEL = 90% (5% in each tail), BOOTSTRAP = 10,000 resamples from a fixed generator.

Why this test: with 3 seeds a side its interval is exactly the min-max rule the project
used before (a median of 3 resampled values lands on the smallest with probability 7/27 > 5%,
so the 5% quantile is the minimum; two sides: (7/27)² = 6.7% > 5%); with more seeds the
interval narrows, so more seeds make a verdict sharper, while min-max ranges only widen.
The min-max answer is still reported beside it (`minmax_apart`).

    ci_one([1.02, 1.05, 1.11])            # (1.02, 1.11): 3 seeds, the min-max range
    ci_two(a, b)                          # CI of median(b) - median(a)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

LEVEL = 0.90  # two-sided coverage of every interval (one-sided 95% for a directed claim)
BOOTSTRAP = 10_000  # resamples
SEED = 0  # the generator's seed: the same seeds give the same interval


def _medians(values: Sequence[float], rng: np.random.Generator) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    idx = rng.integers(0, len(x), size=(BOOTSTRAP, len(x)))
    return np.median(x[idx], axis=1)


def _bounds(samples: np.ndarray) -> tuple[float, float]:
    tail = (1.0 - LEVEL) / 2.0
    lo, hi = np.quantile(samples, [tail, 1.0 - tail], method="inverted_cdf")
    return float(lo), float(hi)


def ci_one(values: Sequence[float]) -> tuple[float, float]:
    """The bootstrap interval of the median of `values` (one per seed)."""
    return _bounds(_medians(values, np.random.default_rng(SEED)))


def ci_two(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """The bootstrap interval of median(b) − median(a), seeds resampled on each side apart."""
    rng = np.random.default_rng(SEED)
    return _bounds(_medians(b, rng) - _medians(a, rng))


def minmax_apart(a: Sequence[float], b: Sequence[float]) -> bool:
    """Today's rule, reported beside the interval: the two seed ranges do not overlap."""
    return max(a) < min(b) or max(b) < min(a)
