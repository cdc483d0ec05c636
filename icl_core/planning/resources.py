"""The one resource planner: CPU/GPU per trial from the config, and members per trial.

GPU share by model size, so small trials share a GPU: the work of one training step,
6 x params x tokens (FLOPs; a looped block's weights count once per loop iteration), picks
the fraction

    < 1e9  -> 1/5     (launch-bound: five such trials keep one GPU busiest, SHARES)
    < 1e10 -> 1/4
    < 1e11 -> 1/2
    else   -> 1

A member with device "cpu", or a cluster without GPUs, gets no GPU. Members of equal
resources are packed `pack` to a trial (one process: start-up cost paid once), or with `auto`
balanced by the cost model (icl_core.planning.cost) into trials of a target duration; a GPU trial
stacks members that differ only in their seeds (icl_core.training.stacked) where that pays.

`gpu_seconds`: the wall time of a study's members on one GPU by the same cost model (where
nothing is measured, its H100 rate model); `--dry-run` prints it per study on a plan without
GPUs, the --yes limit counts it, and the `gpu` presets are sized by it (<= 20 min a study).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from icl_core.planning.cost import SHARED_SLOWDOWN, SHARES, CostModel, device_label
from icl_core.spec.config import ConfigError, MemberConfig
from icl_core.training.flops import step_flops

FRACTION_STEPS = ((1e9, SHARES[0]), (1e10, 0.25), (1e11, 0.5))


@dataclass(frozen=True)
class TrialResources:
    cpu: float
    gpu: float

    def bundle(self) -> dict:
        return {"CPU": self.cpu, "GPU": self.gpu} if self.gpu else {"CPU": self.cpu}

    def __str__(self) -> str:
        return f"{self.cpu:g} CPU" + (f" + {self.gpu:g} GPU" if self.gpu else "")


def gpu_fraction(member: MemberConfig) -> float:
    flops = step_flops(member)
    for limit, fraction in FRACTION_STEPS:
        if flops < limit:
            return fraction
    return 1.0


def member_resources(member: MemberConfig, cluster_gpus: float, cpus: float,
                     cost: CostModel | None = None) -> TrialResources:
    """CPUs, and on a GPU cluster a GPU share: by FLOPs (`gpu_fraction`), raised by the cost
    model to what the member's measured memory and utilisation need (CostModel.gpu_share)."""
    if member.device == "cpu" or cluster_gpus <= 0:
        return TrialResources(cpu=cpus, gpu=0.0)
    share = gpu_fraction(member) if cost is None else cost.gpu_share(member, gpu_fraction(member))
    return TrialResources(cpu=cpus, gpu=min(share, cluster_gpus))


TARGET_TRIAL_S = {"cpu": 180.0, "gpu": 900.0}  # --pack auto: a trial's planned duration
# (a few minutes on CPUs: start-up, ~3-5 s, is paid once per trial; longer on GPUs, where a
# trial also stacks)


def on_share(seconds: float, gpu: float) -> float:
    """A trial's seconds on a GPU share: SHARED_SLOWDOWN x its seconds alone where it shares
    the GPU with others (0 < gpu < 1; icl_core.planning.cost.SHARES)."""
    return seconds * SHARED_SLOWDOWN if 0 < gpu < 1 else seconds


class PlannedTrial(NamedTuple):
    """One trial of the plan: its members, resources, stack mode (icl_core.training.stacked) and the
    cost model's estimate of its duration in seconds; `interleave`: its stacks train at once
    (--pack gpu: icl_core.running.trial.run_together)."""

    members: list[MemberConfig]
    res: TrialResources
    stack: str
    seconds: float
    interleave: bool = False


def _units(group: list[MemberConfig], stack: str, gpu: float, cost) -> list[tuple[list, bool]]:
    """Members in units that stay together: a stack of members that differ only in their
    seeds where this trial kind stacks and the cost model says it pays (launch-bound), else
    one member each; (members, stacked) per unit, first-seen order."""
    from icl_core.training.stack_rules import stack_key, trial_stack_mode

    if trial_stack_mode(stack, gpu) != "always":
        return [([m], False) for m in group]
    by_key: dict[str, list[MemberConfig]] = {}
    for member in group:
        by_key.setdefault(stack_key(member) or member.hash, []).append(member)
    units = []
    for members in by_key.values():
        if len(members) > 1 and (stack == "always" or cost.stack_pays(members[0], len(members))):
            units.append((members, True))
        else:
            units += [([m], False) for m in members]
    return units


def longest_first(sizes: list[float], n: int) -> tuple[list[list[int]], list[float]]:
    """Longest-processing-time packing: the indices of `sizes`, longest first, each into the
    least-loaded of `n` bins; (the bins, their loads)."""
    bins: list[list[int]] = [[] for _ in range(n)]
    loads = [0.0] * n
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        k = loads.index(min(loads))
        bins[k].append(i)
        loads[k] += sizes[i]
    return bins, loads


def balanced_trials(group: list[MemberConfig], res: TrialResources, slots: int, stack: str,
                    cost, target_s: float) -> list[PlannedTrial]:
    """--pack auto: units (`_units`) into trials of about `target_s` by longest-processing-
    time bin packing (the longest unit first, into the least-loaded trial); a unit that alone
    reaches the target is a trial of its own; at least one trial per slot while units last."""
    units = [(u, stacked, cost.unit_seconds(u) if stacked else cost.member_seconds(u[0]))
             for u, stacked in _units(group, stack, res.gpu, cost)]
    alone = [u for u in units if u[2] >= target_s]
    rest = [u for u in units if u[2] < target_s]  # longest_first takes them longest first
    n = max(math.ceil(sum(u[2] for u in rest) / target_s), min(slots, len(rest))) if rest else 0
    bins = [[rest[i] for i in b] for b in longest_first([u[2] for u in rest], n)[0]]
    trials = []
    for units_of in [[u] for u in alone] + [b for b in bins if b]:
        members = [m for u, _, _ in units_of for m in u]
        stacks = any(stacked for _, stacked, _ in units_of)
        trials.append(PlannedTrial(members, res, stack if stacks else "never",
                                   on_share(sum(u[2] for u in units_of), res.gpu)))
    return sorted(trials, key=lambda t: -t.seconds)


def gpu_filled_trials(members: list[MemberConfig], cluster_gpus: float, cpus: float,
                      cost) -> list[PlannedTrial]:
    """--pack gpu: one trial per GPU, a whole GPU each, holding whole stacks (members that
    differ only in their seeds), its stacks trained at once in one process (TrialSpec.
    interleave) instead of a process per stack on a GPU share. Stacks go longest first to the
    least-loaded trial that still fits the GPU's memory by the memory model
    (icl_core.planning.memory: the stacks' peaks added); as many trials as whole GPUs, more
    only where memory needs them. A trial's duration: its stacks one after another (an upper
    bound: stacks at once overlap)."""
    from icl_core.planning.memory import gpu_memory, member_memory

    capacity, _ = gpu_memory()
    units = [(u, cost.unit_seconds(u), member_memory(u[0], stack=len(u)).total)
             for u, _ in _units(members, "always", 1.0, cost)]
    bins: list[list] = [[] for _ in range(max(1, math.floor(cluster_gpus)))]
    for unit in sorted(units, key=lambda u: -u[1]):
        fits = [b for b in bins if sum(u[2] for u in b) + unit[2] <= capacity]
        if not fits:  # every trial's GPU is full by the memory model: one more trial
            bins.append([])
            fits = [bins[-1]]
        min(fits, key=lambda b: sum(u[1] for u in b)).append(unit)
    res = TrialResources(cpu=cpus, gpu=1.0)
    trials = [PlannedTrial([m for u, _, _ in b for m in u], res, "always",
                           sum(u[1] for u in b), interleave=len(b) > 1) for b in bins if b]
    return sorted(trials, key=lambda t: -t.seconds)


def plan_trials(
    members: list[MemberConfig], cluster_gpus: float, cpus: float = 1, pack: int | str = 1,
    cluster_cpus: float = 1, stack: str = "auto", cost=None, target_s: float | None = None,
) -> list[PlannedTrial]:
    """Group members into trials with equal resources: `pack` members each (members that can
    share a stack side by side where the trial stacks), or with "auto" cost-balanced
    (`balanced_trials`, to `target_s`, default TARGET_TRIAL_S). `cost`: an icl_core.planning.cost
    CostModel (default: the FLOP estimate of the cluster's device kind)."""
    from icl_core.training.stack_rules import check_stack_mode, stack_key, trial_stack_mode

    if pack not in ("auto", "gpu") and (not isinstance(pack, int) or pack < 1):
        raise ValueError(f"pack must be an integer >= 1, 'auto' or 'gpu', got {pack!r}")
    check_stack_mode(stack)
    if cost is None:
        cost = CostModel(device_label("cuda" if cluster_gpus > 0 else "cpu", max(1, int(cpus))),
                         max(1, int(cpus)))
    if pack == "gpu":
        if cluster_gpus < 1:
            raise ConfigError(f"--pack gpu: fills a whole GPU a trial; the plan has "
                              f"{cluster_gpus:g} GPUs (plan for a cluster with --plan-gpus N "
                              "--dry-run; valid --pack choices here: an integer, auto)")
        return gpu_filled_trials(members, cluster_gpus, cpus, cost)
    groups: dict[TrialResources, list[MemberConfig]] = {}
    for member in members:
        groups.setdefault(member_resources(member, cluster_gpus, cpus, cost), []).append(member)
    trials = []
    for res, group in groups.items():
        if pack == "auto":
            kind = "gpu" if res.gpu else "cpu"
            slots = max(1, math.floor(cluster_gpus / res.gpu) if res.gpu
                        else math.floor(cluster_cpus / max(res.cpu, 1)))
            trials += balanced_trials(group, res, slots, stack, cost,
                                      target_s or TARGET_TRIAL_S[kind])
            continue
        if trial_stack_mode(stack, res.gpu) == "always":
            keys = {id(m): stack_key(m) or m.hash for m in group}
            order = {key: i for i, key in enumerate(dict.fromkeys(keys.values()))}
            group = sorted(group, key=lambda m: order[keys[id(m)]])  # stable: first seen first
        for i in range(0, len(group), pack):
            chunk = group[i:i + pack]
            trials.append(PlannedTrial(chunk, res, stack,
                                       on_share(trial_seconds(chunk, res, stack, cost), res.gpu)))
    return trials


def trial_seconds(members: list[MemberConfig], res: TrialResources, stack: str, cost) -> float:
    """The cost model's duration of a trial: its stacks (icl_core.training.stacked) one after another."""
    from icl_core.training.stack_rules import stack_groups, trial_stack_mode

    mode = trial_stack_mode(stack, res.gpu)
    return sum(cost.unit_seconds([members[i] for i in g]) for g in stack_groups(members, mode))


# --------------------------------------------------------------- GPU wall-time estimate


def gpu_seconds(members: list[MemberConfig], cost: CostModel | None = None) -> float:
    """The wall time of `members` on one GPU by the cost model `cost` (a GPU's; default: an
    unmeasured one, the GPU rate model of icl_core.planning.gpu_rates), stacked where the cost
    model says stacking pays, each unit on its GPU share (`member_resources`) side by side with
    others at `on_share`'s slowdown: the one-GPU schedule's lower bound (icl_core.planning.
    schedule), max(the shares' GPU-seconds, the longest unit alone), which a study of many
    small units reaches. The estimate --dry-run prints, the --yes limit counts and the gpu presets
    are sized by (<= 20 min a study)."""
    if cost is None:
        cost = CostModel(device_label("cuda", 1), 1)
    return one_gpu_seconds([unit for unit, _ in _units(members, "auto", 1.0, cost)], cost)


def one_gpu_seconds(units: list[list[MemberConfig]], cost: CostModel) -> float:
    """The wall time of these units (stacks, or members alone) on one GPU, each on its share
    beside the others: max(sum of share x `on_share` seconds, the longest unit alone)."""
    busy, longest = 0.0, 0.0
    for unit in units:
        share = member_resources(unit[0], 1.0, 1, cost).gpu
        seconds = cost.unit_seconds(unit)
        busy, longest = busy + share * on_share(seconds, share), max(longest, seconds)
    return max(busy, longest)
