"""Experiment tracking through Ray Tune's own loggers: each trial's folder under
`<storage>/<sweep>/<study>/tune/` gets `result.json`, `progress.csv`, `params.json` and a
TensorBoard event file (`tensorboard --logdir results/<sweep>/<study>/tune`).

A trial's Tune config is the one trial format (`{"spec": TrialSpec JSON}`, icl_core.trainable),
which TensorBoard would show as one long string; `TrialHparams` logs instead each member's
config flattened (`model.depth`, `train.lr`, ... and `config_hash`) as the trial's hparams. A
packed trial logs the fields its members share as they are, and a field they differ in as
the list of its values ("1, 2"). The rows in the store stay the results; these are for
looking at a sweep while it runs.
"""

from __future__ import annotations

import json
import logging
import os

from ray.tune.logger import TBXLoggerCallback

from icl_core.config import flatten
from icl_core.trainable import spec_from_config

logger = logging.getLogger(__name__)
SCALARS = (str, bool, int, float)


def trial_hparams(config: dict) -> dict:
    """The flattened member configs of a trial config, as TensorBoard hparams (scalars)."""
    spec = spec_from_config(config)
    flats = [flatten(member) for member in spec.members]
    out: dict = {"members": len(flats)}
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


class TrialHparams(TBXLoggerCallback):
    """Tune's TensorBoard logger, with the members' flattened configs as hparams (in place
    of the trial config's opaque spec string). Replaces Tune's default TBX logger."""

    def _try_log_hparams(self, trial, result: dict) -> None:
        from tensorboardX.summary import hparams

        try:
            tags = hparams(hparam_dict=trial_hparams(trial.config), metric_dict=result)
        except Exception as exc:  # tracking must never fail a sweep
            logger.warning("TensorBoard hparams not written for %s: %s", trial, exc)
            return
        for tag in tags:
            self._trial_writer[trial].file_writer.add_summary(tag)


def tracking_callbacks() -> list:
    """The loggers a Tuner gets beside Tune's JSON and CSV ones: none when the user turned
    Tune's loggers off (TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1)."""
    if os.environ.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS") == "1":
        return []
    return [TrialHparams()]
