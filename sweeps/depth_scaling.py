"""Depth scaling (Liu et al. 2024, "Can Transformers Solve Least Squares to High Precision?").

Studies: least_squares (Fig 2's Transformer, the quick-start job) and its depth x width
scale-up; ls_mixer_depth (Figs 2 and 10: Transformer vs BaseConv); primitives_depth (Figs 3
and 8); construction (Fig 5: the hand-built BaseConv GD, no training); features_depth (Fig 6);
explicit_gradient (Fig 7). See docs/REPRODUCTION.md for each figure's claim and our numbers.

least_squares: a GPT-2-style transformer reads N = 20 noiseless examples (x_i, y_i), x_i, w ~ N(0, I_5), and
predicts y_q for the query; only the query is supervised (fixed-N layout). MSE at the query vs
depth, against OLS and GD on the same test prompts in float32 and float64. The paper's claim:
depth helps, then saturates (~1e-7 at L = 32-64) orders of magnitude above OLS/GD (~1e-14).

    python sweeps/depth_scaling.py --preset smoke      # seconds
    python sweeps/depth_scaling.py --preset cpu        # minutes a study on 2 cores
    python sweeps/depth_scaling.py --preset gpu        # one H100, <= 20 min a study (estimate)
    ray job submit --working-dir . -- python sweeps/depth_scaling.py --preset paper --yes

Settings and the choices where the paper is silent: see sweeps/bases.py (LIU_LS).
"""

if __package__:  # imported as sweeps.depth_scaling (icl.catalog, the tests)
    from . import bases
else:  # run as a script, python sweeps/depth_scaling.py: sweeps/ is on sys.path
    import bases

from icl import Preset, Study, Sweep

LEAST_SQUARES = Study(
    name="least_squares",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu et al. Fig 2: query MSE vs depth, fixed-N least squares, vs OLS and GD",
    figure="depth",
    base=bases.LIU_LS,
    grid={"model.depth": [1, 2, 4, 8, 12, 16, 24, 32, 48, 64], "seed": [0, 1, 2]},
    presets={
        "smoke": Preset(overrides={**bases.SMOKE_LS, "eval.gd_steps": [1, 10, 100, 1000]},
                        grid={"model.depth": [1, 2], "seed": [0, 1]}),
        "cpu": Preset(overrides={**bases.CPU_LS, "train.steps": 4000},
                      grid={"model.depth": [1, 2, 3, 4, 6], "seed": [0, 1, 2]}),
        # the paper's task, width and batch (bases.GPU_LS), depths to 16 of the paper's 64,
        # 15k steps
        "gpu": Preset(overrides={**bases.GPU_LS, "train.steps": 15_000, "train.step_size": 1500},
                      grid={"model.depth": [1, 2, 4, 8, 12, 16], "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

# The scale-up the paper lacks: MSE(depth) laws, MSE = c + a L^-b, fitted per width and D.
# The grid is what such fits need and no more (issue #35, docs/REPRODUCTION.md "scale-up
# cost"): 6 depths log-spaced over 1.5 decades (1-32; >= 5 points resolve b against c),
# 3 widths around Liu's 64 (32-128) and 3 task sizes (D, N = 2D) for the dependence of the law
# on each, 3 seeds for the bootstrap, the paper's 1M steps and step schedule: 162 members,
# ~174 H100-hours by the cost model. The earlier grid (depth to 64, width to 512, 5 seeds)
# was 525 members and ~8,340 H100-hours, 97% of it in cells that add one point at the far
# end of an axis (width 256-512 is 50-100x the parameters D = 5 needs).
DEPTH_WIDTH = Study(
    name="least_squares_depth_width",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="scale-up: query MSE vs depth x width x D (fixed-N LS), 3 seeds, for law fits",
    figure="depth",
    base=bases.LIU_LS,
    grid={"model.depth": [1, 2, 4, 8, 16, 32], "model.width": [32, 64, 128],
          ("task.dim", "task.n_points"): [(5, 20), (10, 40), (20, 80)], "seed": [0, 1, 2]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_LS, grid={"model.depth": [1], "model.width": [8],
                                                  ("task.dim", "task.n_points"): [(3, 6)],
                                                  "seed": [0]}),
        # a small preview, so the whole file's cpu preset stays within ~20 min on 2 cores
        "cpu": Preset(overrides={**bases.CPU_LS, "train.steps": 2000},
                      grid={"model.depth": [1, 2, 4], "model.width": [16],
                            ("task.dim", "task.n_points"): [(3, 20)], "seed": [0, 1, 2]}),
        # depth 1-8 x width 32-128 x D = 5, 10 at 4300 steps, 3 seeds
        "gpu": Preset(overrides={**bases.GPU_LS, "train.steps": 4300, "train.step_size": 430},
                      grid={"model.depth": [1, 2, 4, 8], "model.width": [32, 64, 128],
                            ("task.dim", "task.n_points"): [(5, 20), (10, 40)],
                            "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

# reduced (issue #35; chosen by sweeps/depth_scaling_reduced.py, docs/REPRODUCTION.md): the
# smallest change of scale at which the compared models clear the unchanged learned-regime bar
# Figs 2/10: D = 2, N = 40 (cpu: D = 3, N = 10; one GD step from 0 leaves (D + 1) /
# (N + D + 1) of the zero predictor's error, 0.29 at the cpu task, 0.07 here); the cpu model
# and schedule (width 32, 3000 steps). The probe (depth_scaling_reduced.py ls_probe, 1 seed):
# BaseConv L = 4 0.061x zero, the Transformer L = 8 0.005x (bar 0.1x). At 3000 steps (3 seeds)
# BaseConv's median was 0.107x zero, one seed 0.32x: 10,000 steps with the same schedule shape
# (StepLR x0.8 every 3000; 0.83 h on 2 CPUs by the cost model).
LS_REDUCED = {**bases.CPU_LS, "task.dim": 2, "task.n_points": 40, "train.steps": 10_000,
              "train.step_size": 3000}
# Fig 7 (a): the cpu task (D = 3, N = 10) and model; the change is the learning rate. The
# search (depth_scaling_reduced.py gradient_lr_search, Optuna TPE + ASHA, 5 trials) found
# BaseConv without LN learning the gradient at lr 8.46e-3 with 192 warmup steps (training
# loss 0.002; lr 1.25e-3 with 358 warmup: 0.34, the cpu preset's 1e-3 without warmup: not
# learned). Every model trains at it; the Transformer and BaseConv with LN also at the cpu
# lr (each model's better lr is what Fig 7 (a) compares). At the cpu's 3000 steps all three
# learned but their seed ranges overlapped (1.6x): the preset trains 10,000 steps, the cpu
# schedule continued (StepLR x0.8 every 1000). There one BaseConv-without-LN seed at 8.5e-3
# stalled at step 1109 (every later step skipped by the gradient-norm rule, MSE 20), so that
# model also trains at the cpu lr and at 3e-3.
GRADIENT_REDUCED = {**bases.CPU_FEATURES, "train.lr": 8.5e-3, "train.warmup_steps": 200,
                    "train.steps": 10_000}
GRADIENT_LRS = [(8.5e-3, 200), (1e-3, 0)]  # (train.lr, train.warmup_steps): searched, cpu
GRADIENT_MIDDLE_LR = (3e-3, 200)  # BaseConv without LN only
# Fig 6: the cpu task and model, learned there already; twice the steps (6000, StepLR x0.8
# every 2000) so that the seed ranges can resolve
FEATURES_REDUCED = {**bases.CPU_FEATURES, "train.steps": 6000, "train.step_size": 2000}

# Liu et al. Figs 2 and 10: the same fixed-N least squares, softmax attention vs BaseConv.
LS_MIXER = Study(
    name="ls_mixer_depth",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu et al. Figs 2, 10: query MSE vs depth, Transformer vs BaseConv, vs OLS and GD",
    figure="precision_depth",
    base=bases.LIU_LS,
    grid={"model.depth": [1, 2, 4, 8, 12, 16, 24, 32, 48, 64],
          "model.mixer": ["attention", "baseconv"], "seed": [0, 1, 2]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_LS, grid={"model.depth": [1], "seed": [0]}),
        "cpu": Preset(overrides={**bases.CPU_LS, "task.n_points": 10},
                      grid={"model.depth": [1, 2, 4, 8], "seed": [0, 1, 2]}),
        # the paper's N = 20, D = 5, width 64, batch 256 (bases.GPU_LS); depths to 12 at 16k
        # steps
        # (b): the Transformer at L = 4 and 8; (c): BaseConv at L = 4 (what 2 loaded cores
        # afforded: BaseConv's best over more depths could only narrow the gap)
        "reduced": Preset(overrides=LS_REDUCED, grid={
            ("model.mixer", "model.depth"): [("attention", 4), ("attention", 8),
                                             ("baseconv", 4)], "seed": [0, 1, 2]}),
        "gpu": Preset(overrides={**bases.GPU_LS, "train.steps": 11_000, "train.step_size": 1100},
                      grid={"model.depth": [1, 2, 4, 8, 12], "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

# Figs 3 and 8: READ / AFFINE / MULTIPLY vs depth, Transformer and BaseConv, with/without LN.
PRIMITIVES_DEPTH = Study(
    name="primitives_depth",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu et al. Figs 3, 8: primitives MSE vs depth, Transformer/BaseConv x LN on/off",
    figure="primitives_depth",
    base=bases.LIU_PRIMITIVES,
    grid={"task.op": ["read", "affine", "multiply"], "model.depth": [1, 2, 4, 8],
          "model.mixer": ["attention", "baseconv"], "model.layer_norm": [True, False],
          "seed": [0]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_PRIMITIVES, grid={"model.depth": [1],
                                                          "model.layer_norm": [False]}),
        "cpu": Preset(overrides=bases.CPU_PRIMITIVES, grid={"model.depth": [1, 2, 4],
                                                      "seed": [0, 1, 2]}),
        # the paper's depths 1-8 and width 64 at the cpu task size, 3700 steps, stacked seeds
        "gpu": Preset(overrides={**bases.GPU_PRIMITIVES, "train.steps": 3700,
                                 "train.step_size": 925}, grid={"model.depth": [1, 2, 4, 8],
                                                      "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

# Fig 5: the hand-built BaseConv GD (no training) against GD, iteration by iteration, in
# float32 and float64. The error is ‖w_T − w*‖²/D at the final token, from w0 = 0.
GD_ITERS = [0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
CONSTRUCTION = Study(
    name="construction",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu et al. Fig 5: hand-built BaseConv GD vs GD iterations, float32 and float64",
    figure="construction",
    base={"task": {"name": "ls_features", "dim": 5, "n_points": 20, "target": "w",
                   "w0_std": 0.0},
          "model": {"name": "baseconv_gd", "lr": 0.2},
          "train": {"steps": 0},
          "eval": {"n_prompts": 1000, "baselines": ["gd", "ols"], "gd_steps": GD_ITERS}},
    grid={"model.steps": GD_ITERS, "dtype": ["float32", "float64"]},
    presets={
        "smoke": Preset(overrides={"eval.n_prompts": 100, "eval.gd_steps": [0, 1, 10]},
                        grid={"model.steps": [0, 1, 10]}),
        "cpu": Preset(),  # seconds: the paper's own setting
        "gpu": Preset(),
        "paper": Preset(),
    },
)

# Fig 6: predicting w* from prompts carrying the construction's first-k-layer features.
FEATURES_DEPTH = Study(
    name="features_depth",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu et al. Fig 6: error of w* vs depth with construction features k = 0, 1, 2",
    figure="features_depth",
    base=bases.LIU_FEATURES,
    grid={"task.features": [0, 1, 2], "model.depth": [1, 2, 4, 8],
          "model.mixer": ["attention", "baseconv"], "seed": [0, 1, 2]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_FEATURES, grid={"task.features": [0, 2],
                                                        "model.depth": [1], "seed": [0]}),
        "cpu": Preset(overrides=bases.CPU_FEATURES, grid={"model.depth": [1, 2, 4],
                                                    "seed": [0, 1, 2]}),
        # Fig 6's Transformer half: k = 0 vs 2 at depth 2 (what 2 loaded cores afforded)
        "reduced": Preset(overrides=FEATURES_REDUCED,
                          grid={"task.features": [0, 2], "model.mixer": ["attention"],
                                "model.depth": [2], "seed": [0, 1, 2]}),
        # the paper's D = 5, N = 20 and depths 1-8, width 64, 5500 steps, stacked seeds
        "gpu": Preset(overrides={**bases.GPU_FEATURES, "train.steps": 5500,
                                 "train.step_size": 1375},
                      grid={"model.depth": [1, 2, 4, 8], "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)


def gradient_models(depths, frozen_depth: int = 3) -> dict:
    """(depth, mixer, layer_norm, construction_layers) rows of Fig 7: Transformer, BaseConv
    with and without LN at every depth, and BaseConv with its first 1 or 2 of `frozen_depth`
    layers frozen to the construction."""
    variants = [("attention", True), ("baseconv", True), ("baseconv", False)]
    rows = [(d, mixer, ln, 0) for d in depths for mixer, ln in variants]
    rows += [(frozen_depth, "baseconv", False, k) for k in (1, 2)]
    return {("model.depth", "model.mixer", "model.layer_norm", "model.construction_layers"):
            rows}


# Fig 7: train to output ∇L(w0); then iterate w <- w − η model(prompt with w) at test time.
EXPLICIT_GRADIENT = Study(
    name="explicit_gradient",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu et al. Fig 7: gradient MSE vs depth; iterated 3-layer models vs inference steps",
    figure="explicit_gradient",
    base={**bases.LIU_FEATURES,
          "task": {**bases.LIU_FEATURES["task"], "target": "grad"},
          "eval": {**bases.LIU_FEATURES["eval"], "baselines": ["gd"],
                   "infer_steps": [0, 1, 2, 5, 10, 20, 50, 100], "infer_lr": 0.2}},
    grid={**gradient_models([1, 2, 3, 4, 6, 8]), "seed": [0, 1, 2]},
    presets={
        "smoke": Preset(overrides={**bases.SMOKE_FEATURES, "eval.infer_steps": [0, 5]},
                        grid={**gradient_models([2], frozen_depth=3), "seed": [0]}),
        "cpu": Preset(overrides=bases.CPU_FEATURES, grid={**gradient_models([1, 2, 3]),
                                                    "seed": [0, 1, 2]}),
        # Fig 7 (a) only: the three models trained from scratch at depth 3
        "reduced": Preset(overrides=GRADIENT_REDUCED, grid={
            ("model.depth", "model.mixer", "model.layer_norm", "model.construction_layers",
             "train.lr", "train.warmup_steps"):
            [(3, mixer, ln, 0, *lr)
             for mixer, ln in (("attention", True), ("baseconv", True), ("baseconv", False))
             for lr in GRADIENT_LRS] + [(3, "baseconv", False, 0, *GRADIENT_MIDDLE_LR)],
            "seed": [0, 1, 2]}),
        # the paper's D = 5, N = 20 and depths 1-8, width 64, 7200 steps, stacked seeds
        "gpu": Preset(overrides={**bases.GPU_FEATURES, "train.steps": 7200,
                                 "train.step_size": 1800},
                      grid={**gradient_models([1, 2, 3, 4, 6, 8]), "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

SWEEP = Sweep("depth_scaling", [LEAST_SQUARES, DEPTH_WIDTH, LS_MIXER, PRIMITIVES_DEPTH,
                                CONSTRUCTION, FEATURES_DEPTH, EXPLICIT_GRADIENT])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
