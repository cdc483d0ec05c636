"""One training loop for every member: Adam/AdamW, warmup, StepLR, clipping, step skipping.

`MemberRun` holds everything a member's training needs (model, optimizer, scheduler, data
RNG, step, rows so far) and exposes `state_dict` / `load_state_dict`, so the trial can
checkpoint and resume it bit for bit. `train_until` is the one driver (step bookkeeping:
train_loss rows, divergence, stop rules, timing): it runs any `Trainer`, a lone member (a
stack of one: MemberRun's own step, L-BFGS on a fixed batch, epoch training) or a stack of
K members (icl_core.training.stacked.StackedRun, one vmapped step). An optimizer is a name in
OPTIMIZERS (icl_core.algorithms.optimizers).

A member whose steps are all skipped by `skip_grad_norm` for STALL_STEPS steps in a row has
stalled: its weights no longer move (the gradient norm stays above the limit), so it ends as
diverged from the first skipped step, with that reason, instead of training on unchanged.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Protocol

import torch

from icl_core.algorithms.optimizers import FIXED_BATCH, OPTIMIZERS
from icl_core.common.batch import Batch, masked_mse
from icl_core.common.compiled import compile_model
from icl_core.common.device import (
    derive_seed,
    generator,
    precision_scope,
    resolve_device,
    resolve_dtype,
)
from icl_core.models import build_model
from icl_core.models.base import HasArtifacts, HasTrainingLoss
from icl_core.spec.config import MemberConfig, TrainConfig
from icl_core.tasks import build_task
from icl_core.tasks.base import SamplesTrainingBatches
from icl_core.tasks.draws import CounterDraws, member_batch
from icl_core.training.stack_rules import shape_key
from icl_core.training.throughput import reset_peak_memory

STALL_STEPS = 500  # consecutive steps skipped by skip_grad_norm: the member has stalled


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of cfg.lr at optimizer step `step` (0-based): linear warmup, then StepLR."""
    warm = min(1.0, (step + 1) / cfg.warmup_steps) if cfg.warmup_steps else 1.0
    if cfg.schedule == "step":
        return warm * cfg.gamma ** (step // cfg.step_size)
    return warm


class MemberRun:
    """Training state of one member; deterministic given its config."""

    def __init__(self, member: MemberConfig, max_len: int | None = None):
        from icl_core.training.evaluate import eval_max_len

        self.member = member
        self.device = resolve_device(member.device)
        self.dtype = resolve_dtype(member.dtype)
        self.task = build_task(member.task, member.task_seed, self.device, self.dtype)
        torch.manual_seed(derive_seed(member.seed, "init"))
        self.model = build_model(
            member.model,
            d_in=self.task.d_in,
            d_out=self.task.d_out,
            max_len=max_len or eval_max_len(member),
            causal=self.task.causal,
            device=self.device,
            dtype=self.dtype,
        )
        cfg = member.train
        if cfg.compile:
            # in place: state_dict keys (checkpoints) unchanged
            compile_model(self.model, shape_key(member, self.model.named_parameters(),
                                                (cfg.batch_size,)))
        reset_peak_memory(self.device)
        self.optimizer = OPTIMIZERS[cfg.optimizer](self.model.parameters(), cfg)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, cfg)
        )
        self.data_gen = generator(self.device, derive_seed(member.seed, "data"))
        # train.draws = "counter": the member's key (its data seed) for counter draws, (1,)
        self.draw_keys = counter_keys([member], self.device) if cfg.draws == "counter" else None
        self.step = 0
        self.rows: list[dict] = []  # rows so far (train curve, intermediate evaluations)
        self.diverged_at: int | None = None
        self.stopped_at: int | None = None  # the step a stop rule ended training at
        self.epoch_loss = torch.zeros((), device=self.device, dtype=self.dtype)  # this epoch's sum
        self.epoch_taken = 0  # ... over this many steps taken (skip_grad_norm may skip some)
        self._dataset: Batch | None = None  # the finite training set, drawn on first use
        self._order: tuple = (-1, None)  # (epoch, its permutation of the training set)
        self._fixed: Batch | None = None  # L-BFGS's fixed batch, drawn on first use
        self.skipped_steps = 0
        self.skip_streak = 0  # steps skipped in a row up to now (STALL_STEPS: stalled)
        self.took_last = True  # whether skip_grad_norm let the last step be taken
        self.stalled = False  # diverged_at is where a stall began, not a non-finite loss
        self.train_seconds = 0.0  # training time (evaluations excluded) ...
        self.steps_timed = 0  # ... over this many steps
        self.tokens = 0
        self.artifacts: dict[str, list] = {}  # name -> [(step, array)], see artifacts.py

    def record_artifacts(self) -> None:
        """Record the model's arrays at the current step (if it defines `artifacts()`)."""
        if not isinstance(self.model, HasArtifacts):
            return
        for name, value in self.model.artifacts().items():
            self.artifacts.setdefault(name, []).append((self.step, value.detach().cpu().clone()))

    # -- training: the step kind of a lone member (see `train_until` below) -------------
    @property
    def runs(self) -> list[MemberRun]:
        return [self]

    def sync_member(self, k: int, optimizer: bool = True) -> MemberRun:
        """The member's own state is the training state (a stack copies it here)."""
        return self

    def train_until(self, target_step: int) -> float:
        """Train up to `target_step`; the mean loss over these steps (NaN if none)."""
        return train_until(self, target_step)[0]

    def train_mode(self) -> None:
        self.model.train()

    def take_step(self, step: int) -> tuple[torch.Tensor, int, torch.Tensor | None]:
        """One optimizer step: (its loss, shape (1,), on the device; tokens trained on; with
        `skip_grad_norm`, whether the step was taken, (1,) bool, else None)."""
        cfg = self.member.train
        if cfg.optimizer in FIXED_BATCH:
            loss = self._fixed_batch_step(step)
            self.scheduler.step()
            return loss.reshape(1), self.tokens_per_step, None
        if cfg.dataset_size:
            batch = self._dataset_batch(step)
        elif self.draw_keys is not None:  # counter draws: a stack of one
            batch = member_batch(train_batch(self.task, cfg.batch_size, self.draw_keys, step), 0)
        else:
            batch = train_batch(self.task, cfg.batch_size, self.data_gen, step)
        loss = self.loss(batch, step)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        took = None
        if cfg.grad_clip is not None or cfg.skip_grad_norm is not None:
            limit = cfg.grad_clip if cfg.grad_clip is not None else math.inf
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), limit)
            if cfg.skip_grad_norm is not None:  # a NaN norm is not above it: taken
                took = torch.logical_not(norm > cfg.skip_grad_norm).reshape(1)
        self.took_last = took is None or bool(took)  # this read syncs, by request of the config
        if self.took_last:
            self.optimizer.step()
        if self.took_last or self.scheduler._step_count > 1:
            self.scheduler.step()
        else:  # a skipped first step advances the schedule all the same (torch would warn)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step", UserWarning)
                self.scheduler.step()
        return loss.detach().reshape(1), batch.inputs.shape[0] * batch.inputs.shape[1], took

    def stop_rule(self, step: int, losses: torch.Tensor) -> bool:
        """Epoch training: True at the end of an epoch whose mean loss meets `stop_loss`; a
        step skipped by skip_grad_norm is not counted in it."""
        return bool(self.member.train.dataset_size) and self._epoch_end(step, losses[0])

    def loss(self, batch: Batch, step: int) -> torch.Tensor:
        return member_loss(self.model, batch, step)

    # -- finite dataset (epochs) ------------------------------------------------------
    @property
    def steps_per_epoch(self) -> int:
        cfg = self.member.train
        return -(-cfg.dataset_size // cfg.batch_size)

    def _dataset_batch(self, step: int):
        """Batch `step` of the finite training set: the set is drawn once from the seed; each
        epoch visits it in a permutation drawn from (seed, epoch), so no RNG state is needed
        to resume mid-epoch. The last batch of an epoch may be smaller."""
        cfg = self.member.train
        if self._dataset is None:
            gen = generator(self.device, derive_seed(self.member.seed, "dataset"))
            self._dataset = self.task.sample(cfg.dataset_size, gen)
        epoch, within = divmod(step, self.steps_per_epoch)
        if self._order[0] != epoch:
            gen = torch.Generator().manual_seed(derive_seed(self.member.seed, "epoch", epoch))
            self._order = (epoch, torch.randperm(cfg.dataset_size, generator=gen).to(self.device))
        idx = self._order[1][within * cfg.batch_size:(within + 1) * cfg.batch_size]
        data = self._dataset
        return Batch(data.inputs[idx], data.targets[idx], data.mask)

    def _epoch_end(self, step: int, loss: torch.Tensor) -> bool:
        """Accumulate this epoch's loss over the steps taken (skip_grad_norm may skip some);
        at its last step, True if their mean meets the stop rule (one host read per epoch,
        only when a stop rule is set; an epoch with no step taken has no mean)."""
        cfg = self.member.train
        if self.took_last:
            self.epoch_loss = self.epoch_loss + loss
            self.epoch_taken += 1
        if (step + 1) % self.steps_per_epoch:
            return False
        taken, self.epoch_taken = self.epoch_taken, 0
        mean = self.epoch_loss / taken if taken else None
        self.epoch_loss = torch.zeros_like(self.epoch_loss)
        if cfg.stop_loss is not None and mean is not None and float(mean) < cfg.stop_loss:
            self.stopped_at = step + 1
            return True
        return False

    def draw_fixed_batch(self) -> Batch:
        """L-BFGS's fixed batch, drawn from the member's own seed (the same at every call)."""
        gen = generator(self.device, derive_seed(self.member.seed, "fixed_batch"))
        return self.task.sample(self.member.train.batch_size, gen)

    def _fixed_batch_step(self, step: int) -> torch.Tensor:
        """One step of a closure optimizer (L-BFGS) on the fixed batch; returns its loss."""
        if self._fixed is None:
            self._fixed = self.draw_fixed_batch()
            self.tokens_per_step = self._fixed.inputs.shape[0] * self._fixed.inputs.shape[1]

        def closure():
            self.optimizer.zero_grad(set_to_none=True)
            loss = self.loss(self._fixed, step)
            loss.backward()
            return loss

        return self.optimizer.step(closure).detach()

    # -- checkpointing ----------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "data_gen": self.data_gen.get_state(),
            "step": self.step,
            "rows": list(self.rows),
            "diverged_at": self.diverged_at,
            "stopped_at": self.stopped_at,
            "epoch_loss": self.epoch_loss,
            "epoch_taken": self.epoch_taken,
            "skipped_steps": self.skipped_steps,
            "skip_streak": self.skip_streak,
            "stalled": self.stalled,
            "train_seconds": self.train_seconds,
            "steps_timed": self.steps_timed,
            "tokens": self.tokens,
            "artifacts": {k: list(v) for k, v in self.artifacts.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.data_gen.set_state(state["data_gen"])
        for key in ("step", "rows", "diverged_at", "stopped_at", "epoch_loss", "skipped_steps",
                    "train_seconds", "steps_timed", "tokens", "artifacts"):
            setattr(self, key, state[key])
        self.skip_streak = state.get("skip_streak", 0)  # checkpoints from before the rule
        # checkpoints from before the count: every step of the epoch so far was counted
        self.epoch_taken = state.get("epoch_taken", self.step % self.steps_per_epoch
                                     if self.member.train.dataset_size else 0)
        self.stalled = state.get("stalled", False)


class Trainer(Protocol):
    """A step kind `train_until` drives: a lone member (`MemberRun`: one model's step, L-BFGS
    on a fixed batch, epoch training) or a stack (icl_core.training.stacked.StackedRun: one vmapped
    step for K members). Its `runs` hold every result; `step` is where it stands."""

    step: int

    @property
    def runs(self) -> list[MemberRun]: ...

    def train_mode(self) -> None: ...

    def take_step(self, step: int) -> tuple[torch.Tensor, int, torch.Tensor | None]:
        """One optimizer step: (losses (K,) on the device, tokens a member trained on, which
        members took it (K,) bool on the device with `skip_grad_norm`, else None)."""

    def stop_rule(self, step: int, losses: torch.Tensor) -> bool:
        """True when a stop rule ends training after this step (its members are stopped)."""


def train_until(trainer: Trainer, target_step: int) -> list[float]:
    """The one training driver: train every member still training up to `target_step`; per
    member, the mean loss over these steps (NaN if none).

    Losses stay on the device; the host reads them once per call, never per step. A member
    whose loss turns non-finite is recorded as diverged at its first bad step (the others go
    on); a stop rule ends the call after its step. Each training member gets a train_loss row.
    With `skip_grad_norm`, a member's skipped step adds nothing to its loss, tokens or
    divergence (`Skips`), and a member skipped STALL_STEPS times in a row has stalled.
    """
    runs, start = trainer.runs, trainer.step
    active = still_training(runs)
    if target_step <= start or not active:
        return [math.nan] * len(runs)
    trainer.train_mode()
    device, dtype = runs[0].device, runs[0].dtype
    t0 = time.perf_counter()
    total = torch.zeros(len(runs), device=device, dtype=dtype)
    bad = torch.full((len(runs),), -1, device=device, dtype=torch.long)
    taken = tokens = 0  # steps whose losses are in `total`; tokens (without skip_grad_norm)
    skips = None  # made at the first step that says which members took it (`Skips`)
    with precision_scope(runs[0].member.train.precision, device):  # a stack shares `train`
        for step in range(start, target_step):
            losses, drawn, took = trainer.take_step(step)
            losses = losses.to(dtype)  # bf16 autocast: the loss of a float32 member
            failed = ~torch.isfinite(losses)
            if took is not None:  # skip_grad_norm: a skipped step counts for nothing
                failed, losses = failed & took, torch.where(took, losses, 0)
                skips = skips or Skips(runs, device)
                skips.add(took, drawn)
            bad = torch.where(failed & (bad < 0), step + 1, bad)
            total, taken, tokens = total + losses, taken + 1, tokens + drawn
            if trainer.stop_rule(step, losses):
                target_step = step + 1  # the stop rule fired: this step is the last
                break
    elapsed = time.perf_counter() - t0
    trainer.step = target_step
    counts, trained, streaks = skips.read() if skips else ([taken] * len(runs),
                                                            [tokens] * len(runs), None)
    means = mean_losses(total, counts)
    bad_steps = bad.tolist()
    for k in active:
        run = runs[k]
        if streaks is not None:  # skip_grad_norm: this call's skips, for the members training
            run.skipped_steps += taken - counts[k]
            run.skip_streak = streaks[k]
        run.step = target_step
        run.train_seconds += elapsed
        run.steps_timed += target_step - start
        run.tokens += trained[k]
        if bad_steps[k] >= 0:
            run.diverged_at = run.step = bad_steps[k]
        elif run.skip_streak >= STALL_STEPS:
            run.diverged_at = run.step = target_step - run.skip_streak  # unchanged since
            run.stalled = True
        run.rows.append(train_row(run.step, means[k]))
    return means


class Skips:
    """skip_grad_norm's counts over one `train_until` call, per member on the device (no host
    read per step): the steps taken (their losses and tokens count), the tokens they trained
    on and the steps skipped in a row (from each run's own); `read`: one host read."""

    def __init__(self, runs: list[MemberRun], device: torch.device):
        self.taken = torch.zeros(len(runs), dtype=torch.long, device=device)
        self.tokens = torch.zeros_like(self.taken)
        self.streak = torch.tensor([r.skip_streak for r in runs], dtype=torch.long,
                                   device=device)

    def add(self, took: torch.Tensor, drawn: int) -> None:
        self.taken += took
        self.tokens += took * drawn
        self.streak = (self.streak + 1) * ~took

    def read(self) -> tuple[list[int], list[int], list[int]]:
        """Per member: (steps taken, tokens trained on, steps skipped in a row up to now)."""
        taken, tokens, streak = torch.stack([self.taken, self.tokens, self.streak]).tolist()
        return taken, tokens, streak


def still_training(runs: list[MemberRun]) -> list[int]:
    """Indices of the runs still training (not diverged, not stopped by a stop rule)."""
    return [k for k, r in enumerate(runs) if r.diverged_at is None and r.stopped_at is None]


def mean_losses(total: torch.Tensor, taken: list[int]) -> list[float]:
    """Summed losses (K,) over the steps each member took -> means (NaN where none): a lone
    member's in Python floats, a stack's in its dtype, as each was written before the two
    shared this driver (the same in float64), so rows are unchanged by the merge of the two
    drivers."""
    if total.shape[0] == 1:
        return [float(total[0]) / taken[0] if taken[0] else math.nan]
    if len(set(taken)) == 1:
        return (total / taken[0]).tolist() if taken[0] else [math.nan] * len(taken)
    # members that skipped different steps (skip_grad_norm): each as a lone member divides
    return [t / n if n else math.nan for t, n in zip(total.tolist(), taken, strict=True)]


def counter_keys(members: list[MemberConfig], device: torch.device) -> torch.Tensor:
    """The members' keys for counter draws (train.draws = "counter"): their data seeds,
    (K,) int64 on `device` (icl_core.tasks.draws.CounterDraws)."""
    return torch.tensor([derive_seed(m.seed, "data") for m in members], dtype=torch.int64,
                        device=device)


def train_batch(task, batch_size: int, draw: torch.Generator | torch.Tensor,
                step: int) -> Batch:
    """The online training batch at optimizer step `step` (MemberRun and StackedRun draw
    through here; a seed stack's generator draws through one task call instead,
    icl_core.training.stacked.draws_together). `draw` routes:

    * a member's `torch.Generator` (train.draws = "generator"): its (B, ...) batch. A task
      with a training curriculum defines `train_sample(batch_size, generator, step)` (e.g.
      relu_teacher's Garg curriculum); every other task draws `sample`;
    * the counter keys (K,) of a stack's members (train.draws = "counter", `counter_keys`):
      all K batches in one call, (K, B, ...), by the task's `sample_counter`
      (icl_core.tasks.base.DrawsByCounter; a curriculum reads the step from the draws).

    The step is a pure function of the run's progress, so a resumed run redraws the same
    batches (counter draws need no other state). Finite datasets and fixed batches are drawn
    once with `sample` (MemberRun refuses a curriculum there, config validation counter draws).
    """
    if isinstance(draw, torch.Tensor):
        return task.sample_counter(batch_size, CounterDraws(draw, step))
    if isinstance(task, SamplesTrainingBatches):
        return task.train_sample(batch_size, draw, step)
    return task.sample(batch_size, draw)


def member_loss(model: torch.nn.Module, batch: Batch, step: int) -> torch.Tensor:
    """The training loss at `step`: the model's own `training_loss(batch, step)` when it
    defines one (e.g. the looped models' window loss and loop curriculum), else the masked
    MSE of its outputs."""
    if isinstance(model, HasTrainingLoss):
        return model.training_loss(batch, step)
    return masked_mse(model(batch.inputs), batch)


def train_row(step: int, loss: float) -> dict:
    return {"metric": "train_loss", "statistic": "mean", "value": loss, "step": step,
            "predictor": "model"}
