"""A stack's training step captured once as a CUDA graph and replayed (train.cuda_graph).

Small models are bound by the host: a stacked step dispatches hundreds of kernels, each paid
for in Python and in a launch. Replaying a captured graph is one launch a step. What the
graph records is `StackedRun.static_step`: the step held in a 0-dim device tensor (filled
before each replay); the batches drawn by counter from it (icl_core/tasks/draws.py: no
generator state to advance) or by each member's CUDA generator (registered with the graph:
torch's graph-safe RNG reads a generator's seed and offset on the device, and each replay
advances its offset by what the step draws, as an eager step does; so the numbers, and a
checkpoint's generator state, are the eager step's); the vmapped forward and backward into
gradients set to None before it (the backward writes them; captured, in the graph's pool,
rewritten by each replay); per-member clipping; and a capturable Adam/AdamW (with
train.skip_grad_norm, or for float64 and bfloat16 weights, MaskedAdam:
training/masked_adam.steps_masked; its skip mask on the device) whose learning rate is a
tensor the scheduler fills between replays. The losses (K,) come back in a tensor the graph writes; train_until
reads them once per report, as it reads an eager stack's, so divergence and stop rules see
the same numbers.

How a run goes: `WARMUP_STEPS` eager steps on a side stream (they train: optimizer state and
the allocator's blocks come into being, as capture requires), then one capture, then every
step a replay. Eager instead, with one line saying why (`eager_reason`): on a device other
than CUDA, where `graph_refusal` (icl_core.spec.config) says the step is read on the host (a
task's training curriculum, a model's loss that reads the step), and when the capture fails
(the step then runs eagerly, and the run goes on). A stack's numbers are those of its static
step either way, so the graph is a speed, not a setting; the test holds a replayed stack to
the eager static step on CUDA.
"""

from __future__ import annotations

import logging
import weakref

import torch
from torch.torch_version import TorchVersion

from icl_core.spec.config import graph_refusal

logger = logging.getLogger(__name__)
WARMUP_STEPS = 3  # eager steps on a side stream before the capture (torch's whole-network recipe)
# a generator a captured step draws from is registered with the graph before the capture up to
# torch 2.13; from 2.14 on its first draw in a capture registers it (pytorch PR #176753)
EXPLICIT_RNG_REGISTRATION = TorchVersion(torch.__version__) < (2, 14)


def eager_reason(run) -> str | None:
    """Why a stack's step cannot be captured (None: it can): no CUDA device, or its members'
    step is read on the host (icl_core.spec.config.graph_refusal)."""
    if run.device.type != "cuda":
        return f"no CUDA graph on a {run.device.type} device"
    return graph_refusal(run.runs[0].member)


class StepGraph:
    """The captured step of one StackedRun (its `static_step`), replayed; eager where none."""

    def __init__(self, run):
        # the run holds this graph: a weak reference back, so a finished stack (its weights,
        # optimizer state and the graph's memory pool) is freed when its trial drops it, not at
        # the next cyclic garbage collection
        self.run = weakref.proxy(run)
        self.step = torch.zeros((), dtype=torch.int64, device=run.device)
        self.why_eager = eager_reason(run)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.losses: torch.Tensor | None = None  # what the graph writes
        self.warm = 0
        self._side = None  # the warm-up steps' side stream, made at the first
        if self.why_eager and run.device.type == "cuda":
            logger.info(f"train.cuda_graph: eager steps ({self.why_eager})")

    def take_step(self, step: int) -> torch.Tensor:
        """The stack's losses (K,) of step `step`, trained."""
        self.step.fill_(step)
        if self.why_eager:
            return self.run.static_step(self.step)
        if self.graph is None:
            if self.warm < WARMUP_STEPS:
                self.warm += 1
                return self._side_stream_step()
            stream = torch.cuda.current_stream(self.run.device)
            states = [r.data_gen.get_state() for r in self.run.runs]
            try:
                self._capture()
            except Exception as exc:  # noqa: BLE001  (any failure: eager, said once)
                self.why_eager = f"capture failed: {type(exc).__name__}: {exc}"
                logger.warning(f"train.cuda_graph: eager steps ({self.why_eager})")
                self._after_failed_capture(stream, states)
                return self.run.static_step(self.step)
        self.graph.replay()
        return self.losses.clone()

    def _side_stream_step(self) -> torch.Tensor:
        """A warm-up step on a side stream (as torch's capture needs), its losses handed to
        the current stream (recorded there, so their memory is not reused under its reads)."""
        device = self.run.device
        current = torch.cuda.current_stream(device)
        if self._side is None:
            self._side = torch.cuda.Stream(device)
        self._side.wait_stream(current)
        with torch.cuda.stream(self._side):
            losses = self.run.static_step(self.step)
        current.wait_stream(self._side)
        losses.record_stream(current)
        return losses

    def _capture(self) -> None:
        """Record one static step (recording runs nothing: the replay after it trains), on the
        member's device, on the warm-up's side stream (made there: torch's default capture
        stream is made once a process, on whichever device captured first)."""
        with torch.cuda.device(self.run.device):  # the generators' device states made there
            graph = torch.cuda.CUDAGraph()
            for p in self.run.trainable:  # the warm-up's gradients freed before the capture
                p.grad = None
            if self.run.keys is None and EXPLICIT_RNG_REGISTRATION:  # generator draws
                for run in self.run.runs:
                    graph.register_generator_state(run.data_gen)
            with torch.cuda.graph(graph, stream=self._side):
                self.losses = self.run.static_step(self.step)
        self.graph = graph

    def _after_failed_capture(self, stream, states: list[torch.Tensor]) -> None:
        """What a failed capture leaves undone. torch.cuda.graph's exit can skip leaving its
        stream, so `stream` is made current again. Before torch 2.14 a failed capture leaves
        the generators registered with it marked as capturing (their next eager draw raises):
        each member draws on from a fresh generator at its state before the capture, and the
        device's default generator (always registered) gets a fresh copy of its own state (on
        later versions, where nothing is left marked, the same states: harmless)."""
        torch.cuda.set_stream(stream)
        for run, state in zip(self.run.runs, states, strict=True):
            run.data_gen = torch.Generator(device=run.device)
            run.data_gen.set_state(state)
        index = self.run.device.index
        default = torch.cuda.default_generators[
            torch.cuda.current_device() if index is None else index]
        default.graphsafe_set_state(default.clone_state())
