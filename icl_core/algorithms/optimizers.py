"""Optimizers by name (`train.optimizer`): Adam / AdamW (fused on CUDA) and L-BFGS.

Each entry builds a torch optimizer from the parameters and the member's TrainConfig. Apart
from both the config (which validates the name against OPTIMIZERS) and the trainer (which
builds them), so neither imports the other.
"""

from __future__ import annotations

import torch


def _fused(params: list) -> dict:
    """One fused kernel per optimizer step on CUDA (the default there is foreach, a few per
    parameter group); CPUs keep torch's default (measured: no faster fused)."""
    return {"fused": True} if params and all(p.is_cuda for p in params) else {}


def _adam_family(cls):
    """Adam / AdamW from the config (weight decay: L2 for Adam, decoupled for AdamW). `static`
    (a step captured as a CUDA graph, icl_core.training.stacked): the learning rate is a tensor
    the scheduler fills in place and, on CUDA, the state stays on the device (capturable)."""

    def make(params, cfg, static: bool = False):
        params = list(params)
        if not static:
            return cls(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps,
                       weight_decay=cfg.weight_decay, **_fused(params))
        lr = torch.tensor(cfg.lr, dtype=torch.promote_types(params[0].dtype, torch.float32),
                          device=params[0].device)  # bf16 weights: the lr not rounded to bf16
        on_device = {"fused": True, "capturable": True} if _fused(params) else {"foreach": False}
        return cls(params, lr=lr, betas=tuple(cfg.betas), eps=cfg.eps,
                   weight_decay=cfg.weight_decay, **on_device)

    return make


def _lbfgs(params, cfg):
    return torch.optim.LBFGS(
        params, lr=cfg.lr, history_size=cfg.lbfgs_history, max_iter=cfg.lbfgs_max_iter
    )


# Online optimizers see a fresh batch every step; FIXED_BATCH ones train on one batch drawn
# once (from its own seed, so a resumed run redraws the same batch).
OPTIMIZERS = {"adam": _adam_family(torch.optim.Adam), "adamw": _adam_family(torch.optim.AdamW),
              "lbfgs": _lbfgs}
FIXED_BATCH = {"lbfgs"}
