"""A real multi-node Ray on one machine (tests/multinode_sweep.py: a head and two worker nodes
with logical GPUs): a smoke sweep runs across the nodes; a worker node removed mid-sweep makes
Tune restart its trial on the other node, which goes on from its checkpoint in the shared store; every config's rows are
there exactly once, equal to an uninterrupted run. And a node-local --storage is refused on a
cluster of several hosts.

    python -m pytest -m slow tests/test_multinode.py     # ~1.5 min on 2 cores
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from icl_core.running.plans import check_storage_reach
from icl_core.spec.config import ConfigError

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_a_sweep_survives_losing_a_worker_node(tmp_path):
    from icl_core.running.trial import TrialSpec, run_trial

    done = subprocess.run([sys.executable, str(ROOT / "tests" / "multinode_sweep.py"),
                           str(tmp_path / "store")], capture_output=True, text=True,
                          timeout=540, cwd=ROOT)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "multinode: removing worker node" in out
    assert "restarted from a checkpoint" in out
    # the restarted trial's member went on from its state in the (shared) store
    assert "multinode: a worker logged: [depth_scaling/least_squares] resumed 1 at step " \
        in out, out[-3000:]
    assert "[depth_scaling/least_squares] finished: 4 ok, 0 diverged, 0 failed, 0 missing" in out
    study = tmp_path / "store" / "depth_scaling" / "least_squares"
    files = sorted((study / "rows").glob("*.parquet"))
    assert len(files) == 4 and not (study / "failed").exists()
    for path in files:  # exactly once: one member's rows, trained to the end once
        rows = pl.read_parquet(path)
        assert rows["config_hash"].unique().to_list() == [path.stem]
        steps = rows.filter(pl.col("metric") == "steps_completed")
        assert steps["value"].to_list() == [600.0]
        # the same numbers as an uninterrupted run of this member in this process
        spec = TrialSpec("depth_scaling", "least_squares", str(tmp_path / "ref"),
                         [json.loads(rows["config_json"][0])], hashes=[path.stem])
        run_trial(spec)
        ref = pl.read_parquet(tmp_path / "ref" / "depth_scaling" / "least_squares" / "rows"
                              / path.name)
        key = ["metric", "statistic", "predictor", "step", "position", "prompt_len", "test_dist",
               "loop_iter", "infer_iter"]
        got = rows.select([*key, "value"]).sort(key, nulls_last=True)["value"].to_list()
        want = ref.select([*key, "value"]).sort(key, nulls_last=True)["value"].to_list()
        assert len(got) == len(want) and all(
            a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(got, want, strict=True))


def test_node_local_storage_is_refused_on_a_cluster_of_several_hosts():
    with pytest.raises(ConfigError, match="node-local filesystem \\(ext4\\).*2 hosts.*shared"):
        check_storage_reach("/data/results", {"10.0.0.1", "10.0.0.2"}, "ext4")
    check_storage_reach("/data/results", {"10.0.0.1", "10.0.0.2"}, "nfs4")  # shared
    check_storage_reach("/data/results", {"10.0.0.1", "10.0.0.2"}, "fuse.gcsfuse")
    check_storage_reach("s3://bucket/icl", {"10.0.0.1", "10.0.0.2"}, "")  # an object store
    check_storage_reach("/data/results", {"127.0.0.1"}, "ext4")  # one host: any path
