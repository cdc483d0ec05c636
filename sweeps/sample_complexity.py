"""Sample complexity: training samples needed to reach a target error, vs problem size.

* least_squares_dim -- fixed-N least squares (N = 2D) at D in {2, 4, 8, 16}: the test-MSE
  curve is recorded every `eval.every` steps; analysis derives n*(D), the samples
  (steps x batch) to reach MSE <= threshold, and fits n* ∝ D^γ (computed in analysis, not in
  trials).

Sparse token retrieval (Mousavi-Hosseini, Wu, Erdogdu et al., "When do transformers
outperform feedforward and recurrent networks?"): n*(N), the training prompts a model needs
to reach a test-MSE threshold, vs the sequence length N, for the one-layer transformer (the
theory's `attention_mlp`, full W_QK per head, and the peer code's `mha_mlp`), the FFN and
the bidirectional GRU. Online protocol [code]: AdamW (lr 1e-3, weight decay 0.01), batch 64
of fresh prompts, test MSE (mean over prompts and positions) every `eval.every` steps on
`eval.n_prompts` prompts, training ends at the first test below `eval.stop_below` (the
lowest threshold) or at the cap (paper: 1e6 samples); n* is derived in analysis
(analysis/figures/retrieval.py), right-censored at the cap. x ~ N(0, I_d), d = 10, linear link
⟨u, x_t⟩, codes and u fixed by task_seed = 0 across the 5 seeds [code].

* str_1 -- Fig 1a: 1STR, N = 2..12 and beyond; thresholds 0.7 (paper), 0.5, 0.3.
  Claim: n*_FFN > n*_RNN > n*_TR, with the transformer's n* flat in N.
* str_simple -- Fig 1b: simple-1STR (one index per prompt), N = 25..33 and beyond;
  thresholds 0.05, 0.02 (paper). Claim: FFN grows with N; RNN and TR stay flat.
* str_simple_n -- str_simple's task with one model (mha_mlp) on a dense N lattice, for the
  exponent γ of n* ∝ N^γ at threshold 0.05; the dense grid of the adaptive n*(N) study
  (sweeps/adaptive_sample_complexity.py).
* str_heads -- Prop. 3: qSTR with q = 2 and the squared-norm link (Var(y) = 1), one attention
  layer with H in {1, 2} heads; threshold 0.3. Claim: H < q never reaches it (floor
  ≈ 1 - H/q), H = q does.
* str_attention -- Fig 2: the finite-dataset protocol (5e4 prompts, <= 20 epochs, AdamW weight
  decay 0.2, stop at training loss < 0.05), N = 100, d_e = 23; the learned |W_QK| is saved
  (artifact "qk"). Claim: a bright diagonal in the (query w_t, key w_j) block, ≈ 0 elsewhere.
  The peer code trains this on simple prompts although the caption says 1STR; both are run.

The peer code tests on simple prompts even in 1STR runs; ours test on the training
distribution. `--set 'eval.grid=[{},{"test_dist":"simple","simple":true}]'` adds the peer's
variant (the first point still decides the stop).
"""

if __package__:  # imported as sweeps.sample_complexity (icl.catalog, the tests)
    from . import bases
else:  # run as a script, python sweeps/sample_complexity.py: sweeps/ is on sys.path
    import bases

from icl import Preset, Study, Sweep


def dims(*ds: int) -> dict:
    return {("task.dim", "task.n_points"): [(d, 2 * d) for d in ds]}


LEAST_SQUARES_DIM = Study(
    name="least_squares_dim",
    doc="samples to reach a target query MSE vs dimension D (N = 2D), test curve every 1%",
    base={**bases.LIU_LS, "model": {**bases.LIU_LS["model"], "depth": 4},
          "eval": {**bases.LIU_LS["eval"], "every": 10_000}},
    grid={**dims(2, 4, 8, 16), "seed": [0, 1, 2]},
    presets={
        "smoke": Preset(overrides={**bases.SMOKE_LS, "eval.every": 10}, grid={**dims(2, 3), "seed": [0]}),
        "cpu": Preset(overrides={**bases.CPU_LS, "model.depth": 2, "eval.every": 250,
                                 "eval.n_prompts": 300},
                      grid={**dims(2, 3, 4, 6), "seed": [0, 1, 2]}),
        # the paper's 4 layers, width and batch, D = 2-8, 20k steps, the curve every 500
        "gpu": Preset(overrides={**bases.GPU_LS, "eval.every": 500},
                      grid={**dims(2, 3, 4, 6, 8), "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

DIM_DEPTH = Study(
    name="least_squares_dim_depth",
    doc="scale-up: samples to a target MSE vs D x depth (N = 2D), 10 seeds for n* CIs",
    base={**bases.LIU_LS, "eval": {**bases.LIU_LS["eval"], "every": 10_000}},
    grid={**dims(2, 4, 8, 16, 32), "model.depth": [2, 4, 8], "seed": list(range(10))},
    presets={
        "smoke": Preset(overrides={**bases.SMOKE_LS, "eval.every": 10},
                        grid={**dims(2), "model.depth": [1], "seed": [0]}),
        "cpu": Preset(overrides={**bases.CPU_LS, "eval.every": 250, "eval.n_prompts": 300},
                      grid={**dims(2, 3, 4), "model.depth": [1, 2], "seed": [0, 1, 2]}),
        # D = 2-8 x depth 2-8, 10k steps, the curve every 250
        "gpu": Preset(overrides={**bases.GPU_LS, "train.steps": 10_000, "train.step_size": 1000,
                                 "train.report_every": 250, "eval.every": 250},
                      grid={**dims(2, 4, 8), "model.depth": [2, 4, 8], "seed": [0, 1, 2]}),
        "paper": Preset(),
    },
)

# ---------------------------------------------------------------- sparse token retrieval


def str_models(width: int, per_token: int, hidden: int, gru: int, steps: int,
               ffn_steps: int | None = None) -> dict:
    """The architecture axis, zipped with each one's cap (train.steps): both transformers,
    the FFN and the bidirectional GRU."""
    models = [{"name": "attention_mlp", "mlp_width": width},
              {"name": "mha_mlp", "mlp_width": width},
              {"name": "ffn", "per_token": per_token, "hidden": hidden},
              {"name": "bigru", "hidden": gru}]
    return {("model", "train.steps"): [
        (m, ffn_steps if m["name"] == "ffn" and ffn_steps else steps) for m in models]}


MH_STR = {  # the paper's Fig 1 settings [code: sample_complexity.py]
    "task": {"name": "qstr", "dim": 10, "q": 1, "simple": False, "link": "linear"},
    "model": {"name": "attention_mlp"},
    "train": {"optimizer": "adamw", "lr": 1e-3, "weight_decay": 0.01, "batch_size": 64,
              "steps": 15_625, "report_every": 10, "checkpoint_every": 1000},  # cap 1e6
    "eval": {"n_prompts": 5000, "every": 10, "stop_below": 0.3},
}
PAPER_MODELS = str_models(100, 10, 1000, 500, steps=15_625)
# Laptop: d = 5, 1000 test prompts every 20 steps, smaller FFN / GRU (the notes' CPU plan:
# FFN [N·d, 256], GRU 128); caps by cost: 4000 x 64 = 256k samples, the cheap FFN (which
# needs the most samples) 16000 x 64 ≈ 1e6 as in the paper
CPU_STR = {"task.dim": 5, "train.report_every": 20, "eval.n_prompts": 1000, "eval.every": 20}
CPU_MODELS = str_models(64, 5, 256, 128, steps=4000, ffn_steps=16_000)
# One H100-class GPU (<= 20 min per study, icl_core.planning.resources.gpu_seconds, at the
# caps: the stop rule ends most runs earlier): the paper's d = 10 and model sizes, 3 seeds;
# caps 7500 steps x 64 = 480k samples, the FFN (which needs the most) the paper's 1e6; 2000
# test prompts every 20 steps (the paper: 5000 every 10).
GPU_STR = {"train.report_every": 20, "eval.n_prompts": 2000, "eval.every": 20}
GPU_MODELS = str_models(100, 10, 1000, 500, steps=7500, ffn_steps=15_625)
SEEDS = {"seed": [0, 1, 2]}
SMOKE_STR = {"task.dim": 3, "train.batch_size": 16, "train.report_every": 10,
             "eval.n_prompts": 50, "eval.every": 10}
SMOKE_MODELS = str_models(8, 2, 16, 8, steps=20)


def only(models: dict, *names: str) -> dict:
    """The architecture axis restricted to `names`."""
    ((key, values),) = models.items()
    return {key: [v for v in values if v[0]["name"] in names]}


STR_1 = Study(
    name="str_1",
    doc="Mousavi-Hosseini et al. Fig 1a: n*(N) on 1STR, transformer vs FFN vs GRU",
    figure="str_sample_complexity",
    figure_args={"thresholds": (0.7, 0.5, 0.3)},
    base=MH_STR,
    grid={**PAPER_MODELS, "task.n_points": [2, 4, 6, 8, 10, 12, 16, 32, 64],
          "seed": list(range(5))},
    presets={
        "smoke": Preset(overrides=SMOKE_STR, grid={**only(SMOKE_MODELS, "attention_mlp", "ffn"),
                                                   "task.n_points": [3, 4], "seed": [0]}),
        "cpu": Preset(overrides=CPU_STR, grid={**CPU_MODELS, "task.n_points": [4, 8, 16, 32],
                                               "seed": [0, 1, 2]}),
        # N = 4-32 with the paper's reference point N = 12 (the paper: 2-64)
        "gpu": Preset(overrides=GPU_STR, grid={**GPU_MODELS, "task.n_points": [4, 8, 12, 16, 32],
                                               **SEEDS}),
        "paper": Preset(),
    },
)

STR_SIMPLE = Study(
    name="str_simple",
    doc="Mousavi-Hosseini et al. Fig 1b: n*(N) on simple-1STR, transformer vs FFN vs GRU",
    figure="str_sample_complexity",
    figure_args={"thresholds": (0.05, 0.02)},
    base={**MH_STR, "task": {**MH_STR["task"], "simple": True},
          "eval": {**MH_STR["eval"], "every": 100, "stop_below": 0.02}},
    grid={**PAPER_MODELS, "task.n_points": [25, 27, 29, 31, 33, 64, 128],
          "seed": list(range(5))},
    presets={
        "smoke": Preset(overrides={**SMOKE_STR, "eval.stop_below": 0.05},
                        grid={**only(SMOKE_MODELS, "mha_mlp"), "task.n_points": [4],
                              "seed": [0]}),
        "cpu": Preset(overrides={**CPU_STR, "eval.stop_below": 0.05},
                      grid={**CPU_MODELS, "task.n_points": [8, 16, 32], "seed": [0, 1, 2]}),
        # N = 25, 29, 33, 64 (the paper: 25-33 and beyond); the test every 100 (the paper's);
        # caps 7000 steps (the FFN's the paper's 1e6 samples)
        "gpu": Preset(overrides={**GPU_STR, "eval.every": 100},
                      grid={**str_models(100, 10, 1000, 500, steps=7000, ffn_steps=15_625),
                            "task.n_points": [25, 29, 33, 64], **SEEDS}),
        "paper": Preset(),
    },
)

STR_SIMPLE_N = Study(
    name="str_simple_n",
    doc="n*(N) of the multi-head transformer on simple-1STR on a dense N lattice: the exponent "
        "of n* ∝ N^γ (the grid sweeps/adaptive_sample_complexity.py competes with)",
    figure="str_sample_complexity",
    figure_args={"thresholds": (0.05,)},
    # str_simple's settings with one model, the peer code's mha_mlp; the stop rule at the
    # threshold fitted (0.05), so a member's time is what its n* costs
    base={**STR_SIMPLE.base, "model": {"name": "mha_mlp", "mlp_width": 100},
          "eval": {**STR_SIMPLE.base["eval"], "stop_below": 0.05}},
    grid={"task.n_points": [8, 16, 32, 64, 128], "seed": list(range(5))},
    presets={
        "smoke": Preset(overrides={**SMOKE_STR, "model.mlp_width": 8, "train.steps": 20},
                        grid={"task.n_points": [4, 6], "seed": [0]}),
        # str_simple's cpu settings (d = 5, cap 4000 x 64 samples), N on a log lattice 8-64
        "cpu": Preset(overrides={**CPU_STR, "model.mlp_width": 64, "train.steps": 4000},
                      grid={"task.n_points": [8, 11, 16, 23, 32, 45, 64], "seed": [0, 1, 2]}),
        "gpu": Preset(overrides={**GPU_STR, "train.steps": 7500},
                      grid={"task.n_points": [8, 16, 32, 64, 128], **SEEDS}),
        "paper": Preset(),
    },
)

STR_HEADS = Study(
    name="str_heads",
    doc="Mousavi-Hosseini et al. Prop. 3: qSTR with q = 2, one attention layer, H in {1, 2}",
    figure="str_heads",
    figure_args={"threshold": 0.3},
    base={**MH_STR, "task": {**MH_STR["task"], "q": 2, "link": "sqnorm"}},
    grid={"model.heads": [1, 2], "task.n_points": [8, 16, 32, 64], "seed": list(range(5))},
    presets={
        "smoke": Preset(overrides={**SMOKE_STR, "train.steps": 20},
                        grid={"model.heads": [1, 2], "task.n_points": [4], "seed": [0]}),
        "cpu": Preset(overrides={**CPU_STR, "task.dim": 4, "train.steps": 6000,
                                 "model.mlp_width": 64},
                      grid={"model.heads": [1, 2], "task.n_points": [8, 16, 32],
                            "seed": [0, 1, 2]}),
        # the paper's d = 10, model, N and cap
        "gpu": Preset(overrides=GPU_STR, grid={"model.heads": [1, 2],
                                               "task.n_points": [8, 16, 32, 64], **SEEDS}),
        "paper": Preset(),
    },
)

STR_ATTENTION = Study(
    name="str_attention",
    doc="Mousavi-Hosseini et al. Fig 2: the learned |W_QK| after finite-dataset training, N=100",
    figure="str_attention",
    base={"task": {"name": "qstr", "dim": 10, "n_points": 100, "simple": True},
          "model": {"name": "mha_mlp"},
          # [code: attention_weights.py] 5e4 prompts, batch 64 (782 steps an epoch), <= 20
          # epochs, stop once an epoch's training loss < 0.05, AdamW lr 1e-3, wd 0.2
          "train": {"optimizer": "adamw", "lr": 1e-3, "weight_decay": 0.2, "batch_size": 64,
                    "dataset_size": 50_000, "steps": 20 * 782, "stop_loss": 0.05,
                    "report_every": 782, "checkpoint_every": 782, "artifact_every": 782},
          "eval": {"n_prompts": 10_000}},
    grid={"model": [{"name": "mha_mlp"}, {"name": "attention_mlp"}], "task.simple": [True, False],
          "seed": [0]},
    presets={
        "smoke": Preset(overrides={"task.dim": 3, "task.n_points": 6, "train.dataset_size": 64,
                                   "train.batch_size": 16, "train.steps": 8,
                                   "train.report_every": 4, "train.checkpoint_every": 4,
                                   "train.artifact_every": 4, "eval.n_prompts": 50},
                        grid={"model": [{"name": "mha_mlp", "mlp_width": 8}], "task.simple": [True]}),
        # N = 32 (d_e = 17), d = 5, 1e4 prompts (157 steps an epoch), <= 20 epochs
        "cpu": Preset(overrides={"task.dim": 5, "task.n_points": 32, "train.dataset_size": 10_000,
                                 "train.steps": 20 * 157, "train.report_every": 157,
                                 "train.checkpoint_every": 157, "train.artifact_every": 157,
                                 "eval.n_prompts": 2000},
                      grid={"model": [{"name": "mha_mlp", "mlp_width": 64},
                                      {"name": "attention_mlp", "mlp_width": 64}], **SEEDS}),
        "gpu": Preset(grid=SEEDS),  # the paper's settings, 3 seeds (paper: 1)
        "paper": Preset(),
    },
)

SWEEP = Sweep("sample_complexity", [LEAST_SQUARES_DIM, DIM_DEPTH, STR_1, STR_SIMPLE,
                                    STR_SIMPLE_N, STR_HEADS, STR_ATTENTION])

if __name__ == "__main__":
    raise SystemExit(SWEEP.main())
