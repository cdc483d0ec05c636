"""Width scaling: query MSE vs embedding (attention) dimension (Liu et al. 2024, Fig. 4 left).

multiply_width and multiply_mlp are the paper's panels (MULTIPLY, 2-layer transformer: dim
{32, 64, 128, 256}; MLP hidden = ratio x dim, ratio {1, 2, 4, 8} at dim 256);
least_squares_width asks the width question of fixed-N least squares.
"""

if __package__:  # imported as sweeps.width_scaling (icl.catalog, the tests)
    from . import bases
else:  # run as a script, python sweeps/width_scaling.py: sweeps/ is on sys.path
    import bases

from icl import Preset, Study, Sweep

LEAST_SQUARES_WIDTH = Study(
    name="least_squares_width",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu et al. Fig 4 (left), on least squares: query MSE vs width, 2 layers",
    base={**bases.LIU_LS, "model": {**bases.LIU_LS["model"], "depth": 2}},
    grid={"model.width": [32, 64, 128, 256], "seed": [0, 1, 2]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_LS, grid={"model.width": [4, 8], "seed": [0]}),
        "cpu": Preset(overrides={**bases.CPU_LS, "model.depth": 2},
                      grid={"model.width": [8, 16, 32, 64], "seed": [0, 1, 2]}),
        # the paper's widths, task and batch (bases.GPU_LS), 32k steps
        "gpu": Preset(overrides={**bases.GPU_LS, "model.depth": 2, "train.steps": 32_000,
                                 "train.step_size": 3200}),
        "paper": Preset(),
    },
)

MULTIPLY_WIDTH = Study(
    name="multiply_width",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu et al. Fig 4 (left): MULTIPLY MSE vs attention dim, 2-layer Transformer",
    figure="multiply_width",
    base=bases.LIU_PRIMITIVES,
    grid={"model.width": [32, 64, 128, 256], "seed": [0]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_PRIMITIVES, grid={"model.width": [4, 8]}),
        "cpu": Preset(overrides=bases.CPU_PRIMITIVES, grid={"model.width": [16, 32, 64],
                                                      "seed": [0, 1, 2]}),
        # the paper's widths 32-256 at the cpu task size, 20k steps (bases.GPU_PRIMITIVES)
        "gpu": Preset(overrides={**bases.GPU_PRIMITIVES, **bases.GPU_PRIMITIVES_LONG},
                      grid={"model.width": [32, 64, 128, 256], "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

MULTIPLY_MLP = Study(
    name="multiply_mlp",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu et al. Fig 4 (right): MULTIPLY MSE vs MLP width factor, 2 layers, dim 256",
    figure="multiply_mlp",
    base={**bases.LIU_PRIMITIVES, "model": {**bases.LIU_PRIMITIVES["model"], "width": 256}},
    grid={"model.mlp_ratio": [1, 2, 4, 8], "seed": [0]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_PRIMITIVES, grid={"model.mlp_ratio": [1, 2]}),
        "cpu": Preset(overrides=bases.CPU_PRIMITIVES, grid={"model.mlp_ratio": [1, 2, 4, 8],
                                                      "seed": [0, 1, 2]}),
        # the paper's dim 256 and ratios at the cpu task size, 20k steps
        "gpu": Preset(overrides={**bases.GPU_PRIMITIVES, **bases.GPU_PRIMITIVES_LONG, "model.width": 256},
                      grid={"model.mlp_ratio": [1, 2, 4, 8], "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

SWEEP = Sweep("width_scaling", [LEAST_SQUARES_WIDTH, MULTIPLY_WIDTH, MULTIPLY_MLP])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
