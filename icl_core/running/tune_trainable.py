"""The function Ray Tune runs (`tune_trainable`), and the one trial format it reads.

Grids and searches hand Tune the same config: {"spec": TrialSpec JSON} plus, in a search, the
sampled settings as dotted keys ({"spec": ..., "train.lr": 3e-4}), which override the spec's
single member before it is resolved (`spec_from_config`).

Checkpoints: a grid trial keeps its members' states in the row store
(icl_core.running.store_checkpoints), one file a member, so a trial Tune restarts (its worker
died) and a member of a grid run again after its driver stopped (Ctrl-C, a batch job's time
limit) go on from them; it hands Tune none. A search trial hands Tune its checkpoint (its
schedulers and `Tuner.restore` read it): one file, written atomically (`save_state` /
`load_state`, weights only: nothing in it runs code).

For the trackers (TensorBoard: icl_core.running.tracking; W&B and MLflow:
icl_core.running.wandb_mlflow), `trial_hparams` gives a trial config's members as flat
hyperparameters: each member's config flattened (`model.depth`, `train.lr`, ... and
`config_hash`) instead of the config's one opaque JSON string. A packed trial gives the fields
its members share as they are, and a field they differ in as the list of its values ("1, 2").
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import tempfile
import time

import torch

from icl_core.common.log import ensure_console
from icl_core.running.store_checkpoints import resumed_note, run_with_store_checkpoints
from icl_core.running.trial import TrialFailed, TrialSpec, run_trial
from icl_core.spec.config import flatten, with_settings

logger = logging.getLogger(__name__)
CHECKPOINT_FILE = "member_state.pt"
PROGRESS_EVERY_S = 2.0  # a grid trial reports progress to Tune at most this often
SPEC_KEY = "spec"
LEGACY_SPEC_KEY = "base"  # searches started before the one format kept their spec here;
# Tune restores a search's param space from its own state, so `--resume` of such a search
# still reads it


def ended_early(result: dict | None) -> bool:
    """Whether a trial's last result is one before its member finished: Tune's scheduler
    (ASHA) stopped it, since a trial that runs to its end reports `member_done` last."""
    return bool(result) and not result.get("member_done")


def trial_config(spec: TrialSpec, sampled: dict | None = None) -> dict:
    """A trial's Tune config: its spec, and a search's sampled (or to-be-sampled) settings."""
    return {SPEC_KEY: spec.to_json(), **(sampled or {})}


def spec_from_config(config: dict) -> TrialSpec:
    """The TrialSpec of a trial config (`trial_config`); sampled settings, if any, are set on
    its single member, which is then resolved (validated) and hashed again."""
    key = SPEC_KEY if SPEC_KEY in config else LEGACY_SPEC_KEY
    spec = TrialSpec.from_json(config[key])
    sampled = {k: v for k, v in config.items() if k not in (SPEC_KEY, LEGACY_SPEC_KEY)}
    if key == LEGACY_SPEC_KEY:
        spec.report_all = True
    if not sampled:
        return spec
    if len(spec.members) != 1:
        raise ValueError(f"sampled settings {sorted(sampled)} need a spec with one member, "
                         f"got {len(spec.members)}")
    member = with_settings(spec.members[0], sampled)
    spec.members, spec.hashes = [member.to_dict()], [member.hash]
    return spec


SCALARS = (str, bool, int, float)


def trial_hparams(config: dict) -> dict:
    """The flattened member configs of a trial config, as TensorBoard hparams (scalars)."""
    spec = spec_from_config(config)
    flats = [flatten(member) for member in spec.members]
    out: dict = {"sweep": spec.sweep, "study": spec.study, "members": len(flats)}
    for key in dict.fromkeys(k for flat in flats for k in flat):
        values = [_scalar(flat.get(key)) for flat in flats]
        unique = list(dict.fromkeys(values))
        out[key] = unique[0] if len(unique) == 1 else ", ".join(map(str, unique))
    hashes = list(dict.fromkeys(spec.hashes))
    out["config_hash"] = hashes[0] if len(hashes) == 1 else ", ".join(hashes)
    return out


def _scalar(value):
    if isinstance(value, SCALARS):
        return value
    return json.dumps(value, sort_keys=True, default=str)  # None, lists, eval grids


def save_state(directory: str, state: dict) -> None:
    """Atomic checkpoint write: to a temporary file, then rename; a failed write (a full
    disk) removes the temporary file and leaves the previous checkpoint as it was."""
    path = os.path.join(directory, CHECKPOINT_FILE)
    tmp = path + ".tmp"
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def load_state(directory: str) -> dict:
    return torch.load(os.path.join(directory, CHECKPOINT_FILE), weights_only=True)


def tune_trainable(config: dict) -> None:
    """The function Ray Tune runs, for grid and search trials alike."""
    import ray

    logging.getLogger("ray.train").setLevel(logging.WARNING)  # one line per checkpoint otherwise
    logging.getLogger("ray.tune").setLevel(logging.WARNING)
    ensure_console()  # a worker's lines reach the driver's console through Ray (its level)
    spec = spec_from_config(config)
    assigned = ray.get_runtime_context().get_assigned_resources()
    spec.provenance = {**spec.provenance, "gpu_share": spec.gpu,
                       "assigned_gpu": float(assigned.get("GPU", 0.0)),
                       "assigned_cpu": float(assigned.get("CPU", 0.0))}
    (search_trial if spec.report_all else grid_trial)(spec)


def grid_trial(spec: TrialSpec) -> None:
    """A grid trial: its members' checkpoints in the store (resumed from there), its reports
    to Tune only for the progress line: each is a round trip to Tune's controller (~0.1 s on
    a loaded node), so at most one every PROGRESS_EVERY_S, and the trial's last."""
    from ray import tune

    last = [-math.inf]

    def progress(metrics: dict) -> None:
        now = time.monotonic()
        if (metrics.get("member_done") and metrics.get("progress", 0) >= 1) or \
                now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            tune.report(metrics)

    _, resumed, failure = run_with_store_checkpoints(spec, progress=progress)
    if resumed:
        logger.info(f"[{spec.sweep}/{spec.study}] {resumed_note(resumed)} from checkpoints "
                    "in the store")
    if failure is not None:
        raise TrialFailed(failure)  # its members' rows say why; Tune counts the trial failed


def search_trial(spec: TrialSpec) -> None:
    """A search trial (one member): every report to Tune (Optuna and ASHA read each), each
    checkpoint handed to Tune."""
    from ray import tune

    saw_loss = [False]
    checkpoint = tune.get_checkpoint()
    state = None
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            state = load_state(d)

    def report(metrics: dict, ckpt_state: dict | None) -> None:
        saw_loss[0] = saw_loss[0] or "loss" in metrics
        if ckpt_state is None:
            tune.report(metrics)
            return
        with tempfile.TemporaryDirectory() as d:
            save_state(d, ckpt_state)
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))

    statuses = run_trial(spec, report, state)
    if not saw_loss[0]:
        # a search sampled a config that an earlier trial finished: its rows exist, so nothing
        # trained; the searcher still needs the trial's metric (Tune refuses a result without)
        tune.report(stored_result(spec, statuses[spec.hashes[0]]))


def stored_result(spec: TrialSpec, status: str) -> dict:
    """The one result of a search trial whose member an earlier trial finished: its stored
    step and training loss; `member_done` unless it was pruned (its scheduler stopped it),
    so this trial ends pruned too (`ended_early`)."""
    from icl_core.storage.store import Store

    step, loss = Store(spec.storage).final_train_loss(spec.sweep, spec.study, spec.hashes[0])
    return {"loss": loss, "step": step, "member_done": status != "pruned", "progress": 1.0}
