"""The task contract every study plugs into.

A task is built from its config and a *task seed* (fixed task parameters: teachers, position
codes, covariances, primitive indices come from it), separately from the *training seed*
that drives `sample`. Every prompt layout of the five papers is a `Batch`:

    inputs  (B, T, d_in)   the token sequence a model reads
    targets (B, T, d_out)  what the model should output at each token
    mask    (T,) bool      tokens whose output is supervised and evaluated
    extras  dict           task tensors that baselines and analysis need (e.g. xs, ys, w)

and the task says `d_in`, `d_out`, `seq_len`, whether the model must be `causal`, and
`prompt_len` (examples per prompt) and `positions` (T,): the number of in-context examples before each token's prediction (the
`position` column of evaluation rows; -1 where nothing is predicted).

Layouts this holds: all-prefix interleaved x/y (mask on every x token); fixed-N query-only
(mask on the last token); seq2seq primitives (mask on every token); a vector read at the last
token (d_out = D); the linear-attention column layout (T = n + 1 columns of [x; y]);
non-causal retrieval (causal = False); AR(q) (mask on every next-step token);
chain-of-thought (vector targets on the intermediate tokens).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ClassVar, Protocol, runtime_checkable

import torch

from icl_core.common.batch import Batch, RegressionProblem, masked_mse  # noqa: F401  (re-exported)

# ----------------------------------------------------------------------------- the contract


class TaskConfig:
    """Base of every task config (the frozen dataclass a task registers with `TASKS`).

    Declares no dataclass fields (a config's fields, and so its config hash, are its own).
    `curriculum` is read by `icl_core.spec.config.resolve_member`: a task config whose training
    batches change with the step says so, and online training is then required."""

    name: str

    @property
    def curriculum(self) -> bool:
        """Training batches depend on the step (a curriculum): online batches only."""
        return False


@runtime_checkable
class Task(Protocol):
    """What every task provides (built by `TASKS.build(cfg, task_seed=, device=, dtype=)`):
    the token widths, the prompt length, whether the model must be causal, the supervised
    tokens (`mask`) with their example counts (`positions`), and `sample`. The trainer
    (icl_core.training.train) draws batches with `sample`; the evaluator (icl_core.training.evaluate) reads
    `mask`, `positions` and `prompt_len`; config validation reads `causal` on the class."""

    d_in: int
    d_out: int
    seq_len: int
    prompt_len: int  # in-context examples per prompt (the prompt_len column)
    causal: bool
    mask: torch.Tensor  # (T,) bool: the supervised tokens
    positions: torch.Tensor  # (T,) long

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch: ...


class TaskBase:
    """Base class of every registered task: the class-level flags, with their defaults.

    pool_tokens: the evaluator (icl_core.training.evaluate) pools a prompt's error over all its
      supervised tokens and outputs (one row, position null) instead of one per position.
    trivial_ridge: icl_core.training.trivial fits the `ridge` trivial predictor on `context_problems`
      (False: the prompt's examples are not an (x, y) regression, e.g. AR(q)).
    baseline_names: the eval.baselines this task defines (None: any of BASELINES); checked
      by icl_core.spec.config.resolve_member.
    """

    causal: ClassVar[bool]
    pool_tokens: ClassVar[bool] = False
    trivial_ridge: ClassVar[bool] = True
    baseline_names: ClassVar[tuple[str, ...] | None] = None

    @functools.cached_property
    def device_mask(self) -> torch.Tensor:
        """`mask` on the task's device, copied once: a drawn batch's mask without a host-to-
        device copy at every draw (a copy a CUDA graph's capture refuses; on a CPU, `mask`)."""
        return self.mask.to(self.device)


# ----------------------------------------------------------------------------- capabilities
# Optional: a task implements the methods of a capability, and the core asks
# `isinstance(task, Capability)` (or `issubclass(task_cls, ...)` before one is built).


@runtime_checkable
class HasRegressionProblems(Protocol):
    """The least-squares problem behind each supervised token, so the classical baselines
    (OLS, GD, ... in icl_core.algorithms.baselines) run on the very test prompts. Called by
    icl_core.training.evaluate (baseline_rows, tuned_steps); config validation accepts eval.baselines
    only for a task with this or `HasBaselineErrors`."""

    def regression_problems(self, batch: Batch) -> list[RegressionProblem]: ...


@runtime_checkable
class HasBaselineErrors(Protocol):
    """A task's own classical baselines: it says what they measure (e.g. the error of w
    rather than of a prediction). Yields (metric, infer_iter, (P,) errors) or finished row
    dicts per baseline name and precision. Called by icl_core.training.evaluate.baseline_rows in place
    of `regression_problems`."""

    def baseline_errors(self, batch: Batch, name: str, precision: torch.dtype,
                        eval_cfg) -> list: ...


@runtime_checkable
class HasArtifactMetrics(Protocol):
    """Rows the task reads off the trained model's recorded arrays (`model.artifacts()`, e.g.
    attention weights) at the final evaluation: dicts with metric, statistic, value (position
    None). Called by icl_core.training.evaluate for models that record artifacts."""

    def artifact_metrics(self, artifacts: dict) -> list[dict]: ...


@runtime_checkable
class HasPredictionMetrics(Protocol):
    """Rows the task computes from all predictions at once (e.g. R² pooled over prompts):
    dicts with metric, statistic, value, position. Called by icl_core.training.evaluate for the model
    and every trivial predictor."""

    def prediction_metrics(self, pred_PxTxO: torch.Tensor, batch: Batch) -> list[dict]: ...


@runtime_checkable
class Iterates(Protocol):
    """Iterative inference: w <- w - lr * predict(prompt with w), `steps` iteration counts
    reported as "w_mse" rows (infer_iter column) when eval.infer_steps is set. Called by
    icl_core.training.evaluate.prediction_rows."""

    def iterate(self, predict: Callable, batch: Batch, steps,
                lr: float) -> dict[int, torch.Tensor]: ...


@runtime_checkable
class HasContextProblems(Protocol):
    """The in-context examples (x, y) available to each supervised token, read from the
    inputs alone: icl_core.training.trivial fits the `prompt_mean` and `ridge` predictors on them."""

    def context_problems(self, inputs: torch.Tensor) -> list[RegressionProblem]: ...


@runtime_checkable
class HasTrivialPredictors(Protocol):
    """A task's own trivial predictors {name: fn(inputs) -> outputs} (e.g. qSTR's
    `no_retrieval`), scored by icl_core.training.evaluate beside the shared ones (icl_core.training.trivial)."""

    def trivial_predictors(self) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]: ...


@runtime_checkable
class HasFloor(Protocol):
    """The best predictor that knows the task's law (its Bayes posterior mean, icl_core.algorithms.floor):
    fn(inputs) -> outputs, or None where the task gives none at this config. Scored by
    icl_core.training.evaluate (`floor_rows`) beside the trivial predictors, as predictor "floor"; a
    task without it has floor 0 error (R² 1) in the learned-regime check (analysis.reading.regime)."""

    def floor_predictor(self) -> Callable[[torch.Tensor], torch.Tensor] | None: ...


@runtime_checkable
class SamplesTrainingBatches(Protocol):
    """A training curriculum: the online training batch at optimizer step `step` (a pure
    function of the step, so a resumed run redraws the same batches). Called by
    icl_core.training.train.train_batch (MemberRun and StackedRun); others train on `sample`."""

    def train_sample(self, batch_size: int, generator: torch.Generator, step: int) -> Batch: ...


@runtime_checkable
class DrawsByCounter(Protocol):
    """Training batches of K members in one call from counter-based draws (train.draws =
    "counter", icl_core.tasks.draws.CounterDraws): tensors (K, B, ...), the mask (T,) shared;
    `draws.step` is the optimizer step (a curriculum reads it). Member k's batch is a pure
    function of its key and the step, the same alone (K = 1) or stacked. Called by
    icl_core.training.train.train_batch (MemberRun and StackedRun); config validation refuses
    train.draws = "counter" for a task without it."""

    def sample_counter(self, batch_size: int, draws) -> Batch: ...


@runtime_checkable
class KnowsInputWidth(Protocol):
    """A task *config* that knows the token width d_in before the task is built, so
    config validation can ask a model config that `ChecksInput` (icl_core.models.base)."""

    @property
    def d_in(self) -> int: ...


@runtime_checkable
class KnowsShape(Protocol):
    """A task *config* that gives its built task's (d_in, d_out, seq_len) without building
    it, so planning never allocates a task's tensors (icl_core.training.flops); a config without it
    is planned by building the task."""

    def shape(self) -> tuple[int, int, int]: ...


@runtime_checkable
class KnowsMemory(Protocol):
    """A task *config* that gives the bytes of the buffers its built task holds for good (a
    d x d covariance, teacher weights), for the planner's memory estimate (icl_core.planning.memory);
    a config without it holds none worth counting."""

    def fixed_bytes(self) -> float: ...


CAPABILITIES = (HasRegressionProblems, HasBaselineErrors, HasPredictionMetrics, Iterates,
                HasContextProblems, HasTrivialPredictors, HasFloor, SamplesTrainingBatches,
                DrawsByCounter)


def all_prefix_positions(n: int) -> torch.Tensor:
    """Positions of the all-prefix layout [x1, y1, ..., xN, yN, x_query] (2N + 1 tokens):
    x-token k predicts y_k after k examples; y-tokens predict nothing (-1)."""
    positions = torch.full((2 * n + 1,), -1, dtype=torch.long)
    positions[0::2] = torch.arange(n + 1)
    return positions


def deinterleave(inputs_BxTxD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The points of all-prefix inputs, read back: xs (B, N+1, D) and ys (B, N)."""
    return inputs_BxTxD[:, 0::2], inputs_BxTxD[:, 1::2, 0]


def prefix_problems(xs_BxMxD: torch.Tensor, ys_BxM: torch.Tensor, positions: torch.Tensor,
                    ) -> list[RegressionProblem]:
    """The problem behind each supervised token (position k >= 0): the first k points as
    examples, point k as the query."""
    return [RegressionProblem(xs_BxMxD[:, :k], ys_BxM[:, :k], xs_BxMxD[:, k], token)
            for token, k in enumerate(positions.tolist()) if k >= 0]


def interleave(xs_BxMxD: torch.Tensor, ys_BxM: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """All-prefix inputs (B, 2N+1, D) [x1, y1·e1, ..., xN, yN·e1, x_{N+1}] and targets
    (B, 2N+1, 1) with y_k at x-token k, from M = N + 1 points."""
    B, M, D = xs_BxMxD.shape
    n = M - 1
    inputs = xs_BxMxD.new_zeros(B, 2 * n + 1, D)
    inputs[:, 0::2] = xs_BxMxD
    inputs[:, 1::2, 0] = ys_BxM[:, :n]
    targets = xs_BxMxD.new_zeros(B, 2 * n + 1, 1)
    targets[:, 0::2, 0] = ys_BxM
    return inputs, targets
