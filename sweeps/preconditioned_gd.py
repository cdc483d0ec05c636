"""Linear transformers learn preconditioned GD (Ahn, Cheng, Daneshmand, Sra 2023).

* fig1_sparse -- Figs 1-2: 3-layer LSA in the sparse form (Eq. 9, A_i only), n = 20, d = 5,
  x ~ N(0, Σ), Σ = Uᵀ D² U, D = (1, 1, .5, .25, 1), w* ~ N(0, Σ⁻¹), noiseless; a new Σ per
  seed (task_seed = seed). Claim: Dist(Σ^½A_iΣ^½, I) → 0 while Dist(A_i, I) stays ≈ 0.78,
  and the loss reaches the preconditioned-set optimum f_3* = 0.134.
* fig3_sparse_b -- Figs 3-4: the form with B_i (Eq. 13), n = 10. Claim: Dist(B_i, I) → 0,
  Dist(Σ^½A_iΣ^½, I) → 0, loss far below f_3* (GD++: ~0.03).
* lsa_layers / lsa_context -- the scaling the paper implies: trained loss vs layers L and vs
  context length n, next to f_L* (∝ n^-L for n ≫ d).
* lsa_dim -- n = 10 at d = 3, 4, 5: where f_3* leaves room under the learned bar (reduced).

Training follows the authors' notebook [repo]: L-BFGS (lr 0.1, history 600, max_iter 4) on
one fixed batch of B = 20000 prompts, 2000 iterations, init N(0, 1e-4²), 5 seeds; test loss
on fresh prompts. A_i are not constrained symmetric [repo]. Paper silent on all of these.
"""

from icl import Preset, Study, Sweep

SPECTRUM = [1.0, 1.0, 0.5, 0.25, 1.0]
AHN = {
    "task": {"name": "linear_regression", "dim": 5, "n_points": 20, "layout": "fixed_n",
             "spectrum": SPECTRUM, "w_law": "inverse"},
    "model": {"name": "lsa", "layers": 3, "form": "sparse", "init_std": 1e-4},
    "train": {"optimizer": "lbfgs", "lr": 0.1, "lbfgs_history": 600, "lbfgs_max_iter": 4,
              "batch_size": 20_000, "steps": 2000, "report_every": 20,
              "checkpoint_every": 200, "artifact_every": 20},
    # lsa_optimal: the f_L*-optimal preconditioned GD scored on the same test prompts, the
    # paired reference of "trained loss ≈ f_L*" (analysis/claims/ahn.py)
    "eval": {"n_prompts": 20_000, "every": 20, "baselines": ["lsa_optimal"]},
}
SEEDS = {("seed", "task_seed"): [(s, s) for s in range(5)]}  # a new Σ per seed
CPU = {"train.steps": 300, "train.batch_size": 10_000, "eval.n_prompts": 10_000}
# One H100-class GPU (<= 20 min per study, icl_core.planning.resources.gpu_seconds): the
# paper's batch (20,000 prompts) and test set (20,000), 3 seeds. L-BFGS is launch-bound on a
# GPU (alone, its two-loop recursion reads a scalar back per stored pair: ~36 ms an iteration
# with 600 pairs; a stack of seeds walks all its members' pairs at once), so the step count is
# what the 20 minutes buy: 2000 (the paper's) for one model, 400-500 for the layer and context
# sweeps (300 at cpu scale).
GPU = {"eval.n_prompts": 20_000}
SEEDS3 = {("seed", "task_seed"): [(s, s) for s in range(3)]}
# reduced (docs/REPRODUCTION.md, Ahn): the two cells 300 L-BFGS iterations did not settle, L = 4
# (1.37x f_4*) and n = 10, 3 seeds. With the paper's 2000 iterations the ratios did not move
# (1.365, 1.177): L-BFGS stops changing the weights by iteration ~200, with the training loss
# *below* f_L* (0.85x at L = 4) and the test loss above it: the fixed batch is overfitted. So
# the axis here is the fixed batch (10k, the paper's 20k, 40k prompts), 500 iterations.
REDUCED = {**CPU, "train.steps": 500, "eval.n_prompts": 20_000}
BATCHES = {"train.batch_size": [10_000, 20_000, 40_000]}
SMOKE = {"train.steps": 4, "train.batch_size": 200, "train.report_every": 2,
         "train.checkpoint_every": 2, "train.artifact_every": 2, "eval.every": 2,
         "eval.n_prompts": 200}

FIG1 = Study(
    name="fig1_sparse",
    doc="Ahn et al. Figs 1-2: Dist(Σ½AΣ½, I), Dist(A, I), loss vs f_3*; sparse LSA, n=20",
    figure="lsa_convergence",
    base=AHN,
    grid=SEEDS,
    presets={"smoke": Preset(overrides=SMOKE, grid={("seed", "task_seed"): [(0, 0)]}),
             "cpu": Preset(overrides=CPU, grid=SEEDS3),
             "gpu": Preset(overrides=GPU, grid=SEEDS3),  # the paper's, 3 seeds (paper: 5)
             "paper": Preset()},
)

FIG3 = Study(
    name="fig3_sparse_b",
    doc="Ahn et al. Figs 3-4: Dist(B, I), Dist(Σ½AΣ½, I), loss; LSA with B (Eq. 13), n=10",
    figure="lsa_convergence",
    base={**AHN, "task": {**AHN["task"], "n_points": 10},
          "model": {**AHN["model"], "form": "sparse_b"}},
    grid=SEEDS,
    presets={"smoke": Preset(overrides=SMOKE, grid={("seed", "task_seed"): [(0, 0)]}),
             "cpu": Preset(overrides=CPU, grid=SEEDS3),
             "gpu": Preset(overrides=GPU, grid=SEEDS3),  # the paper's, 3 seeds (paper: 5)
             "paper": Preset()},
)

LAYERS = Study(
    name="lsa_layers",
    doc="trained sparse-LSA loss vs layers L = 1..8 (n = 20), next to f_L*",
    figure="lsa_scaling",
    base={**AHN, "train": {**AHN["train"], "artifact_every": 0}},
    grid={"model.layers": [1, 2, 3, 4, 5, 6, 7, 8], **SEEDS},
    presets={"smoke": Preset(overrides=SMOKE, grid={"model.layers": [2],
                                                    ("seed", "task_seed"): [(0, 0)]}),
             "cpu": Preset(overrides=CPU, grid={"model.layers": [1, 2, 3, 4], **SEEDS3}),
             # L = 1-5 (the paper's range: 1-8), 500 steps (at 300, L = 4 stopped 46% above
             # f_4*)
             "reduced": Preset(overrides=REDUCED,
                               grid={"model.layers": [4], **BATCHES, **SEEDS3}),
             "gpu": Preset(overrides={**GPU, "train.steps": 500},
                           grid={"model.layers": [1, 2, 3, 4, 5], **SEEDS3}),
             "paper": Preset()},
)

CONTEXT = Study(
    name="lsa_context",
    doc="trained 3-layer sparse-LSA loss vs context length n, next to f_3* (∝ n^-3, n ≫ d)",
    figure="lsa_scaling",
    base={**AHN, "train": {**AHN["train"], "artifact_every": 0}},
    grid={"task.n_points": [10, 20, 40, 80, 160], **SEEDS},
    presets={"smoke": Preset(overrides=SMOKE, grid={"task.n_points": [10],
                                                    ("seed", "task_seed"): [(0, 0)]}),
             # 20,000 test prompts (the paper's): with 10,000 trained / f_3* read 1.21 and 1.27
             # at n = 10 and 40 (test-set noise); with 20,000 they re-measure at 0.99-1.08
             "cpu": Preset(overrides={**CPU, "eval.n_prompts": 20_000},
                           grid={"task.n_points": [10, 20, 40, 80], **SEEDS3}),
             "reduced": Preset(overrides=REDUCED,
                               grid={"task.n_points": [10], **BATCHES, **SEEDS3}),
             # the paper's n = 10-160, 400 steps
             "gpu": Preset(overrides={**GPU, "train.steps": 400}, grid=SEEDS3),
             "paper": Preset()},
)

# n = 10 at a smaller d (issue #35): at d = 5 the optimum f_3* itself is 0.116x the zero
# predictor (E y² = d), so no 3-layer LSA can clear the learned bar (0.1x) and the n = 10 cell
# of lsa_context cannot test "trained ≈ f_3*". f_3* / d at n = 10: 0.084 (d = 4), 0.057
# (d = 3), so d = 4 is the smallest change with room, d = 3 the next; d = 5 stays as the
# reference. Σ's spectrum is the paper's, cut to d (f_L* does not depend on Σ). The reduced
# settings otherwise: the paper's batch (20,000 prompts) and test set, 500 iterations.
DIMS = {("task.dim", "task.spectrum"): [(d, SPECTRUM[:d]) for d in (3, 4, 5)]}
DIM = Study(
    name="lsa_dim",
    doc="trained 3-layer sparse-LSA loss at n = 10 vs task dimension d, next to f_3*",
    figure="lsa_scaling",
    base={**AHN, "task": {**AHN["task"], "n_points": 10},
          "train": {**AHN["train"], "artifact_every": 0}},
    grid={**DIMS, **SEEDS},
    presets={"smoke": Preset(overrides=SMOKE, grid={**DIMS, ("seed", "task_seed"): [(0, 0)]}),
             "cpu": Preset(overrides={**CPU, "eval.n_prompts": 20_000}, grid={**DIMS, **SEEDS3}),
             "reduced": Preset(overrides={**REDUCED, "train.batch_size": 20_000},
                               grid={**DIMS, **SEEDS3}),
             "gpu": Preset(overrides={**GPU, "train.steps": 500}, grid={**DIMS, **SEEDS3}),
             "paper": Preset()},
)

SWEEP = Sweep("preconditioned_gd", [FIG1, FIG3, LAYERS, CONTEXT, DIM])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
