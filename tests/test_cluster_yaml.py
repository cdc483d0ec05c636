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


def test_ssh_is_not_open_to_the_world_and_the_token_stays_owner_only():
    config = load()
    rules = config["provider"]["security_group"]["IpPermissions"]
    assert [(r["FromPort"], r["ToPort"]) for r in rules] == [(22, 22)]
    cidrs = [ip["CidrIp"] for r in rules for ip in r["IpRanges"]]
    assert cidrs and all(c.endswith("/32") for c in cidrs)  # one address, never 0.0.0.0/0
    assert "chmod 600 ~/.ray/auth_token" in config["setup_commands"][0]


def test_figures_under_ray_job_submit_go_beside_the_rows(monkeypatch, tmp_path):
    from icl.api import default_figures

    monkeypatch.delenv("RAY_JOB_SUBMISSION_ID", raising=False)
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    assert default_figures(str(tmp_path)) == "figures"
    monkeypatch.setenv("RAY_JOB_SUBMISSION_ID", "raysubmit_1")
    assert default_figures(str(tmp_path)) == f"{tmp_path}/figures"
