"""Transformers as deep optimizers (Wu, Su, Hu, Song, Liu 2024, App. G): in-context learning of
N-layer ReLU-network teachers, ReLU vs softmax attention, distribution shift, depth.

* teacher_shift -- Figs 1, 2: R² vs prompt length k (trained on 50 pairs, evaluated to 75)
  for teacher depth N in {3, 4, 6} x test mixture ω₂ in {0, .1, .3, .5}, ReLU attention
  (Fig 1) and softmax attention (Fig 2), next to a fresh N-layer network trained on the
  prompt's first k examples (best of 100 epochs; computed once per teacher depth, on the
  ReLU member, since it depends only on the shared test prompts) and least squares. Claims:
  ICL ≈ the trained network; R² falls with ω₂; softmax degrades past the training length.
* transformer_depth -- Fig 3: R² at k in {15, 30, 45} vs transformer depth {4, 6, 8, 10},
  ReLU and softmax, test N(-2·1, I). Claim: deeper is better. Teacher depth: 3 [gap].
* scaleup -- the scale-up the paper lacks: 1 - R² vs depth x width (ReLU attention), dense in
  k, for fits of 1 - R² = c + a L^-b and of 1 - R² vs k.

Model: Garg et al.'s GPT-2 (12 blocks, 8 heads, width 256) with the attention activation as
the `model.mixer` axis (`attention` | `relu_attention`, σ(QKᵀ/√d_h)/(t+1), causal). Data: d =
20, teacher width 100 [gap; Garg relu_2nn], He-normal weights, linear output, x ~ N(-2·1, I).
Training: MSE on all 51 targets, batch 64, 500k steps [paper]; Adam lr 1e-4, no warmup, no
curriculum [gap: Garg's defaults, curriculum off since the paper does not mention one]; MLP
4 x 256 [code: GPT-2's n_inner; the paper's "MLP dimension 256" would be mlp_ratio = 1].
Evaluation: 6400 prompts (100 batches of 64), R² pooled and per-batch mean.
"""

from icl import Preset, Study, Sweep

MIXES = (0.0, 0.1, 0.3, 0.5)


def shift_grid(n_points: int, mixes=MIXES) -> list[dict]:
    """Evaluation points: test mixture ω₂ at prompts of n_points pairs (no retraining)."""
    return [{"test_dist": f"w{m}", "n_points": n_points, "mix": m} for m in mixes]


WU = {
    "task": {"name": "relu_teacher", "dim": 20, "n_points": 50, "depth": 3, "hidden": 100,
             "mean": 2.0, "mix": 0.0, "r2_batch": 64, "baseline_epochs": 100,
             "baseline_lr": 1e-3},
    "model": {"name": "transformer", "width": 256, "depth": 12, "heads": 8, "mlp_ratio": 4,
              "mixer": "relu_attention"},
    "train": {"optimizer": "adam", "lr": 1e-4, "batch_size": 64, "steps": 500_000,
              "report_every": 1000, "checkpoint_every": 10_000},
    "eval": {"n_prompts": 6400, "grid": shift_grid(75), "chunk": 640},
}
# The baseline depends only on the test prompts (and the teacher depth): once per teacher depth.
MIXER_BASELINES = {("model.mixer", "eval.baselines"): [
    ("relu_attention", ("teacher_net", "ols")), ("attention", ())]}

# 2-core laptop [digest §7]: d = 8, teacher width 32, 20 training pairs, tested to 30; a 4-block,
# 4-head, width-32 transformer, 2000 Adam steps at 1e-3 (200 warmup); 640 test prompts; the
# baseline at 10 values of k.
CPU = {"task.dim": 8, "task.n_points": 20, "task.hidden": 32,
       "task.baseline_k": [1, 2, 3, 5, 8, 10, 15, 20, 25, 30],
       "model.width": 32, "model.depth": 4, "model.heads": 4,
       "train.lr": 1e-3, "train.warmup_steps": 200, "train.steps": 2000,
       "train.report_every": 250, "train.checkpoint_every": 1000,
       "eval.n_prompts": 640, "eval.grid": shift_grid(30)}
# One H100-class GPU (<= 20 min per study, icl_core.planning.resources.gpu_seconds): the cpu
# task (d = 8, 20 pairs, teacher width 32, tested to 30; 640 test prompts, so the
# teacher-network baseline, computed on the CPU, stays at its cpu cost), a wider and deeper
# transformer (width 128, 8 blocks, the paper's 8 heads), 10x the cpu steps (20k; the paper:
# 500k; each study's preset cuts them to fit the budget: teacher_shift 11.5k,
# transformer_depth 10.5k, scaleup 8500), 3 seeds trained
# stacked. A check at 20k steps and width 128 (docs/REPRODUCTION.md) moved R² little: this
# preset measures the seed spread there, the paper preset the claims.
GPU = {**CPU, "model.width": 128, "model.depth": 8, "model.heads": 8, "train.steps": 20_000,
       "train.report_every": 500, "train.checkpoint_every": 5000}
# reduced (issue #35; docs/REPRODUCTION.md): at the cpu task every model sat within 0.03 of
# the prompt mean and 0.1 below ridge, because at inputs N(-2·1, I) a bias-free He-normal
# teacher is nearly linear where the data lie (ridge R² 0.97 at d = 20, 0.98 at d = 4): no
# room above the bar. Here: inputs N(0, I) (mean 0; the shift mixture is then void, so the
# ω₂ claim is not tested here), d = 4, teacher width 16 (ridge 0.76, prompt mean 0.43 at k =
# 20), the cpu model (4 blocks, width 32, 4 heads), 10k Adam steps at lr 1e-3 with 200 warmup
# steps (the cpu preset's; the probe in issue #35 reached R² 0.805 with them at 5k steps),
# evaluated to k = 30. The reduced lr_search (sweeps/deep_optimizers_plateau.py) is the search
# that should choose them; its first run did not finish (docs/REPRODUCTION.md, Wu).
REDUCED = {**CPU, "task.dim": 4, "task.hidden": 16, "task.mean": 0.0,
           "train.steps": 10_000, "train.lr": 1e-3, "train.warmup_steps": 200,
           "train.report_every": 500, "train.checkpoint_every": 2500,
           "eval.grid": shift_grid(30, (0.0,))}
SEEDS = {"seed": [0, 1, 2]}
SMOKE = {"task.dim": 3, "task.n_points": 4, "task.hidden": 4, "task.r2_batch": 16,
         "task.baseline_k": [1, 3, 6], "task.baseline_epochs": 5,
         "model.width": 8, "model.depth": 1, "model.heads": 2,
         "train.steps": 20, "train.batch_size": 16, "train.report_every": 10,
         "train.checkpoint_every": 10, "eval.n_prompts": 64, "eval.grid": shift_grid(6, (0.0, 0.5))}

SHIFT = Study(
    name="teacher_shift",
    doc="Wu et al. Figs 1-2: R² vs k x teacher depth x test mixture, ReLU and softmax "
        "attention, vs a trained teacher-class network",
    figure="deep_shift",
    base=WU,
    grid={"task.depth": [3, 4, 6], **MIXER_BASELINES},
    presets={"smoke": Preset(overrides=SMOKE, grid={"task.depth": [3]}),
             "cpu": Preset(overrides=CPU, grid=SEEDS),
             "reduced": Preset(overrides=REDUCED, grid={"task.depth": [3], **SEEDS}),
             "gpu": Preset(overrides={**GPU, "train.steps": 11_500}, grid=SEEDS),
             "paper": Preset()},
)

DEPTH = Study(
    name="transformer_depth",
    doc="Wu et al. Fig 3: R² at k = 15, 30, 45 vs transformer depth 4-10, ReLU and softmax",
    figure="deep_depth",
    base={**WU, "eval": {**WU["eval"], "grid": shift_grid(50, (0.0,))}},
    grid={"model.depth": [4, 6, 8, 10], "model.mixer": ["relu_attention", "attention"]},
    presets={"smoke": Preset(overrides={**SMOKE, "eval.grid": shift_grid(4, (0.0,))},
                             grid={"model.depth": [1, 2], "model.mixer": ["relu_attention"]}),
             "cpu": Preset(overrides={**CPU, "eval.grid": shift_grid(20, (0.0,))},
                           grid={"model.depth": [1, 2, 4, 6], **SEEDS}),
             # depth 1-8 (the paper: 4-10) at width 128, 10.5k steps
             "gpu": Preset(overrides={**GPU, "train.steps": 10_500,
                                      "eval.grid": shift_grid(20, (0.0,))},
                           grid={"model.depth": [1, 2, 4, 6, 8], **SEEDS}),
             # the teacher_shift reduced setting (softmax learns there; ReLU attention did
             # not, so only softmax), depth 1, 2, 4 (4 is teacher_shift's), R² to k = 30
             "reduced": Preset(overrides=REDUCED,
                               grid={"model.depth": [1, 2, 4], "model.mixer": ["attention"],
                                     **SEEDS}),
             "paper": Preset()},
)

SCALEUP = Study(
    name="scaleup",
    doc="beyond the paper: 1 - R² vs depth x width (ReLU attention), dense in k, for fits",
    figure="deep_scaling",
    base={**WU, "eval": {**WU["eval"], "grid": shift_grid(75, (0.0,))}},
    grid={"model.depth": [2, 3, 4, 6, 8, 12, 16, 24], "model.width": [64, 128, 256],
          "seed": [0, 1, 2]},
    presets={"smoke": Preset(overrides={**SMOKE, "eval.grid": shift_grid(6, (0.0,))},
                             grid={"model.depth": [1], "model.width": [8], "seed": [0]}),
             "cpu": Preset(overrides={**CPU, "eval.grid": shift_grid(30, (0.0,))},
                           grid={"model.depth": [1, 2, 3, 4, 6], "model.width": [16, 32],
                                 "seed": [0]}),
             # depth 1-8 x width 32-128, 8500 steps
             "gpu": Preset(overrides={**GPU, "train.steps": 8500,
                                      "eval.grid": shift_grid(30, (0.0,))},
                           grid={"model.depth": [1, 2, 3, 4, 6, 8], "model.width": [32, 64, 128],
                                 **SEEDS}),
             # the teacher_shift reduced setting with softmax attention (ReLU attention did
             # not learn there); depth saturates at 2 (transformer_depth, reduced), so the law
             # is sought in width at depth 2: width 8-128 (heads 4 at every width; 128 added
             # when 8 and 16 did not learn, so that three learned widths can test the law)
             "reduced": Preset(overrides={**REDUCED, "model.mixer": "attention"},
                               grid={"model.depth": [2], "model.width": [8, 16, 32, 64, 128],
                                     **SEEDS}),
             "paper": Preset()},
)

SWEEP = Sweep("deep_optimizers", [SHIFT, DEPTH, SCALEUP])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
