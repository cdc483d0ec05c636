"""Tracking: a sweep's trials leave Tune's logs, TensorBoard event files among them, whose
hparams are each member's config flattened (icl_core.tracking), not the opaque trial spec.

The event files are read back as TFRecords (length, CRC, Event protobuf) with the protobuf
classes tensorboardX ships: no TensorBoard install needed.
"""

from __future__ import annotations

import struct
from pathlib import Path

from depth_scaling import SWEEP

from icl_core.tracking import trial_hparams
from icl_core.trainable import trial_config
from icl_core.trial import TrialSpec


def read_events(path: Path) -> list:
    from tensorboardX.proto.event_pb2 import Event

    data, events, at = path.read_bytes(), [], 0
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        start = at + 12  # length (8) + its masked CRC (4)
        event = Event()
        event.ParseFromString(data[start:start + length])
        events.append(event)
        at = start + length + 4  # + the data's CRC
    return events


def logged_hparams(path: Path) -> dict:
    """The hparams of one event file's session (the hparams plugin's session_start_info)."""
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData

    for event in read_events(path):
        for value in event.summary.value:
            if value.metadata.plugin_data.plugin_name != "hparams":
                continue
            plugin = HParamsPluginData()
            plugin.ParseFromString(value.metadata.plugin_data.content)
            if plugin.HasField("session_start_info"):
                out = {}
                for key, v in plugin.session_start_info.hparams.items():
                    kind = v.WhichOneof("kind")
                    out[key] = getattr(v, kind)
                return out
    return {}


def test_smoke_sweep_leaves_tensorboard_hparams_of_each_member(ray_session, tmp_path, capsys):
    storage = tmp_path / "results"
    argv = ["--preset", "smoke", "--study", "least_squares", "--num-samples", "1",
            "--pack", "1", "--storage", str(storage), "--no-figures"]
    assert SWEEP.main(argv) == 0
    files = sorted((storage / "depth_scaling" / "tune").rglob(  # the file's pool
        "events.out.tfevents.*"))
    assert len(files) == 2, files  # one per trial (one member each)
    logged = [logged_hparams(f) for f in files]
    assert sorted(h["model.depth"] for h in logged) == [1.0, 2.0]  # numbers are floats
    for h in logged:
        assert h["task.name"] == "linear_regression" and h["model.width"] == 8.0
        assert h["seed"] == 0.0 and h["members"] == 1.0 and len(h["config_hash"]) == 16
        assert "spec" not in h
    trial_dirs = {f.parent for f in files}
    for folder in trial_dirs:  # Tune's JSON and CSV loggers are on too
        assert (folder / "result.json").stat().st_size > 0
        assert (folder / "progress.csv").exists()


def test_packed_trial_hparams_list_what_members_differ_in():
    members = [SWEEP.study("least_squares").members("smoke")[i] for i in (0, 1, 2)]
    spec = TrialSpec("depth_scaling", "least_squares", "/tmp/x", [m.to_dict() for m in members],
                     hashes=[m.hash for m in members])
    hp = trial_hparams(trial_config(spec))
    depths = [m.model.depth for m in members]
    seeds = [m.seed for m in members]
    assert hp["members"] == 3
    assert hp["model.depth"] == ", ".join(map(str, dict.fromkeys(depths)))
    assert hp["seed"] == ", ".join(map(str, dict.fromkeys(seeds)))
    assert hp["model.width"] == 8 and hp["eval.grid"] == "[{}]"
    assert hp["config_hash"] == ", ".join(m.hash for m in members)
    # a search trial: its sampled setting is the member's value
    search_cfg = trial_config(TrialSpec("d", "s", "/tmp/x", [members[0].to_dict()],
                                        hashes=[members[0].hash]), {"train.lr": 0.0123})
    assert trial_hparams(search_cfg)["train.lr"] == 0.0123
