"""Width scaling: query MSE vs embedding (attention) dimension (Liu et al. 2024, Fig. 4 left).

The paper's panel uses MULTIPLY with a 2-layer transformer, dim {32, 64, 128, 256}; this
study asks it of fixed-N least squares (the primitives join with the least-squares issue).
"""

from bases import CPU_LS, LIU_LS, SMOKE_LS

from icl_core.sweep import Preset, Study, Sweep

LEAST_SQUARES_WIDTH = Study(
    name="least_squares_width",
    doc="Liu et al. Fig 4 (left), on least squares: query MSE vs width, 2 layers",
    base={**LIU_LS, "model": {**LIU_LS["model"], "depth": 2}},
    grid={"model.width": [32, 64, 128, 256], "seed": [0, 1, 2]},
    presets={
        "smoke": Preset(overrides=SMOKE_LS, grid={"model.width": [4, 8], "seed": [0]}),
        "cpu": Preset(overrides={**CPU_LS, "model.depth": 2},
                      grid={"model.width": [8, 16, 32, 64], "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

SWEEP = Sweep("width_scaling", [LEAST_SQUARES_WIDTH])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
