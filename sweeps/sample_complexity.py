"""Sample complexity: training samples needed to reach a target error, vs problem size.

* least_squares_dim -- fixed-N least squares (N = 2D) at D in {2, 4, 8, 16}: the test-MSE
  curve is recorded every `eval.every` steps; analysis derives n*(D), the samples
  (steps x batch) to reach MSE <= threshold, and fits n* ∝ D^γ (computed in analysis, not in
  trials). The sparse-token-retrieval studies (Wang et al., n*(N) for transformer / FFN /
  RNN) join this file with that paper's issue.
"""

from bases import CPU_LS, LIU_LS, SMOKE_LS

from icl_core.sweep import Preset, Study, Sweep


def dims(*ds: int) -> dict:
    return {("task.dim", "task.n_points"): [(d, 2 * d) for d in ds]}


LEAST_SQUARES_DIM = Study(
    name="least_squares_dim",
    doc="samples to reach a target query MSE vs dimension D (N = 2D), test curve every 1%",
    base={**LIU_LS, "model": {**LIU_LS["model"], "depth": 4},
          "eval": {**LIU_LS["eval"], "every": 10_000}},
    grid={**dims(2, 4, 8, 16), "seed": [0, 1, 2]},
    presets={
        "smoke": Preset(overrides={**SMOKE_LS, "eval.every": 10}, grid={**dims(2, 3), "seed": [0]}),
        "cpu": Preset(overrides={**CPU_LS, "model.depth": 2, "eval.every": 250,
                                 "eval.n_prompts": 300},
                      grid={**dims(2, 3, 4, 6), "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

DIM_DEPTH = Study(
    name="least_squares_dim_depth",
    doc="scale-up: samples to a target MSE vs D x depth (N = 2D), 10 seeds for n* CIs",
    base={**LIU_LS, "eval": {**LIU_LS["eval"], "every": 10_000}},
    grid={**dims(2, 4, 8, 16, 32), "model.depth": [2, 4, 8], "seed": list(range(10))},
    presets={
        "smoke": Preset(overrides={**SMOKE_LS, "eval.every": 10},
                        grid={**dims(2), "model.depth": [1], "seed": [0]}),
        "cpu": Preset(overrides={**CPU_LS, "eval.every": 250, "eval.n_prompts": 300},
                      grid={**dims(2, 3, 4), "model.depth": [1, 2], "seed": [0, 1]}),
        "paper": Preset(),
    },
)

SWEEP = Sweep("sample_complexity", [LEAST_SQUARES_DIM, DIM_DEPTH])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
