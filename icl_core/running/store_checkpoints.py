"""Trial checkpoints kept in the row store, for trials run without Tune (a lent machine with no
Ray: benchmarks/run_without_ray.py), so a trial cut off by a time limit or a kill goes on from
its members' last checkpoints on the next run instead of from their first step.

One file per member, `<study>/checkpoints/<config hash>.pt`: the member's `MemberRun` state (as
in a Tune checkpoint's "runs") with the device it trained on and the driver's code version,
written atomically (`Store.write_bytes`) at the member's checkpoint steps
(`train.checkpoint_every`), at most every `CHECKPOINT_MIN_S` seconds a trial as Tune's are
(`ICL_CHECKPOINT_MIN_S`; its first at once). A write that fails is logged and training goes
on (a checkpoint is a saving, not a result). A member's file is removed once its rows are
written. A file of another device or code version (the device is not in the config hash), or
one that does not load, is set aside with a warning and the member starts from its first step:
a member's rows come from one device and one code version.

Per member, not per trial: a re-run that groups the members otherwise (other `--seeds`,
`--interleave`) finds each one's state; members resumed at different steps train apart
(icl_core.training.stack_rules). On a CPU the rows are an uninterrupted run's bit for bit
(tested); on CUDA, members a cut left at different steps train in smaller stacks, whose sums
may round otherwise.
"""

from __future__ import annotations

import io
import logging
import time

import pyarrow as pa
import pyarrow.fs as pafs
import torch

from icl_core.common.device import resolve_device
from icl_core.running.trial import Reporter, TrialFailed, TrialSpec, run_trial_results
from icl_core.running.tune_trainable import CHECKPOINT_MIN_S
from icl_core.spec.config import resolve_member
from icl_core.storage.store import Store

FOLDER = "checkpoints"
logger = logging.getLogger(__name__)


def checkpoint_path(store: Store, sweep: str, study: str, config_hash: str) -> str:
    return f"{store.study_dir(sweep, study)}/{FOLDER}/{config_hash}.pt"


def origin(spec: TrialSpec, raw: dict) -> dict:
    """What a member's checkpoint must match to be resumed: its device and the code."""
    return {"device": str(resolve_device(resolve_member(raw).device)),
            "code_version": spec.provenance.get("code_version")}


def saved_state(store: Store, spec: TrialSpec) -> dict | None:
    """The trial state (`{"runs": {hash: state}}`, tensors on the host) of the spec's members
    whose checkpoint file matches their origin (`origin`); None when none does. A file that
    does not match or load is removed, with a warning (weights only: nothing in it runs
    code)."""
    runs = {}
    paths = {h: checkpoint_path(store, spec.sweep, spec.study, h) for h in spec.hashes}
    infos = store.fs.get_file_info(list(paths.values()))
    for (config_hash, path), raw, info in zip(paths.items(), spec.members, infos, strict=True):
        if info.type != pafs.FileType.File:
            continue
        try:
            with store.fs.open_input_file(path) as f:
                saved = torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)
            theirs = {key: saved[key] for key in ("device", "code_version")}
            run = saved["run"]
        except Exception as exc:  # a file from elsewhere, or cut short by a full disk
            reason = f"does not load ({type(exc).__name__}: {str(exc)[:200]})"
        else:
            ours = origin(spec, raw)
            if theirs == ours:
                runs[config_hash] = run
                continue
            reason = f"is from {theirs}, this run is {ours}"
        logger.warning(f"[{spec.sweep}/{spec.study}] member {config_hash}: its checkpoint "
                       f"{reason}; set aside: it trains from its first step")
        store.discard(path)
    return {"runs": runs} if runs else None


def store_reporter(store: Store, spec: TrialSpec, min_s: float = CHECKPOINT_MIN_S) -> Reporter:
    """A reporter that writes each member's checkpointed state to its file (a member whose
    step did not move since its last write is not written again), at most every `min_s`
    seconds, and removes a member's file once it is done (its rows written)."""
    saved_at, steps = [-float("inf")], {}
    origins = {h: origin(spec, raw) for h, raw in zip(spec.hashes, spec.members, strict=True)}

    def report(metrics: dict, state: dict | None) -> None:
        if metrics.get("member_done"):  # metrics["member"]: the member's index in the spec
            config_hash = spec.hashes[metrics["member"]]
            store.discard(checkpoint_path(store, spec.sweep, spec.study, config_hash))
            steps.pop(config_hash, None)
            return
        now = time.monotonic()
        if state is None or now - saved_at[0] < min_s:
            return
        saved_at[0] = now
        for config_hash, run in state["runs"].items():
            if steps.get(config_hash) == run["step"]:
                continue
            buffer = io.BytesIO()
            torch.save({**origins[config_hash], "run": run}, buffer)
            try:
                store.write_bytes(checkpoint_path(store, spec.sweep, spec.study, config_hash),
                                  buffer.getvalue())
            except (OSError, pa.ArrowException) as exc:  # a full disk, a store's hiccup
                logger.warning(f"[{spec.sweep}/{spec.study}] member {config_hash}: checkpoint "
                               f"at step {run['step']} not written ({exc}); training goes on")
                continue
            steps[config_hash] = run["step"]

    return report


def run_with_store_checkpoints(spec: TrialSpec, min_s: float = CHECKPOINT_MIN_S
                               ) -> tuple[dict, dict[str, int]]:
    """Run a trial, resumed from its members' checkpoint files and writing them as it goes;
    returns ({config_hash: status}, {config_hash: step resumed at} of the members resumed).
    The files of the members recorded in the store (rows or a failure) are removed when the
    trial ends, a failed member's too (it trains again from its first step); a trial killed,
    or one that failed before recording its members, keeps the others."""
    store = Store(spec.storage)
    recorded = store.member_status(spec.sweep, spec.study, spec.hashes)
    state = saved_state(store, spec)
    resumed = {h: run["step"] for h, run in (state or {"runs": {}})["runs"].items()
               if recorded[h][0] == "missing"}
    try:
        results = run_trial_results(spec, store_reporter(store, spec, min_s), state)
    except TrialFailed:  # some members recorded as failed; or none trained (another code)
        clear_recorded(store, spec.sweep, spec.study, spec.hashes)
        raise
    clear_recorded(store, spec.sweep, spec.study, spec.hashes)
    return {h: r.status for h, r in results.items()}, resumed


def clear_recorded(store: Store, sweep: str, study: str, hashes) -> None:
    """Remove the checkpoint files of those of `hashes` the store has recorded (rows under
    rows/ or failed/, or a compacted copy): their state is of no further use."""
    recorded = store.member_status(sweep, study, list(hashes))
    for config_hash, (status, _) in recorded.items():
        if status != "missing":
            store.discard(checkpoint_path(store, sweep, study, config_hash))


def leftover_hashes(store: Store, sweep: str, study: str) -> list[str]:
    """The config hashes of the study's checkpoint files."""
    selector = pafs.FileSelector(f"{store.study_dir(sweep, study)}/{FOLDER}",
                                 allow_not_found=True)
    return [info.base_name.removesuffix(".pt") for info in store.fs.get_file_info(selector)
            if info.base_name.endswith(".pt")]
