"""Base configs shared by sweep files: each reads like a paper's settings table.

LIU_LS: in-context least squares, Liu et al. 2024 App. B.1 (embedding 64, 12 layers, 1 head,
MLP 4x ReLU, batch 256, Adam 1e-3, StepLR x0.9 every 1e4 steps, 1e6 steps, D = 5, N = 20),
fixed-N layout (only the query supervised), evaluated against OLS and GD.
Where the paper is silent: Adam eps 1e-8 and no clipping [gap; the precision-ls code uses
eps 1e-16, clip 100]; GPT-2 init std 0.02 [code]; pre-LN blocks, learned positions [code];
GD step 0.2 under our convention (the code's 0.1 with a 2/N gradient) from w0 = 0.
"""

LIU_LS = {
    "task": {"name": "linear_regression", "dim": 5, "n_points": 20, "layout": "fixed_n"},
    "model": {"name": "transformer", "width": 64, "depth": 12, "heads": 1, "mlp_ratio": 4,
              "layer_norm": True},
    "train": {"optimizer": "adam", "lr": 1e-3, "batch_size": 256, "steps": 1_000_000,
              "schedule": "step", "step_size": 10_000, "gamma": 0.9,
              "report_every": 1000, "checkpoint_every": 10_000},
    "eval": {"n_prompts": 1000, "baselines": ["ols", "gd"]},
}

# Laptop-sized runs: D = 3 so a few thousand steps learn the task; N stays 20.
CPU_LS = {"task.dim": 3, "model.width": 32, "train.batch_size": 64, "train.steps": 3000,
          "train.step_size": 1000, "train.gamma": 0.8, "train.report_every": 250,
          "train.checkpoint_every": 1000}

# Seconds: used by the tests and CI.
SMOKE_LS = {"model.width": 8, "model.depth": 1, "train.steps": 20, "train.batch_size": 16,
            "train.report_every": 10, "train.checkpoint_every": 10, "eval.n_prompts": 100,
            "eval.gd_steps": [1, 10, 100]}
