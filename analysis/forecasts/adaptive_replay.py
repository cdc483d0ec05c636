"""Replay an adaptive design on a measured dense grid: would it have reached the grid's CI
width, and with what share of the grid's trials and device-hours?

    icl forecast replay --storage S --sweep W --study T --x model.width \
        [--form saturating] [--estimator seeds] [--initial 8 32 128] [--seeds 2] [--batch 3]
    icl forecast replay --synthetic     # where it pays, where not
    result = replay(x, y, seeds, seconds, goal, form="power", initial=[8, 16, 64])

The design is the one a live adaptive study runs (icl.adaptive: round 0 at
`initial` x `seeds`, then `batch` trials a round chosen by analysis.forecasts.adaptive_design's
look-ahead, per unit of measured cost), but a trial's outcome is looked up among the grid's
measured members instead of trained: the (x, seed) it asks for, with that member's value and
wall time. So it can only ask for what the grid ran: the candidates are the grid's x, and at
most as many seeds per x as the grid has (a trial beyond them is dropped from its batch).
The goal is the grid's own width by the same estimator (`--estimator`, default the one the
study's figure uses: `medians` = fit_gamma for n*, `seeds` for the scaling figures' fits);
the design stops when it reaches it or has used every member. Every member's cost is its
measured wall time, the same for the grid and the replay, so the device-hour share does not
depend on how loaded the machine was when each ran (a live re-run's does).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from analysis.forecasts.adaptive_design import (
    Goal,
    assess,
    choose,
    measured_cost,
)

__all__ = ["SYNTHETIC", "Replay", "replay", "synthetic_draw", "synthetic_grid",
           "synthetic_replays"]


@dataclass
class Replay:
    """What the replay spent and reached against the dense grid."""

    target: float  # the dense grid's width
    grid_trials: int
    grid_hours: float
    rounds: list[dict] = field(default_factory=list)  # trials, width, hours after each round
    stop: str = ""

    @property
    def trials(self) -> int:
        return self.rounds[-1]["trials"] if self.rounds else 0

    @property
    def hours(self) -> float:
        return self.rounds[-1]["hours"] if self.rounds else 0.0

    @property
    def width(self) -> float:
        return self.rounds[-1]["width"] if self.rounds else math.inf

    @property
    def reached(self) -> bool:
        return self.width <= self.target


def replay(x, y, seeds, seconds, goal: Goal, form: str = "power", initial=None,
           n_seeds: int = 2, batch: int = 3, fantasies: int = 4,
           cost_weighted: bool = True, draw=None) -> Replay:
    """Replay the design on measured members (x, y, seed label, wall seconds; one each).
    `goal.target` is ignored: the target is the grid's own width by `goal.estimator`.
    `draw(x, seed) -> (y, seconds)`: where outcomes can be drawn (a synthetic law), a trial
    the grid did not run is drawn instead of dropped, so the design may put more seeds at an
    x than the grid has; it stops once it has spent the grid's device-hours."""
    x, y, seconds = (np.asarray(a, dtype=float) for a in (x, y, seconds))
    seeds = np.asarray(seeds).astype(np.int64)
    pool = {(float(a), int(s)): (float(v), float(t))
            for a, s, v, t in zip(x, seeds, y, seconds, strict=True)}
    grid_x = np.unique(x)
    target = assess(x, y, goal, form, seeds=seeds).width
    result = Replay(target, len(pool), float(np.sum(seconds)) / 3600)
    if not math.isfinite(target):
        result.stop = "the grid itself has no finite width by this estimator"
        return result
    goal = dataclasses.replace(goal, target=target)
    start = grid_x[[0, grid_x.size // 2, -1]] if initial is None else np.asarray(initial, float)
    chosen = [(float(a), s) for a in start for s in range(n_seeds) if (float(a), s) in pool]
    for index in range(len(pool)):
        cx = np.array([c[0] for c in chosen])
        cs = np.array([c[1] for c in chosen])
        cy = np.array([pool[c][0] for c in chosen])
        ct = np.array([pool[c][1] for c in chosen])
        status = assess(cx, cy, goal, form, seeds=cs)
        result.rounds.append({"round": index, "trials": len(chosen), "width": status.width,
                              "hours": float(ct.sum()) / 3600,
                              "x": {float(a): int((cx == a).sum()) for a in np.unique(cx)}})
        if status.reached:
            result.stop = "reached the grid's width"
            break
        if draw is not None and ct.sum() >= np.sum(seconds):
            result.stop = "spent the grid's device-hours"
            break
        left = grid_x if draw is not None else \
            [a for a in grid_x if any((float(a), s) not in chosen
                                      for s in range(int((x == a).sum())))]
        if not len(left):
            result.stop = "used every member of the grid"
            break
        try:
            choice = choose(cx, cy, cs, left, goal, batch, form, fantasies, seed=index,
                            cost=measured_cost(cx, ct) if cost_weighted else None)
        except ValueError as exc:
            result.stop = f"cannot choose: {exc}"
            break
        if draw is not None:
            pool.update({(float(a), int(s)): draw(float(a), int(s))
                         for a, s in choice.trials if (float(a), int(s)) not in pool})
        new = [(float(a), int(s)) for a, s in choice.trials if (float(a), int(s)) in pool]
        new = [t for t in dict.fromkeys(new) if t not in chosen]
        if not new:
            result.stop = "the design asked only for members the grid does not have"
            break
        chosen += new
    return result


# Synthetic grids where a design can and cannot pay (name, x count, seeds per x, cost
# exponent k of seconds ~ x^k, law, estimator); power: 2 x^-0.8, saturating: 0.05 + 2 x^-0.8,
# x log-spaced in 1-64, log-normal seed noise 0.2 (synthetic_draw).
SYNTHETIC = (("power, 8 x, cost ~ x", 8, 4, 1.0, "power", "seeds"),
             ("power, 8 x, every trial the same cost", 8, 4, 0.0, "power", "seeds"),
             ("power, 4 x", 4, 3, 1.0, "power", "seeds"),
             ("power, 8 x, fit_gamma's estimator", 8, 4, 1.0, "power", "medians"),
             ("saturating, 8 x", 8, 4, 1.0, "saturating", "seeds"))


def _law(law: str, x):
    return 2 * np.asarray(x, dtype=float) ** -0.8 + (0.05 if law == "saturating" else 0.0)


def synthetic_draw(cost_k: float, law: str, seed: int):
    """draw(x, seed label) -> (y, seconds): one member of SYNTHETIC's law, its log-normal
    noise fixed by (x, label, seed) whoever asks for it."""
    def draw(xv: float, label: int) -> tuple[float, float]:
        rng = np.random.default_rng([int(round(xv * 1000)), int(label), int(seed)])
        noise, jitter = rng.normal(size=2)
        return (float(_law(law, xv) * math.exp(0.2 * noise)),
                float(10 * xv ** cost_k * math.exp(0.05 * jitter)))
    return draw


def synthetic_grid(n_x: int, n_seeds: int, cost_k: float, law: str, seed: int):
    """(x, y, seed label, seconds) of a dense synthetic grid (SYNTHETIC's laws): x log-spaced
    in 1-64, seeds 0..n_seeds-1, each member from synthetic_draw."""
    xs = np.unique(np.round(np.geomspace(1, 64, n_x)))
    x, labels = np.repeat(xs, n_seeds), np.tile(np.arange(n_seeds), xs.size)
    draw = synthetic_draw(cost_k, law, seed)
    y, seconds = np.array([draw(a, s) for a, s in zip(x, labels, strict=True)]).T
    return x, y, labels, seconds


def synthetic_replays(seeds=(0, 1, 2), cases=SYNTHETIC, echo=None) -> list[dict]:
    """The design on SYNTHETIC's grids, one row per (case, seed): free to draw any seed at the
    grid's x (as a live study is), against the grid's own width."""
    out = []
    for name, n_x, n_seeds, cost_k, law, estimator in cases:
        for seed in seeds:
            x, y, labels, seconds = synthetic_grid(n_x, n_seeds, cost_k, law, seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = replay(x, y, labels, seconds, Goal("exponent", 1.0, estimator=estimator),
                           law, draw=synthetic_draw(cost_k, law, seed))
            out.append({"case": name, "seed": seed, "trials": r.trials,
                        "grid_trials": r.grid_trials, "trial_share": r.trials / r.grid_trials,
                        "hour_share": r.hours / r.grid_hours, "stop": r.stop,
                        "x": r.rounds[-1]["x"] if r.rounds else {}})
            if echo:
                spread = ", ".join(f"{a:g}: {n}" for a, n in out[-1]["x"].items())
                echo(f"  {name}, seed {seed}: {r.trials}/{r.grid_trials} trials, "
                     f"{r.hours / r.grid_hours:.0%} of the device-hours ({r.stop}; seeds at x: "
                     f"{spread})")
    return out


if __name__ == "__main__":  # the command moved to the face: `icl forecast replay`
    from icl_core.old_paths import run_moved_command

    run_moved_command("analysis.forecasts.adaptive_replay")
