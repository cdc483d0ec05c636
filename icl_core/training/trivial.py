"""Trivial predictors: the levels that a model which learned nothing can reach.

Each is a function of a prompt's inputs only, like a model: inputs (P, T, d_in) float64 ->
outputs (P, T, d_out) float64 (zero at unsupervised tokens). The evaluator
(`icl_core.training.evaluate.trivial_rows`) measures them exactly like the model, on the same test
prompts and through the same code (per-position or pooled MSE statistics, the task's
`prediction_metrics` such as R², its `iterate` rows), as rows with `predictor` = the name,
at every final evaluation (`evaluate(..., baselines=True)`), whatever `eval.baselines` says.

Names (the analysis draws them by these exact strings):

* ``zero``: 0 everywhere; every task.
* ``prompt_mean``: for each supervised token, the mean of the in-context targets available to
  it, ignoring its x (0 before any example). Tasks with `context_problems` get it here; a
  task whose prompt holds no targets of the model's kind says its own meaning in
  `trivial_predictors` (the target's mean given nothing the model must learn from).
* ``ridge``: ridge regression WITH an unpenalised intercept, fitted per prompt on the same
  in-context examples, predicting at the query: min over (W, b) of
  (1/k) Σ_i |Wᵀx_i + b − y_i|² + λ |W|²_F with λ = `RIDGE_LAMBDA` = 1e-3 (per example: on the
  summed loss that is λ·k), solved in float64 on the centred data by Cholesky:
  (X_cᵀX_c + λk I) W = X_cᵀ(Y − ȳ), b = ȳ − x̄ᵀW. Unlike OLS at N = D (baselines.py), these
  normal equations are safe: λ > 0 bounds their condition number by 1 + σ_max(X_c)²/(λk)
  (~1e4 for unit-scale x). All tokens' systems are solved together (`ridge_many`: Cholesky,
  `cholesky_inverse`, a matmul, in a few large batched calls): on a loaded 2-core CPU with
  2 threads, one batched lstsq / solve / cholesky_solve call per token over 1000 prompts ran
  20-300x slower than single-threaded (cot_mlp's 246 ridge fits: minutes; now seconds).
  0 examples: 0; 1 example: its target (= prompt_mean). Every task with `context_problems`
  unless it sets `trivial_ridge = False`.
* ``no_retrieval``: qstr only (`SparseRetrieval.trivial_predictors`).

A task adds or overrides predictors with a `trivial_predictors()` method returning
{name: fn(inputs) -> outputs}. The task's floor (`icl_core.algorithms.floor`, predictor "floor": the
best predictor that knows its law) is measured beside these, but is not one of them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from icl_core.tasks.base import HasContextProblems, HasTrivialPredictors

RIDGE_LAMBDA = 1e-3  # ridge penalty per in-context example (mean-loss scale)

Predict = Callable[[torch.Tensor], torch.Tensor]


def zero(task) -> Predict:
    """The zero predictor: (P, T, d_out) zeros."""
    return lambda inputs: inputs.new_zeros(inputs.shape[0], inputs.shape[1], task.d_out)


def prompt_mean(X, Y, x_query) -> torch.Tensor:
    """Mean of the k in-context targets Y (P, k, O), ignoring every x; 0 when k = 0: (P, O)."""
    P, k, n_out = Y.shape
    return Y.mean(1) if k else Y.new_zeros(P, n_out)


def ridge(X, Y, x_query, lam: float = RIDGE_LAMBDA) -> torch.Tensor:
    """Ridge with an unpenalised intercept on (X (P, k, D), Y (P, k, O)) at x_query (P, D),
    penalty λ per example (module docstring): (P, O). 0 when k = 0."""
    return ridge_many([(X, Y, x_query)], lam)[0]


SOLVE_BUDGET = 2 ** 24  # Gram entries solved per batched call (128 MiB in float64)


def ridge_many(problems: list, lam: float = RIDGE_LAMBDA) -> list[torch.Tensor]:
    """`ridge` of many problems [(X, Y, x_query)] sharing P, D and O, their systems solved
    together in few batched calls (module docstring: per-call cost on a loaded CPU):
    (X_cᵀX_c / k + λ I) W = X_cᵀ(Y − ȳ) / k, the same W as the λk form."""
    out: list = [None] * len(problems)
    pending: list = []  # (index, gram, rhs, centred query, ȳ)

    def flush():
        gram = torch.cat([g for _, g, _, _, _ in pending])
        inv = torch.cholesky_inverse(torch.linalg.cholesky(gram))
        W = (inv @ torch.cat([r for _, _, r, _, _ in pending])).split(
            [g.shape[0] for _, g, _, _, _ in pending])
        for (i, _, _, xq, y_bar), w in zip(pending, W, strict=True):
            out[i] = y_bar + (xq.unsqueeze(1) @ w)[:, 0]
        pending.clear()

    for i, (X, Y, x_query) in enumerate(problems):
        P, k, D = X.shape
        if k == 0:
            out[i] = Y.new_zeros(P, Y.shape[-1])
            continue
        x_bar, y_bar = X.mean(1), Y.mean(1)
        Xc = X - x_bar.unsqueeze(1)
        gram = Xc.transpose(1, 2) @ Xc / k + lam * torch.eye(D, dtype=X.dtype, device=X.device)
        rhs = Xc.transpose(1, 2) @ (Y - y_bar.unsqueeze(1)) / k  # (P, D, O)
        pending.append((i, gram, rhs, x_query - x_bar, y_bar))
        if len(pending) * P * D * D >= SOLVE_BUDGET:
            flush()
    if pending:
        flush()
    return out


def from_context(task, rule) -> Predict:
    """A predictor applying `rule([(X, Y, x_query)]) -> [(P, O)]` to the supervised tokens'
    in-context examples, as the task's `context_problems(inputs)` gives them."""

    def predict(inputs: torch.Tensor) -> torch.Tensor:
        out = inputs.new_zeros(inputs.shape[0], inputs.shape[1], task.d_out)
        problems = task.context_problems(inputs)
        preds = rule([(p.X, p.y.unsqueeze(-1) if p.y.ndim == 2 else p.y, p.x_query)
                      for p in problems])  # y (P, k) or (P, k, O)
        for p, pred in zip(problems, preds, strict=True):
            out[:, p.token] = pred
        return out

    return predict


def prompt_means(problems: list) -> list[torch.Tensor]:
    return [prompt_mean(*p) for p in problems]


def predictors(task) -> dict[str, Predict]:
    """{name: predictor} of every trivial predictor that applies to `task` (module doc)."""
    out = {"zero": zero(task)}
    if isinstance(task, HasContextProblems):
        out["prompt_mean"] = from_context(task, prompt_means)
        if task.trivial_ridge:
            out["ridge"] = from_context(task, ridge_many)
    if isinstance(task, HasTrivialPredictors):
        out.update(task.trivial_predictors())
    return out
