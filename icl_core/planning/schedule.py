"""How long a plan takes on a cluster: trials placed as Ray places them (the cluster simulator).

`simulate(trials, devices, policy)` replays `SimTrial`s (estimated seconds, GPU and CPU share)
and returns a `SimResult` (makespan, utilisation, the lower bound). `--dry-run` uses it for the
planned cluster's wall time (icl.cli), benchmarks/cluster_sim.py for its tables.

The model (event driven, no time steps):
- Cluster: GPU trials (any trial with gpu > 0) run on ceil(devices / gpus_per_node) nodes of
  gpus_per_node GPUs (the last node takes the remainder) and cpus_per_node CPUs (default 192,
  an 8 x H100 node). A CPU-only set of trials runs on `devices` CPUs (one node by default).
- Placement as Ray places it: a fractional GPU request (< 1) must fit on ONE device (so 0.75
  and 0.5 never share a GPU; eight 0.125 shares fill one); a whole request takes that many free
  devices of one node; CPUs are pooled per node. Nodes first fit; among a node's devices the
  fullest one that still fits (best fit; Ray's own instance choice is not modelled).
- Order: pending trials are scanned in queue order at every event and each one that fits
  starts (a trial that does not fit does not block later ones, as Tune requests resources for
  several pending trials). `by_study`: each study its own queue (as icl_core.running.plans.run_plans runs
  one Tuner.fit per study), in the order studies first appear, trials in the given (grid)
  order; the next study starts when the last trial of the previous one ends. `pool`: every
  trial in one queue, longest first (LPT; ties keep the given order).
- A trial's duration does not depend on what shares its GPU here: the planner charges it
  once, when it plans a trial on a GPU share (icl_core.planning.resources.on_share: 1.25x its
  time alone, as measured at five trials a GPU). Each start pays `startup_s` (a Ray worker, imports,
  CUDA) while holding its resources: an upper bound, as grid trials reuse a worker of the same
  resources (reuse_actors=True) and then pay less.
- Failures: a Poisson process at `failure_rate` per trial-hour of training (start-ups are
  not exposed). A trial checkpoints every `checkpoint_s` seconds of its own training
  (`SimTrial.checkpoint_s`, else the simulator's default); on a failure it releases its
  resources, loses the work since its last checkpoint, and goes back to its place in the
  queue; the restart pays startup_s + restart_s (checkpoint load). Unlimited restarts (Tune's
  max_failures=2 is not modelled). Draws come from random.Random(seed): reproducible.
- Accounting: busy device-seconds = share x time held (start-ups and lost work included);
  utilisation = busy / (devices x makespan). The lower bound, from the failure-free trials
  with one start-up each: max(sum of share x (seconds + startup_s) / devices, the longest
  trial's seconds + startup_s). No schedule beats it; the makespan never falls below it.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from dataclasses import dataclass, field

UNIT = 10_000  # resource quantities in 1e-4 units, Ray's fixed-point resolution
POLICIES = ("by_study", "pool")


@dataclass(frozen=True)
class SimTrial:
    study: str
    seconds: float  # estimated wall time of its training, start-up excluded
    gpu: float  # GPU share (0: a CPU-only trial)
    cpu: float = 1.0
    members: int = 1  # configs trained in the trial (reported only)
    checkpoint_s: float | None = None  # seconds of training between checkpoints
    longest_member_s: float | None = None  # its longest member trained alone (reported only)


@dataclass
class SimResult:
    makespan_s: float
    utilisation: float
    lower_bound_s: float
    devices: int
    policy: str
    busy_s: float  # device-seconds held
    work_s: float  # device-seconds of the failure-free trials, one start-up each
    failures: int = 0
    lost_s: float = 0.0  # seconds of training redone after failures
    spans: list[tuple[int, float, float]] = field(default_factory=list)  # (trial, start, end)

    @property
    def ratio(self) -> float:
        return self.makespan_s / self.lower_bound_s if self.lower_bound_s else 1.0


class _Node:
    def __init__(self, gpus: int, cpus: float):
        self.cpus = round(cpus * UNIT)
        self.gpus = [UNIT] * gpus  # free units per device

    def place(self, gpu: int, cpu: int) -> list[tuple[int, int]] | None:
        """[(device, units)] taken for the request, or None where it does not fit."""
        if cpu > self.cpus:
            return None
        if gpu == 0:
            take = []
        elif gpu < UNIT:
            fits = [(free, i) for i, free in enumerate(self.gpus) if free >= gpu]
            if not fits:
                return None
            take = [(min(fits)[1], gpu)]
        else:
            whole = [i for i, free in enumerate(self.gpus) if free == UNIT][:gpu // UNIT]
            if len(whole) < gpu // UNIT:
                return None
            take = [(i, UNIT) for i in whole]
        self.cpus -= cpu
        for i, units in take:
            self.gpus[i] -= units
        return take

    def release(self, take: list[tuple[int, int]], cpu: int) -> None:
        self.cpus += cpu
        for i, units in take:
            self.gpus[i] += units


def _cluster(trials, devices: int, cpus_per_node, gpus_per_node: int):
    """(nodes, share of a trial, whether devices are GPUs)."""
    on_gpu = any(t.gpu > 0 for t in trials)
    if on_gpu:
        cpus = 192.0 if cpus_per_node is None else cpus_per_node
        counts = [min(gpus_per_node, devices - i) for i in range(0, devices, gpus_per_node)]
        nodes = [_Node(n, cpus) for n in counts]
    else:
        per = devices if cpus_per_node is None else cpus_per_node
        nodes = [_Node(0, min(per, devices - i)) for i in range(0, devices, int(per))]
    return nodes, (lambda t: t.gpu) if on_gpu else (lambda t: t.cpu), on_gpu


def _check(trials, nodes, on_gpu: bool) -> None:
    for t in trials:
        if t.gpu > 1 and t.gpu != int(t.gpu):
            raise ValueError(f"{t.study}: a GPU request over 1 must be whole, got {t.gpu:g}")
        if t.seconds < 0 or t.gpu < 0 or t.cpu < 0:
            raise ValueError(f"{t.study}: invalid trial {t}")
        gpu, cpu = round(t.gpu * UNIT), round(t.cpu * UNIT)
        if not any(_Node(len(n.gpus), n.cpus / UNIT).place(gpu, cpu) is not None for n in nodes):
            raise ValueError(f"{t.study}: a trial asking {t.gpu:g} GPU + {t.cpu:g} CPU fits on "
                             "no node of this cluster")


@dataclass
class _Run:
    """Everything one simulation changes as it goes."""
    trials: list
    nodes: list
    share: object
    startup_s: float
    restart_s: float
    rate_per_s: float
    checkpoint_s: float
    rng: random.Random
    done: dict = field(default_factory=dict)  # trial -> checkpointed seconds of training
    starts: dict = field(default_factory=dict)  # trial -> attempts so far
    busy: float = 0.0
    failures: int = 0
    lost: float = 0.0
    spans: list = field(default_factory=list)

    def _start(self, i: int, now: float, events: list, take) -> None:
        t = self.trials[i]
        overhead = self.startup_s + (self.restart_s if self.starts.get(i) else 0.0)
        self.starts[i] = self.starts.get(i, 0) + 1
        done = self.done.get(i, 0.0)
        left = t.seconds - done
        fail_in = self.rng.expovariate(self.rate_per_s) if self.rate_per_s > 0 else math.inf
        end = now + overhead + min(left, fail_in)
        self.busy += self.share(t) * (end - now)
        self.spans.append((i, now, end))
        heapq.heappush(events, (end, len(self.spans), i, fail_in < left, done + fail_in, take))

    def _finish(self, event) -> bool:
        """Release an ending attempt's resources; True where it failed (to be queued again)."""
        _, _, i, failed, progress, (node, take, cpu) = event
        self.nodes[node].release(take, cpu)
        if failed:
            step = self.trials[i].checkpoint_s or self.checkpoint_s
            saved = math.floor(progress / step) * step if step > 0 else 0.0
            self.lost += progress - saved
            self.done[i] = saved
            self.failures += 1
        return failed

    def _place(self, i: int):
        t = self.trials[i]
        gpu, cpu = round(t.gpu * UNIT), round(t.cpu * UNIT)
        for n, node in enumerate(self.nodes):
            take = node.place(gpu, cpu)
            if take is not None:
                return n, take, cpu
        return None

    def phase(self, order: list[int], now: float) -> float:
        """Run the trials of `order` (queue order) from `now`; when the last one ends."""
        rank = {i: r for r, i in enumerate(order)}
        pending = list(range(len(order)))  # ranks, kept sorted
        events: list = []
        while pending or events:
            refused = set()  # request shapes that found no room at this instant
            for r in list(pending):
                t = self.trials[order[r]]
                if (t.gpu, t.cpu) in refused:
                    continue
                placed = self._place(order[r])
                if placed is None:
                    refused.add((t.gpu, t.cpu))
                    continue
                pending.remove(r)
                self._start(order[r], now, events, placed)
            now = events[0][0]
            while events and events[0][0] <= now:
                event = heapq.heappop(events)
                if self._finish(event):
                    bisect.insort(pending, rank[event[2]])
        return now


def lower_bound(trials, devices: int, startup_s: float = 0.0) -> float:
    """max(total work / devices, longest trial), each trial with one start-up; the share is
    the GPU share on a GPU cluster, else the CPU request."""
    if not trials:
        return 0.0
    on_gpu = any(t.gpu > 0 for t in trials)
    work = sum((t.gpu if on_gpu else t.cpu) * (t.seconds + startup_s) for t in trials)
    return max(work / devices, max(t.seconds for t in trials) + startup_s)


def simulate(trials: list[SimTrial], devices: int, policy: str = "pool", *,
             cpus_per_node: float | None = None, gpus_per_node: int = 8,
             startup_s: float = 10.0, failure_rate: float = 0.0, restart_s: float = 30.0,
             checkpoint_s: float = 600.0, seed: int = 0) -> SimResult:
    """Simulate `trials` on `devices` GPUs (CPUs when no trial asks for a GPU); see the
    module docstring for the model. failure_rate: failures per trial-hour of training."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if devices < 1:
        raise ValueError(f"devices must be >= 1, got {devices}")
    nodes, share, on_gpu = _cluster(trials, devices, cpus_per_node, gpus_per_node)
    _check(trials, nodes, on_gpu)
    run = _Run(list(trials), nodes, share, startup_s, restart_s, failure_rate / 3600.0,
               checkpoint_s, random.Random(seed))
    if policy == "pool":
        queues = [sorted(range(len(trials)), key=lambda i: -trials[i].seconds)]
    else:
        studies: dict[str, list[int]] = {}
        for i, t in enumerate(trials):
            studies.setdefault(t.study, []).append(i)
        queues = list(studies.values())
    now = 0.0
    for queue in queues:
        now = run.phase(queue, now)
    work = sum(share(t) * (t.seconds + startup_s) for t in trials)
    return SimResult(
        makespan_s=now, utilisation=run.busy / (devices * now) if now else 0.0,
        lower_bound_s=lower_bound(trials, devices, startup_s), devices=devices, policy=policy,
        busy_s=run.busy, work_s=work, failures=run.failures, lost_s=run.lost, spans=run.spans)
