"""How the reduced presets of algoformer (AlgoFormer, Yang et al.) are searched (issue #35): kept
so a reader can re-run them. One seed each and the reduced schedule; the 3-seed verdict runs
are the `reduced` presets of sweeps/algoformer.py.

At the reduced task (d = 3, N = 10, regression with representation; `icl levels algoformer
--study examples --preset reduced`: ridge 0.405, bar 0.041 at k = 10) the standard transformer
and AlgoFormer are learned at Adam lr 1e-3 with 200 warmup steps, but the looped transformer
stops just short (0.0443 [0.0404-0.0563] over 3 seeds, 0.109x ridge), which leaves "AlgoFormer
below the looped transformer" (Fig 2) not testable. The reduced presets' lr and warmup were
taken from the cpu preset, not searched.

* looped_lr_search -- Optuna (TPE + ASHA) over train.lr and warmup for the looped transformer
  at (T, ΔT) = (8, 6), the reduced task and schedule (4000 steps), one seed.

    python sweeps/algoformer_reduced.py --preset reduced --study looped_lr_search
"""

if __package__:  # imported as sweeps.algoformer_reduced (icl.catalog, the tests)
    from . import algoformer as algo
else:  # run as a script: sweeps/ is on sys.path
    import algoformer as algo

from icl import Preset, Search, Sweep

SPACE = {"train.lr": ("loguniform", 1e-4, 1e-2), "train.warmup_steps": ("int", 0, 500)}
SMOKE_SPACE = {"train.warmup_steps": ("int", 0, 5)}  # within the smoke preset's 20 steps
LOOPED = {"name": "looped", **algo.CPU_LOOP}

LOOPED_LR_SEARCH = Search(
    name="looped_lr_search",
    doc="AlgoFormer Fig 2, reduced: Optuna over lr and warmup, the looped transformer (8, 6)",
    base={**algo.EXAMPLES.base, "task": algo.RED_TASK, "model": LOOPED},
    space=SPACE,
    grid={"seed": [0]},
    presets={
        "smoke": Preset(overrides={**algo.SMOKE, "task": {**algo.RED_TASK, "n_points": 4},
                                   "model": {"name": "looped", **algo.SMOKE_LOOP}},
                        num_samples=2, space=SMOKE_SPACE),
        "cpu": Preset(overrides=algo.REDUCED, num_samples=5),
        "reduced": Preset(overrides=algo.REDUCED, num_samples=5),
        "gpu": Preset(overrides=algo.REDUCED, num_samples=5),
        "paper": Preset(num_samples=32),
    },
)

SWEEP = Sweep("algoformer_reduced", [LOOPED_LR_SEARCH])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
