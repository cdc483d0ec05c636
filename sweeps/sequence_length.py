"""Sequence length: error vs the number of in-context examples.

* icl_prefix -- Liu et al. 2024, Fig. 1: one 12-layer transformer trained on the all-prefix
  layout (N = 20) predicts after every prefix; MSE per position vs OLS (under-determined
  N < D: the two match; N >= D: the transformer plateaus ~1e-5, OLS ~1e-14).
* fixed_n_points -- fixed-N least squares at N in {5, 10, 20, 40}: query MSE vs N.
"""

if __package__:  # imported as sweeps.sequence_length (icl.catalog, the tests)
    from . import bases
else:  # run as a script, python sweeps/sequence_length.py: sweeps/ is on sys.path
    import bases

from icl import Preset, Study, Sweep

PREFIX = {**bases.LIU_LS, "task": {**bases.LIU_LS["task"], "layout": "all_prefix"}}

ICL_PREFIX = Study(
    name="icl_prefix",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu et al. Fig 1: MSE vs number of in-context examples (all-prefix), vs OLS",
    figure="icl_prefix",
    base=PREFIX,
    grid={"seed": [0, 1, 2]},
    presets={
        "smoke": Preset(overrides={**bases.SMOKE_LS, "task.n_points": 6}, grid={"seed": [0]}),
        "cpu": Preset(overrides={**bases.CPU_LS, "model.depth": 4, "task.n_points": 10}),
        # the paper's model (12 layers), N = 20, D = 5 and batch, 34k steps
        "gpu": Preset(overrides={**bases.GPU_LS, "train.steps": 34_000, "train.step_size": 3400}),
        "paper": Preset(),
    },
)

FIXED_N_POINTS = Study(
    name="fixed_n_points",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="query MSE vs prompt length N (fixed-N least squares), 4 layers",
    base={**bases.LIU_LS, "model": {**bases.LIU_LS["model"], "depth": 4}},
    grid={"task.n_points": [5, 10, 20, 40], "seed": [0, 1, 2]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_LS, grid={"task.n_points": [4, 8], "seed": [0]}),
        "cpu": Preset(overrides={**bases.CPU_LS, "model.depth": 2},
                      grid={"task.n_points": [5, 10, 20, 40], "seed": [0, 1, 2]}),
        # the paper's 4 layers, D = 5, width and batch, 36k steps
        "gpu": Preset(overrides={**bases.GPU_LS, "train.steps": 36_000, "train.step_size": 3600}),
        "paper": Preset(),
    },
)

N_DEPTH = Study(
    name="fixed_n_points_depth",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="scale-up: query MSE vs prompt length N x depth (fixed-N LS, D = 5), 5 seeds",
    base=bases.LIU_LS,
    grid={"task.n_points": [5, 10, 20, 40, 80, 160], "model.depth": [2, 4, 8, 16],
          "seed": [0, 1, 2, 3, 4]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_LS, grid={"task.n_points": [5], "model.depth": [1],
                                                  "seed": [0]}),
        "cpu": Preset(overrides=bases.CPU_LS, grid={"task.n_points": [5, 10, 20, 40],
                                             "model.depth": [1, 2], "seed": [0, 1, 2]}),
        # N 5-80 x depth 2-8, the paper's D = 5, width and batch, 7400 steps
        "gpu": Preset(overrides={**bases.GPU_LS, "train.steps": 7400, "train.step_size": 740},
                      grid={"task.n_points": [5, 10, 20, 40, 80], "model.depth": [2, 4, 8],
                            "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

SWEEP = Sweep("sequence_length", [ICL_PREFIX, FIXED_N_POINTS, N_DEPTH])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
