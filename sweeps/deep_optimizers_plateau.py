"""The Wu et al. plateau (sweeps/deep_optimizers.py): try before blaming scale.

At the cpu scale of deep_optimizers (d = 8, 20 pairs, teacher depth 3, a 4-block width-32
relu_attention transformer, 2000 Adam steps at 1e-3), training loss stalls near 2 (Var(y) ≈ 10)
and R² at k = 20 is ≈ 0.86, barely above the trivial prompt-mean predictor (≈ 0.83; ridge with
an intercept: ≈ 0.97); 10x the steps on a GPU did not break it. Two things Garg et al. and
the usual practice would try first:

* curriculum -- Garg et al.'s curriculum (task.curriculum_*, `ReLUTeacher.train_sample`): the
  input dims and the prompt's pairs start at ~1/4 and grow to the full task by ~60% of
  training, against no curriculum, 3 seeds each; evaluation on the full task (ω₂ = 0, k = 0..20),
  with the trivial predictors (zero, prompt_mean, ridge) and OLS on the same prompts.
* lr_search -- Optuna (TPE + ASHA on Ray Tune, or plain Optuna with --optuna-journal) over
  train.lr (log 1e-4..1e-2) and train.warmup_steps, objective: the training loss on fresh
  prompts (a test loss), no curriculum.

The question: does either move the plateau (final training loss, R² at k = 20 above the
prompt mean's), or is it a matter of scale? Both studies import deep_optimizers' settings (WU and its
presets, evaluated at ω₂ = 0 like transformer_depth) so their rows
compare with teacher_shift / transformer_depth at each preset.
"""

if __package__:  # imported as sweeps.deep_optimizers_plateau (icl.catalog, the tests)
    from . import deep_optimizers as wu
else:  # run as a script, python sweeps/deep_optimizers_plateau.py: sweeps/ is on sys.path
    import deep_optimizers as wu

from icl import Preset, Search, Study, Sweep

# deep_optimizers' settings, imported (one source), evaluated like transformer_depth: ω₂ = 0
# at the training length, with the cheap baselines only (trivial predictors always, plus OLS;
# no teacher-network baseline)
BASE = {**wu.WU, "eval": {**wu.WU["eval"], "grid": wu.shift_grid(50, (0.0,)), "baselines": ["ols"]}}
CPU = {**wu.CPU, "eval.grid": wu.shift_grid(20, (0.0,))}
# one H100: deep_optimizers' GPU (width 128, 8 blocks, 8 heads, 20k steps: where the plateau
# was seen to hold) with 6400 test prompts (no teacher_net baseline here to keep cheap)
GPU = {**wu.GPU, "eval.grid": wu.shift_grid(20, (0.0,)), "eval.n_prompts": 6400}
SMOKE = {**wu.SMOKE, "eval.grid": wu.shift_grid(4, (0.0,))}

# The curriculum arm, one zipped axis: off = the fields' defaults (so its hash is that of a
# config without a curriculum); on = (dims start, dims inc, points start, points inc, every).
KEYS = ("task.curriculum_dims_start", "task.curriculum_dims_inc",
        "task.curriculum_points_start", "task.curriculum_points_inc", "task.curriculum_every")
OFF = (0, 1, 0, 5, 2000)


def arms(on: tuple) -> dict:
    return {KEYS: [OFF, on]}


CURRICULUM = Study(
    name="curriculum",
    doc="Garg et al.'s curriculum (dims and pairs from ~1/4, full by ~60% of training) vs "
        "none; relu_attention, teacher depth 3, 3 seeds; R² vs k and the trivial predictors",
    base=BASE,
    # paper: d 5 -> 20 (+1) full at 300k, pairs 12 -> 50 (+3) full at 260k, every 20k of 500k
    grid={**arms((5, 1, 12, 3, 20_000)), "seed": [0, 1, 2]},
    presets={
        # d 1 -> 3, pairs 1 -> 4, every 5 of 20 steps
        "smoke": Preset(overrides=SMOKE, grid={**arms((1, 1, 1, 1, 5)), "seed": [0]}),
        # d 2 -> 8 (+1) full at step 1200, pairs 5 -> 20 (+3) full at 1000, every 200 of 2000
        "cpu": Preset(overrides=CPU, grid=arms((2, 1, 5, 3, 200))),
        # the same schedule over 20k steps: every 2000, full at 12k (d) and 10k (pairs)
        "gpu": Preset(overrides=GPU, grid=arms((2, 1, 5, 3, 2000))),
        "paper": Preset(),
    },
)

LR_SEARCH = Search(
    name="lr_search",
    doc="Optuna (TPE + ASHA) over train.lr (log 1e-4..1e-2) and warmup, no curriculum; "
        "objective: training loss on fresh prompts",
    base=BASE,
    space={"train.lr": ("loguniform", 1e-4, 1e-2),
           "train.warmup_steps": ("int", 0, 1000)},
    presets={
        "smoke": Preset(overrides=SMOKE, num_samples=2,  # 20 steps: warmup within them
                        space={"train.warmup_steps": ("int", 0, 5)}),
        "cpu": Preset(overrides=CPU, num_samples=8),
        # deep_optimizers' reduced task (d = 4, teacher width 16, inputs N(0, I)), 5000 steps,
        # one search per attention: what chose the reduced preset's lr and warmup
        "reduced": Preset(overrides={**wu.REDUCED, "eval.grid": wu.shift_grid(20, (0.0,)),
                                     "train.steps": 5000},
                          grid={"model.mixer": ["relu_attention", "attention"]}, num_samples=8),
        # 10k steps (5x cpu), 14 trials: ~19 GPU-min by the planner's estimate (trials of a
        # search do not stack; it counts every trial to the end, ASHA stops most early)
        "gpu": Preset(overrides={**GPU, "train.steps": 10_000}, num_samples=14),
        "paper": Preset(num_samples=32),
    },
)

SWEEP = Sweep("deep_optimizers_plateau", [CURRICULUM, LR_SEARCH])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
