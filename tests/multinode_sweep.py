"""Test tooling: a smoke sweep on a real multi-node Ray on one machine (ray.cluster_utils:
a head and two worker nodes with logical GPUs); once the two running trials have checkpointed,
one worker node is removed, and Tune restarts its trial on the other, which goes on from its
checkpoint in the store.

    python tests/multinode_sweep.py STORAGE      # prints the sweep's output; exit: its status
"""

from __future__ import annotations

import glob
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SWEEP_ARGS = ["--study", "least_squares", "--preset", "smoke", "--no-figures", "--pack", "1",
              "--set", "train.steps=600", "--set", "train.checkpoint_every=100",
              "--set", "train.report_every=100"]


def remove_after_checkpoint(cluster, node, storage: str, timeout_s: float = 240) -> None:
    """Remove `node` once both running trials (one a worker node) hold a checkpoint in the
    store, so the trial restarted has one whichever it is (or after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(glob.glob(f"{storage}/**/checkpoints/*.pt", recursive=True)) >= 2:
            break
        time.sleep(0.2)
    print(f"multinode: removing worker node {node.unique_id}", flush=True)
    cluster.remove_node(node, allow_graceful=False)


def main(storage: str) -> int:
    from ray.cluster_utils import Cluster

    from sweeps.depth_scaling import SWEEP

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    workers = [cluster.add_node(num_cpus=1, num_gpus=2) for _ in range(2)]
    cluster.wait_for_nodes()
    killer = threading.Thread(target=remove_after_checkpoint,
                              args=(cluster, workers[0], storage), daemon=True)
    killer.start()
    try:
        status = SWEEP.main([*SWEEP_ARGS, "--storage", storage, "--address", cluster.address])
        # what the trials' workers logged of resuming: Ray forwards worker lines to the driver
        # a moment later, which a run that ends at once does not wait for
        logs = Path(cluster.head_node.get_logs_dir_path())
        for path in sorted(logs.glob("worker-*")):
            for line in path.read_text(errors="replace").splitlines():
                if "] resumed " in line:
                    print(f"multinode: a worker logged: {line}", flush=True)
        return status
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
