"""In-context learning of N-layer ReLU-network teachers (Wu et al. 2024, "Transformers are deep
optimizers", App. G).

Every prompt has its own teacher f (a fresh network, `icl_core.algorithms.teacher_baseline.he_network`:
`depth` linear layers, ReLU between them, width `hidden`, no biases, He-normal weights, linear
scalar output) and n + 1 points from the mixture ω₁ N(-m·1, I) + ω₂ N(+m·1, I) (ω₂ = `mix`,
m = `mean`, each point's component drawn on its own); y = f(x), no label noise. Training uses
ω₂ = 0; evaluation points of `eval.grid` shift ω₂ and lengthen the prompt without retraining.

Garg-style all-prefix layout (d_in = dim; y zero-padded to d, i.e. y e_1 [code]); with
dim = 2, n_points = 2:

    tokens   x1        y1 e1     x2        y2 e1     x3
             [-2.3,-1.1] [0.8, 0]  [-1.6,-2.9] [1.9, 0]  [-2.2,-0.7]
    targets  y1                    y2                  y3          (at the x tokens)
    position 0                     1                   2           (examples seen before)

Metrics beyond the evaluator's per-prompt MSE (`prediction_metrics`): R² per position, both
pooled over all test prompts and as the mean over batches of `r2_batch` prompts (the paper
says "mean R² over 6400 samples" = 100 batches of 64; both readings are recorded). Baselines
(`baseline_errors`, named in eval.baselines): "teacher_net" — a fresh network of the teacher's
class trained on the prompt's first k examples (R² per epoch and at the best epoch, which is
oracle early stopping, as the paper's); "ols" — least squares with an intercept.

Paper silent [gap] on the teacher's width, activation, bias, scale and output; defaults follow
Garg et al.'s relu_2nn_regression [code] (ReLU, width 100, no bias, N(0, 2/fan_in) weights,
linear output). Trivial predictors (`icl_core.training.trivial`, from `context_problems`): zero,
prompt_mean (the mean of the y's before the token) and ridge with an intercept, each with R²
rows like the model's. "N-layer" = N linear layers (N - 1 hidden ReLU layers) [inferred]. Means
±2·1 [inferred from "N(-2, I_d)"].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from icl_core.algorithms.teacher_baseline import (
    batch_mean_r2,
    he_layers,
    he_network,
    network_forward,
    pooled_r2,
    train_networks,
)
from icl_core.common.device import derive_seed
from icl_core.common.validation import require
from icl_core.tasks.base import (
    Batch,
    RegressionProblem,
    TaskBase,
    TaskConfig,
    all_prefix_positions,
    deinterleave,
    interleave,
    prefix_problems,
)
from icl_core.tasks.draws import CounterDraws, Draws, GeneratorDraws, stacked


@dataclass(frozen=True)
class ReLUTeacherConfig(TaskConfig):
    """The relu_teacher task. Training curriculum (`curriculum_*`, Garg et al. 2022 [code:
    src/curriculum.py, conf/*.yaml]): during training only, x has its first d coordinates
    non-zero and the loss covers the first n pairs' predictions, d and n growing by `_inc`
    every `curriculum_every` steps up to dim / n_points (`ReLUTeacher.train_sample`);
    evaluation always uses the full task. Garg's defaults: dims 5 -> 20 (+1), points 26 -> 101
    (+5, relu_2nn; +2 from 11 -> 41 for linear regression), every 2000 of 500k steps (both
    full at 30k). Garg's `points` count the query, ours do not (n_points = pairs before the
    last query): Garg's 26 is our 25. Ours: off (a start of 0; the fields' defaults keep
    every existing config hash), inc 1 dim / 5 pairs every 2000 steps when only the starts
    are set; sweeps/deep_optimizers_plateau.py sets its own (from ~d/4 and ~n/4, full by ~60%
    of training)."""

    name: str = "relu_teacher"
    dim: int = 20  # d: input dimension (paper: 20)
    n_points: int = 50  # in-context pairs before the last query (paper: 50 train, 75 test)
    depth: int = 3  # N: linear layers of the teacher (paper: 3, 4, 6)
    hidden: int = 100  # K: teacher width [gap; Garg relu_2nn: 100]
    mean: float = 2.0  # the mixture's means are -mean·1 and +mean·1 (paper: 2)
    mix: float = 0.0  # ω₂, weight of N(+mean·1, I) (paper: 0 train; 0, .1, .3, .5 test)
    r2_batch: int = 64  # prompts per batch of the batch-mean R² (paper: 64)
    baseline_epochs: int = 100  # teacher_net baseline: full-batch epochs (paper: 100)
    baseline_lr: float = 1e-3  # teacher_net baseline: Adam lr [gap; digest: 1e-3]
    # teacher_net baseline: the k (examples) it trains at, those <= n_points used (empty: all
    # of 1..n_points); every k trains P networks for baseline_epochs, so a sparse set is cheaper
    baseline_k: tuple[int, ...] = ()
    # Garg et al.'s training curriculum [code: curriculum.dims / curriculum.points]; off at
    # the defaults (a start of 0), see ReLUTeacher.train_sample. d and n at step s:
    # min(dim, dims_start + (s // every) * dims_inc), likewise for n_points.
    curriculum_dims_start: int = 0  # d at step 0; 0: no dims curriculum [Garg: 5 of 20]
    curriculum_dims_inc: int = 1  # + this many dims every `curriculum_every` steps [Garg: 1]
    # in-context pairs before the last query at step 0 (our n_points: Garg's points - 1);
    # 0: no points curriculum [Garg relu_2nn: points 26 -> 101, i.e. 25 -> 100 here]
    curriculum_points_start: int = 0
    curriculum_points_inc: int = 5  # [Garg relu_2nn: +5; linear regression: +2]
    curriculum_every: int = 2000  # steps between increments [Garg: interval 2000]

    @property
    def curriculum(self) -> bool:  # TaskConfig: online batches only
        return bool(self.curriculum_dims_start or self.curriculum_points_start)

    def shape(self) -> tuple[int, int, int]:
        """(d_in, d_out, seq_len) of the built task, from the config alone (planning)."""
        return self.dim, 1, 2 * self.n_points + 1

    def check(self, path: str) -> None:
        for name, low in (("dim", 1), ("n_points", 1), ("depth", 1), ("hidden", 1),
                          ("r2_batch", 2), ("baseline_epochs", 0),
                          ("curriculum_dims_start", 0), ("curriculum_dims_inc", 1),
                          ("curriculum_points_start", 0), ("curriculum_points_inc", 1),
                          ("curriculum_every", 1)):
            value = getattr(self, name)
            require(value >= low, f"{path}.{name}", f"must be >= {low}, got {value}")
        for name, end in (("curriculum_dims_start", "dim"), ("curriculum_points_start",
                                                               "n_points")):
            value, limit = getattr(self, name), getattr(self, end)
            require(value <= limit, f"{path}.{name}", f"must be <= {end} ({limit}), got {value}")
        require(0.0 <= self.mix <= 1.0, f"{path}.mix", f"must be in [0, 1], got {self.mix}")
        require(self.mean >= 0, f"{path}.mean", f"must be >= 0, got {self.mean}")
        require(self.baseline_lr > 0, f"{path}.baseline_lr", f"must be > 0, got {self.baseline_lr}")
        require(all(k >= 1 for k in self.baseline_k), f"{path}.baseline_k",
                f"every k must be >= 1, got {list(self.baseline_k)}")


class ReLUTeacher(TaskBase):
    causal = True
    baseline_names = ("ols", "teacher_net")  # eval.baselines this task defines

    def __init__(self, cfg: ReLUTeacherConfig, task_seed: int, device, dtype):
        del task_seed  # nothing fixed per task: every prompt draws its own teacher
        self.cfg, self.device, self.dtype = cfg, device, dtype
        N = cfg.n_points
        self.prompt_len = N
        self.d_in, self.d_out, self.seq_len = cfg.shape()
        self.positions = all_prefix_positions(N)
        self.mask = self.positions >= 0
        self.has_curriculum = bool(cfg.curriculum_dims_start or cfg.curriculum_points_start)
        self._positions_dev = self.positions.to(device)  # curriculum masks, built on device

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        return self._sample(batch_size, GeneratorDraws(generator, self.device), self.cfg.dim)

    def curriculum(self, step: int) -> tuple[int, int]:
        """(d, n) at training step `step` (0-based) under Garg et al.'s curriculum: the
        non-zero input dims and the in-context pairs before the last supervised query; each
        starts at its `curriculum_*_start` and grows by its `_inc` every `curriculum_every`
        steps up to the task's dim / n_points (a start of 0: the full value from step 0)."""
        cfg, grown = self.cfg, step // self.cfg.curriculum_every
        d = min(cfg.dim, cfg.curriculum_dims_start + grown * cfg.curriculum_dims_inc) \
            if cfg.curriculum_dims_start else cfg.dim
        n = min(cfg.n_points, cfg.curriculum_points_start + grown * cfg.curriculum_points_inc) \
            if cfg.curriculum_points_start else cfg.n_points
        return d, n

    def train_sample(self, batch_size: int, generator: torch.Generator, step: int) -> Batch:
        """The training batch at `step` (the trainer's call; evaluation uses `sample`, the
        full task). Garg et al.'s curriculum [code: samplers.py, curriculum.py], at (d, n) =
        `curriculum(step)`:

        * dims: every x has only its first d coordinates non-zero (the rest set to 0 after
          drawing, before y = f(x) is computed), as Garg's `n_dims_truncated`;
        * points: the prompt has n pairs before its last query. The tensors keep the task's
          full length and the loss mask covers only the x-tokens of positions 0..n (Garg
          trains on a prompt of n + 1 points, predicting at every x). The two are the same
          loss and gradients for a causal model (this task's models are causal): an output
          at token t reads tokens <= t only, so the tokens after the n-th pair change no
          supervised output (relu_attention's 1/(t+1) normalisation counts visible keys, not
          the prompt's length). The cost is the full length's compute from step 0.

        Every step draws the same random numbers as `sample`, so the batch equals
        `sample`'s once (d, n) reach (dim, n_points), and with the curriculum off always."""
        return self._curriculum_batch(batch_size, GeneratorDraws(generator, self.device), step)

    def sample_counter(self, batch_size: int, draws: CounterDraws) -> Batch:
        """DrawsByCounter: the K members' training batches at `draws.step` (the curriculum's
        step), (K, B, ...)."""
        batch = self._curriculum_batch(batch_size, draws, draws.step)
        return stacked(batch, draws.members)

    def _curriculum_batch(self, batch_size: int, draws: Draws, step: int) -> Batch:
        d, n = self.curriculum(step)
        batch = self._sample(batch_size, draws, d)
        if n < self.cfg.n_points:
            batch.mask = (self._positions_dev >= 0) & (self._positions_dev <= n)
        return batch

    def _sample(self, batch_size: int, draws: Draws, d: int) -> Batch:
        """Prompts whose x's are zero beyond their first d coordinates (d = dim: all); a
        stack's counter draws give K·B prompts."""
        cfg, B, N = self.cfg, batch_size, self.cfg.n_points
        noise = draws.normal((B, N + 1, cfg.dim), self.dtype)
        plus = draws.uniform((B, N + 1, 1), self.dtype) < cfg.mix  # component 2: prob. ω₂
        xs = noise + cfg.mean * (2 * plus.to(self.dtype) - 1)  # (B, N+1, d)
        if d < cfg.dim:
            xs[..., d:] = 0.0  # Garg's truncated dims: zero, then y = f(x)
        layers = he_layers(B, cfg.dim, cfg.hidden, cfg.depth)  # he_network's, drawn here
        weights = [W * std for W, (_, std) in zip(
            draws.normals([shape for shape, _ in layers], self.dtype), layers, strict=True)]
        ys = network_forward(weights, xs)  # (B, N+1)
        inputs, targets = interleave(xs, ys)
        extras = {"xs": xs, "ys": ys, **{f"teacher_{i}": W for i, W in enumerate(weights)}}
        return Batch(inputs, targets, self.device_mask, extras)

    @staticmethod
    def teacher(batch: Batch) -> list[torch.Tensor]:
        """The prompts' teacher weights, layer by layer."""
        n = sum(key.startswith("teacher_") for key in batch.extras)
        return [batch.extras[f"teacher_{i}"] for i in range(n)]

    # -- evaluation hooks (icl_core.training.evaluate) -------------------------------------------
    def context_problems(self, inputs: torch.Tensor) -> list[RegressionProblem]:
        """The k examples before each x-token, read from the inputs (trivial predictors)."""
        return prefix_problems(*deinterleave(inputs), self.positions)

    def r2_rows(self, pred_PxM: torch.Tensor, target_PxM: torch.Tensor, positions,
                infer_iter=None) -> list[dict]:
        """R² rows (pooled and batch-mean) at each position."""
        rows = []
        for stat, values in (("pooled", pooled_r2(pred_PxM, target_PxM)),
                             ("batch_mean", batch_mean_r2(pred_PxM, target_PxM,
                                                          self.cfg.r2_batch))):
            rows += [{"metric": "r2", "statistic": stat, "position": int(k),
                      "value": float(v), "infer_iter": infer_iter}
                     for k, v in zip(positions, values.tolist(), strict=True)]
        return rows

    def prediction_metrics(self, pred_PxTxO: torch.Tensor, batch: Batch) -> list[dict]:
        """R² of the model's predictions per position k = 0..n (float64)."""
        tokens = torch.nonzero(self.mask).flatten()
        pred = pred_PxTxO[:, tokens, 0].double()
        return self.r2_rows(pred, batch.targets[:, tokens, 0].double(),
                            self.positions[tokens].tolist())

    def baseline_ks(self) -> list[int]:
        ks = self.cfg.baseline_k or range(1, self.cfg.n_points + 1)
        return sorted({k for k in ks if k <= self.cfg.n_points})

    def baseline_errors(self, batch: Batch, name: str, precision, eval_cfg) -> list[dict]:
        """Rows of a baseline on these prompts: R² per k (pooled and batch-mean).

        teacher_net: trained in float32 only (returns nothing for float64: the reference is
        the trained network, not its arithmetic); per epoch (infer_iter = epoch, 0 = the
        fresh network) and at the best epoch per k and statistic (infer_iter null), with the
        best epoch as metric "best_epoch". Init seeds: eval.seed and k, so every member with
        the same test prompts gets the same baseline. ols: least squares with an intercept."""
        xs, ys = batch.extras["xs"].to(precision), batch.extras["ys"].double()
        rows: list[dict] = []
        if name == "ols":
            from icl_core.algorithms.baselines import ols

            ones = torch.ones_like(xs[..., :1])
            feats = torch.cat([xs, ones], dim=-1)  # (P, n+1, d+1)
            preds = [(ols(feats[:, :k], ys[:, :k].to(precision)) * feats[:, k]).sum(-1)
                     for k in self.baseline_ks()]
            pred = torch.stack(preds, dim=1).double()
            return self.r2_rows(pred, ys[:, self.baseline_ks()], self.baseline_ks())
        if name != "teacher_net":
            raise ValueError(f"eval.baselines: {name!r} is not defined for relu_teacher; "
                             "valid choices: ols, teacher_net")
        if precision != torch.float32:
            return rows
        cfg = self.cfg
        for k in self.baseline_ks():
            gen = torch.Generator(device=xs.device).manual_seed(
                derive_seed(eval_cfg.seed, "teacher_net", k))
            init = he_network(xs.shape[0], cfg.dim, cfg.hidden, cfg.depth, gen, xs.device,
                              precision)
            preds = train_networks(xs[:, :k], ys[:, :k].to(precision), xs[:, k], init,
                                   cfg.baseline_epochs, cfg.baseline_lr)  # (E+1, P)
            target = ys[:, k:k + 1].expand(-1, preds.shape[0])
            per_epoch = self.r2_rows(preds.t().double(), target, [k] * preds.shape[0])
            for i, row in enumerate(per_epoch):
                row["infer_iter"] = i % preds.shape[0]
            rows += per_epoch
            for stat in ("pooled", "batch_mean"):
                values = torch.tensor([r["value"] for r in per_epoch if r["statistic"] == stat])
                values = torch.nan_to_num(values, nan=-torch.inf)
                best = int(values.argmax())
                rows += [{"metric": "r2", "statistic": stat, "position": k,
                          "value": float(values[best]), "infer_iter": None},
                         {"metric": "best_epoch", "statistic": stat, "position": k,
                          "value": float(best), "infer_iter": None}]
        return rows
