"""The cost model: how long a member, or a stack of members, trains on the target device.

Per distinct *step shape* (model, task, batch, optimizer, dtype: what sets the time of one
optimizer step; seeds, step counts and evaluation do not), the step time comes from, best
first:

1. **rows**: the `step_time_s` of finished rows of the same shape on the same device kind
   (median; a stack's rows give the stack's step time for its size), via `learn_from_rows`;
2. **calibration**: a few optimizer steps timed on the target device (`calibrate`: two warm-up
   steps, then the best of REPEATS timings of CALIBRATION_STEPS; icl_core.planning.calibration), alone and, where members can stack, as a stack of
   `STACK_PROBE` members; cached per device, dtype and threads in
   $ICL_CACHE/step_times.json (else ~/.cache/icl_core), like the matmul peak;
3. **FLOPs**: on a GPU the GPU rate model fitted to an H100's measured steps
   (icl_core.planning.gpu_rates), on a CPU
   `step_cost_flops` (6 x params x tokens plus attention's T^2 term) at CPU_FLOPS per thread
   with a launch floor per layer pass.

A member's time is steps x step time, plus its evaluations (the forward FLOPs of evaluation
over those of a training step, at the step's measured rate) and a start-up overhead. A stack
pays only where it is launch-bound: `stack_pays` says whether K members stacked take less per
member than alone (the calibration or rows decide; without either, the GPU rate model).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from icl_core.common.memo import per_config
from icl_core.planning import gpu_rates
from icl_core.spec.config import ConfigError, MemberConfig, to_plain
from icl_core.training.flops import step_cost_flops, step_shape, supervised_positions

CPU_FLOPS = 2e10  # training FLOP/s of one CPU core, roughly (throughput records: 1-4e10)
CPU_LAYER_PASS_S = 2e-4  # eager PyTorch on a CPU: per layer pass, forward and backward
# A member's fixed cost on a CPU beside its steps, evaluation and baselines: build, the
# evaluation's bookkeeping, its row file. Measured (docs/COST.md): a tiny least-squares member
# of the smoke preset takes ~0.19-0.25 CPU-s in all, 0.13 s of it the GD baselines.
MEMBER_OVERHEAD_S = 0.05
CPU_STEP_FLOOR_S = 1.5e-3  # eager PyTorch on a CPU: batch, loss, Adam of one step, any size
BASELINE_ITER_S = 60e-6  # one GD iteration of a baseline over the test prompts (measured)
BASELINE_SOLVE_ITERS = 20  # a lstsq (ols), in baseline iterations
STACK_GAIN = 0.8  # a stack pays when its time per member is below this share of alone
# GPU shares a trial may get: at most five trials side by side on one GPU, each then taking
# SHARED_SLOWDOWN x its time alone (measured on an H100, `icl cost --check evidence/reduced`:
# five processes of 3-seed stacks took 1.16-1.22x the rate model's steps alone; thirteen CUDA
# processes queued each other's kernels at 3.4-4.0x, docs/COST.md), so five keep a GPU busiest
SIDE_BY_SIDE = 5
SHARES = (1 / SIDE_BY_SIDE, 0.25, 0.5, 1.0)
SHARED_SLOWDOWN = 1.25
MEMORY_HEADROOM = 1.25  # a share holds the member's measured peak memory x this
# On a GPU, before a shape is measured there: the GPU rate model (icl_core.planning.gpu_rates),
#   constants fitted to step times measured on an H100 (launch floor and per layer pass, the
#   vmapped stack's own cost, a cost per member, the FLOPs at a fitted rate), one set per path
#   (eager or a CUDA graph; precision), refitted by `icl cost --write`.
#   L-BFGS (a fixed batch) runs lbfgs_max_iter closures a step, each iteration walking its
#   history twice: alone with a host read per stored pair (torch.optim.LBFGS passes a tensor
#   as alpha), LBFGS_PAIR_S per pair and walk (a dot, a multiply, an axpy, the read); a stack
#   walks every member's pairs at once with about half a lone member's launches (4 a pair,
#   both walks) and no read
#   (icl_core/training/stacked_lbfgs.py), costed at LBFGS_PAIR_S per pair for the whole
#   stack until a GPU measures it (benchmarks/gpu_stacks.py).
#   Evaluation (CostModel._eval_seconds): per evaluation point and chunk a floor of
#   EVAL_FLOOR_S plus a third of a layer pass per layer, or its FLOPs at the rate. Plus
#   STACK_OVERHEAD_S per stack (build, warm-up, the final evaluation's CPU baselines, rows).
# Stacks run one after another on the one GPU: trials sharing it concurrently are not
# credited, nor are stop rules (eval.stop_below, train.stop_loss: the cap is estimated), nor
# ASHA's early stops in a search: an upper bound. Not modelled: the ReLU-teacher studies'
# teacher-network baseline (trained on the CPU at the final evaluation), checkpoint writes,
# Ray start-up.
EVAL_FLOOR_S = 1e-3
LBFGS_PAIR_S = 30e-6
STACK_OVERHEAD_S = 5.0


DEVICE_MEMORY = "device_memory_mb"  # the cache's entry for the device's memory


@per_config
def shape_key(member: MemberConfig) -> str:
    """What sets the time of one optimizer step: model, task, batch, optimizer, dtype."""
    t = member.train
    plain = {"model": to_plain(member.model), "task": to_plain(member.task),
             "batch": t.batch_size, "optimizer": t.optimizer, "dtype": member.dtype,
             "lbfgs": [t.lbfgs_max_iter, t.lbfgs_history] if t.optimizer == "lbfgs" else None,
             "dataset": t.dataset_size, "compile": t.compile}
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()[:16]


@per_config
def rest_key(member: MemberConfig) -> str:
    """What sets a member's time beside its steps (CostModel.rest_seconds): its step shape,
    its evaluation and how many evaluations its steps give."""
    plain = {"shape": shape_key(member), "eval": to_plain(member.eval),
             "evaluations": member.train.steps // member.eval.every if member.eval.every else 0}
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()[:16]


def baseline_seconds(member: MemberConfig) -> float:
    """The iterative baselines of the final evaluation (icl_core.training.evaluate.baseline_rows): per
    evaluation point, precision (float32 and float64) and supervised position, max(gd_steps)
    iterations of GD (gd_tuned and newton: once per step size of their grid, then once more),
    BASELINE_ITER_S each; a lstsq (ols) counts as BASELINE_SOLVE_ITERS iterations. The
    supervised positions: n_points for an all-prefix layout, else one (the query)."""
    cfg, task = member.eval, member.task
    longest = max(cfg.gd_steps, default=0)
    runs = {"gd": 1, "gd_tuned": 1 + len(cfg.gd_lr_grid), "newton": 1 + len(cfg.newton_alpha_grid)}
    iterations = sum(runs[name] * longest if name in runs else BASELINE_SOLVE_ITERS
                     for name in cfg.baselines)
    problems = supervised_positions(task)
    return iterations * 2 * problems * len(cfg.grid) * BASELINE_ITER_S


def _lbfgs_mean_history(iterations: int, history: int) -> float:
    """Mean stored pairs over `iterations` L-BFGS iterations (the history fills, then stays)."""
    if iterations <= history:
        return iterations / 2
    return history - history * history / (2 * iterations)


def device_label(device_type: str, threads: int, gpu_name: str | None = None) -> str:
    """The device a step time holds for: a GPU model, or this host's CPU at a thread count."""
    if device_type == "cuda":
        return f"cuda|{gpu_name or 'gpu'}"
    return f"cpu|{socket.gethostname()}|threads={threads}"


def cache_file() -> Path:
    root = os.environ.get("ICL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "icl_core")
    return Path(root) / "step_times.json"


@dataclass
class StepTime:
    """Measured seconds per optimizer step of one shape: alone, and per stack size."""

    alone: float | None = None
    stacked: dict[int, float] = field(default_factory=dict)  # stack size -> stack's step time
    source: str = "calibration"
    memory_mb: float | None = None  # peak device memory of one member (CUDA allocations)
    busy: float | None = None  # share of the device's matmul peak one member achieves


@dataclass
class CostModel:
    """Step times of one target device (`device` from `device_label`), and the estimates
    built on them. `table`: shape key -> StepTime."""

    device: str
    threads: int = 1
    table: dict[str, StepTime] = field(default_factory=dict)
    device_memory_mb: float | None = None  # the GPU's memory (calibration), for shares
    rest: dict[str, float] = field(default_factory=dict)  # rest_key -> seconds (rows)
    # the GPU rate model's constants (gpu_rates.RateFile; None: the committed ones)
    rate_file: gpu_rates.RateFile | None = None

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")

    # -- step times -------------------------------------------------------------------
    def step_seconds(self, member: MemberConfig, stack: int = 1) -> tuple[float, str]:
        """(seconds of one optimizer step of `stack` such members trained at once, source)."""
        known = self.table.get(shape_key(member))
        if known is not None:
            if stack == 1 and known.alone:
                return known.alone, known.source
            if stack in known.stacked:
                return known.stacked[stack], known.source
            if known.alone and known.stacked:  # between measured sizes: linear in K
                k, s = max(known.stacked.items())
                per = max(0.0, (s - known.alone) / max(k - 1, 1))
                return known.alone + per * (stack - 1), known.source
            if known.alone:
                return known.alone * stack, known.source
        return self._flop_step(member, stack), "flops"

    def _flop_step(self, member: MemberConfig, stack: int) -> float:
        if self.on_gpu:
            return self._rates(member).step_seconds(member, stack)
        shape = step_shape(member)
        compute = step_cost_flops(member, shape) / (CPU_FLOPS * max(self.threads, 1))
        return stack * (CPU_STEP_FLOOR_S + CPU_LAYER_PASS_S * shape.layers + compute)

    def _rates(self, member: MemberConfig) -> gpu_rates.Rates:
        """The GPU rate model's constants for `member`'s path."""
        return (self.rate_file or gpu_rates.load()).for_member(member)

    def gpu_share(self, member: MemberConfig, flop_share: float) -> float:
        """A member's GPU share: its FLOP-based share, raised to what its measured memory
        (with MEMORY_HEADROOM, over the device's) and its measured utilisation need, each
        rounded up to the next of SHARES. Unmeasured: the FLOP share."""
        known = self.table.get(shape_key(member))
        need = flop_share
        if known is not None and known.memory_mb and self.device_memory_mb:
            need = max(need, MEMORY_HEADROOM * known.memory_mb / self.device_memory_mb)
        if known is not None and known.busy:
            need = max(need, known.busy)
        return next((s for s in SHARES if need <= s), 1.0)

    def stack_pays(self, member: MemberConfig, k: int) -> bool:
        """Whether `k` members stacked train faster per member than one after another."""
        if k < 2:
            return False
        alone, _ = self.step_seconds(member, 1)
        stacked, _ = self.step_seconds(member, k)
        return stacked / k < STACK_GAIN * alone

    # -- members and stacks -----------------------------------------------------------
    def member_seconds(self, member: MemberConfig) -> float:
        """One member trained alone: its steps, its evaluations, its overhead."""
        return self.unit_seconds([member])

    def unit_seconds(self, members: list[MemberConfig]) -> float:
        """A stack (members that differ only in their seeds) trained at once, or one member:
        its steps, then each member's evaluations and fixed cost (`rest_seconds`)."""
        first, k = members[0], len(members)
        cfg = first.train
        step, source = self.step_seconds(first, k)
        if cfg.optimizer == "lbfgs" and source == "flops":  # a measured step holds them all
            step *= cfg.lbfgs_max_iter
            if self.on_gpu:  # each iteration walks its history twice (a stack's at once)
                pairs = _lbfgs_mean_history(cfg.steps * cfg.lbfgs_max_iter, cfg.lbfgs_history)
                step += cfg.lbfgs_max_iter * 2 * pairs * LBFGS_PAIR_S
        return cfg.steps * step + sum(self.rest_seconds(m, step / k, k) for m in members)

    def rest_seconds(self, member: MemberConfig, step_s: float, stack: int = 1) -> float:
        """What a member costs beside its training steps: build, evaluations with their
        baselines, rows. Measured where finished rows of the same shape and evaluation say
        (wall_time_s - train_time_s, their median; `learn_from_rows`), else its evaluations
        (`_eval_seconds`), its baselines (`baseline_seconds`) and a fixed overhead
        (MEMBER_OVERHEAD_S on a CPU; on a GPU, STACK_OVERHEAD_S per stack)."""
        known = self.rest.get(rest_key(member))
        if known is not None:
            return known
        fixed = STACK_OVERHEAD_S / stack if self.on_gpu else MEMBER_OVERHEAD_S
        return self._eval_seconds(member, step_s) + baseline_seconds(member) + fixed

    def _eval_seconds(self, member: MemberConfig, step_s: float) -> float:
        """Evaluations, every `eval.every` steps and at the end, each evaluation point
        (and iterative-inference step) one forward over n_prompts in chunks. From a measured
        step: the forward FLOPs over a training step's at the step's rate (a forward is a
        third of a step), at least a third of a step per chunk. From FLOPs on a GPU: the rate
        model, max(chunks x (EVAL_FLOOR_S + layer_pass_s / 3 x layer passes), 2 x params x
        tokens at its rate)."""
        shape, cfg = step_shape(member), member.eval
        steps = member.train.steps
        evaluations = 1 + ((steps - 1) // cfg.every if cfg.every and steps else 0)
        passes = 1 + max(cfg.infer_steps, default=0)
        chunks = math.ceil(cfg.n_prompts / cfg.chunk)
        known = shape_key(member) in self.table
        if self.on_gpu and not known:
            rates = self._rates(member)
            floor = chunks * (EVAL_FLOOR_S + rates.layer_pass_s / 3 * shape.eval_layers)
            per_flop = rates.s_per_flop * gpu_rates.flop_weight(member.dtype)
            compute = 2.0 * shape.eval_params * shape.seq * cfg.n_prompts * per_flop
            return evaluations * len(cfg.grid) * passes * max(floor, compute)
        ratio = (shape.eval_params * cfg.n_prompts) / max(
            shape.params * member.train.batch_size, 1.0) / 3.0
        return evaluations * len(cfg.grid) * passes * max(ratio, chunks / 3.0) * step_s

    # -- what it learns ---------------------------------------------------------------
    def learn(self, member: MemberConfig, alone: float | None = None,
              stacked: dict[int, float] | None = None, source: str = "calibration",
              memory_mb: float | None = None, busy: float | None = None) -> None:
        entry = self.table.setdefault(shape_key(member), StepTime(source=source))
        if alone is not None:
            entry.alone = alone
        if memory_mb is not None:
            entry.memory_mb = memory_mb
        if busy is not None:
            entry.busy = busy
        entry.stacked.update(stacked or {})
        entry.source = source

    def to_json(self) -> dict:
        """The table, and the device's memory (DEVICE_MEMORY) when known: what from_json reads
        (the cache; a calibration on a GPU worker sent back to the driver)."""
        out: dict = {k: {"alone": v.alone, "stacked": {str(n): s for n, s in v.stacked.items()},
                         "source": v.source, "memory_mb": v.memory_mb, "busy": v.busy}
                     for k, v in self.table.items()}
        if self.device_memory_mb:
            out[DEVICE_MEMORY] = self.device_memory_mb
        return out

    @classmethod
    def from_json(cls, device: str, threads: int, data: dict) -> CostModel:
        data = dict(data)
        memory = data.pop(DEVICE_MEMORY, None)
        table = {k: StepTime(v["alone"], {int(n): s for n, s in v["stacked"].items()},
                             v.get("source", "calibration"), v.get("memory_mb"), v.get("busy"))
                 for k, v in data.items()}
        return cls(device, threads, table, memory)


# ---------------------------------------------------------------------- the cache


def load(device: str, threads: int = 1) -> CostModel:
    """The cached step times of `device` (an empty model where there are none)."""
    path = cache_file()
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:  # a damaged cache is measured again
        data = {}
    return CostModel.from_json(device, threads, data.get(device, {}))


def save(model: CostModel) -> None:
    """Merge `model`'s calibrated step times into the cache (rows-learned ones are not kept:
    the rows are there to learn from again)."""
    import fcntl

    path = cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = json.loads(path.read_text()) if path.exists() else {}
        except ValueError:
            data = {}
        mine = {k: v for k, v in model.to_json().items()
                if k == DEVICE_MEMORY or v["source"] == "calibration"}
        data.setdefault(model.device, {}).update(mine)
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)


def learn_from_rows(model: CostModel, rows) -> int:
    """Step times of finished rows (a Polars frame with config_json, step_time_s, stack_size,
    device_type, threads): the median per shape and stack size, on this model's device kind
    (and thread count on CPUs); with wall_time_s and train_time_s, also the median time of a
    lone member beside its steps (build, evaluations, baselines) per `rest_key`. Returns how
    many shapes were learned."""
    from icl_core.spec.config import resolve_member

    kind = "cuda" if model.on_gpu else "cpu"
    need = {"config_json", "step_time_s", "stack_size", "device_type", "threads"}
    if rows is None or not need <= set(rows.columns):
        return 0
    walls = ["wall_time_s", "train_time_s"] if {"wall_time_s", "train_time_s"} <= set(
        rows.columns) else []
    extra = [c for c in ("peak_memory_mb", "flops_fraction") if c in rows.columns]
    times: dict[tuple[str, int], list[float]] = {}
    rests: dict[str, list[float]] = {}  # rest_key -> wall - training of members alone
    footprint: dict[str, list[tuple]] = {}  # shape -> (memory, busy) of members alone
    members: dict[str, MemberConfig] = {}
    columns = ["config_json", "step_time_s", "stack_size", "device_type", "threads", *walls,
               *extra]
    for config, step, size, device, threads, *more in rows.select(columns).unique().iter_rows():
        if step is None or device != kind or (kind == "cpu" and threads != model.threads):
            continue
        try:
            member = resolve_member(json.loads(config))
        except ConfigError:  # an older store's config this code refuses: it teaches nothing
            continue
        key = shape_key(member)
        members[key] = member
        times.setdefault((key, int(size or 1)), []).append(float(step))
        if walls:
            (wall, train), more = more[:2], more[2:]
            if int(size or 1) == 1 and wall is not None and train is not None:
                rests.setdefault(rest_key(member), []).append(max(0.0, wall - train))
        if kind == "cuda" and int(size or 1) == 1 and len(more) == 2:
            footprint.setdefault(key, []).append(tuple(more))
    for key, seen in rests.items():
        model.rest[key] = statistics.median(seen)
    for (key, size), values in times.items():
        median = statistics.median(values)
        if size == 1:
            model.learn(members[key], alone=median, source="rows")
        else:
            model.learn(members[key], stacked={size: median}, source="rows")
    for key, seen in footprint.items():  # a GPU member's memory and utilisation, alone
        memory = [m for m, _ in seen if m is not None]
        busy = [b for _, b in seen if b is not None]
        model.learn(members[key], memory_mb=max(memory) if memory else None,
                    busy=statistics.median(busy) if busy else None, source="rows")
    return len({k for k, _ in times})
