"""Time a few training steps of a study's members at a preset's sizes on this machine.

    python benchmarks/paper_step.py sample_complexity --study str_1 [--preset paper]
        [--steps 50] [--dtype float32] [--device auto] [--limit 8]

Before a cluster run: one member per distinct config (first seed), trained `--steps` steps
(after 5 warm-up steps) with the study's own trainer on `--device`; prints ms per step,
tokens/s and peak GPU memory beside the planner's estimates (the cost model's step time on an
unmeasured device, e.g. the H100 rate model, and the memory model's training part: weights,
optimizer state, activations, task buffers), and the projected training time of the full
preset run (steps x members, evaluation excluded). Needs torch and pyarrow only (no Ray), so it
runs on a bare GPU machine. Data stay on the device; the host reads the loss once per call.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from icl.catalog import load_sweep  # noqa: E402
from icl_core.common.device import resolve_device  # noqa: E402
from icl_core.models import num_params  # noqa: E402
from icl_core.planning.cost import CostModel, device_label  # noqa: E402
from icl_core.planning.gpu_rates import REVISIONS  # noqa: E402
from icl_core.planning.memory import human, member_memory  # noqa: E402
from icl_core.spec.config import to_plain  # noqa: E402
from icl_core.training.train import MemberRun  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_member(member, steps: int) -> dict:
    run = MemberRun(member)
    run.train_until(5)  # warm-up: allocator, kernels, the dataset of epoch training
    sync(run.device)
    if run.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(run.device)
    t0, tokens0 = time.perf_counter(), run.tokens
    loss = run.train_until(5 + steps)
    sync(run.device)
    seconds = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated(run.device) / 2**20 if run.device.type == "cuda" else 0
    return {"ms_per_step": 1e3 * seconds / steps, "tokens_per_s": (run.tokens - tokens0) / seconds,
            "peak_mib": peak, "params": num_params(run.model), "loss": loss,
            "device": str(run.device)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep")
    parser.add_argument("--study", required=True)
    parser.add_argument("--preset", default="paper")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--dtype", default=None, help="override the configs' dtype")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--limit", type=int, default=8, help="at most this many configs")
    parser.add_argument("--json", default=None,
                        help="write each timed member (its config, ms/step) here, in "
                        "stack_scaling.py's layout: `icl cost --add` fits the GPU rate model to it")
    args = parser.parse_args(argv)
    members = load_sweep(args.sweep).study(args.study).members(args.preset)
    first_seed = min(m.seed for m in members)
    chosen = [m for m in members if m.seed == first_seed][: args.limit]
    total_s, rows = 0.0, []
    print(f"{args.sweep}/{args.study} [{args.preset}]: {len(members)} members; timing "
          f"{len(chosen)} configs x {args.steps} steps", flush=True)
    for member in chosen:
        member = dataclasses.replace(member, device=args.device,
                                     dtype=args.dtype or member.dtype)
        r = time_member(member, args.steps)
        rows.append({"side": "ours", "status": "ok", "k": 1, "precision": member.train.precision,
                     "ms_per_step": r["ms_per_step"], "member": to_plain(member)})
        model_s, _ = CostModel(device_label(r["device"].split(":")[0], 1)).step_seconds(member)
        mem = member_memory(member)
        train_mem = mem.weights + mem.activations + mem.task
        seeds = sum(1 for m in members if m.model == member.model and m.task == member.task)
        projected = r["ms_per_step"] / 1e3 * member.train.steps * seeds
        total_s += projected
        print(f"{member.model.name:>14} N={getattr(member.task, 'n_points', '?'):<4} "
              f"{member.dtype} {r['device']}: {r['ms_per_step']:.2f} ms/step, "
              f"{r['tokens_per_s']:.3g} tokens/s, {r['params']:,} params, peak "
              f"{r['peak_mib']:.0f} MiB (model: {1e3 * model_s:.2f} ms/step, measured/model "
              f"{r['ms_per_step'] / 1e3 / model_s:.2f}x; memory {human(train_mem)}); "
              f"{member.train.steps} steps x {seeds} seeds -> "
              f"{projected / 60:.1f} min", flush=True)
    print(f"projected training time of the timed configs (x seeds): {total_s / 3600:.2f} h "
          "on one device, evaluation and early stops not counted", flush=True)
    if args.json:
        device = resolve_device(args.device)
        out = {"device": device.type, "torch": torch.__version__,
               "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
               else "cpu", "source": f"paper_step {args.sweep} --study {args.study} "
               f"--preset {args.preset} --steps {args.steps}", "ours": rows,
               "revisions": REVISIONS}  # the paths' code revisions timed (`icl cost --add`)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1))
        print(f"wrote {args.json}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
