"""Stacked packing: K members of one architecture trained at once, their weights stacked.

Small models are launch-bound on a GPU: one 4-layer, 64-wide transformer leaves most of it
idle. Members that differ only in their seeds (same model, training, task, dtype and device
config; or in a shape-free task field: stack_rules) train as one `StackedRun`: their weights
are stacked along a leading member axis (`torch.func.stack_module_state`), one vmapped
forward and backward (`torch.func.functional_call`) and one optimizer step train all of them.

Which members stack is icl_core/training/stack_rules.py's (`stack_key`).

Nothing else changes for a member:
- it is initialised by its own `MemberRun` (same seed, same weights as alone) and sees the
  data it would see alone (`_batch`): train.draws = "generator" (the default) draws from each
  member's generator, the task's batch code run once on the K·B prompts where they share the
  task (`draws_together`); "counter" (icl_core/tasks/draws.py) draws all K batches in one call
  from the members' keys and the step, so no aten operation grows with K;
- Adam / AdamW are elementwise, so a member's optimizer state is its slice of the stacked
  state; gradient clipping is per member (its own norm); with train.skip_grad_norm a member
  skips the steps it skips alone (its norm above the limit), decided and applied on the
  device with a step count per member (icl_core/training/masked_adam.py), so a stack that
  skips reads nothing on the host per step and its step can still be a CUDA graph;
- a member whose loss turns non-finite is recorded as diverged at that step, exactly as
  alone; the others go on (its slice is garbage from then on, and no operation mixes slices);
- checkpoints hold one ordinary `MemberRun.state_dict()` per member, so a stacked trial can
  resume stacked or one member after another.

Packed (stacked) and unpacked runs of the same config and seed agree to rounding (a test
checks float64 to rtol 1e-10). L-BFGS stacks run torch's algorithm per member, its tests and
breaks on the device (icl_core/training/stacked_lbfgs.py).

With train.compile a stack's vmapped forward and loss are one torch.compile'd function (the
backward compiled with it; fused elementwise kernels where a lone member compiles only its
model), compiled at the first step; a model with its own training loss (it reads the step on
the host) keeps the eager vmapped loss, with one line saying so.
"""

from __future__ import annotations

import copy
import logging
import math

import torch
from torch.func import functional_call, stack_module_state, vmap

from icl_core.common.batch import Batch
from icl_core.common.compiled import compile_function
from icl_core.models.base import HasTrainingLoss, VmapAware, stack_linear
from icl_core.tasks.base import SamplesTrainingBatches
from icl_core.tasks.draws import DrawnBatches
from icl_core.training.masked_adam import MaskedAdam, steps_masked
from icl_core.training.stack_rules import shape_key
from icl_core.training.stacked_lbfgs import StackedLBFGS
from icl_core.training.train import (
    FIXED_BATCH,
    OPTIMIZERS,
    MemberRun,
    counter_keys,
    lr_factor,
    member_loss,
    still_training,
    train_batch,
    train_until,
)

logger = logging.getLogger(__name__)


def draws_together(runs: list[MemberRun]) -> bool:
    """Whether generator draws go through one call of the task (DrawnBatches.sample_members):
    no training curriculum, and one task (config and seed; a generator stack's may differ)."""
    task, first = runs[0].task, runs[0].member
    return isinstance(task, DrawnBatches) and not isinstance(task, SamplesTrainingBatches) \
        and all(r.member.task == first.task and r.member.task_seed == first.task_seed
                for r in runs)


def _stacked(batches: list[Batch]) -> tuple:
    """The members' batches with a leading K axis (inputs, targets, extras) and the shared
    mask."""
    return (torch.stack([b.inputs for b in batches]), torch.stack([b.targets for b in batches]),
            {k: torch.stack([b.extras[k] for b in batches]) for k in batches[0].extras},
            batches[0].mask)


class _VmapLinear(torch.nn.Linear):
    """nn.Linear as a vmapped stack runs it (models.base.stack_linear: two kernels fewer a
    layer than F.linear's batching rule, the same arithmetic bit for bit). A stack's copy of
    the model only: its class swapped in StackedRun, its weights and names those of
    nn.Linear."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return stack_linear(x, self.weight, self.bias)


# nn.Linear, and the marker subclass nn.MultiheadAttention's out-projection is (no behaviour
# of its own): both swapped for _VmapLinear in a stack's copy
LINEARS = (torch.nn.Linear, torch.nn.modules.linear.NonDynamicallyQuantizableLinear)


class _Loss(torch.nn.Module):
    """The member's training loss as a module, so functional_call can swap its weights."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs, targets, extras, mask, step):
        return member_loss(self.model, Batch(inputs, targets, mask, extras), step)


class StackedRun:
    """Train the `MemberRun`s of one stack at once; they hold every result, as alone."""

    def __init__(self, runs: list[MemberRun]):
        steps = {r.step for r in runs}
        if len(steps) != 1:
            raise ValueError(f"stacked members must be at the same step, got {sorted(steps)}")
        self.runs, self.step = runs, runs[0].step
        self.cfg = cfg = runs[0].member.train
        self.device, self.dtype = runs[0].device, runs[0].dtype
        params, buffers = stack_module_state([r.model for r in runs])
        self.params = {f"model.{k}": v for k, v in params.items()}
        self.buffers = {f"model.{k}": v for k, v in buffers.items()}
        self.loss_module = _Loss(copy.deepcopy(runs[0].model))  # structure; weights swapped in
        for module in self.loss_module.modules() if len(runs) > 1 else ():  # one: as alone
            if isinstance(module, VmapAware):  # a vmap-friendly path (mixers.py, mha_mlp.py)
                module.stacked = True
            elif type(module) in LINEARS:
                module.__class__ = _VmapLinear
        self.trainable = [p for p in self.params.values() if p.requires_grad]
        # train.cuda_graph: the static step (a step tensor, an lr tensor, gradients written
        # anew by each backward), captured once as a CUDA graph where it can be
        # (icl_core.training.cuda_graph)
        self.static = cfg.cuda_graph
        # L-BFGS on each member's fixed batch: torch's algorithm per member, on the device
        # (icl_core.training.stacked_lbfgs)
        self.fixed = cfg.optimizer in FIXED_BATCH
        self.fixed_batch: tuple | None = None  # the members' fixed batches, stacked once
        # train.skip_grad_norm: Adam/AdamW with a step count per member, stepping only the
        # members whose gradient norm is within the limit (`took`, written in place each step)
        self.skips = cfg.skip_grad_norm is not None
        self.took = torch.ones(len(runs), dtype=torch.bool, device=self.device)
        # MaskedAdam also for a captured step of non-float32 weights on CUDA (steps_masked)
        self.masked = steps_masked(cfg, runs[0].member.dtype, self.device.type == "cuda", True)
        weights = list(self.params.values())
        self.optimizer = StackedLBFGS(weights, lr=cfg.lr, history_size=cfg.lbfgs_history,
                                      max_iter=cfg.lbfgs_max_iter) if self.fixed else \
            MaskedAdam.build(weights, cfg, self.static) if self.masked else \
            OPTIMIZERS[cfg.optimizer](weights, cfg, static=self.static)
        self.lr = self.optimizer.param_groups[0]["lr"] if self.static else None
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, cfg))
        self.scheduler.load_state_dict(runs[0].scheduler.state_dict())
        self._load_optimizer_states([r.optimizer.state_dict() for r in runs])
        self.tokens_per_step = 0
        # train.draws = "counter": the members' keys (K,) (their tasks are alike: stack_key)
        self.keys = counter_keys([r.member for r in runs], self.device) \
            if cfg.draws == "counter" else None
        # generator draws, members of one task: its batch code run once on their K·B prompts
        self.together = self.keys is None and draws_together(runs)
        self.graph = None  # the captured step (CUDA, train.cuda_graph), made at the first step
        self.compiled = None  # train.compile: the vmapped loss compiled, made at the first step
        self.why_eager = ""  # why train.compile left the loss eager

    @property
    def size(self) -> int:
        return len(self.runs)

    def active(self) -> list[int]:
        """Members still training (not diverged, not stopped by a stop rule)."""
        return still_training(self.runs)

    # -- training ---------------------------------------------------------------------
    def _batch(self, step: int) -> tuple:
        """The K members' batches at `step`: inputs, targets, extras with a leading K axis and
        the shared mask (a curriculum's mask depends on the step only). Counter draws: one
        call for the stack; generator draws: each member's own generator, through one call of
        their task where they share it (`draws_together`), else one call a member."""
        if self.keys is not None:
            batch = train_batch(self.runs[0].task, self.cfg.batch_size, self.keys, step)
        elif self.together:
            batch = self.runs[0].task.sample_members(self.cfg.batch_size,
                                                     [r.data_gen for r in self.runs])
        else:
            return _stacked([train_batch(r.task, self.cfg.batch_size, r.data_gen, step)
                             for r in self.runs])
        return batch.inputs, batch.targets, batch.extras, batch.mask

    def _stacked_fixed_batch(self) -> tuple:
        """The members' L-BFGS fixed batches, each drawn as alone, stacked (made once)."""
        if self.fixed_batch is None:
            self.fixed_batch = _stacked([r.draw_fixed_batch() for r in self.runs])
        return self.fixed_batch

    def _losses(self, step: int) -> torch.Tensor:
        inputs, targets, extras, mask = self._stacked_fixed_batch() if self.fixed else \
            self._batch(step)
        self.tokens_per_step = inputs.shape[1] * inputs.shape[2]
        loss = self._compiled(inputs) if self.cfg.compile else None
        if loss is not None:  # step unread: a model that reads it is left eager
            return loss(self, self.params, self.buffers, inputs, targets, extras, mask)
        return self._vmapped(self.params, self.buffers, inputs, targets, extras, mask, step)

    def _vmapped(self, params, buffers, inputs, targets, extras, mask, step: int = 0):
        """Every member's loss (K,): the loss module vmapped over the stacked weights and
        batches. A stack of one (a lone member with train.cuda_graph) is called on its
        member's squeezed views instead, its layers on their own paths (SDPA attention): the
        arithmetic of the member alone, without vmap's batched forms (a linear's bmm and
        separate bias add, a LayerNorm's affine apart, their backward reductions), about half
        the kernels, which a replayed small step is bound by."""
        def one(p, b, x, y, ex):
            return functional_call(self.loss_module, (p, b), (x, y, ex, mask, step))

        if self.size == 1:
            def first(tree: dict) -> dict:
                return {k: v.squeeze(0) for k, v in tree.items()}  # views: no copy either way

            loss = one(first(params), first(buffers), inputs[0], targets[0], first(extras))
            return loss.unsqueeze(0)
        return vmap(one)(params, buffers, inputs, targets, extras)

    def _compiled(self, inputs: torch.Tensor):
        """train.compile: `_vmapped` compiled once, a function of (the stack, weights, batches,
        mask), for the stack's shapes (common.compiled: stacks of these shapes share it,
        others are compiled apart); None for a model with its own training loss (it reads the
        step on the host, which would recompile it every step)."""
        if self.compiled is None and not self.why_eager:
            if isinstance(self.runs[0].model, HasTrainingLoss):
                self.why_eager = "the model's own training loss reads the step on the host"
                logger.info(f"train.compile: the stack's loss runs eagerly ({self.why_eager})")
                return None
            # the function, not the bound method (called with self): no reference cycle, so a
            # finished stack is freed when its trial drops it
            self.compiled = compile_function(StackedRun._vmapped, shape_key(
                self.runs[0].member, self.params.items(), inputs.shape))
        return self.compiled

    def _update(self) -> None:
        """The optimizer step after the backward: each member's gradients clipped to its own
        norm (torch.nn.utils.clip_grad_norm_ per member, train.grad_clip); with
        skip_grad_norm, only the members whose norm is within it step (`took`: a NaN norm
        steps, as alone), on the device."""
        cfg = self.cfg
        if cfg.grad_clip is None and not self.skips:
            if self.masked:
                self.optimizer.step(self.took)
            else:
                self.optimizer.step()
            return
        grads = [p.grad for p in self.trainable if p.grad is not None]
        K = self.size
        norm = torch.stack([g.reshape(K, -1).pow(2).sum(1) for g in grads]).sum(0).sqrt()
        # alone, skip_grad_norm clips at inf: a NaN norm makes every gradient NaN there too
        limit = cfg.grad_clip if cfg.grad_clip is not None else math.inf
        coef = (limit / (norm + 1e-6)).clamp(max=1.0)  # (K,)
        if not self.masked:
            for g in grads:
                g.mul_(coef.view(K, *([1] * (g.dim() - 1))))
            self.optimizer.step()
            return
        if self.skips:
            torch.logical_not(norm > cfg.skip_grad_norm, out=self.took)
        self.optimizer.step(self.took, scale=coef)  # scaled in its one (K, P) gradient buffer

    def train_until(self, target_step: int) -> list[float]:
        """Train every member up to `target_step`; per member, the mean loss over these steps
        (icl_core.training.train.train_until, the driver a lone member trains by too)."""
        return train_until(self, target_step)

    def train_mode(self) -> None:
        self.loss_module.train()

    def take_step(self, step: int) -> tuple[torch.Tensor, int, torch.Tensor | None]:
        """One vmapped forward and backward and one optimizer step for every member:
        (losses (K,) on the device, tokens per member, with skip_grad_norm the members that
        took the step (K,) bool, else None). With train.cuda_graph, the static step:
        replayed from its CUDA graph, or run eagerly where none can be captured."""
        if self.fixed:  # L-BFGS: its iterations re-evaluate the losses on the fixed batches
            losses = self.optimizer.step(lambda: self._closure(step))
            self.scheduler.step()
            return losses, self.tokens_per_step, None
        if self.static:
            if self.graph is None:  # made once, at the first step
                from icl_core.training.cuda_graph import StepGraph

                self.graph = StepGraph(self)
            losses = self.graph.take_step(step)
            self.scheduler.step()  # fills the lr tensor in place, outside the graph
            return losses, self.tokens_per_step, self._took()
        losses = self._losses(step)
        self.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        self._update()
        self.scheduler.step()
        return losses.detach(), self.tokens_per_step, self._took()

    def _closure(self, step: int) -> torch.Tensor:
        """L-BFGS's closure: gradients zeroed, every member's loss on its fixed batch (K,),
        their sum backpropagated."""
        self.optimizer.zero_grad(set_to_none=True)
        losses = self._losses(step)
        losses.sum().backward()
        return losses

    def _took(self) -> torch.Tensor | None:
        return self.took if self.skips else None  # read within the step, before the next

    def static_step(self, step: torch.Tensor) -> torch.Tensor:
        """The body of a captured step, at the step held in a 0-dim device tensor: the
        batches drawn by counter from it or by the members' generators (registered with the
        graph), the gradients set to None before the backward (as
        the eager step does: the backward writes them, no zeroing and no accumulation, two
        kernels a weight fewer; captured, they are allocated once in the graph's pool and
        rewritten in place by every replay, torch's whole-network recipe), the optimizer step
        with the lr tensor; the losses (K,). Eager on its own (a CPU), or recorded once by
        icl_core.training.cuda_graph and replayed."""
        losses = self._losses(step)
        for p in self.trainable:
            p.grad = None
        losses.sum().backward()
        self._update()
        return losses.detach()

    def stop_rule(self, step: int, losses: torch.Tensor) -> bool:
        return False  # epoch training (the one stop rule inside training) never stacks

    # -- members' own state -----------------------------------------------------------
    def sync_member(self, k: int, optimizer: bool = True) -> MemberRun:
        """Copy member k's weights into its MemberRun (for evaluation and artifacts), and with
        `optimizer` its optimizer and scheduler state too (for checkpoints); returns it."""
        run = self.runs[k]
        with torch.no_grad():
            for name, p in run.model.named_parameters():
                p.copy_(self.params[f"model.{name}"][k])
            for name, b in run.model.named_buffers():
                b.copy_(self.buffers[f"model.{name}"][k])
        if not optimizer:
            return run
        if self.fixed:  # torch's own LBFGS state, from the member's slice of the stack's
            state = self.optimizer.member_state(k)
        else:  # every member gets its own tensors, its slice of each (a torch Adam's 0-dim
            # `step` is the stack's; MaskedAdam's (K,) is one per member)
            state = {i: {key: (v[k] if v.dim() else v).clone() if torch.is_tensor(v) else v
                         for key, v in slots.items()}
                     for i, slots in self.optimizer.state_dict()["state"].items()}
        # a member's own optimizer (its kind, flags, a float lr) at the stack's learning rate
        groups = [{**own, "lr": float(g["lr"])} for own, g in
                  zip(run.optimizer.state_dict()["param_groups"], self.optimizer.param_groups,
                      strict=True)]
        run.optimizer.load_state_dict({"state": state, "param_groups": groups})
        run.scheduler.load_state_dict(self.scheduler.state_dict())
        return run

    def _load_optimizer_states(self, states: list[dict]) -> None:
        """Stack the members' optimizer states (a resumed stack), slot by slot. With
        skip_grad_norm each member's step count is its own (MaskedAdam), and a member none of
        whose steps was taken yet (no state: torch's Adam makes it at its first step) starts
        from zeros, as it would alone."""
        filled = [s["state"] for s in states]
        if self.fixed:  # at the members' learning rate (the scheduler's state holds the base)
            self.optimizer.load_members(filled)
            self.optimizer.param_groups[0]["lr"] = states[0]["param_groups"][0]["lr"]
            return
        lr = states[0]["param_groups"][0]["lr"]  # the members' (the scheduler's state: its base)
        if self.static:
            self.lr.fill_(lr)  # the tensor a graph reads
        if not any(filled):  # no step taken yet by any member: their learning rate all the same
            if not self.static:
                self.optimizer.param_groups[0]["lr"] = lr
            return
        template = next(f for f in filled if f)
        filled = [f or {i: {key: torch.zeros_like(v) for key, v in slots.items()}
                        for i, slots in template.items()} for f in filled]
        stacked = {
            i: {key: torch.stack([f[i][key] for f in filled]).to(self.device)
                if key != "step" else
                torch.stack([f[i][key] for f in filled]).to(self.device, torch.float32)
                if self.masked else v
                for key, v in slots.items()}
            for i, slots in filled[0].items()
        }
        # the stack's own optimizer (its kind and flags; the lr tensor a graph reads) at the
        # members' learning rate
        groups = [{**ours, "lr": self.lr if self.static else lr}
                  for ours in self.optimizer.state_dict()["param_groups"]]
        self.optimizer.load_state_dict({"state": stacked, "param_groups": groups})
        if self.static:
            self.optimizer.param_groups[0]["lr"] = self.lr  # the same tensor, not a copy
