"""The planner's peak-memory estimate (icl_core.planning.memory) against a measured peak, on a CPU.

    python benchmarks/memory_check.py

Each member runs in a fresh process (run_trial: build, train, evaluate, write rows); its
measured peak is ru_maxrss at the end minus the RSS after imports (the interpreter, torch),
set side by side with the estimate (which counts PyTorch's first-use runtime as RUNTIME_BYTES). A refusal rule needs the ratio within ~2x.
"""

from __future__ import annotations

import json
import subprocess
import sys

MEMBERS = {
    "transformer w256 d4 T41 batch 64": {
        "task": {"name": "linear_regression", "dim": 20, "n_points": 40},
        "model": {"name": "transformer", "width": 256, "depth": 4, "heads": 4},
        "train": {"steps": 10, "batch_size": 64, "report_every": 10, "checkpoint_every": 10},
        "eval": {"n_prompts": 1000, "baselines": ["ols"]}},
    "linear regression d=300 (ridge's d x d Gram per prompt)": {
        "task": {"name": "linear_regression", "dim": 300, "n_points": 20},
        "model": {"name": "transformer", "width": 32, "depth": 2, "heads": 2},
        "train": {"steps": 10, "batch_size": 32, "report_every": 10, "checkpoint_every": 10},
        "eval": {"n_prompts": 200, "baselines": ["ols"]}},
    "transformer w512 d8 T101 batch 32": {
        "task": {"name": "linear_regression", "dim": 10, "n_points": 50, "layout": "all_prefix"},
        "model": {"name": "transformer", "width": 512, "depth": 8, "heads": 8},
        "train": {"steps": 4, "batch_size": 32, "report_every": 2, "checkpoint_every": 2},
        "eval": {"n_prompts": 200}},
}

CHILD = r"""
import json, resource, sys, tempfile
resource.setrlimit(resource.RLIMIT_AS, (12 << 30, 12 << 30))  # a wrong guess fails, alone
import torch
from icl_core.spec.config import resolve_member
from icl_core.running.trial import TrialSpec, run_trial
torch.set_num_threads(1)
member = resolve_member({**json.loads(sys.argv[1]), "device": "cpu"})
base = int(open("/proc/self/statm").read().split()[1]) * 4096
run_trial(TrialSpec("m", "m", tempfile.mkdtemp(), [member.to_dict()], hashes=[member.hash]))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"measured": peak - base}))
"""


def main() -> None:
    from icl_core.planning.memory import human, member_memory
    from icl_core.spec.config import resolve_member

    for label, cfg in MEMBERS.items():
        estimate = member_memory(resolve_member({**cfg, "device": "cpu"}))
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg)], check=True,
                             capture_output=True, text=True).stdout.strip().splitlines()[-1]
        measured = json.loads(out)["measured"]
        print(f"{label}: estimate {human(estimate.total)}, measured peak {human(measured)} "
              f"(estimate / measured {estimate.total / measured:.2f}); {estimate}")


if __name__ == "__main__":
    main()
