"""A trial: a list of members (one model each) trained in one process, in groups: a stack
(icl_core.training.stacked: members trained at once, weights stacked) or a lone member, which is a
stack of one here; both go through one run path (`run_group`) and one training driver
(icl_core.training.train.train_until).

`run_trial` is plain Python (tests and notebooks call it directly); icl_core.running.tune_trainable wraps
it for Ray Tune: metrics go out through `ray.tune.report` every `train.report_every` steps,
with a checkpoint every `train.checkpoint_every` steps, and a restarted trial resumes from it.
Each member writes its own row file, so packing members changes nothing else.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from icl_core.common.device import host_copy, resolve_device
from icl_core.models import num_params
from icl_core.spec.config import flatten, resolve_member
from icl_core.storage.claims import holder
from icl_core.storage.member_store import store_member
from icl_core.storage.provenance import worker_provenance
from icl_core.storage.store import LAST_METRIC, Store
from icl_core.training.evaluate import eval_prompts
from icl_core.training.member_evals import (
    after_report,
    final_rows,
    headline_mse,
    needs_model,
)
from icl_core.training.stack_rules import stack_groups, stack_key
from icl_core.training.stacked import StackedRun
from icl_core.training.throughput import records
from icl_core.training.train import (
    MemberRun,
    Trainer,
    still_training,
    train_row,
    train_until,
)

logger = logging.getLogger(__name__)


@dataclass
class TrialSpec:
    sweep: str
    study: str
    storage: str
    members: list[dict]  # resolved member configs (plain dicts)
    threads: int = 1  # torch CPU threads (the trial's CPU share)
    gpu: float = 0.0  # the trial's GPU share (icl_core.planning.resources)
    provenance: dict = field(default_factory=dict)  # from the driver: code and package versions
    hashes: list[str] = field(default_factory=list)  # the planner's config hashes (file
    # names): planning resolves each member once and passes them; left empty (tests,
    # notebooks), they are computed here
    # icl_core.training.stack_rules.STACK_MODES: stack members on CUDA (auto), always, never
    stack: str = "auto"
    driver: str = ""  # the id of the driver that claimed these members (icl_core.storage.claims)
    report_all: bool = False  # a search trial: Optuna / ASHA read every intermediate result
    # (a grid trial's reports only feed the progress line, so they are thinned out)
    interleave: bool = False  # train the trial's stack groups at once, a report interval of
    # each in turn, each on its own CUDA stream (run_together); False: one after another

    def __post_init__(self):
        if not self.hashes:
            self.hashes = [resolve_member(m).hash for m in self.members]

    @property
    def trial_id(self) -> str:
        hashes = self.hashes
        if len(hashes) == 1:
            return hashes[0]
        return hashlib.sha256(",".join(hashes).encode()).hexdigest()[:16]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrialSpec:
        return cls(**json.loads(text))


class StopMember(Exception):
    """Raised by a reporter to stop a member early (a search pruning it); recorded as pruned."""


class TrialFailed(RuntimeError):
    """Raised after all members ran when at least one raised; rows record each reason."""


Reporter = Callable[[dict, dict | None], None]  # (metrics, checkpoint state or None)


@dataclass
class MemberResult:
    """How a member of a trial ended: status, reason, and its last training loss (None for a
    member an earlier attempt finished: its rows hold it)."""

    status: str
    reason: str | None = None
    final_loss: float | None = None


def run_trial(spec: TrialSpec, report: Reporter | None = None, state: dict | None = None) -> dict:
    """Train every unfinished member; returns {config_hash: status} (`run_trial_results`)."""
    return {h: r.status for h, r in run_trial_results(spec, report, state).items()}


def run_trial_results(spec: TrialSpec, report: Reporter | None = None,
                      state: dict | None = None) -> dict[str, MemberResult]:
    """Train every unfinished member; returns {config_hash: MemberResult}.

    Members that may share a stack (icl_core.training.stacked: same config but seeds, and stacking on
    for this device by `spec.stack`) train at once; the others one after another.
    """
    torch.set_num_threads(max(1, spec.threads))
    store = Store(spec.storage)
    stored = store.member_status(spec.sweep, spec.study, spec.hashes)  # verified row files
    resumed = saved_runs(state)
    results, todo = {}, []
    for index, (raw, expected) in enumerate(zip(spec.members, spec.hashes, strict=True)):
        member = resolve_member(raw)
        if member.hash != expected:
            # Rows are named by the driver's hash; a worker on other code would rename them.
            raise TrialFailed(
                f"config hash {member.hash} on this worker != {expected} on the driver: "
                "driver and workers run different versions of icl_core"
            )
        if stored[member.hash][0] not in ("failed", "missing"):  # an earlier attempt's
            results[member.hash] = MemberResult(*stored[member.hash])
        elif other := holder(store, spec.sweep, spec.study, member.hash, spec.driver):
            logger.info(f"[{spec.sweep}/{spec.study}] member {member.hash}: claimed by another "
                        f"driver ({other}), skipped")
            results[member.hash] = MemberResult("claimed", f"claimed by another driver ({other})")
        else:
            todo.append((index, member))
    work = Work(spec, store, report, len(todo),
                diverged=sum(1 for r in results.values() if r.status == "diverged"))
    steps = [resumed.get(m.hash, {}).get("step", 0) for _, m in todo]  # a stack: one step
    groups = [[todo[i] for i in g] for g in stack_groups([m for _, m in todo], spec.stack, steps)]
    if spec.interleave and len(groups) > 1:
        run_together(work, groups, resumed)
    else:
        for group in groups:
            run_group(work, group, resumed)
    results.update(work.results)
    if work.failures:
        raise TrialFailed("; ".join(work.failures))
    return results


def saved_runs(state: dict | None) -> dict:
    """{config_hash: MemberRun state} from a trial checkpoint."""
    return state["runs"] if state else {}


@dataclass
class Work:
    """What a trial's members share while they run: the spec, store, reporter, progress."""

    spec: TrialSpec
    store: Store
    report: Reporter | None
    total: int  # members this attempt trains
    finished: int = 0
    diverged: int = 0  # members of this trial recorded as diverged (earlier attempts too)
    failures: list = field(default_factory=list)
    results: dict = field(default_factory=dict)  # config_hash -> MemberResult, as written

    def progress(self, running: float = 0.0) -> float:
        """Share of this attempt's work done (finished members + fractions of running ones)."""
        return (self.finished + running) / max(self.total, 1)


def next_report(step: int, cfg) -> int:
    return min(cfg.steps, (step // cfg.report_every + 1) * cfg.report_every)


def run_group(work: Work, members: list, resumed: dict) -> None:
    """Train a group of members, a stack (icl_core.training.stacked: at once, stacked weights) or a
    lone member (a stack of one as far as this is concerned); each ends (diverges, meets its
    stop rule, finishes) on its own and writes its rows as if it had trained alone (each
    one's MemberResult goes to `work.results`)."""
    group = open_group(work, members, resumed)
    while group is not None and group.open and drive(group):
        pass


def run_together(work: Work, groups: list[list], resumed: dict) -> None:
    """Train several groups (stacks of different shapes) at once in this process: one report
    interval of each in turn, each on its own CUDA stream (on a CPU, in turn), so one process
    keeps a GPU busy with all of a study's stacks (TrialSpec.interleave). Numbers are those of
    the groups one after another; a checkpoint holds every open member's latest state (a
    group's own from its last checkpoint), so a resumed trial goes on from it."""
    saved: dict = {}  # config hash -> the member's latest checkpointed state
    opened = []
    for members in groups:
        stream = group_stream(members[0][1])
        with torch.cuda.stream(stream):  # None: no stream (a CPU), nothing changes
            group = open_group(work, members, resumed)
        if group is not None:
            group.stream, group.saved = stream, saved
            opened.append(group)
    while opened:
        for group in opened:
            with torch.cuda.stream(group.stream):
                drive(group)  # a group done early has recorded (closed) its members
        opened = [g for g in opened if g.open]


def group_stream(member) -> torch.cuda.Stream | None:
    """A CUDA stream of its own for a group on a CUDA device (None elsewhere)."""
    device = resolve_device(member.device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    try:
        stream = torch.cuda.Stream(device)
    except (RuntimeError, AssertionError, ValueError):  # no such device: the group fails as
        return None  # it is built, and is recorded with the reason
    stream.wait_stream(torch.cuda.current_stream(device))
    return stream


def open_group(work: Work, members: list, resumed: dict) -> Group | None:
    """A group's runs and trainer, resumed where a checkpoint holds them; None (every member
    recorded as failed, with the reason) when they cannot be built."""
    t0, runs = time.time(), []
    try:
        for _, member in members:
            run = MemberRun(member)
            if member.hash in resumed:
                run.load_state_dict(resumed[member.hash])
            runs.append(run)
        prompts = [eval_prompts(member) for _, member in members]
        # a lone member too trains as a stack (of one) where its step is to be a CUDA graph
        graphed = members[0][1].train.cuda_graph and stack_key(members[0][1]) is not None
        trainer = runs[0] if len(runs) == 1 and not graphed else StackedRun(runs)
    except Exception as exc:  # every member of the group is recorded with the reason
        reason = failure("", exc)
        for k, (index, member) in enumerate(members):
            run = runs[k] if k < len(runs) else None
            finish_member(work, index, member, run, "failed", reason, math.nan, time.time() - t0)
        return None
    return Group(work, members, runs, prompts, trainer, t0)


def drive(group: Group) -> bool:
    """One report interval of a group: train, report, write the members that ended; False
    when the group is done early (a failure or a pruning: its members are recorded)."""
    try:
        live, checkpoint = group.advance()
    except Exception as exc:  # recorded with its reason; the trial goes on with others
        group.fail(exc)
        return False
    try:  # the reporter's own errors end the trial (Tune restarts it from a checkpoint)
        group.report(live, checkpoint)
    except StopMember as stop:
        group.close_all("pruned", str(stop))
        return False
    try:
        group.close_ended()
    except Exception as exc:
        group.fail(exc)
        return False
    return True


@dataclass
class Group:
    """A group's members while they train: the trainer (a MemberRun or a StackedRun), the
    members not yet written (`open`), each one's last mean loss."""

    work: Work
    members: list  # (index in the trial, MemberConfig)
    runs: list  # MemberRun per member
    prompts: list  # evaluation prompts per member, drawn once
    trainer: Trainer  # a MemberRun (a lone member) or a StackedRun
    t0: float
    open: dict = field(init=False)
    losses: list = field(init=False)
    stream: object = None  # its CUDA stream when trained together with others (run_together)
    saved: dict | None = None  # shared with the others then: every open member's last state

    def __post_init__(self):
        self.open = dict(enumerate(self.members))
        self.losses = [math.nan] * len(self.members)

    def advance(self) -> tuple[list[int], bool]:
        """Train to the next report step; for each member that trained and did not diverge
        (returned, with whether a checkpoint is due), its intermediate evaluation and artifacts."""
        cfg, trainer = self.members[0][1].train, self.trainer
        trained = [k for k in still_training(self.runs) if k in self.open] \
            if trainer.step < cfg.steps else []
        if trained:
            self.losses = train_until(trainer, next_report(trainer.step, cfg))
        checkpoint = trainer.step % cfg.checkpoint_every == 0 and trainer.step < cfg.steps
        live = [k for k in trained if self.runs[k].diverged_at is None]
        for k in list(live):
            member, run = self.members[k][1], self.runs[k]
            if needs_model(member, run, checkpoint) or run.step >= cfg.steps:
                trainer.sync_member(k, optimizer=checkpoint)  # a stack's weights -> the member's
            try:
                after_report(member, run, self.prompts[k])
            except Exception as exc:  # this member's evaluation: recorded, the stack trains on
                live.remove(k)
                self.close(k, "failed", failure(f"evaluation at step {run.step}: ", exc))
        return live, checkpoint

    def report(self, live: list[int], checkpoint: bool) -> None:
        """Progress of the members that trained, with their checkpoint when one is due."""
        if self.work.report is None or not live:
            return
        steps, step = self.members[0][1].train.steps, self.trainer.step
        states = {self.members[k][1].hash: self.runs[k].state_dict() for k in live} \
            if checkpoint else None
        if states is not None and self.saved is not None:  # with the other groups' latest
            # a copy on the host: this group trains on in place while the others report theirs
            self.saved.update(host_copy(states))
            states = dict(self.saved)
        self.work.report(
            # ("done" is reserved by Tune: it would end the whole trial)
            {"member": min(self.members[k][0] for k in live), "step": step,
             "loss": finite_mean([self.losses[k] for k in live]), "member_done": False,
             "progress": self.work.progress(len(live) * step / max(steps, 1))},
            {"runs": states} if states is not None else None,
        )

    def close_ended(self) -> None:
        """Final evaluation and rows of every member that diverged, stopped or finished."""
        steps = self.members[0][1].train.steps
        for k in list(self.open):
            run = self.runs[k]
            if run.diverged_at is not None or run.stopped_at is not None or run.step >= steps:
                try:
                    ended = final_rows(self.members[k][1], run, self.prompts[k])
                except Exception as exc:  # this member's alone: the others are evaluated
                    ended = "failed", failure(f"final evaluation at step {run.step}: ", exc)
                self.close(k, *ended)

    def close(self, k: int, status: str, reason: str | None) -> None:
        index, member = self.open.pop(k)
        if self.saved is not None:
            self.saved.pop(member.hash, None)  # written: a resumed trial skips it
        finish_member(self.work, index, member, self.runs[k], status, reason, self.losses[k],
                      time.time() - self.t0, len(self.runs))

    def close_all(self, status: str, reason: str) -> None:
        for k in list(self.open):
            self.close(k, status, reason)

    def fail(self, exc: Exception) -> None:
        self.close_all("failed", failure("", exc))


def failure(what: str, exc: Exception) -> str:
    """A failure's reason, `what` first ("final evaluation at step 8: "); its traceback to the
    trial's log."""
    traceback.print_exc()
    return f"{what}{type(exc).__name__}: {exc}"


def finite_mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def finish_member(work: Work, index, member, run, status, reason, loss, wall,
                  stack_size: int = 1) -> None:
    """Write a member's rows (and artifacts), report it done to Tune, count failures.

    A storage fault (the store cannot be written after `WRITE_TRIES` tries) records the member
    `failed` with the errno and message: in a failed/ record where the store takes one, in what
    Tune gets back and in the trial's log. It does not fail the trial: Tune would only train
    the whole trial again against the same storage. The config stays unfinished (no verified
    row file), so the next run of the sweep trains it again."""
    spec, h = work.spec, member.hash
    rows = run.rows if run is not None else []
    rows = rows + [steps_row(run.step if run else 0)]
    constants = member_constants(spec, index, member, run, status, reason, wall, stack_size)
    fault = store_member(work.store, spec, h, status, rows, constants,
                         run.artifacts if run is not None else None)
    if fault is not None:
        status, reason = "failed", fault
    elif status == "failed":
        work.failures.append(f"member {index} ({h}): {reason}")
    work.finished += 1
    work.diverged += status == "diverged"
    losses = [r["value"] for r in rows if r["metric"] == "train_loss"]
    work.results[h] = MemberResult(status, reason, losses[-1] if losses else math.nan)
    if work.report is not None and status != "pruned":
        work.report({"member": index, "step": run.step if run else 0, "member_done": True,
                     "status": status, "loss": loss, "mse": headline_mse(rows),
                     "progress": work.progress(), "diverged_members": work.diverged,
                     **({"storage_error": fault} if fault else {})}, None)


def steps_row(step: int) -> dict:
    """A member's last row (the store's LAST_METRIC): the steps it completed."""
    return {"metric": LAST_METRIC, "statistic": "value", "predictor": "model",
            "value": float(step), "step": step}


def record_stopped(spec: TrialSpec, step: int, loss: float, reason: str) -> bool:
    """A search member that Tune's scheduler stopped (ASHA ends the trial's process, which
    writes nothing), recorded `pruned` by the driver: its last reported step and training loss
    as its rows, so the store counts it as its Optuna study does and a resumed search does not
    train it again. False where its rows were written already."""
    store, member = Store(spec.storage), resolve_member(spec.members[0])
    if store.finished(spec.sweep, spec.study, [member.hash]):
        return False
    rows = [train_row(step, loss)] if math.isfinite(loss) else []
    rows.append(steps_row(step))
    constants = member_constants(spec, 0, member, None, "pruned", reason, 0.0)
    return store_member(store, spec, member.hash, "pruned", rows, constants, None) is None


def member_constants(spec, index, member, run, status, reason, wall, stack_size=1) -> dict:
    plain = member.to_dict()
    device = run.device if run is not None else torch.device("cpu")
    seconds = run.train_seconds if run is not None else 0.0
    return {
        **flatten(plain),
        **spec.provenance,
        **worker_provenance(device),
        "sweep": spec.sweep, "study": spec.study, "trial_id": spec.trial_id, "member": index,
        "config_hash": member.hash, "status": status, "reason": reason,
        "config_json": json.dumps(plain, sort_keys=True),
        "num_params": num_params(run.model) if run is not None else None,
        "wall_time_s": wall, "train_time_s": seconds,
        **records(member, run),  # step time, tokens/s, FLOP/s and its share of peak, memory
        "skipped_steps": run.skipped_steps if run is not None else None,
        "threads": spec.threads,
        "stack_size": stack_size,  # members trained at once with this one (icl_core.training.stacked)
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
