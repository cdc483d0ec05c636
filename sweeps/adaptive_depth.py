"""Adaptive depth scaling: the least-squares depth study (sweeps/depth_scaling.py,
least_squares) with its trials chosen where the law MSE(depth) = c + a depth^-b is uncertain
(icl.adaptive; the criterion: analysis.forecasts.adaptive_design).

Round 0 runs depths 1, 2, 6 x 2 seeds; each later round adds up to 3 trials (a depth and a
seed each) chosen by a greedy bootstrap look-ahead, until b's 95% CI (the depth figure's fit:
saturating, seeds resampled; so it needs a third seed) is narrower than the goal
or the budget is spent. Same base config, presets and depth range (1-6) as the cpu grid of
least_squares, whose 15 trials it competes with.

    python sweeps/adaptive_depth.py --preset smoke     # seconds
    python sweeps/adaptive_depth.py --preset cpu --dry-run
    python sweeps/adaptive_depth.py --preset cpu       # resumable: re-run to go on
"""

if __package__:  # imported as sweeps.adaptive_depth (the tests)
    from .depth_scaling import LEAST_SQUARES
else:  # run as a script, python sweeps/adaptive_depth.py: sweeps/ is on sys.path
    from depth_scaling import LEAST_SQUARES

from icl import Adaptive, Goal, adaptive_main

LEAST_SQUARES_ADAPTIVE = Adaptive(
    name="least_squares_adaptive",
    doc="least_squares (Liu et al. Fig 2) with adaptively chosen depths: exponent of MSE(depth)",
    study=LEAST_SQUARES,
    axis="model.depth",
    bounds=(1, 6),
    initial=[1, 2, 6],
    seeds=2,
    # the depth figure's fit: saturating c + a L^-b, seeds resampled (analysis.figures.registry)
    goal=Goal("exponent", target=0.5, estimator="seeds"),
    form="saturating",
    budget_trials=15,  # the cpu grid's 5 depths x 3 seeds
    batch=3,
    candidates=6,
    presets={
        "smoke": {"bounds": (1, 3), "initial": [1, 2, 3], "seeds": 1, "batch": 2,
                  "budget_trials": 6, "goal": Goal("exponent", target=1e-3), "form": "power"},
        "gpu": {"bounds": (1, 16), "initial": [1, 4, 16], "candidates": 10,
                "budget_trials": 18},
        "paper": {"bounds": (1, 64), "initial": [1, 8, 64], "candidates": 12,
                  "budget_trials": 30},
    },
)

ADAPTIVE = [LEAST_SQUARES_ADAPTIVE]

if __name__ == "__main__":
    raise SystemExit(adaptive_main("adaptive_depth", ADAPTIVE))
