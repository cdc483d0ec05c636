"""AlgoFormer (pre-transformer + looped transformer + post-transformer) vs the looped transformer
(Yang et al. 2024) vs a standard transformer: scaling *loop iterations* rather than layers.

* examples -- Fig 2: error vs # in-context examples for standard / looped / AlgoFormer on the
  three tasks with representation (regression σ = 0, AR(3), chain-of-thought with MLPs), all
  loops at (T, ΔT) = (20, 15). Claim: AlgoFormer lowest on all three; on CoT, AlgoFormer and
  the standard transformer far below the looped one.
* loops -- Fig 3: error vs inference loop iterations (far beyond T) for a grid of (T, ΔT) on
  regression with representation. Claim: larger ΔT keeps long-horizon inference stable (small
  ΔT diverges after t > T); larger T gives more capacity but trains harder.
* layers_heads -- Fig 4: error vs layers L (each of pre / loop / post has L layers) and heads h,
  next to standard transformers with 3L layers (the same distinct layers). Claim: more L and
  h lower the error (the largest can be worse: optimisation).
* vs_newton -- Fig 5: linear regression, noise σ in {0, 0.1, 1}: AlgoFormer's error after t
  loops vs GD and Newton (Newton–Schulz) after t iterations on each prefix problem (Eq. 5),
  step sizes by grid search on held-out prompts. Claim: AlgoFormer ahead in the first
  iterations, then a floor (~1e-3 noiseless) while Newton reaches machine precision; with
  noise, GD and Newton slow and AlgoFormer is better.

The paper's IWSLT15 De-En translation experiment needs a downloaded corpus: out of scope.

Paper settings [digest §2-4]: d = 20, N = 40, width 256, Adam lr 1e-4, 500k steps, squared
error (Eq. 6) with the window loss; pre / loop / post 1 layer each; GPT-2 12 layers as the
standard. Where the paper is silent: 8 heads, batch 64, no weight decay [code: Yang
base_loop.yaml]; loop curriculum from T = 1, +1 every 250 steps [code: Yang +2 every 500];
pre-LN GPT-2 blocks with ReLU MLP 4x and input injection z <- f(z + e) [code: Yang]; error =
squared error per prompt position, normalised so the zero predictor scores ≈ 1 (see
icl_core/tasks/representation.py); 1000 test prompts.
"""

from icl import Preset, Study, Sweep

PAPER_TRAIN = {"optimizer": "adam", "lr": 1e-4, "batch_size": 64, "steps": 500_000,
               "report_every": 1000, "checkpoint_every": 10_000}
LOOP = {"width": 256, "heads": 8, "layers": 1, "loops": 20, "window": 15,
        "curriculum_start": 1, "curriculum_every": 250}
PAPER_MODELS = [{"name": "transformer", "width": 256, "depth": 12, "heads": 8},
                {"name": "looped", **LOOP}, {"name": "algoformer", **LOOP}]
PAPER_TASKS = [{"name": "rep_regression", "dim": 20, "n_points": 40, "noise_std": 0.0},
               {"name": "rep_ar", "dim": 20, "n_points": 40, "q": 3},
               {"name": "cot_mlp", "dim": 20, "n_points": 40, "layers": 6}]

# 2-core laptop [digest §7]: d = 5, N = 20, width 32, 4 heads, (T, ΔT) = (8, 6), no loop
# curriculum, standard transformer of 4 layers; Adam lr 1e-3 (50 warmup), batch 64, 800 steps;
# AR(3) with σ = 0.1 (σ = 1 leaves little signal at this length); CoT with L = 3, N = 10.
CPU_LOOP = {"width": 32, "heads": 4, "layers": 1, "loops": 8, "window": 6}
CPU_MODELS = [{"name": "transformer", "width": 32, "depth": 4, "heads": 4},
              {"name": "looped", **CPU_LOOP}, {"name": "algoformer", **CPU_LOOP}]
CPU_TASKS = [{"name": "rep_regression", "dim": 5, "n_points": 20, "hidden": 5},
             {"name": "rep_ar", "dim": 5, "n_points": 20, "hidden": 5, "noise_std": 0.1},
             {"name": "cot_mlp", "dim": 5, "n_points": 10, "layers": 3}]
CPU = {"train.lr": 1e-3, "train.warmup_steps": 50, "train.steps": 800,
       "train.report_every": 100, "train.checkpoint_every": 400, "eval.n_prompts": 500}

# One H100-class GPU (<= 20 min per study, icl_core.planning.resources.gpu_seconds): the cpu
# tasks (d = 5, N = 20; CoT N = 10), the paper's (T, ΔT) = (20, 15), 8 heads and 12-layer
# standard transformer, but width 64 (the paper: 256; a loop step at 256 is FLOP-bound, 16x
# the FLOPs of 64) and no loop curriculum (it would spend most of a short run below T);
# Adam lr 1e-3 (400 warmup), 5000 steps (cpu: 800; the paper: 500k), 3 seeds trained stacked.
GPU_LOOP = {"width": 64, "heads": 8, "layers": 1, "loops": 20, "window": 15}
GPU_MODELS = [{"name": "transformer", "width": 64, "depth": 12, "heads": 8},
              {"name": "looped", **GPU_LOOP}, {"name": "algoformer", **GPU_LOOP}]
GPU = {"train.lr": 1e-3, "train.warmup_steps": 400, "train.steps": 5000,
       "train.report_every": 250, "train.checkpoint_every": 1000, "eval.n_prompts": 1000}
SEEDS = {"seed": [0, 1, 2]}

# reduced (issue #35; docs/REPRODUCTION.md, AlgoFormer "Reduced scale"): at the cpu task (d = 5,
# N = 20) the best model was 0.39x ridge, the bar 0.1x. `icl levels` of candidate settings
# (regression with representation, mean over 500 prompts at the last position; the floor is 0
# there): d = 5, N = 20: ridge 0.265, bar 0.027; d = 3, N = 20: 0.272, 0.027; d = 2, N = 10:
# 0.236, 0.024; d = 4, N = 12: 0.450, 0.045; d = 3, N = 10: 0.405, bar 0.041 (the most room,
# the shortest prompt). Here: d = 3, N = 10, the cpu models, more steps (see REDUCED).
RED_TASK = {"name": "rep_regression", "dim": 3, "n_points": 10, "hidden": 3}
RED_TRAIN = {"train.steps": 4000, "train.warmup_steps": 200, "train.report_every": 500,
             "train.checkpoint_every": 2000}
REDUCED = {**CPU, "task": RED_TASK, **RED_TRAIN}

# seconds (tests, CI): <= 5 members for the whole file
SMOKE_LOOP = {"width": 8, "heads": 2, "layers": 1, "loops": 2, "window": 1,
              "eval_loop_iters": [1, 2, 4]}
SMOKE = {"train.steps": 20, "train.batch_size": 16, "train.report_every": 10,
         "train.checkpoint_every": 10, "eval.n_prompts": 32}

EXAMPLES = Study(
    name="examples",
    doc="AlgoFormer Fig 2: error vs # in-context examples, standard / looped / AlgoFormer on "
        "regression, AR(3) and CoT with representation",
    figure="algo_examples",
    base={"task": PAPER_TASKS[0], "model": PAPER_MODELS[2], "train": PAPER_TRAIN,
          "eval": {"n_prompts": 1000}},
    grid={"task": PAPER_TASKS, "model": PAPER_MODELS},
    presets={
        "smoke": Preset(overrides=SMOKE, grid={
            ("task", "model"): [({"name": "rep_ar", "dim": 3, "n_points": 4, "hidden": 3},
                                 {"name": "looped", **SMOKE_LOOP}),
                                ({"name": "cot_mlp", "dim": 3, "n_points": 3, "layers": 2},
                                 {"name": "algoformer", **SMOKE_LOOP})]}),
        "cpu": Preset(overrides=CPU, grid={"task": CPU_TASKS, "model": CPU_MODELS, **SEEDS}),
        "gpu": Preset(overrides=GPU, grid={"task": CPU_TASKS, "model": GPU_MODELS, **SEEDS}),
        # regression with representation only (the claim's first panel), d = 3, N = 10
        "reduced": Preset(overrides=REDUCED, grid={"task": [RED_TASK], "model": CPU_MODELS,
                                                   **SEEDS}),
        "paper": Preset(),
    },
)


def windows(T_values, dT_values, base: dict) -> dict:
    """The (T, ΔT) grid (ΔT <= T) as one zipped axis over AlgoFormer configs."""
    return {"model": [{**base, "loops": T, "window": dT}
                      for T in T_values for dT in dT_values if dT <= T]}


LOOPS = Study(
    name="loops",
    doc="AlgoFormer Fig 3: error vs inference loops (to 5T) for a grid of (T, ΔT), regression "
        "with representation",
    figure="algo_loops",
    base={"task": PAPER_TASKS[0], "model": PAPER_MODELS[2], "train": PAPER_TRAIN,
          "eval": {"n_prompts": 1000}},
    # [gap: values not in the text; panels differ in ΔT]
    grid=windows([10, 20, 30], [5, 10, 15],
                 {"name": "algoformer", **LOOP, "eval_loop_iters": list(range(1, 101))}),
    presets={
        "smoke": Preset(overrides={**SMOKE, "task": {"name": "rep_regression", "dim": 3,
                                                     "n_points": 4, "hidden": 3}},
                        grid={"model": [{"name": "algoformer", **SMOKE_LOOP}]}),
        "cpu": Preset(overrides={**CPU, "task": CPU_TASKS[0]},
                      grid={**windows([4, 8], [1, 4], {"name": "algoformer", **CPU_LOOP,
                                                       "eval_loop_iters": list(range(1, 51))}),
                            **SEEDS}),
        # (T, ΔT) in {10, 20} x {5, 10, 15} at width 64, inference to 100 loops (the
        # paper's), 8000 steps
        "gpu": Preset(overrides={**GPU, "task": CPU_TASKS[0], "train.steps": 8000},
                      grid={**windows([10, 20], [5, 10, 15],
                                      {"name": "algoformer", **GPU_LOOP,
                                       "eval_loop_iters": list(range(1, 101))}),
                            **SEEDS}),
        # the cpu (T, ΔT) grid at the reduced task (d = 3, N = 10), inference to 50 loops
        "reduced": Preset(overrides=REDUCED,
                          grid={**windows([4, 8], [1, 4], {"name": "algoformer", **CPU_LOOP,
                                                           "eval_loop_iters": list(range(1, 51))}),
                                **SEEDS}),
        "paper": Preset(),
    },
)


def layers_heads(Ls, hs, base: dict, standard: dict) -> dict:
    """AlgoFormer at every (L, h), plus a standard transformer of 3L layers per L."""
    algo = [{**base, "layers": L, "heads": h} for L in Ls for h in hs]
    return {"model": algo + [{**standard, "depth": 3 * L} for L in Ls]}


LAYERS_HEADS = Study(
    name="layers_heads",
    doc="AlgoFormer Fig 4: error vs layers L (pre / loop / post each L) and heads h, next to "
        "standard transformers of 3L layers, regression with representation",
    figure="algo_layers_heads",
    base={"task": PAPER_TASKS[0], "model": PAPER_MODELS[2], "train": PAPER_TRAIN,
          "eval": {"n_prompts": 1000}},
    # [gap: only "4-layer and 16-head" is named]
    grid=layers_heads([1, 2, 4], [2, 4, 8, 16], {"name": "algoformer", **LOOP},
                      PAPER_MODELS[0]),
    presets={
        "smoke": Preset(overrides={**SMOKE, "task": {"name": "rep_regression", "dim": 3,
                                                     "n_points": 4, "hidden": 3}},
                        grid={"model": [{"name": "algoformer", **SMOKE_LOOP, "heads": 1}]}),
        # (T, ΔT) = (4, 4) and 600 steps keep L = 2 affordable
        "cpu": Preset(overrides={**CPU, "task": CPU_TASKS[0], "train.steps": 600},
                      grid={**layers_heads([1, 2], [1, 2, 4],
                                           {"name": "algoformer", **CPU_LOOP, "loops": 4,
                                            "window": 4}, CPU_MODELS[0]),
                            **SEEDS}),
        # L in {1, 2, 4} x h in {2, 4, 8} at width 64 (the paper's L, h up to 8), (T, ΔT) =
        # (4, 4) as at cpu scale (L = 4 loops 4 layers), 4000 steps
        "gpu": Preset(overrides={**GPU, "task": CPU_TASKS[0], "train.steps": 4000},
                      grid={**layers_heads([1, 2, 4], [2, 4, 8],
                                           {"name": "algoformer", **GPU_LOOP, "loops": 4,
                                            "window": 4}, GPU_MODELS[0]),
                            **SEEDS}),
        # the reduced task (d = 3, N = 10), L in {1, 2} x h in {1, 4} (the cpu grid's corners)
        # and standard transformers of 3 and 6 layers, (T, ΔT) = (4, 4) as at cpu scale
        "reduced": Preset(overrides=REDUCED,
                          grid={**layers_heads([1, 2], [1, 4],
                                               {"name": "algoformer", **CPU_LOOP, "loops": 4,
                                                "window": 4}, CPU_MODELS[0]),
                                **SEEDS}),
        "paper": Preset(),
    },
)

NEWTON_EVAL = {"n_prompts": 1000, "baselines": ["gd_tuned", "newton", "ols"],
               "gd_steps": list(range(0, 51))}
VS_NEWTON = Study(
    name="vs_newton",
    doc="AlgoFormer Fig 5: error vs iterations, AlgoFormer loops vs GD and Newton–Schulz on "
        "each prefix least-squares problem, noise σ in {0, 0.1, 1}",
    figure="algo_newton",
    base={"task": {"name": "linear_regression", "dim": 20, "n_points": 40,
                   "layout": "all_prefix"},
          "model": {"name": "algoformer", **LOOP, "eval_loop_iters": list(range(1, 51))},
          "train": PAPER_TRAIN, "eval": NEWTON_EVAL},
    grid={"task.noise_std": [0.0, 0.1, 1.0],
          ("model.loops", "model.window"): [(20, 15), (10, 10)]},
    presets={
        "smoke": Preset(overrides={**SMOKE, "task.dim": 3, "task.n_points": 4,
                                   "model": {"name": "algoformer", **SMOKE_LOOP},
                                   "eval.gd_steps": [0, 1, 2, 4], "eval.tune_prompts": 16},
                        grid={"task.noise_std": [0.1], ("model.loops", "model.window"): [(2, 1)]}),
        # d = 3, N = 10 (d = 5 learnt nothing in 600 steps), (T, ΔT) = (6, 6), 1200 steps,
        # loops and iterations to 30
        "cpu": Preset(overrides={**CPU, "task.dim": 3, "task.n_points": 10, "train.steps": 1200,
                                 "model": {"name": "algoformer", **CPU_LOOP,
                                           "eval_loop_iters": list(range(1, 31))},
                                 "eval.gd_steps": list(range(0, 31))},
                      grid={"task.noise_std": [0.0, 0.1, 1.0],
                            ("model.loops", "model.window"): [(6, 6)], **SEEDS}),
        # d = 5, N = 20 all-prefix (cpu: d = 3, as d = 5 learnt nothing in 600 steps; here
        # 5000), the paper's (T, ΔT) = (20, 15) and (10, 10), width 64, loops and iterations
        # to 50 (the paper's)
        "gpu": Preset(overrides={**GPU, "task.dim": 5, "task.n_points": 20,
                                 "model": {"name": "algoformer", **GPU_LOOP,
                                           "eval_loop_iters": list(range(1, 51))}},
                      grid={"task.noise_std": [0.0, 0.1, 1.0],
                            ("model.loops", "model.window"): [(20, 15), (10, 10)], **SEEDS}),
        # the cpu setting (d = 3, N = 10, (T, ΔT) = (6, 6)) trained as long as REDUCED (cpu:
        # 1200 steps, best 0.15x zero)
        "reduced": Preset(overrides={**CPU, **RED_TRAIN, "task.dim": 3, "task.n_points": 10,
                                     "model": {"name": "algoformer", **CPU_LOOP,
                                               "eval_loop_iters": list(range(1, 31))},
                                     "eval.gd_steps": list(range(0, 31))},
                          grid={"task.noise_std": [0.0, 0.1, 1.0],
                                ("model.loops", "model.window"): [(6, 6)], **SEEDS}),
        "paper": Preset(),
    },
)

SWEEP = Sweep("algoformer", [EXAMPLES, LOOPS, LAYERS_HEADS, VS_NEWTON])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
