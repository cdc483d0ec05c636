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

from typing import Protocol

import torch

from icl_core.batch import Batch, RegressionProblem, masked_mse  # noqa: F401  (re-exported)


class Task(Protocol):
    d_in: int
    d_out: int
    seq_len: int
    prompt_len: int  # in-context examples per prompt (the prompt_len column)
    causal: bool
    positions: torch.Tensor  # (T,) long

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch: ...


# Optional capabilities (icl_core.evaluate / icl_core.trivial look them up with getattr):
#   regression_problems(batch)  the least-squares problem per supervised token (OLS, GD)
#   baseline_errors(...)        a task's own classical baselines
#   prediction_metrics(pred, batch), iterate(predict, batch, steps, lr), pool_tokens
#   context_problems(inputs)    the in-context examples (x, y) available to each supervised
#                               token, read from the inputs alone: prompt_mean and ridge
#   trivial_predictors()        {name: fn(inputs) -> outputs}: a task's own trivial predictors
#   trivial_ridge = False       no ridge predictor from context_problems


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
