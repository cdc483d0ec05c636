"""Tracking: a sweep's trials leave Tune's logs, TensorBoard event files among them, whose
hparams are each member's config flattened (icl_core.running.tune_trainable.trial_hparams), not
the opaque trial spec.

The event files are read back as TFRecords (length, CRC, Event protobuf) with the protobuf
classes tensorboardX ships: no TensorBoard install needed.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from icl_core.running.trial import TrialSpec
from icl_core.running.tune_trainable import trial_config, trial_hparams
from sweeps.depth_scaling import SWEEP


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


# ------------------------------------------------------------------- --logger wandb|mlflow


def wandb_run_config(path: Path) -> dict:
    """The run config of an offline W&B run file (`run-<id>.wandb`): a 7-byte header, then
    LevelDB-log records (CRC 4, length 2, type 1: full/first/middle/last) in 32 KiB blocks,
    each a `wandb_internal_pb2.Record`; the config is in the run record and config records."""
    import json

    from wandb.proto.wandb_internal_pb2 import Record

    data, at, block, chunks, config = path.read_bytes(), 7, 32768, b"", {}
    while at + 7 <= len(data):
        if block - at % block < 7:  # a block's tail too short for a header is padding
            at += block - at % block
            continue
        (length,) = struct.unpack("<H", data[at + 4:at + 6])
        kind, payload = data[at + 6], data[at + 7:at + 7 + length]
        at += 7 + length
        chunks = payload if kind in (1, 2) else chunks + payload
        if kind not in (1, 4):
            continue
        record = Record()
        record.ParseFromString(chunks)
        which = record.WhichOneof("record_type")
        updates = record.run.config.update if which == "run" else \
            record.config.update if which == "config" else []
        for item in updates:
            config[item.key] = json.loads(item.value_json)
    return config


@pytest.mark.slow  # ~15 s; W&B's service can drop under load. TensorBoard's test covers the hook
def test_smoke_sweep_logs_members_hparams_to_wandb_offline_and_mlflow(
        ray_session, tmp_path, monkeypatch, capsys):
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    storage = tmp_path / "results"
    argv = ["--preset", "smoke", "--study", "least_squares", "--num-samples", "1",
            "--pack", "1", "--storage", str(storage), "--no-figures",
            "--logger", "wandb", "--logger", "mlflow"]
    assert SWEEP.main(argv) == 0
    out = capsys.readouterr().out
    assert "W&B: one run per trial" in out and "MLflow: experiment 'depth_scaling'" in out

    runs = sorted((storage / "depth_scaling" / "tune").rglob("offline-run-*/run-*.wandb"))
    assert len(runs) == 2, runs  # one run per trial, in the trial's own folder
    configs = [wandb_run_config(run) for run in runs]
    assert sorted(c["model.depth"] for c in configs) == [1, 2]
    for config in configs:
        assert config["study"] == "least_squares" and len(config["config_hash"]) == 16
        assert "spec" not in config  # not the opaque trial format

    client = MlflowClient(f"sqlite:///{storage}/mlflow.db")
    experiment = client.get_experiment_by_name("depth_scaling")
    found = client.search_runs([experiment.experiment_id])
    assert sorted(r.data.params["model.depth"] for r in found) == ["1", "2"]
    for run in found:
        assert "spec" not in run.data.params and len(run.data.params["config_hash"]) == 16
        assert "mse" in run.data.metrics  # each report's metrics, by name


def test_logger_that_cannot_start_is_one_line_before_ray(tmp_path, monkeypatch, capsys):
    import ray

    from icl.preflight import check_loggers
    from icl_core.common.validation import ConfigError

    pytest.importorskip("wandb")
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_SETUP_API_KEY_HOOK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no `wandb login`
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    was_running = ray.is_initialized()
    argv = ["--preset", "smoke", "--study", "least_squares", "--storage",
            str(tmp_path / "r"), "--no-figures", "--logger", "wandb"]
    assert SWEEP.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --logger wandb: no W&B credentials") and "\n" not in err
    assert "WANDB_MODE=offline" in err
    assert ray.is_initialized() == was_running
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(ConfigError, match="remote; set MLFLOW_TRACKING_URI"):
        check_loggers(["mlflow"], "s3://bucket/icl")
    assert check_loggers(["mlflow"], str(tmp_path)) is None  # a local store: beside the rows
