"""Training length: query MSE vs training steps (Liu et al. 2024, Fig. 9 / App. C.2).

The paper trains steps in {1e5, 1e6, 1e7, 1e8} with the StepLR period scaled to steps/100
(so every run decays the same number of times): a zipped axis (steps, step_size).
multiply_steps is the paper's panel (MULTIPLY, 1-layer Transformer and BaseConv with LN);
least_squares_steps asks it of fixed-N least squares.
"""

if __package__:  # imported as sweeps.training_length (icl.catalog, the tests)
    from . import bases
else:  # run as a script, python sweeps/training_length.py: sweeps/ is on sys.path
    import bases

from icl import Preset, Study, Sweep


def steps_axis(*steps: int) -> dict:
    """(train.steps, train.step_size = steps / 100) pairs, as in the paper."""
    return {("train.steps", "train.step_size"): [(s, max(1, s // 100)) for s in steps]}


PAPER_DECAY = {"train.gamma": 0.9}  # the paper's StepLR factor (the cpu presets use 0.8)


LEAST_SQUARES_STEPS = Study(
    name="least_squares_steps",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu et al. Fig 9, on least squares: query MSE vs training steps (StepLR at steps/100)",
    base={**bases.LIU_LS, "model": {**bases.LIU_LS["model"], "depth": 1}},
    grid={**steps_axis(100_000, 1_000_000, 10_000_000, 100_000_000), "seed": [0, 1, 2]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_LS, grid={**steps_axis(10, 20), "seed": [0]}),
        "cpu": Preset(overrides={**bases.CPU_LS, "model.depth": 1},
                      grid={**steps_axis(300, 1000, 3000, 10_000), "seed": [0, 1, 2]}),
        # 1e3-1e5 steps (the paper: 1e5-1e8), the paper's task, width, batch and StepLR
        # (x0.9 every steps/100)
        "gpu": Preset(overrides={**bases.GPU_LS, **PAPER_DECAY},
                      grid={**steps_axis(1000, 3000, 10_000, 30_000, 100_000),
                            "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

STEPS_DEPTH = Study(
    name="least_squares_steps_depth",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="scale-up: query MSE vs training steps x depth (fixed-N LS), 5 seeds",
    base=bases.LIU_LS,
    grid={**steps_axis(10_000, 30_000, 100_000, 300_000, 1_000_000, 3_000_000),
          "model.depth": [2, 4, 8, 16], "seed": [0, 1, 2, 3, 4]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_LS, grid={**steps_axis(10), "model.depth": [1],
                                                  "seed": [0]}),
        "cpu": Preset(overrides=bases.CPU_LS, grid={**steps_axis(300, 1000, 3000),
                                             "model.depth": [1, 2], "seed": [0, 1, 2]}),
        # 1e3-2.6e4 steps x depth 2-8, the paper's task, width, batch and StepLR
        "gpu": Preset(overrides={**bases.GPU_LS, **PAPER_DECAY}, grid={**steps_axis(1000, 3000, 10_000, 26_000),
                                             "model.depth": [2, 4, 8], "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

MULTIPLY_STEPS = Study(
    name="multiply_steps",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu et al. Fig 9: MULTIPLY MSE vs training steps, 1-layer Transformer vs BaseConv",
    figure="multiply_steps",
    base={**bases.LIU_PRIMITIVES, "model": {**bases.LIU_PRIMITIVES["model"], "depth": 1}},
    grid={**steps_axis(100_000, 1_000_000, 10_000_000, 100_000_000),
          "model.mixer": ["attention", "baseconv"], "seed": [0]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_PRIMITIVES, grid={**steps_axis(10, 20)}),
        "cpu": Preset(overrides=bases.CPU_PRIMITIVES,
                      grid={**steps_axis(300, 1000, 3000, 10_000), "seed": [0, 1, 2]}),
        # 1e3-1e5 steps (the paper: 1e5-1e8), the paper's width, batch and StepLR (x0.9 every
        # steps/100), the cpu task size (bases.GPU_PRIMITIVES)
        "gpu": Preset(overrides={**bases.GPU_PRIMITIVES, **PAPER_DECAY},
                      grid={**steps_axis(1000, 3000, 10_000, 30_000, 100_000),
                            "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

SWEEP = Sweep("training_length", [LEAST_SQUARES_STEPS, STEPS_DEPTH, MULTIPLY_STEPS])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
