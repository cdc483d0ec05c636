"""Adaptive sample complexity: n*(N) of the multi-head transformer on simple-1STR
(sweeps/sample_complexity.py, str_simple_n) with its trials chosen where the law
n*(N) = a N^γ is uncertain (icl.adaptive; the criterion: analysis.forecasts.adaptive_design).

n* is the samples (steps x batch) a member needs to reach a mean test MSE of 0.05, read from
its recorded curve (analysis.forecasts.points.Measure "n_star"); a member that never reaches
it is right-censored and left out of the fit. Round 0 runs N = 8, 16, 64 x 2 seeds; each later
round adds up to 3 trials chosen by the greedy bootstrap look-ahead, per unit of measured cost
(a member's wall time grows with N), until γ's 95% CI is narrower than the goal or the budget
is spent; the width is fit_gamma's, the estimator of the n* figures. Same base config, presets and N range (8-64) as the cpu grid of str_simple_n,
whose 21 trials it competes with.

    python sweeps/adaptive_sample_complexity.py --preset smoke     # seconds
    python sweeps/adaptive_sample_complexity.py --preset cpu --dry-run
    python sweeps/adaptive_sample_complexity.py --preset cpu       # resumable: re-run to go on
"""

if __package__:  # imported as sweeps.adaptive_sample_complexity (the tests)
    from .sample_complexity import STR_SIMPLE_N
else:  # run as a script: sweeps/ is on sys.path
    from sample_complexity import STR_SIMPLE_N

from icl import Adaptive, Goal, Measure, adaptive_main

N_STAR_005 = Measure("n_star", statistic="mean", threshold=0.05)  # the stop rule's statistic

STR_SIMPLE_ADAPTIVE = Adaptive(
    name="str_simple_adaptive",
    doc="str_simple_n with adaptively chosen N: exponent of n*(N) at mean test MSE 0.05",
    study=STR_SIMPLE_N,
    axis="task.n_points",
    bounds=(8, 64),
    initial=[8, 16, 64],
    seeds=2,
    # the n* figures' estimator (fit_gamma: per-N medians, seeds resampled within each N)
    goal=Goal("exponent", target=0.05, estimator="medians"),
    form="power",
    measure=N_STAR_005,
    budget_trials=21,  # the cpu grid's 7 N values x 3 seeds
    batch=3,
    candidates=7,  # the lattice 8, 11, 16, 23, 32, 45, 64: the grid's N values
    presets={
        "smoke": {"bounds": (4, 8), "initial": [4, 6, 8], "seeds": 1, "batch": 2,
                  "budget_trials": 5, "candidates": 3, "goal": Goal("exponent", target=1e-3),
                  # 20 steps cross no fixed threshold reliably: the final MSE stands in
                  "measure": Measure("mse", statistic="mean")},
        "gpu": {"bounds": (8, 128), "initial": [8, 32, 128], "candidates": 9,
                "budget_trials": 15},
        "paper": {"bounds": (8, 128), "initial": [8, 32, 128], "candidates": 9,
                  "budget_trials": 25},
    },
)

ADAPTIVE = [STR_SIMPLE_ADAPTIVE]

if __name__ == "__main__":
    raise SystemExit(adaptive_main("adaptive_sample_complexity", ADAPTIVE))
