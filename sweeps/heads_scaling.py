"""Heads scaling: query MSE vs attention heads at fixed width (Liu et al. 2024, Fig. 4 middle).

multiply_heads is the paper's panel: the MULTIPLY primitive, 2 layers, dim 256, heads
{1, 2, 4, 8}. least_squares_heads asks the same question of fixed-N least squares.
"""

if __package__:  # imported as sweeps.heads_scaling (icl.catalog, the tests)
    from . import bases
else:  # run as a script, python sweeps/heads_scaling.py: sweeps/ is on sys.path
    import bases

from icl import Preset, Study, Sweep

LEAST_SQUARES_HEADS = Study(
    name="least_squares_heads",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu et al. Fig 4 (middle), on least squares: query MSE vs heads, 2 layers, dim 256",
    base={**bases.LIU_LS, "model": {**bases.LIU_LS["model"], "depth": 2, "width": 256}},
    grid={"model.heads": [1, 2, 4, 8], "seed": [0, 1, 2]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_LS, grid={"model.heads": [1, 2], "seed": [0]}),
        "cpu": Preset(overrides={**bases.CPU_LS, "model.depth": 2},
                      grid={"model.heads": [1, 2, 4, 8], "seed": [0, 1, 2]}),
        # the paper's dim 256, heads, task and batch (bases.GPU_LS: 20k steps)
        "gpu": Preset(overrides=bases.GPU_LS),
        "paper": Preset(),
    },
)

HEADS_WIDTH = Study(
    name="least_squares_heads_width",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="scale-up: query MSE vs heads x width (fixed-N LS, 2 layers), 5 seeds",
    base={**bases.LIU_LS, "model": {**bases.LIU_LS["model"], "depth": 2}},
    grid={"model.heads": [1, 2, 4, 8, 16], "model.width": [64, 128, 256, 512],
          "seed": [0, 1, 2, 3, 4]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_LS, grid={"model.heads": [2], "model.width": [8],
                                                  "seed": [0]}),
        "cpu": Preset(overrides={**bases.CPU_LS, "model.depth": 2},
                      grid={"model.heads": [1, 2, 4], "model.width": [16, 32],
                            "seed": [0, 1, 2]}),
        # heads 1-8 x width 64-256 at 8500 steps (bases.GPU_LS otherwise)
        "gpu": Preset(overrides={**bases.GPU_LS, "train.steps": 8500, "train.step_size": 850},
                      grid={"model.heads": [1, 2, 4, 8], "model.width": [64, 128, 256],
                            "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

MULTIPLY_HEADS = Study(
    name="multiply_heads",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu et al. Fig 4 (middle): MULTIPLY MSE vs heads, 2-layer Transformer, dim 256",
    figure="multiply_heads",
    base={**bases.LIU_PRIMITIVES, "model": {**bases.LIU_PRIMITIVES["model"], "width": 256}},
    grid={"model.heads": [1, 2, 4, 8], "seed": [0]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_PRIMITIVES, grid={"model.heads": [1, 2]}),
        "cpu": Preset(overrides=bases.CPU_PRIMITIVES, grid={"model.heads": [1, 2, 4, 8],
                                                      "seed": [0, 1, 2]}),
        # the paper's dim 256 and heads at the cpu task size, 20k steps
        "gpu": Preset(overrides={**bases.GPU_PRIMITIVES, **bases.GPU_PRIMITIVES_LONG, "model.width": 256},
                      grid={"model.heads": [1, 2, 4, 8], "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

SWEEP = Sweep("heads_scaling", [LEAST_SQUARES_HEADS, HEADS_WIDTH, MULTIPLY_HEADS])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
