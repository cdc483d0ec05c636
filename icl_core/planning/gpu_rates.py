"""The GPU rate model: what one training step costs on a GPU before that shape is measured
there, fitted to step times measured on one GPU kind (an H100 so far).

One step of a stack of K members (K = 1: a lone `MemberRun`; K > 1: one vmapped
`StackedRun`, icl_core.training.stacked) of a model with L layer passes (StepShape.layers)
and F = step_cost_flops FLOPs per member takes

    floor_s + layer_pass_s L                                   launches, Python, Adam, any K
    + [K > 1] (stack_floor_s + stack_layer_pass_s L)           the vmapped path's own cost
    + K member_s                                               per member (its batch drawn)
    + K F / rate                                               the FLOPs, at the fitted rate

with every term >= 0. Batches drawn by counter (train.draws), a step captured as a CUDA graph
(train.cuda_graph), a compiled one (train.compile) and a step under another precision
(train.precision) are other *paths*, each with its own constants once it is measured; until
then they are costed as the default path (BASE_PATH: generator draws, eager, fp32). float64
and bfloat16 scale the rate by the GPU's dense peaks (PEAK).

The constants are fitted by `fit`: least squares on the relative error (each measured step
weighs the same whatever its length), non-negative (scipy's NNLS), on the measured steps kept in
`gpu_rates.json` beside this module (each with its member's config, stack size, seconds and
source: the measurement command and machine). `icl cost` adds measurements (benchmarks/
stack_scaling.py's or paper_step.py's --json), refits, writes the file and checks the model
against the step times and stack walls of studies run on that GPU (icl.commands.cost).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from icl_core.spec.config import ConfigError, MemberConfig, resolve_member, set_path, to_plain
from icl_core.training.flops import step_cost_flops, step_shape

logger = logging.getLogger(__name__)

RATES_FILE = Path(__file__).resolve().with_name("gpu_rates.json")
TERMS = ("floor_s", "layer_pass_s", "stack_floor_s", "stack_layer_pass_s", "member_s",
         "s_per_flop")
BASE_PATH = "generator fp32"  # the default path, every other's fallback until it is measured
# dense peaks of an H100 SXM by dtype (float32 without TF32): the fitted float32 rate scales
# by their ratio for float64 (no tensor cores) and bfloat16
PEAK = {"float32": 67e12, "float64": 34e12, "bfloat16": 990e12}
MEMBER_FIELDS = {f.name for f in fields(MemberConfig)}  # a row's config columns start so
# A path's revision, raised when what its step launches changes: steps timed on an earlier
# revision stay in the file as a record but are not fitted. 2 (2026-11-28): counter draws hash
# a call's two stream words at once, a graph's body writes its gradients unzeroed, a stack of
# one runs without vmap and with SDPA (about a third of the kernels of a lone graph step), and
# a stack's linear layers skip F.linear's batching rule (2 kernels a layer). The generator
# path stays at 1: its lone steps are unchanged and its stacked ones lose 2 of ~25 kernels a
# layer, within its fit's error; raising it would leave the base path with no steps to fit.
# Later that day a seed stack's generator draws went through one task call (about 6 launches
# a member fewer): its per-member term now overstates a large stack a little, so the plans
# are upper bounds there until the next window's generator steps are added. Later still
# (stop 60) a stack's attention on CUDA up to 64 tokens became SDPA's fused kernel (about 10
# launches a layer fewer at K > 1, float32 or bfloat16): every stacked path's fitted terms
# overstate it likewise. Past 64 tokens a member trains in the matmul form instead (SDPA's
# fused backward is not deterministic there), alone too: plans for lone members that long
# (9 of the gpu preset's, sequence_length/fixed_n_points_depth) are lower bounds.
REVISIONS = {"counter": 2, "graph": 2}


def path_of(member: MemberConfig) -> str:
    """The path a member's step takes: eager with its batches drawn by `generator` or
    `counter` (train.draws), or captured (train.cuda_graph): `graph` with counter draws,
    `graph-generator` with the members' generators replayed (what an evidence window runs with
    GRAPH=1; fewer launches, so fitted apart); `+compile` (train.compile); and its precision
    (train.precision). E.g. "generator fp32" (the defaults), "graph tf32",
    "graph-generator fp32", "counter+compile fp32"."""
    return f"{_kind(member)}{'+compile' if member.train.compile else ''} {member.train.precision}"


def _kind(member: MemberConfig) -> str:
    """A step's kind: its draws, eager; `graph` (counter draws) or `graph-<draws>` captured."""
    draws = member.train.draws
    if member.train.cuda_graph:
        return "graph" if draws == "counter" else f"graph-{draws}"
    return draws


def revision_of(member: MemberConfig, revisions: dict | None = None) -> int:
    """The revision of a member's path in `revisions` (default the current REVISIONS; 1 where
    never raised)."""
    return (REVISIONS if revisions is None else revisions).get(_kind(member), 1)


def features(member: MemberConfig, stack: int) -> list[float]:
    """The terms' multipliers for a stack of `stack` such members (the order of TERMS); the
    FLOPs in float32 FLOPs (a float64 or bfloat16 one weighs the peaks' ratio), so a fit and a
    prediction treat a dtype alike."""
    shape = step_shape(member)
    stacked = 1.0 if stack > 1 else 0.0
    return [1.0, float(shape.layers), stacked, stacked * shape.layers, float(stack),
            stack * step_cost_flops(member, shape) * flop_weight(member.dtype)]


def flop_weight(dtype: str) -> float:
    """A FLOP of `dtype` in float32 FLOPs: the ratio of the GPU's dense peaks (float64: its
    slower peak; bfloat16: its faster one)."""
    return PEAK["float32"] / PEAK.get(dtype, PEAK["float32"])


@dataclass(frozen=True)
class Rates:
    """One path's fitted constants (seconds; s_per_flop: seconds per float32 FLOP)."""

    floor_s: float
    layer_pass_s: float
    stack_floor_s: float
    stack_layer_pass_s: float
    member_s: float
    s_per_flop: float

    def step_seconds(self, member: MemberConfig, stack: int = 1) -> float:
        """One step of a stack of `stack` such members (1: alone)."""
        return sum(c * f for c, f in zip(self.coefficients(), features(member, stack),
                                         strict=True))

    def coefficients(self) -> list[float]:
        return [getattr(self, t) for t in TERMS]

    def describe(self) -> str:
        rate = f"{1 / self.s_per_flop / 1e12:.3g} TFLOP/s" if self.s_per_flop else "no FLOP term"
        return (f"{1e3 * self.floor_s:.3g} ms + {1e3 * self.layer_pass_s:.3g} ms/layer pass; "
                f"stacked + {1e3 * self.stack_floor_s:.3g} ms + "
                f"{1e3 * self.stack_layer_pass_s:.3g} ms/layer pass; "
                f"{1e3 * self.member_s:.3g} ms/member; {rate}")


@dataclass(frozen=True)
class Measured:
    """One measured step: `stack` members of `member`'s shape took `step_s` a step."""

    member: MemberConfig
    stack: int
    step_s: float
    source: str
    revision: int = 1  # its path's revision when it was timed (REVISIONS)

    @property
    def current(self) -> bool:
        """Timed on the path's current code: fitted (else kept as a record only)."""
        return self.revision == revision_of(self.member)

    def to_json(self) -> dict:
        return {"config": to_plain(self.member), "stack": self.stack, "step_s": self.step_s,
                "source": self.source, "revision": self.revision}

    @classmethod
    def from_json(cls, data: dict) -> Measured:
        return cls(resolve_member(data["config"]), int(data["stack"]), float(data["step_s"]),
                   data["source"], int(data.get("revision", 1)))


def fit(points: list[Measured]) -> Rates:
    """Non-negative least squares on the relative error of `points` (one path's)."""
    import numpy as np
    from scipy.optimize import nnls

    if not points:
        raise ConfigError("a GPU rate fit needs measured steps; none given")
    if not any(p.stack > 1 for p in points) or not any(p.stack == 1 for p in points):
        raise ConfigError("a GPU rate fit needs steps of lone members (K = 1) and of stacks "
                          f"(K > 1); got K = {sorted({p.stack for p in points})}")
    a = np.array([features(p.member, p.stack) for p in points], dtype=float)
    y = np.array([p.step_s for p in points], dtype=float)
    scale = a.max(axis=0)  # columns of like size (FLOPs are ~1e9), undone below
    scale[scale == 0] = 1.0
    rank = int(np.linalg.matrix_rank(a / scale))
    if rank < len(TERMS):
        raise ConfigError(
            f"a GPU rate fit needs steps that tell its {len(TERMS)} terms apart (rank "
            f"{rank} of {len(TERMS)} from {len(points)} steps): lone and stacked steps at two "
            "depths or more and two stack sizes or more, e.g. stack_scaling.py's K = 1, 8, "
            "32 at both sizes")
    coef, _ = nnls(a / scale / y[:, None], np.ones(len(y)))
    return Rates(*(float(c) for c in coef / scale))


def relative_errors(rates: Rates, points: list[Measured]) -> list[float]:
    """predicted / measured - 1, per point."""
    return [rates.step_seconds(p.member, p.stack) / p.step_s - 1.0 for p in points]


def leave_one_out(points: list[Measured]) -> list[float | None]:
    """Each point's relative error under the fit of all the others (None where the others
    cannot be fitted)."""
    out: list[float | None] = []
    for i, p in enumerate(points):
        try:
            rates = fit(points[:i] + points[i + 1:])
        except ConfigError:
            out.append(None)
            continue
        out.append(relative_errors(rates, [p])[0])
    return out


# ---------------------------------------------------------------- the committed file


@dataclass
class RateFile:
    """gpu_rates.json: the device the steps were measured on, the measured steps, and the
    constants fitted to them per path."""

    device_name: str
    points: list[Measured]
    rates: dict[str, Rates]
    note: str = ""

    def for_member(self, member: MemberConfig) -> Rates:
        """The constants of a member's path, else the default path's (BASE_PATH)."""
        return self.rates.get(path_of(member)) or self.rates[BASE_PATH]

    def refit(self) -> dict[str, Rates]:
        """Fit every path that has both lone and stacked steps (those timed on its current
        revision)."""
        by_path: dict[str, list[Measured]] = {}
        for p in self.current_points():
            by_path.setdefault(path_of(p.member), []).append(p)
        out = {}
        for path, points in sorted(by_path.items()):
            try:
                out[path] = fit(points)
            except ConfigError:
                continue  # a path with too few kinds of steps keeps falling back on BASE_PATH
        if BASE_PATH not in out:
            raise ConfigError(f"no {BASE_PATH} steps to fit: the path every other one falls back on")
        return out

    def current_points(self) -> list[Measured]:
        return [p for p in self.points if p.current]

    def to_json(self) -> dict:
        return {"device_name": self.device_name, "note": self.note,
                "rates": {k: asdict(v) for k, v in self.rates.items()},
                "points": [p.to_json() for p in self.points]}

    @classmethod
    def from_json(cls, data: dict) -> RateFile:
        return cls(data["device_name"], [Measured.from_json(p) for p in data["points"]],
                   {k: Rates(**v) for k, v in data["rates"].items()}, data.get("note", ""))


_LOADED: dict[Path, RateFile] = {}


def load(path: Path | None = None) -> RateFile:
    """The committed rate file, or another (read once per process; treat it as read-only)."""
    path = RATES_FILE if path is None else path.resolve()  # the cost model asks every step
    if path not in _LOADED:
        _LOADED[path] = RateFile.from_json(json.loads(path.read_text()))
    return _LOADED[path]


def save(rate_file: RateFile, path: Path | None = None) -> None:
    path = RATES_FILE if path is None else path.resolve()
    path.write_text(json.dumps(rate_file.to_json(), indent=1, sort_keys=True) + "\n")
    _LOADED.pop(path, None)


# ---------------------------------------------------------------- measured rows


def member_of_row(row: dict) -> MemberConfig:
    """A member's config from one of its rows: its `config_json` where kept, else its
    flattened `section.field` columns (evidence rows drop config_json; list values are JSON
    text). Raises ConfigError where the rebuilt config's hash is not the row's."""
    if row.get("config_json"):
        return resolve_member(json.loads(row["config_json"]))
    nested: dict = {}
    for key, value in row.items():
        if value is None:
            continue
        if isinstance(value, str) and value[:1] in "[{":
            try:
                value = json.loads(value)
            except ValueError:
                pass
        if key.partition(".")[0] in MEMBER_FIELDS:
            set_path(nested, key, value)
    member = resolve_member(nested)
    if row.get("config_hash") and member.hash != row["config_hash"]:
        raise ConfigError(f"a row's config does not rebuild: hash {member.hash} is not the "
                          f"row's {row['config_hash']}")
    return member


def stacks_of_rows(rows, source: str) -> list[tuple[Measured, float | None, int]]:
    """Finished CUDA stacks in a frame of rows (Polars; a store's or evidence's): per trial and
    stack, (its measured step, its wall in seconds (the longest member's wall_time_s), its
    training steps). One entry per stack (its members share the step time)."""
    need = {"config_hash", "trial_id", "step_time_s", "stack_size", "device_type"}
    if rows is None or not need <= set(rows.columns):
        return []
    finished = rows.filter((rows["device_type"] == "cuda") & rows["step_time_s"].is_not_null())
    if "status" in finished.columns:
        finished = finished.filter(finished["status"] == "ok")
    if finished.height == 0:
        return []
    keys = ["trial_id", "step_time_s", "stack_size"]
    out = []
    for _, group in finished.group_by(keys, maintain_order=True):
        first = group.row(0, named=True)
        try:
            member = member_of_row(first)
        except ConfigError as exc:  # an older store's config this code refuses, or that no
            # longer rebuilds to its hash: no stack to plan against, said once
            logger.warning(f"[{source}] a stack's rows left out (trial "
                           f"{first['trial_id']}): {exc}")
            continue
        walls = [w for w in group["wall_time_s"].to_list() if w is not None] \
            if "wall_time_s" in group.columns else []
        out.append((Measured(member, int(first["stack_size"] or 1), float(first["step_time_s"]),
                             source), max(walls) if walls else None, member.train.steps))
    return out


def study_span(rows) -> float | None:
    """Seconds from a study's first CUDA member's start to its last one's end, in a frame of a
    store's rows (finished_at less wall_time_s; None where the rows keep no finished_at, as
    evidence does not)."""
    import polars as pl

    need = {"finished_at", "wall_time_s", "device_type", "config_hash"}
    if rows is None or not need <= set(rows.columns):
        return None
    members = rows.filter((pl.col("device_type") == "cuda") & pl.col("wall_time_s").is_not_null()
                          & pl.col("finished_at").is_not_null()).unique("config_hash")
    if members.height == 0:
        return None
    end = members["finished_at"].str.to_datetime("%Y-%m-%dT%H:%M:%S%z").dt.epoch("s")
    start = end - members["wall_time_s"]
    return float(end.max() - start.min())


def stack_scaling_points(data: dict, source: str) -> list[Measured]:
    """The measured cells of benchmarks/stack_scaling.py's JSON (`--json`): ours, status ok,
    each with its member's config, whose train.precision is its pass's (refused otherwise),
    and its path's revision when the benchmark ran (the JSON's `revisions`; none recorded: a
    file from before REVISIONS, so revision 1)."""
    if data.get("device") != "cuda":
        raise ConfigError(f"{source}: measured on {data.get('device')!r}; the GPU rate model "
                          "takes steps measured on a CUDA device")
    out = []
    for row in data.get("ours", []):
        if row.get("status") != "ok":
            continue
        if "member" not in row:
            raise ConfigError(f"{source}: a cell without its member's config (written by a "
                              "stack_scaling.py older than `icl cost`); re-run the benchmark")
        member = resolve_member(row["member"])
        if row.get("precision", "fp32") != member.train.precision:
            raise ConfigError(
                f"{source}: a {row.get('precision')} cell (K = {row['k']}) whose member trains at "
                f"train.precision={member.train.precision}, which the trainer sets TF32 from: "
                "stack_scaling.py before 2026-11-28 timed its TF32 pass with fp32 members; re-run "
                "it, or relabel those cells as the fp32 steps they were")
        out.append(Measured(member, int(row["k"]), float(row["ms_per_step"]) / 1e3, source,
                            revision_of(member, data.get("revisions", {}))))
    return out


TOLERANCE = 0.25  # issue 46: planned and measured GPU time within 25%


def summary(errors: list[float | None]) -> str:
    """"median |error| 6.1%, worst +21%, 11 of 12 within 25%"."""
    known = [e for e in errors if e is not None and math.isfinite(e)]
    if not known:
        return "no errors"
    within = sum(abs(e) <= TOLERANCE for e in known)
    worst = max(known, key=abs)
    median = sorted(abs(e) for e in known)[len(known) // 2]
    return (f"median |error| {100 * median:.1f}%, worst {100 * worst:+.0f}%, {within} of "
            f"{len(known)} within {100 * TOLERANCE:.0f}%")
