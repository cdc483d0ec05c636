"""What tasks produce and models consume, in a module of its own: models and tasks import
these and never each other.

`Batch` (a prompt batch, the contract in icl_core/tasks/base.py), `RegressionProblem` (the
least-squares problem behind a supervised token, for the classical baselines), `masked_mse`
(the training loss, which looped models also apply per loop iteration) and `Layout` (the
token channels of the least-squares-features prompts, which the hand-built BaseConv GD
construction reads).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Batch:
    inputs: torch.Tensor  # (B, T, d_in)
    targets: torch.Tensor  # (B, T, d_out)
    mask: torch.Tensor  # (T,) bool
    extras: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class RegressionProblem:
    """One least-squares problem per prompt, for the classical baselines (OLS, GD).

    X (B, k, D), y (B, k): the k in-context examples; x_query (B, D); `token` is the index
    of the token whose prediction this problem answers. A task's `context_problems` (the
    examples the trivial predictors fit, `icl_core.training.trivial`) may give vector targets y (B, k, O).
    """

    X: torch.Tensor
    y: torch.Tensor
    x_query: torch.Tensor
    token: int


def masked_mse(pred_BxTxO: torch.Tensor, batch: Batch) -> torch.Tensor:
    """The training loss: mean squared error over supervised tokens and output dims.

    Written without boolean indexing, whose output size the host must read: on a GPU that
    would be a device sync every training step."""
    B, _, n_out = pred_BxTxO.shape
    err = (pred_BxTxO - batch.targets).pow(2)
    supervised = torch.where(batch.mask[None, :, None], err, 0.0).sum()
    return supervised / (B * n_out * batch.mask.sum())


class Layout:
    """Channel offsets of the token for dimension D (the construction's layout too)."""

    def __init__(self, D: int):
        self.D, self.width = D, D * D + 3 * D + 1
        self.x, self.y, self.w = 0, D, D + 1
        self.a, self.m = 2 * D + 1, 3 * D + 1
        self.features = range(self.a, self.width)  # a and M: D + D² channels
