"""Adam / AdamW over a stack's weights with a step count per member, for stacks that skip
some members' steps (train.skip_grad_norm, Liu et al.'s code rule).

torch's Adam keeps one step count per tensor, so it steps every member of a stack alike.
Alone, a member whose step is skipped (gradient norm above skip_grad_norm) keeps its weights,
its moments and its step count (MemberRun does not call `optimizer.step()`), and its later
bias corrections use its own count. `MaskedAdam.step(took)` does that for K members at once,
on the device and with no host read (so a stack's step can still be a CUDA graph): each
member's update is torch's Adam / AdamW formula at its own step count, applied where `took`
(K,) holds. A skipped member's gradient is zeroed first and its update scaled by 0, so its
weights and moments stay bit for bit, whatever its gradient held (inf or NaN included).

The arithmetic runs on the group's gradients and moments as (K, P) matrices (P: a member's
parameter count), not tensor by tensor: a step dispatches about 40 operations and 4 per
weight tensor (torch's Adam on a CPU: 9 per tensor; a loop over the tensors with the mask:
about 17), and holds one (K, P) buffer beyond the state (icl_core/planning/memory.py counts
it). The weights that have gradients must be the same at every step (one count per member
serves them all; torch counts per tensor): a change raises.
Each weight tensor's `exp_avg` / `exp_avg_sq` is a view of its columns, so the state is
torch's, with `step` a (K,) float32 tensor: member k's slice of every slot is the ordinary
Adam state it would hold alone (icl_core.training.stacked.StackedRun.sync_member).
"""

from __future__ import annotations

import torch

MOMENTS = ("exp_avg", "exp_avg_sq")


def steps_masked(train, dtype: str, cuda: bool, stacked: bool) -> bool:
    """Whether a step's optimizer is MaskedAdam: a stack's (or a captured step's) with
    train.skip_grad_norm; and a captured step's on CUDA whose weights are not float32, where
    torch's fused capturable Adam would read its lr tensor as float32 (and refuse another)."""
    if train.optimizer not in ("adam", "adamw") or not (stacked or train.cuda_graph):
        return False
    return train.skip_grad_norm is not None or (train.cuda_graph and cuda and dtype != "float32")


class MaskedAdam(torch.optim.Optimizer):
    """Adam (L2 weight decay) or, with `decoupled`, AdamW over stacked (K, ...) parameters."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 decoupled: bool = False):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps,
                                  "weight_decay": weight_decay})
        self.decoupled = decoupled
        self._flat: dict[int, dict] = {}  # a group's (K, P) moments and step counts

    @classmethod
    def build(cls, params: list, cfg, static: bool = False) -> MaskedAdam:
        """From a member's TrainConfig (adam: L2 weight decay; adamw: decoupled). `static`
        (a step captured as a CUDA graph): the learning rate is a tensor the scheduler fills
        in place, as icl_core.algorithms.optimizers makes it for torch's Adam."""
        lr = torch.tensor(cfg.lr, dtype=torch.promote_types(params[0].dtype, torch.float32),
                          device=params[0].device) if static else cfg.lr
        return cls(params, lr=lr, betas=tuple(cfg.betas), eps=cfg.eps,
                   weight_decay=cfg.weight_decay, decoupled=cfg.optimizer == "adamw")

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._flat.clear()  # gathered again from the loaded tensors at the next step

    @torch.no_grad()
    def step(self, took: torch.Tensor, scale: torch.Tensor | None = None) -> None:
        """One step of the members where `took` (K,) bool holds; the others are unchanged.
        `scale` (K,): each member's gradients times it first (its clipping coefficient)."""
        for index, group in enumerate(self.param_groups):
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._group_step(index, group, params, took, scale)

    def _flat_state(self, index: int, params: list, took: torch.Tensor) -> dict:
        """The group's moments as (K, P) matrices whose column blocks each parameter's state
        views, its columns and the members' step counts (K,), made once (and after a load)."""
        key = tuple(id(p) for p in params)
        flat = self._flat.get(index)
        if flat is not None and flat["key"] == key:
            return flat
        if flat is not None:  # torch's Adam would count steps per tensor: one count can't
            raise RuntimeError("MaskedAdam: the weights that have gradients changed between "
                               "steps; a stack that skips steps (train.skip_grad_norm) needs "
                               "every step to train the same weights")
        K = took.shape[0]
        sizes = [p[0].numel() for p in params]

        def gathered(name: str) -> torch.Tensor:
            return torch.cat([self.state[p][name].reshape(K, n) if name in self.state[p] else
                              p.new_zeros(K, n) for p, n in zip(params, sizes, strict=True)], 1)

        step = self.state[params[0]].get("step")
        flat = {"key": key, **{name: gathered(name) for name in MOMENTS},
                "step": torch.zeros(K, dtype=torch.float32, device=took.device)
                if step is None else step.to(took.device, torch.float32).clone(),
                "columns": []}
        start = 0
        for p, n in zip(params, sizes, strict=True):
            flat["columns"].append((start, start + n))
            state = self.state[p]
            for name in MOMENTS:
                state[name] = flat[name][:, start:start + n].view(p.shape)
            state["step"] = flat["step"]
            start += n
        self._flat[index] = flat
        return flat

    def _group_step(self, index: int, group: dict, params: list, took: torch.Tensor,
                    scale: torch.Tensor | None) -> None:
        beta1, beta2 = group["betas"]
        lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
        flat = self._flat_state(index, params, took)
        count, K, dtype = flat["step"], took.shape[0], params[0].dtype
        # per member (K, 1): its step count after this step (a skipped member's own, at least
        # 1 so its unused corrections stay finite) and the factors, computed in float64 as
        # torch computes them on the host, then in the weights' dtype (float32 at least, as
        # torch's arithmetic for bfloat16 weights)
        factor = torch.promote_types(dtype, torch.float32)
        on = took.to(torch.float64)
        counted = count.double()
        n = torch.where(took, counted + 1, counted.clamp(min=1))
        step_size = (lr / (1 - torch.pow(beta1, n)) * on).to(factor)[:, None]  # 0: skipped
        root2 = torch.sqrt(1 - torch.pow(beta2, n)).to(factor)[:, None]
        keep1 = ((1 - beta1) * on).to(factor)[:, None]  # lerp weight 0 keeps a skipped m
        keep2 = torch.where(took, torch.full_like(on, beta2), 1.0).to(factor)[:, None]  # v kept
        # in place past the one (K, P) buffer that gathers the gradients: memory.py counts it
        grad = torch.cat([p.grad.reshape(K, -1) for p in params], 1)
        if scale is not None:
            grad.mul_(scale[:, None])
        if decay and not self.decoupled:  # Adam's L2 decay: in the gradient (g + decay * w)
            for p, (a, b) in zip(params, flat["columns"], strict=True):
                grad[:, a:b].add_(p.reshape(K, -1), alpha=decay)
        grad.masked_fill_(~took[:, None], 0)
        exp_avg, exp_avg_sq = flat["exp_avg"], flat["exp_avg_sq"]
        if exp_avg.dtype == factor:
            exp_avg.lerp_(grad, keep1)
        else:  # bfloat16 moments: lerp in float32, as torch's kernel computes a bf16 lerp
            exp_avg.copy_(exp_avg.to(factor).lerp_(grad.to(factor), keep1))
        exp_avg_sq.mul_(keep2).addcmul_(grad, grad, value=1 - beta2)
        update = torch.sqrt(exp_avg_sq, out=grad).div_(root2).add_(eps)  # the denominator
        torch.div(exp_avg, update, out=update).mul_(step_size)
        shrink = (1 - lr * decay * on).to(factor) if decay and self.decoupled else None
        for p, (a, b) in zip(params, flat["columns"], strict=True):
            if shrink is not None:  # AdamW: the weights decay before the update
                p.mul_(shrink.view((-1,) + (1,) * (p.dim() - 1)))
            p.sub_(update[:, a:b].view(p.shape))
        count.add_(took.to(count.dtype))
