"""An adaptive study's declaration: the axis, bounds and round-0 points over a base Study, the
goal it must reach (`Goal`), what it measures per member (`Measure`) and its budget
(`Adaptive`); the candidate lattice (`lattice`) and a member at an axis value (`member_at`).
Run by icl.adaptive; its criterion is analysis.forecasts.adaptive_design's.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from icl_core.spec.config import MemberConfig, resolve_member, set_path
from icl_core.spec.study import Study

GOAL_KINDS = ("exponent", "forecast")
ESTIMATORS = ("members", "seeds", "medians")  # whose CI (analysis.forecasts.adaptive_design)
FORECAST_LEVEL = 0.9  # as analysis.forecasts.forecast seals
EXPONENT_LEVEL = 0.95  # analysis.fitting.fit's CIs
N_STAR = "n_star"  # the measure read from error curves (samples needed), not a row metric


@dataclass(frozen=True)
class Goal:
    """What the study must resolve: the exponent's CI width, or a forecast's log10 band width
    at a larger x (`at`), at most `target`."""

    kind: str
    target: float
    at: float | None = None  # forecast: the x of the forecast
    param: str | None = None  # exponent: its name (default: the form's first exponent)
    estimator: str = "members"  # whose CI: ESTIMATORS (module doc)

    def __post_init__(self):
        if self.kind not in GOAL_KINDS:
            raise ValueError(f"goal kind: unknown {self.kind!r}; valid choices: "
                             f"{', '.join(GOAL_KINDS)}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"goal estimator: unknown {self.estimator!r}; valid choices: "
                             f"{', '.join(ESTIMATORS)}")
        if self.estimator == "medians" and self.kind != "exponent":
            raise ValueError("goal estimator 'medians' (fit_gamma) measures an exponent only: "
                             "use kind='exponent'")
        if not (isinstance(self.target, (int, float)) and self.target > 0):
            raise ValueError(f"goal target: must be > 0, got {self.target!r}")
        if self.kind == "forecast" and not (self.at and self.at > 0):
            raise ValueError("a forecast goal needs a positive x to forecast at (at=...)")

    def describe(self) -> str:
        if self.kind == "forecast":
            return (f"log10 width of the {FORECAST_LEVEL:.0%} band at x = {self.at:g} "
                    f"<= {self.target:g}")
        by = {"members": "", "seeds": " (seeds resampled)",
              "medians": " (fit_gamma: per-x medians, seeds resampled within x)"}[self.estimator]
        return (f"{EXPONENT_LEVEL:.0%} CI width of {self.param or 'the exponent'}{by} "
                f"<= {self.target:g}")


@dataclass(frozen=True)
class Measure:
    """What is measured per member: a final row metric, or n_star (with its threshold)."""

    metric: str
    statistic: str = "median"
    predictor: str = "model"
    test_dist: str = "train"
    threshold: float | None = None  # n_star only
    curve_metric: str = "mse"  # n_star only: the recorded curve it is read from
    position: int | None = None  # the query position (None: each member's last)

    def __post_init__(self):
        if self.metric == N_STAR and not (self.threshold and self.threshold > 0):
            raise ValueError("metric n_star needs a positive threshold (--threshold)")

    def to_dict(self) -> dict:
        out = asdict(self)
        if self.metric != N_STAR:
            out.pop("threshold")
            out.pop("curve_metric")
        if self.position is None:
            out.pop("position")
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Measure:
        return cls(**data)


def lattice(lo: float, hi: float, n: int, integer: bool = False) -> np.ndarray:
    """n log-spaced candidate points in [lo, hi] (rounded and deduplicated when integer)."""
    if not (0 < lo <= hi) or n < 1:
        raise ValueError(f"lattice: need 0 < lo <= hi and n >= 1, got {lo}, {hi}, {n}")
    points = np.geomspace(lo, hi, n) if n > 1 else np.array([float(lo)])
    if integer:
        points = np.unique(np.clip(np.round(points), math.ceil(lo), math.floor(hi)))
    return np.unique(points.astype(float))


@dataclass
class Adaptive:
    """An adaptive study over one axis of a base study (see the module doc)."""

    name: str  # the study folder its rows go to
    study: Study  # the base config (per preset) comes from here
    axis: str  # dotted config key, e.g. "model.depth"
    bounds: tuple[float, float]
    initial: list[float]  # round 0 points
    goal: Goal
    seeds: int = 2  # seeds per initial point
    form: str = "power"  # analysis.fitting.forms form of the law
    budget_trials: int | None = None
    budget_hours: float | None = None  # device-hours: the sum of the rows' wall_time_s
    batch: int = 3  # trials per round
    candidates: int = 10  # log-spaced lattice size within bounds
    integer: bool = True  # the axis takes integers
    measure: Measure = field(default_factory=lambda: Measure("mse"))
    fantasies: int = 4
    n_boot: int = 400  # bootstrap refits of the stop check (the look-ahead uses 100)
    # choose by variance reduction per unit cost, a trial's cost at x from the measured
    # members' wall times (analysis.forecasts.adaptive_design.measured_cost); False: every trial costs the same
    cost_weighted: bool = True
    presets: dict[str, dict] = field(default_factory=dict)  # preset -> field overrides
    doc: str = ""

    def __post_init__(self):
        lo, hi = self.bounds
        if not 0 < lo < hi:
            raise ValueError(f"{self.name}: bounds must be 0 < lo < hi, got {self.bounds}")
        outside = [p for p in self.initial if not lo <= p <= hi]
        if outside or len(set(self.initial)) < 2:
            raise ValueError(f"{self.name}: initial points must be >= 2 distinct values within "
                             f"{self.bounds}, got {self.initial}")
        if self.budget_trials is None and self.budget_hours is None:
            raise ValueError(f"{self.name}: give a budget (budget_trials and/or budget_hours)")
        if self.seeds < 1 or self.batch < 1:
            raise ValueError(f"{self.name}: seeds and batch must be >= 1")
        if self.goal.estimator == "medians" and self.form != "power":
            raise ValueError(f"{self.name}: the goal's estimator 'medians' (fit_gamma) fits a "
                             f"power law; form must be 'power', got {self.form!r}")

    def for_preset(self, preset: str) -> Adaptive:
        """This declaration with the preset's overrides (the preset itself is checked by the
        base study when members are built)."""
        return dataclasses.replace(self, **self.presets.get(preset, {}))

    def lattice(self) -> np.ndarray:
        return lattice(*self.bounds, self.candidates, self.integer)

    def round0(self) -> list[tuple[float, int]]:
        return [(float(x), s) for x in self.initial for s in range(self.seeds)]


def member_at(base: dict, adaptive: Adaptive, x: float, seed: int) -> MemberConfig:
    """The member config at axis value x with a training seed: the base config, axis set."""
    raw = copy.deepcopy(base)
    set_path(raw, adaptive.axis, int(round(x)) if adaptive.integer else float(x))
    raw["seed"] = int(seed)
    return resolve_member(raw)
