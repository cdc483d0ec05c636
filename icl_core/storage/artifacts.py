"""Arrays per member over training (weights, attention maps), for weight-space figures.

A model that defines `artifacts() -> dict[str, Tensor]` has them recorded every
`train.artifact_every` steps; each name becomes one file

    <storage>/<sweep>/<study>/artifacts/<config_hash>/<name>.npz   steps (S,), values (S, ...)

and `load_artifact` reads it back.
"""

from __future__ import annotations

import io

import numpy as np

from icl_core.storage.store import Store


def artifact_path(store: Store, sweep: str, study: str, config_hash: str, name: str) -> str:
    return f"{store.study_dir(sweep, study)}/artifacts/{config_hash}/{name}.npz"


def save_artifacts(store: Store, sweep: str, study: str, config_hash: str, series: dict) -> None:
    """series: {name: [(step, array), ...]} -> one .npz per name."""
    for name, points in series.items():
        buf = io.BytesIO()
        steps = np.array([s for s, _ in points], dtype=np.int64)
        values = np.stack([np.asarray(v) for _, v in points])
        np.savez(buf, steps=steps, values=values)
        store.write_bytes(artifact_path(store, sweep, study, config_hash, name), buf.getvalue())


class MissingArtifact(FileNotFoundError):
    """A member's recorded array series is not in the store (e.g. a folder of rows only, as
    the committed evidence/ is): the figures that read it cannot be drawn from there."""


def load_artifact(storage: str, sweep: str, study: str, config_hash: str, name: str):
    """(steps (S,), values (S, ...)) of one recorded array series; MissingArtifact if the
    store does not hold it."""
    store = Store(storage)
    path = artifact_path(store, sweep, study, config_hash, name)
    try:
        f = store.fs.open_input_file(path)
    except FileNotFoundError as exc:
        raise MissingArtifact(
            f"no {name!r} artifact of member {config_hash} in {store.redacted} "
            f"({sweep}/{study}/artifacts/{config_hash}/{name}.npz); a store of rows only, as "
            "evidence/ is, keeps none: draw this figure from the store the study ran in") from exc
    with f:
        data = np.load(io.BytesIO(f.read()))
        return data["steps"], data["values"]
