"""How the reduced presets of depth_scaling (Liu et al.) were chosen (issue #35): the probes
and searches, kept so a reader can re-run them. Each is one seed and a short schedule; the
3-seed verdict runs are the `reduced` presets of sweeps/depth_scaling.py.

At the cpu presets four Liu rows are "not testable at this scale" (docs/REPRODUCTION.md): on
fixed-N least squares (ls_mixer_depth) BaseConv never leaves the trivial level (>= 0.64x the
zero predictor) and the Transformer at L = 8 is not learned; on the explicit gradient
(explicit_gradient) BaseConv without LN is not learned; in features_depth the Transformer's
k = 0, 1, 2 seed ranges overlap.

* ls_probe -- least squares: BaseConv at L = 4 and the Transformer at L = 8 over a small grid of
  (D, N). One GD step from 0, the least a 2-layer BaseConv can compute, leaves (D + 1) /
  (N + D + 1) of the zero predictor's mean error: at D = 3, N = 10 that is 0.29, above the
  0.1x bar, so the probe moves towards more examples per dimension. (D, N) = (3, 10) ran too
  and was stopped: the cpu preset measured it on 3 seeds.
* gradient_lr_search -- Optuna (TPE + ASHA) over train.lr and warmup for the explicit
  gradient: BaseConv without LN at depth 3
  (the paper's best; at the cpu preset's lr 1e-3 without warmup it stayed at the trivial
  level, 0.64 [0.14-0.65]), at the cpu task (D = 3, N = 10); the other models are learned
  there already.

features_depth needs no probe: its models are learned at the cpu preset already; its reduced
preset only trains longer (6000 steps), so the seed ranges can resolve.

    python sweeps/depth_scaling_reduced.py --preset reduced --study ls_probe
    python sweeps/depth_scaling_reduced.py --preset reduced --study gradient_lr_search
"""

if __package__:  # imported as sweeps.depth_scaling_reduced (icl.catalog, the tests)
    from . import bases
    from . import depth_scaling as liu
else:  # run as a script: sweeps/ is on sys.path
    import bases
    import depth_scaling as liu

from icl import Preset, Search, Study, Sweep

SPACE = {"train.lr": ("loguniform", 1e-4, 1e-2), "train.warmup_steps": ("int", 0, 500)}
SMOKE_SPACE = {"train.warmup_steps": ("int", 0, 5)}  # within the smoke preset's 20 steps

LS_PROBE = Study(
    name="ls_probe",
    measures_precision=True,  # Liu et al.: errors at float32's limits
    doc="Liu Figs 2/10, reduced: BaseConv at L = 4, the Transformer at L = 8, over (D, N), 1 seed",
    base=bases.LIU_LS,
    # (3, 10) is the cpu preset's task (BaseConv >= 0.64x zero there at 3000 steps)
    grid={("task.dim", "task.n_points"): [(2, 20), (2, 40)],
          ("model.mixer", "model.depth"): [("attention", 8), ("baseconv", 4)], "seed": [0]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_LS,
                        grid={("task.dim", "task.n_points"): [(2, 4)],
                              ("model.mixer", "model.depth"): [("baseconv", 1)]}),
        "cpu": Preset(overrides=liu.LS_REDUCED),
        "reduced": Preset(overrides=liu.LS_REDUCED),
        "gpu": Preset(overrides=liu.LS_REDUCED),
        "paper": Preset(overrides=liu.LS_REDUCED),
    },
)

GRADIENT_LR_SEARCH = Search(
    name="gradient_lr_search",
    doc="Liu Fig 7 (a), reduced: Optuna over lr and warmup, BaseConv w/o LN at depth 3",
    base=liu.EXPLICIT_GRADIENT.base,
    space=SPACE,
    grid={"model.mixer": ["baseconv"], "model.layer_norm": [False], "model.depth": [3]},
    presets={
        "smoke": Preset(overrides=bases.SMOKE_FEATURES, num_samples=2, space=SMOKE_SPACE),
        "cpu": Preset(overrides=liu.GRADIENT_REDUCED, num_samples=5),
        "reduced": Preset(overrides=liu.GRADIENT_REDUCED, num_samples=5),
        "gpu": Preset(overrides=liu.GRADIENT_REDUCED, num_samples=5),
        "paper": Preset(num_samples=32),
    },
)

SWEEP = Sweep("depth_scaling_reduced", [LS_PROBE, GRADIENT_LR_SEARCH])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
