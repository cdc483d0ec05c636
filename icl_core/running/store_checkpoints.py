"""Trial checkpoints kept in the row store, for trials run without Tune (a lent machine with no
Ray: benchmarks/run_without_ray.py), so a trial cut off by a time limit or a kill goes on from
its members' last checkpoints on the next run instead of from their first step.

One file per member, `<study>/checkpoints/<config hash>.pt`: the member's `MemberRun` state (as
in a Tune checkpoint's "runs") with its origin (the device it trained on, a digest of the
core's sources, torch's version), written atomically (`Store.write_bytes`) at the member's
checkpoint steps (`train.checkpoint_every`), at most every `CHECKPOINT_MIN_S` seconds a trial
as Tune's are (`ICL_CHECKPOINT_MIN_S`; its first at once). A write that fails is logged and
training goes on (a checkpoint is a saving, not a result). A member's file is removed once
its rows are written (or its failure recorded). A file of another origin (the device is not in
the config hash), or one that does not load, is set aside with a warning and the member
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
import time

import pyarrow as pa
import pyarrow.fs as pafs
import torch

from icl_core.common.device import resolve_device
from icl_core.running.trial import Reporter, TrialFailed, TrialSpec, run_trial_results
from icl_core.running.tune_trainable import CHECKPOINT_MIN_S
from icl_core.spec.config import resolve_member
from icl_core.storage.provenance import code_digest
from icl_core.storage.store import Store

FOLDER = "checkpoints"
logger = logging.getLogger(__name__)


def checkpoint_path(store: Store, sweep: str, study: str, config_hash: str) -> str:
    return f"{store.study_dir(sweep, study)}/{FOLDER}/{config_hash}.pt"


def origin(raw: dict) -> dict:
    """What a member's checkpoint must match to be resumed: its device, the core's sources
    (`code_digest`) and torch's version."""
    return {"device": str(resolve_device(resolve_member(raw).device)), "code": code_digest(),
            "torch": str(torch.__version__)}


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


def store_reporter(store: Store, spec: TrialSpec, min_s: float = CHECKPOINT_MIN_S) -> Reporter:
    """A reporter that writes each member's checkpointed state to its file (a member whose
    step did not move since its last write is not written again), at most every `min_s`
    seconds, and removes a member's file once it is done (its rows written: not after a
    storage fault, which leaves the member unfinished)."""
    saved_at, steps = [-float("inf")], {}
    origins = {h: origin(raw) for h, raw in zip(spec.hashes, spec.members, strict=True)}

    def report(metrics: dict, state: dict | None) -> None:
        if metrics.get("member_done"):  # metrics["member"]: the member's index in the spec
            if "storage_error" not in metrics:
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
                               ) -> tuple[dict, dict[str, int], str | None]:
    """Run a trial, resumed from its members' checkpoint files and writing them as it goes;
    returns ({config_hash: status}, {config_hash: step resumed at} of the members resumed,
    the trial's failure or None). A failure (`TrialFailed`: members recorded as failed, each
    with its reason) is returned, not raised, with the statuses the store holds then. The
    files of the members recorded in the store (rows or a failure) are removed when the trial
    ends, a failed member's too (it trains again from its first step); a trial killed keeps
    them."""
    store = Store(spec.storage)
    recorded = store.member_status(spec.sweep, spec.study, spec.hashes)
    state = saved_state(store, spec)
    resumed = {h: run["step"] for h, run in (state or {"runs": {}})["runs"].items()
               if recorded[h][0] == "missing"}
    try:
        statuses = {h: r.status for h, r in
                    run_trial_results(spec, store_reporter(store, spec, min_s), state).items()}
        failure = None
    except TrialFailed as exc:  # members recorded as failed; or none trained (another code)
        statuses, failure = {}, str(exc)
    # recorded: rows written (ok, diverged) or a failure the store holds (not a storage
    # fault's, which leaves the member unfinished)
    unsure = [h for h in spec.hashes if statuses.get(h) not in ("ok", "diverged")]
    held = store.member_status(spec.sweep, spec.study, unsure) if unsure else {}
    statuses.update((h, status) for h, (status, _) in held.items() if h not in statuses)
    for config_hash in spec.hashes:
        if statuses[config_hash] in ("ok", "diverged") or \
                held.get(config_hash, ("missing",))[0] != "missing":
            store.discard(checkpoint_path(store, spec.sweep, spec.study, config_hash))
    return statuses, resumed, failure


def clear_leftovers(store: Store, sweep: str, study: str) -> None:
    """Remove what a killed run leaves in the study's checkpoints/: the files of members the
    store has recorded since (rows under rows/ or failed/, or a compacted copy: killed between
    them and the file's removal) and partial writes (`*.tmp-*`); other members' files stay."""
    selector = pafs.FileSelector(f"{store.study_dir(sweep, study)}/{FOLDER}",
                                 allow_not_found=True)
    names = [info.base_name for info in store.fs.get_file_info(selector)]
    for name in names:
        if ".tmp-" in name:
            store.discard(f"{store.study_dir(sweep, study)}/{FOLDER}/{name}")
    hashes = [n.removesuffix(".pt") for n in names if n.endswith(".pt")]
    for config_hash, (status, _) in store.member_status(sweep, study, hashes).items():
        if status != "missing":
            store.discard(checkpoint_path(store, sweep, study, config_hash))
