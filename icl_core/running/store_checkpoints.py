"""Trial checkpoints kept in the row store, for trials run without Tune (a lent machine with no
Ray: benchmarks/run_without_ray.py), so a trial cut off by a time limit or a kill goes on from
its members' last checkpoints on the next run instead of from their first step.

One file per member, `<study>/checkpoints/<config hash>.pt` (the member's `MemberRun` state, as
in a Tune checkpoint's "runs"), written atomically (`Store.write_bytes`) at a member's
checkpoint steps (`train.checkpoint_every`), at most every `CHECKPOINT_MIN_S` seconds a trial
as Tune's are (`ICL_CHECKPOINT_MIN_S`; its first at once). A member's file is removed once its
rows are written. Per member, not per trial: a re-run that groups the members otherwise (other
`--seeds`, `--interleave`) finds each one's state; members resumed at different steps train
apart (icl_core.training.stack_rules), each to the numbers of an uninterrupted run.
"""

from __future__ import annotations

import io
import time

import pyarrow.fs as pafs
import torch

from icl_core.running.trial import Reporter, TrialFailed, TrialSpec, run_trial_results
from icl_core.running.tune_trainable import CHECKPOINT_MIN_S
from icl_core.storage.store import Store

FOLDER = "checkpoints"


def checkpoint_path(store: Store, sweep: str, study: str, config_hash: str) -> str:
    return f"{store.study_dir(sweep, study)}/{FOLDER}/{config_hash}.pt"


def saved_state(store: Store, spec: TrialSpec) -> dict | None:
    """The trial state (`{"runs": {hash: state}}`) of the spec's members that have a
    checkpoint file; None when none has (weights only: nothing in it runs code)."""
    runs = {}
    paths = {h: checkpoint_path(store, spec.sweep, spec.study, h) for h in spec.hashes}
    for config_hash, info in zip(paths, store.fs.get_file_info(list(paths.values())),
                                 strict=True):
        if info.type != pafs.FileType.File:
            continue
        with store.fs.open_input_file(info.path) as f:
            runs[config_hash] = torch.load(io.BytesIO(f.read()), weights_only=True)
    return {"runs": runs} if runs else None


def store_reporter(store: Store, spec: TrialSpec, min_s: float = CHECKPOINT_MIN_S) -> Reporter:
    """A reporter that writes each member's checkpointed state to its file (a member whose
    step did not move since its last write is not written again), at most every `min_s`
    seconds, and removes a member's file once it is done (its rows written)."""
    saved_at, steps = [-float("inf")], {}

    def report(metrics: dict, state: dict | None) -> None:
        if metrics.get("member_done"):
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
            torch.save(run, buffer)
            store.write_bytes(checkpoint_path(store, spec.sweep, spec.study, config_hash),
                              buffer.getvalue())
            steps[config_hash] = run["step"]

    return report


def run_with_store_checkpoints(spec: TrialSpec, min_s: float = CHECKPOINT_MIN_S
                               ) -> tuple[dict, dict[str, int]]:
    """Run a trial, resumed from its members' checkpoint files and writing them as it goes;
    returns ({config_hash: status}, {config_hash: step resumed at} of the members resumed).
    Every member's file is removed when the trial ends with each member recorded (a failed
    member trains again from its first step); a trial killed, or one whose store or reporter
    failed, keeps them."""
    store = Store(spec.storage)
    state = saved_state(store, spec)
    resumed = {h: run["step"] for h, run in (state or {"runs": {}})["runs"].items()}
    try:
        results = run_trial_results(spec, store_reporter(store, spec, min_s), state)
    except TrialFailed:  # every member recorded, some as failed
        clear(store, spec)
        raise
    clear(store, spec)
    return {h: r.status for h, r in results.items()}, resumed


def clear(store: Store, spec: TrialSpec) -> None:
    for config_hash in spec.hashes:
        store.discard(checkpoint_path(store, spec.sweep, spec.study, config_hash))
