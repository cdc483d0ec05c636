"""A trial's members as flat hyperparameters, for the trackers (TensorBoard: icl_core.running.tracking;
W&B and MLflow: icl_core.running.wandb_mlflow): each member's config flattened (`model.depth`, `train.lr`,
... and `config_hash`) instead of the trial config's one opaque JSON string (the trial format,
icl_core.running.tune_trainable). A packed trial gives the fields its members share as they are, and a
field they differ in as the list of its values ("1, 2").
"""

from __future__ import annotations

import json

from icl_core.running.tune_trainable import spec_from_config
from icl_core.spec.config import flatten

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
