"""Depth scaling of in-context least squares (Liu et al. 2024, Fig. 2; Fig. 10's Transformer).

A GPT-2-style transformer reads N = 20 noiseless examples (x_i, y_i), x_i, w ~ N(0, I_5), and
predicts y_q for the query; only the query is supervised (fixed-N layout). MSE at the query vs
depth, against OLS and GD on the same test prompts in float32 and float64. The paper's claim:
depth helps, then saturates (~1e-7 at L = 32-64) orders of magnitude above OLS/GD (~1e-14).

    python sweeps/depth_scaling.py --preset smoke      # seconds
    python sweeps/depth_scaling.py --preset cpu        # <= 20 min on 2 cores
    ray job submit --working-dir . -- python sweeps/depth_scaling.py --preset paper

Settings and the choices where the paper is silent: see sweeps/bases.py (LIU_LS).
"""

from bases import CPU_LS, LIU_LS, SMOKE_LS

from icl_core.sweep import Preset, Study, Sweep

LEAST_SQUARES = Study(
    name="least_squares",
    doc="Liu et al. Fig 2: query MSE vs depth, fixed-N least squares, vs OLS and GD",
    figure="depth",
    base=LIU_LS,
    grid={"model.depth": [1, 2, 4, 8, 12, 16, 24, 32, 48, 64], "seed": [0, 1, 2]},
    presets={
        "smoke": Preset(overrides={**SMOKE_LS, "eval.gd_steps": [1, 10, 100, 1000]},
                        grid={"model.depth": [1, 2], "seed": [0, 1]}),
        "cpu": Preset(overrides={**CPU_LS, "train.steps": 4000},
                      grid={"model.depth": [1, 2, 3, 4, 6], "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

# The scale-up the paper lacks: depth x width x dimension, dense enough to fit MSE(depth)
# laws per width and D, with 5 seeds for bootstrap CIs.
DEPTH_WIDTH = Study(
    name="least_squares_depth_width",
    doc="scale-up: query MSE vs depth x width x D (fixed-N LS), 5 seeds, for law fits",
    figure="depth",
    base=LIU_LS,
    grid={"model.depth": [1, 2, 4, 8, 16, 32, 64], "model.width": [32, 64, 128, 256, 512],
          ("task.dim", "task.n_points"): [(5, 20), (10, 40), (20, 80)], "seed": [0, 1, 2, 3, 4]},
    presets={
        "smoke": Preset(overrides=SMOKE_LS, grid={"model.depth": [1], "model.width": [8],
                                                  ("task.dim", "task.n_points"): [(3, 6)],
                                                  "seed": [0]}),
        # a small preview, so the whole file's cpu preset stays within ~20 min on 2 cores
        "cpu": Preset(overrides={**CPU_LS, "train.steps": 2000},
                      grid={"model.depth": [1, 2, 4], "model.width": [16],
                            ("task.dim", "task.n_points"): [(3, 20)], "seed": [0]}),
        "paper": Preset(),
    },
)

SWEEP = Sweep("depth_scaling", [LEAST_SQUARES, DEPTH_WIDTH])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
