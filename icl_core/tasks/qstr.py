"""q-sparse token regression, qSTR (Mousavi-Hosseini et al., Def. 2; Figs 1, 2).

A prompt holds N tokens x_1..x_N ~ N(0, I_d) and, per position i, q indices t_i ∈ [N]^q; the
label at i depends only on the tokens the indices point to: y_i = g(x_{t_i1}, ..., x_{t_iq}).
The indices are part of the input, as fixed position codes w_1..w_N ∈ R^{d_e}: token i reads

    z_i = (x_i, w_i, w_{t_i1}, ..., w_{t_iq}) ∈ R^{d + (q+1) d_e}       (the paper's code:
                                                                        no √(d/q) factor)

With N = 3, d = 1, q = 1 and t = (2, 0, 0):
    tokens = [(x_1, w_1, w_3), (x_2, w_2, w_1), (x_3, w_3, w_1)]   targets = ⟨u, (x_3, x_1, x_1)⟩

Every position is supervised (seq2seq, non-causal: the label at i may read any token); the
metric is the MSE pooled over positions, (1/N) Σ_i (ŷ_i - y_i)², which Var(y) = 1 normalises.

* ``simple = True`` (simple-qSTR): one index tuple per prompt, shared by every position.
* ``link = "linear"``: y_i = (1/√q) Σ_l ⟨u, x_{t_il}⟩, u a unit vector fixed by the task seed
  (q = 1: the paper's experiments, Var(y) = 1).
* ``link = "sqnorm"`` (Prop. 3's link): y_i = (1/√(2qd)) Σ_l (‖x_{t_il}‖² − d).
  For q > 1 the q indices of a position are distinct, so Var(y) = 1 exactly (with repeats it
  would not be).

Position codes (Assumption 3): Rademacher vectors {±1/√d_e}^{d_e}, d_e = max(3, ⌊5 ln N⌋)
([code]: ⌊5 ln N⌋; the max keeps N = 2 valid), drawn **vector by vector with rejection**
until |⟨w_i, w_j⟩| ≤ 1/2 against every earlier code (the paper's bound; rejecting the whole
set never succeeds for N >= 16, and the peer code does not enforce it). Codes and u come from
the task seed (on the CPU, so every device sees the same), and are exposed as `codes` and `u`.

Trivial predictors (`trivial_predictors`): zero; prompt_mean, also 0 (no labels in the prompt;
E[y] = 0 for both links); and no_retrieval, the best predictor that does not know which
positions to read: the conditional mean of y_i given all the tokens but not the indices,
E[y_i | x_1..x_N] = q · (1/N) Σ_j g₁(x_j) with y_i = Σ_l g₁(x_{t_il}) (g₁ = ⟨u, x⟩/√q or
(‖x‖² − d)/√(2qd)): the link averaged over positions. Its MSE is 1 − q/N (a_j = g₁(x_j)√q
i.i.d. with mean 0, variance 1: E[(y − √q ā)²] = 1 − 2q/N + q/N), e.g. 0.5 at N = 2, 0.75 at
N = 4 for q = 1; the same for simple-qSTR, whose shared tuple is unknown as well.

[code] The peer code tests on simple prompts even in 1STR runs; here the test prompts follow
the training distribution, and an evaluation point {"test_dist": "simple", "simple": True}
gives the peer's variant without retraining.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from icl_core.common.device import derive_seed
from icl_core.common.validation import require
from icl_core.tasks.base import Batch, TaskBase, TaskConfig
from icl_core.tasks.draws import DrawnBatches, Draws

MAX_TRIES = 10_000  # candidate draws per code before giving up


@dataclass(frozen=True)
class SparseRetrievalConfig(TaskConfig):
    name: str = "qstr"
    n_points: int = 10  # N: tokens per prompt (paper Fig 1a: 2..12; 1b: 25..33)
    dim: int = 10  # d: token dimension (paper: 10)
    q: int = 1  # indices per label (paper's experiments: 1)
    simple: bool = False  # simple-qSTR: one index tuple per prompt
    link: Literal["linear", "sqnorm"] = "linear"  # g: ⟨u, x⟩ (paper) or Prop. 3's ‖x‖² − d
    code_dim: int = 0  # d_e of the position codes; 0: max(3, ⌊5 ln N⌋) ([code])

    def shape(self) -> tuple[int, int, int]:
        """(d_in, d_out, seq_len) of the built task, from the config alone (planning)."""
        return self.d_in, 1, self.n_points

    def check(self, path: str) -> None:
        require(self.n_points >= 2, f"{path}.n_points", f"must be >= 2, got {self.n_points}")
        require(self.dim >= 1, f"{path}.dim", f"must be >= 1, got {self.dim}")
        require(self.q >= 1, f"{path}.q", f"must be >= 1, got {self.q}")
        require(self.q <= self.n_points, f"{path}.q",
                f"q={self.q} distinct indices need q <= n_points={self.n_points}")
        require(self.code_dim >= 0, f"{path}.code_dim", f"must be >= 0, got {self.code_dim}")
        require(self.code_dim == 0 or self.code_dim >= 3, f"{path}.code_dim",
                f"must be 0 (auto) or >= 3, got {self.code_dim}")

    @property
    def d_e(self) -> int:
        return self.code_dim or code_dim(self.n_points)

    @property
    def d_in(self) -> int:
        """Token size D_e = d + (q + 1) d_e (known before the task is built)."""
        return self.dim + (self.q + 1) * self.d_e


def code_dim(n: int) -> int:
    """d_e = max(3, ⌊5 ln N⌋): N = 2 -> 3, 12 -> 12, 100 -> 23 (the paper's Fig 2)."""
    return max(3, int(math.floor(5 * math.log(n))))


def position_codes(n: int, d_e: int, generator: torch.Generator) -> torch.Tensor:
    """(n, d_e) Rademacher codes / √d_e with |⟨w_i, w_j⟩| <= 1/2 for i != j, drawn one vector
    at a time (a candidate is redrawn until it clears every earlier code)."""
    codes = torch.empty(n, d_e, dtype=torch.float64)
    for i in range(n):
        for _ in range(MAX_TRIES):
            cand = (torch.randint(0, 2, (d_e,), generator=generator) * 2 - 1).double()
            cand /= math.sqrt(d_e)
            if i == 0 or (codes[:i] @ cand).abs().max() <= 0.5 + 1e-12:
                codes[i] = cand
                break
        else:
            raise ValueError(f"position codes: no code {i + 1} of {n} in d_e={d_e} dimensions "
                             f"with |<w_i, w_j>| <= 1/2 after {MAX_TRIES} draws; "
                             "raise task.code_dim")
    return codes


def qk_contrast(qk, d: int, d_e: int) -> float:
    """The Fig 2 contrast of a query-key matrix (E, E) (numpy or torch): mean |diagonal of
    the (query w_t, key w_j) block| / mean |entries outside that block| (features ordered
    x | w | w_t: the block is rows d + d_e .. d + 2 d_e, columns d .. d + d_e)."""
    a = torch.as_tensor(qk, dtype=torch.float64).abs()
    block = a[d + d_e:d + 2 * d_e, d:d + d_e]
    outside = torch.ones_like(a, dtype=torch.bool)
    outside[d + d_e:d + 2 * d_e, d:d + d_e] = False
    return float(torch.diagonal(block).mean() / a[outside].mean())


class SparseRetrieval(DrawnBatches, TaskBase):
    causal = False
    pool_tokens = True  # metric: MSE pooled over the N positions of a prompt

    def __init__(self, cfg: SparseRetrievalConfig, task_seed: int, device, dtype):
        self.cfg, self.device, self.dtype = cfg, device, dtype
        g = torch.Generator().manual_seed(derive_seed(task_seed, "qstr_u"))
        u = torch.randn(cfg.dim, generator=g, dtype=torch.float64)
        self.u = (u / u.norm()).to(device=device, dtype=dtype)  # depends on d only
        g = torch.Generator().manual_seed(derive_seed(task_seed, "qstr_codes", cfg.n_points))
        self.codes = position_codes(cfg.n_points, cfg.d_e, g).to(device=device, dtype=dtype)
        self.d_in, self.d_out, self.seq_len = cfg.shape()
        self.prompt_len = cfg.n_points
        self.positions = torch.arange(cfg.n_points)
        self.mask = torch.ones(cfg.n_points, dtype=torch.bool)

    def artifact_metrics(self, artifacts: dict) -> list[dict]:
        """Fig 2's claim as a row: "qk_offblock_ratio" = 1 / `qk_contrast` of head 0's
        query-key matrix (the attention models record "qk"); lower is better, like an error.
        Nothing for a model without one."""
        if "qk" not in artifacts:
            return []
        qk = artifacts["qk"][0]  # head 0: (E, E)
        contrast = qk_contrast(qk, self.cfg.dim, self.cfg.d_e)
        return [{"metric": "qk_offblock_ratio", "statistic": "value", "position": None,
                 "value": 1.0 / contrast if contrast > 0 else float("inf")}]

    def indices(self, batch_size: int, draws: Draws) -> torch.Tensor:
        """(B, N, q) long: t_i per position (distinct within a position when q > 1); the same
        tuple at every position for simple-qSTR. A stack's draws: K·B prompts."""
        N, q = self.cfg.n_points, self.cfg.q
        rows = 1 if self.cfg.simple else N
        if q == 1:
            t = draws.integers(N, (batch_size, rows, 1))
        else:  # q distinct indices: the first q of a random permutation
            keys = draws.uniform((batch_size, rows, N), torch.float32)
            t = keys.argsort(dim=-1)[..., :q]
        return t.expand(t.shape[0], N, q)

    def labels(self, x_BxNxD: torch.Tensor, t_BxNxQ: torch.Tensor) -> torch.Tensor:
        """(B, N, 1): y_i = g(x_{t_i1}, ..., x_{t_iq})."""
        B, N, q = t_BxNxQ.shape
        picked = torch.gather(  # (B, N, q, d): x_{t_il}
            x_BxNxD.unsqueeze(1).expand(B, N, N, x_BxNxD.shape[-1]), 2,
            t_BxNxQ.unsqueeze(-1).expand(B, N, q, x_BxNxD.shape[-1]),
        )
        if self.cfg.link == "linear":
            y = (picked @ self.u).sum(-1) / math.sqrt(q)
        else:
            d = self.cfg.dim
            y = (picked.pow(2).sum(-1) - d).sum(-1) / math.sqrt(2 * q * d)
        return y.unsqueeze(-1)

    def trivial_predictors(self) -> dict:
        """prompt_mean (0) and no_retrieval (the link averaged over positions), module doc."""
        cfg = self.cfg

        def no_retrieval(inputs: torch.Tensor) -> torch.Tensor:
            x = inputs[..., :cfg.dim]  # (P, N, d): the tokens, without the position codes
            if cfg.link == "linear":
                g1 = x @ self.u.to(x.dtype) / math.sqrt(cfg.q)
            else:
                g1 = (x.pow(2).sum(-1) - cfg.dim) / math.sqrt(2 * cfg.q * cfg.dim)
            mean = cfg.q * g1.mean(1, keepdim=True)  # (P, 1): the same at every position
            return mean.expand(-1, inputs.shape[1]).unsqueeze(-1).clone()

        return {"prompt_mean": lambda inputs: inputs.new_zeros(*inputs.shape[:2], 1),
                "no_retrieval": no_retrieval}

    def _draw(self, batch_size: int, draws: Draws) -> Batch:
        N = self.cfg.n_points
        x = draws.normal((batch_size, N, self.cfg.dim), self.dtype)
        B = x.shape[0]  # K·B with a stack's draws (DrawnBatches)
        t = self.indices(batch_size, draws)
        own = self.codes.unsqueeze(0).expand(B, N, -1)  # w_i at position i
        pointed = self.codes[t].flatten(2)  # (B, N, q d_e): w_{t_i1}, ..., w_{t_iq}
        inputs = torch.cat([x, own, pointed], dim=-1)
        mask = self.device_mask
        return Batch(inputs, self.labels(x, t), mask, extras={"x": x, "t": t})
