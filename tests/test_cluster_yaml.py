"""cluster.yaml is a real launcher file: checked offline against Ray's own schema."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CLUSTER = Path(__file__).resolve().parent.parent / "cluster.yaml"


def load() -> dict:
    return yaml.safe_load(CLUSTER.read_text())


def test_cluster_yaml_passes_rays_launcher_schema():
    cfg = load()
    validate_config(prepare_config(copy.deepcopy(cfg)))
    workers = cfg["available_node_types"]["gpu_worker"]
    assert workers["min_workers"] == 0 and workers["max_workers"] >= 1
    assert cfg["head_node_type"] == "head"
    assert cfg["file_mounts"]["~/icl-sweeps"] == "."  # installs this working tree
    assert any("pip install -e ." in c for c in cfg["setup_commands"])
    assert all("--dashboard-host=127.0.0.1" in c for c in cfg["head_start_ray_commands"][1:])


def test_schema_check_has_teeth():
    cfg = load()
    cfg["available_node_types"]["gpu_worker"]["min_wrokers"] = 1
    with pytest.raises(Exception, match="min_wrokers"):
        validate_config(prepare_config(cfg))


def test_no_credentials_in_the_file():
    text = CLUSTER.read_text().lower()
    for word in ("aws_access_key_id", "aws_secret", "password", "private_key", "ssh_private_key"):
        assert word not in text
