"""Learning-rate / batch / warmup search per model width, with Optuna (TPE) + ASHA on Ray Tune.

One search per width; every search trial is an ordinary member whose rows land in the same
store as grid trials. Feed the winners into a scaling sweep:

    from icl import best_settings
    best = best_settings("results", "hpo_lr", "width_lr", by="model.width", params=["train.lr"])
    # e.g. grid={("model.width", "train.lr"): [(w, best[w]["train.lr"]) for w in best]}

Without a cluster, run plain Optuna with a persistent journal (open it in optuna-dashboard):

    python sweeps/hpo_lr.py --preset cpu --optuna-journal results/hpo_lr.journal
"""

if __package__:  # imported as sweeps.hpo_lr (icl.catalog, the tests)
    from . import bases
else:  # run as a script, python sweeps/hpo_lr.py: sweeps/ is on sys.path
    import bases

from icl import Preset, Search, Sweep

WIDTH_LR = Search(
    name="width_lr",
    doc="Optuna (TPE) + ASHA over lr, batch, warmup; one search per width; 2-layer LS model",
    base={**bases.LIU_LS, "model": {**bases.LIU_LS["model"], "depth": 2}},
    space={
        "train.lr": ("loguniform", 1e-4, 1e-2),
        "train.batch_size": ("choice", [64, 128, 256]),
        "train.warmup_steps": ("int", 0, 10_000),
    },
    grid={"model.width": [32, 64, 128, 256]},
    presets={
        # each preset's warmup range stays within its train.steps (up to a quarter of them)
        "smoke": Preset(overrides=bases.SMOKE_LS, grid={"model.width": [8]}, num_samples=3,
                        space={"train.warmup_steps": ("int", 0, 5)}),
        "cpu": Preset(overrides={**bases.CPU_LS, "model.depth": 2, "train.steps": 2000},
                      grid={"model.width": [16, 32]}, num_samples=12,
                      space={"train.warmup_steps": ("int", 0, 500)}),
        # widths 32-128 (the paper's 2-layer model, D = 5, batch range), 4000 steps, 16 trials
        # a width (an upper bound: ASHA stops poor trials early)
        "gpu": Preset(overrides={**bases.GPU_LS, "model.depth": 2, "train.steps": 4000,
                                 "train.step_size": 1000},
                      grid={"model.width": [32, 64, 128]}, num_samples=16,
                      space={"train.warmup_steps": ("int", 0, 1000)}),
        "paper": Preset(num_samples=64),  # 1e6 steps: the space's warmup 0-10k
    },
)

SWEEP = Sweep("hpo_lr", [WIDTH_LR])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
