"""Trial checkpoints kept in the row store, so a trial cut off by a time limit or a kill goes on
from its members' last checkpoints on the next run instead of from their first step: a grid
trial under Ray Tune (`tune_trainable`: a worker Tune restarts, a driver Ctrl-C'd or a batch
job killed at its time limit and submitted again) and a trial run without Ray (a lent machine:
benchmarks/run_without_ray.py). A search's trials keep Tune's own checkpoints (its schedulers
and `Tuner.restore` read them).

One file per member, `<study>/checkpoints/<config hash>.pt`: the member's `MemberRun` state (as
in a trial state's "runs") with its origin (the device it trained on, on CUDA with the GPU's
name, a digest of the core's sources, torch's version), written atomically
(`Store.write_bytes`) at the member's checkpoint steps (`train.checkpoint_every`), at most
every `CHECKPOINT_MIN_S` seconds a trial (`ICL_CHECKPOINT_MIN_S`; its first at once). A write
that fails is logged and training goes on (a checkpoint is a saving, not a result). A member's
file is removed once its rows are written (`FINISHED`); a failed member keeps it, so its retry
(Tune's, or the next run's) goes on from there. A file of another origin (the device is not
in the config hash), or one that does not load, is set aside with a warning and the member
starts from its first step: a member's rows come from one device and one code.

Per member, not per trial: a re-run that groups the members otherwise (other `--seeds`,
`--interleave`) finds each one's state; members resumed at different steps train apart
(icl_core.training.stack_rules). On a CPU the rows are an uninterrupted run's bit for bit
(tested); on CUDA, members a cut left at different steps train in smaller stacks, whose sums
may round otherwise.
"""

from __future__ import annotations

import io
import logging
import os
import time
from collections.abc import Callable, Iterable

import pyarrow as pa
import pyarrow.fs as pafs
import torch

from icl_core.common.device import resolve_device
from icl_core.running.trial import TrialFailed, TrialSpec, run_trial_results
from icl_core.spec.config import resolve_member
from icl_core.storage.provenance import code_digest
from icl_core.storage.store import Store

FOLDER = "checkpoints"
FINISHED = ("ok", "diverged", "pruned")  # a member with rows: its file is no longer needed
UNFINISHED = ("missing", "failed")  # a member that may hold a file to go on from
# A trial writes its members' states at most this often (its first at once): tiny members that
# checkpoint after a few steps would otherwise write (and, on S3, upload) more than they train.
# A state held back loses nothing a resumed trial needs: finished members have their rows, and
# a member whose newest state was not written trains again from the last one written (or from
# its first step) to the same numbers. `ICL_CHECKPOINT_MIN_S` overrides it (0: every one).
CHECKPOINT_MIN_S = float(os.environ.get("ICL_CHECKPOINT_MIN_S", "60"))
logger = logging.getLogger(__name__)


def checkpoint_path(store: Store, sweep: str, study: str, config_hash: str) -> str:
    return f"{store.study_dir(sweep, study)}/{FOLDER}/{config_hash}.pt"


def listed(store: Store, sweep: str, study: str) -> list[str]:
    """The names in the study's checkpoints/ (none when it is not there)."""
    selector = pafs.FileSelector(f"{store.study_dir(sweep, study)}/{FOLDER}",
                                 allow_not_found=True)
    return [info.base_name for info in store.fs.get_file_info(selector)]


def hashes_of(names: Iterable[str]) -> set[str]:
    """The config hashes of the checkpoint files among a listing's names."""
    return {n.removesuffix(".pt") for n in names if n.endswith(".pt")}


def held(store: Store, sweep: str, study: str) -> set[str]:
    """The config hashes with a checkpoint file in the study's checkpoints/."""
    return hashes_of(listed(store, sweep, study))


def resumable(store: Store, sweep: str, study: str, hashes: Iterable[str]) -> set[str]:
    """Of `hashes`, the unfinished ones with a checkpoint file (what a dry run counts; reads
    no state, so not whether its origin matches); none where the store cannot be listed."""
    try:
        files = held(store, sweep, study) & set(hashes)
        return files - store.finished(sweep, study, sorted(files)) if files else set()
    except (OSError, pa.ArrowException):
        return set()


def origin(raw: dict) -> dict:
    """What a member's checkpoint must match to be resumed: its device (on CUDA with the GPU's
    name: an H100's state does not go on on an H200), the core's sources (`code_digest`) and
    torch's version."""
    device = resolve_device(resolve_member(raw).device)
    where = str(device)
    if device.type == "cuda" and torch.cuda.is_available():
        where += f" ({torch.cuda.get_device_name(device)})"
    return {"device": where, "code": code_digest(), "torch": str(torch.__version__)}


def saved_state(store: Store, spec: TrialSpec) -> dict | None:
    """The trial state (`{"runs": {hash: state}}`, tensors on the host) of the spec's members
    whose checkpoint file matches their origin (`origin`); None when none does. A file that
    does not match or load is removed, with a warning (weights only: nothing in it runs
    code)."""
    runs = {}
    present = set(listed(store, spec.sweep, spec.study))  # one listing, not a request a member
    for config_hash, raw in zip(spec.hashes, spec.members, strict=True):
        if f"{config_hash}.pt" not in present:
            continue
        path = checkpoint_path(store, spec.sweep, spec.study, config_hash)
        try:
            with store.fs.open_input_file(path) as f:
                saved = torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)
            theirs = {key: saved[key] for key in ("device", "code", "torch")}
            run = saved["run"]
        except Exception as exc:  # a file from elsewhere, or cut short by a full disk
            reason = f"does not load ({type(exc).__name__}: {str(exc)[:200]})"
        else:
            ours = origin(raw)
            if theirs == ours:
                runs[config_hash] = run
                continue
            reason = f"is from {theirs}, this run is {ours}"
        logger.warning(f"[{spec.sweep}/{spec.study}] member {config_hash}: its checkpoint "
                       f"{reason}; set aside: it trains from its first step")
        store.discard(path)
    return {"runs": runs} if runs else None


class StoreReporter:
    """A reporter (`Reporter`) that writes each member's checkpointed state to its file (a
    member whose step did not move since its last write is not written again), at most every
    `min_s` seconds, and removes a member's file once its rows are written (not after a
    failure, a storage fault's included: the member is unfinished). `found`: the members whose
    file the trial found; only files found or written (`files`) are removed, so the others
    cost no request (a trial of thousands of tiny members on S3)."""

    def __init__(self, store: Store, spec: TrialSpec, min_s: float = CHECKPOINT_MIN_S,
                 found: Iterable[str] = ()):
        self.store, self.spec, self.min_s = store, spec, min_s
        self.files, self.steps, self.saved_at = set(found), {}, -float("inf")
        self.raw = dict(zip(spec.hashes, spec.members, strict=True))
        self.origins: dict[str, dict] = {}  # a member's, when its state is first written

    def origin(self, config_hash: str) -> dict:
        if config_hash not in self.origins:
            self.origins[config_hash] = origin(self.raw[config_hash])
        return self.origins[config_hash]

    def path(self, config_hash: str) -> str:
        return checkpoint_path(self.store, self.spec.sweep, self.spec.study, config_hash)

    def __call__(self, metrics: dict, state: dict | None) -> None:
        if metrics.get("member_done"):  # metrics["member"]: the member's index in the spec
            config_hash = self.spec.hashes[metrics["member"]]
            # a storage fault's member is "failed": unfinished, its file kept
            if metrics.get("status") in FINISHED and config_hash in self.files:
                self.store.discard(self.path(config_hash))
                self.files.discard(config_hash)
                self.steps.pop(config_hash, None)
            return
        now = time.monotonic()
        if state is None or now - self.saved_at < self.min_s:
            return
        self.saved_at = now
        for config_hash, run in state["runs"].items():
            if self.steps.get(config_hash) == run["step"]:
                continue
            buffer = io.BytesIO()
            torch.save({**self.origin(config_hash), "run": run}, buffer)
            try:
                self.store.write_bytes(self.path(config_hash), buffer.getbuffer())
            except (OSError, pa.ArrowException) as exc:  # a full disk, a store's hiccup
                logger.warning(f"[{self.spec.sweep}/{self.spec.study}] member {config_hash}: "
                               f"checkpoint at step {run['step']} not written ({exc}); "
                               "training goes on")
                continue
            self.steps[config_hash] = run["step"]
            self.files.add(config_hash)


def run_with_store_checkpoints(spec: TrialSpec, min_s: float = CHECKPOINT_MIN_S,
                               progress: Callable[[dict], None] | None = None
                               ) -> tuple[dict, dict[str, int], str | None]:
    """Run a trial, resumed from its members' checkpoint files and writing them as it goes;
    returns ({config_hash: status}, {config_hash: step resumed at} of the members resumed,
    the trial's failure or None). A failure (`TrialFailed`: members recorded as failed, each
    with its reason) is returned, not raised, with the statuses the store holds then. The
    files of the members with rows in the store are removed when the trial ends; a failed
    member's stays (its retry goes on from it), as does a killed trial's. `progress` gets
    every report's metrics (Tune's progress: `tune_trainable`)."""
    store = Store(spec.storage)
    state = saved_state(store, spec)
    found = (state or {"runs": {}})["runs"]
    recorded = store.member_status(spec.sweep, spec.study, list(found)) if found else {}
    resumed = {h: run["step"] for h, run in found.items() if recorded[h][0] not in FINISHED}
    write = StoreReporter(store, spec, min_s, found=found)

    def report(metrics: dict, checkpoint: dict | None) -> None:
        write(metrics, checkpoint)
        if progress is not None:
            progress(metrics)

    try:
        statuses = {h: r.status for h, r in run_trial_results(spec, report, state).items()}
        failure = None
    except TrialFailed as exc:  # members recorded as failed; or none trained (another code)
        statuses, failure = {}, str(exc)
    unsure = [h for h in spec.hashes if statuses.get(h) not in FINISHED]
    stored = store.member_status(spec.sweep, spec.study, unsure) if unsure else {}
    statuses.update((h, status) for h, (status, _) in stored.items() if h not in statuses)
    for config_hash in write.files:
        if statuses[config_hash] in FINISHED or \
                stored.get(config_hash, ("missing",))[0] in FINISHED:  # another driver's rows
            store.discard(write.path(config_hash))
    return statuses, resumed, failure


def resumed_note(resumed: dict[str, int]) -> str:
    """What a trial's line says of the members it resumed: "resumed 2 at step 400-800"."""
    steps = sorted(set(resumed.values()))
    at = "-".join(map(str, dict.fromkeys((steps[0], steps[-1]))))
    return f"resumed {len(resumed)} at step {at}"


RESUMABLE = "; a checkpoint is in the store: the same command goes on from it"


def with_checkpoints(store: Store, sweep: str, study: str, statuses: dict) -> dict:
    """{hash: (status, reason)} with the reason of each unfinished member (missing, failed)
    that holds a checkpoint saying so (a study's report after Ctrl-C or a failure); one
    listing; a store that cannot be listed leaves the reasons as they are."""
    if not any(status in UNFINISHED for status, _ in statuses.values()):
        return statuses
    try:
        files = held(store, sweep, study)
    except (OSError, pa.ArrowException):
        return statuses
    return {h: (status, f"{reason}{RESUMABLE}" if status in UNFINISHED and h in files
                else reason) for h, (status, reason) in statuses.items()}


def clear_leftovers(store: Store, sweep: str, study: str, hashes: Iterable[str] | None = None,
                    done_elsewhere: Iterable[str] = ()) -> set[str]:
    """Remove what a killed run leaves in the study's checkpoints/: the files of members with
    rows since (under rows/ or compacted: killed between them and the file's removal), or with
    rows elsewhere (`done_elsewhere`: committed evidence, whose state a window carried in), and
    partial writes (`*.tmp-*`: only those of the members `hashes` when given, the ones this
    driver claimed, since another driver's write may be in flight); other members' files stay,
    a failed member's too; returns the hashes whose file stays. A store that cannot be read
    now is a warning: nothing is removed."""
    try:
        names = listed(store, sweep, study)
        mine = None if hashes is None else set(hashes)
        for name in names:
            if ".tmp-" in name and (mine is None or name.split(".", 1)[0] in mine):
                store.discard(f"{store.study_dir(sweep, study)}/{FOLDER}/{name}")
        files = hashes_of(names)
        done = store.finished(sweep, study, sorted(files)) if files else set()
        for config_hash in done | (files & set(done_elsewhere)):
            store.discard(checkpoint_path(store, sweep, study, config_hash))
        return files - done - set(done_elsewhere)
    except (OSError, pa.ArrowException) as exc:  # a store's hiccup: the next run clears them
        logger.warning(f"[{sweep}/{study}] checkpoints/ not cleared ({exc}); training goes on")
        return set()
