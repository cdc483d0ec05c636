"""Depth scaling of in-context least squares (Liu et al. 2024, Fig. 2; Fig. 10's Transformer).

A GPT-2-style transformer reads N = 20 noiseless examples (x_i, y_i), x_i, w ~ N(0, I_5), and
predicts y_q for the query; only the query is supervised (fixed-N layout). MSE at the query vs
depth, against OLS and GD on the same test prompts in float32 and float64. The paper's claim:
depth helps, then saturates (~1e-7 at L = 32-64) orders of magnitude above OLS/GD (~1e-14).

    python sweeps/depth_scaling.py --preset smoke      # seconds
    python sweeps/depth_scaling.py --preset cpu        # <= 20 min on 2 cores
    ray job submit --working-dir . -- python sweeps/depth_scaling.py --preset paper

Choices where the paper is silent: 3 seeds [gap]; Adam eps 1e-8 and no clipping [gap; the
precision-ls code uses eps 1e-16 and clip 100 - set with --set train.eps=1e-16]; GPT-2 init
std 0.02 [code]; pre-LN blocks with learned positions [code]; GD step 0.2 under our
convention (the code's 0.1 with a 2/N gradient) from w0 = 0.
"""

from icl_core.sweep import Preset, Study, Sweep

LEAST_SQUARES = Study(
    name="least_squares",
    doc="Liu et al. Fig 2: query MSE vs depth, fixed-N least squares, vs OLS and GD",
    figure="depth",
    base={
        "task": {"name": "linear_regression", "dim": 5, "n_points": 20, "layout": "fixed_n"},
        "model": {"name": "transformer", "width": 64, "heads": 1, "mlp_ratio": 4,
                  "layer_norm": True},
        "train": {"optimizer": "adam", "lr": 1e-3, "batch_size": 256, "steps": 1_000_000,
                  "schedule": "step", "step_size": 10_000, "gamma": 0.9,
                  "report_every": 1000, "checkpoint_every": 10_000},
        "eval": {"n_prompts": 1000, "baselines": ["ols", "gd"]},
    },
    grid={"model.depth": [1, 2, 4, 8, 12, 16, 24, 32, 48, 64], "seed": [0, 1, 2]},
    presets={
        "smoke": Preset(
            overrides={"model.width": 16, "train.steps": 40, "train.batch_size": 32,
                       "train.report_every": 20, "train.checkpoint_every": 20,
                       "eval.n_prompts": 200, "eval.gd_steps": [1, 10, 100, 1000]},
            grid={"model.depth": [1, 2], "seed": [0, 1]},
        ),
        "cpu": Preset(
            # D = 3 (not 5) so that 5k steps on a laptop core learn the task; N stays 20.
            overrides={"task.dim": 3, "model.width": 32, "train.steps": 5000,
                       "train.batch_size": 64, "train.step_size": 1000, "train.gamma": 0.8,
                       "train.report_every": 250, "train.checkpoint_every": 1000},
            grid={"model.depth": [1, 2, 3, 4, 6], "seed": [0, 1, 2]},
        ),
        "paper": Preset(),
    },
)

SWEEP = Sweep("depth_scaling", [LEAST_SQUARES])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
