"""Issue 46's GPU checks in one prepared run for a lent machine (torch and pyarrow only: no Ray,
Polars or pytest there). On an H100 (first run 2026-11-28) parts 1-2 took about 2 minutes;
part 3 is capped at 150 s (cpu size) + 330 s (paper size, fp32 and TF32), so all of it can
take ~10 minutes: a later window runs `--parts 3`, the rest measured:

    python benchmarks/gpu_stacks.py --out $OUT            # on the GPU machine
    python benchmarks/gpu_stacks.py --device cpu --quick  # the same script, dry-run on a CPU

1. A stack's step as a CUDA graph (train.cuda_graph) against the same step run eagerly: the
   weights of K = 8 members after 20 steps (float32), whether the graph was captured, and a
   curriculum task (relu_teacher) left eager with its reason; then a stack that skips steps
   (train.skip_grad_norm: MaskedAdam, the mask on the device) against the same stack without
   the rule, eager and as a graph (ms/step, steps skipped). 1b: L-BFGS alone (torch's)
   against a stack of 3 L-BFGS members, ms/step as the history fills and the cost per pair.
2. A study's stacks in one process (TrialSpec.interleave): four stacks of 3 seeds (depths 1, 2,
   4, 8) trained one after another and then at once, each on its own CUDA stream, with and
   without the graph: wall time of the whole trial (evaluation included).
3. benchmarks/stack_scaling.py, a separate process per size: ms/step, member-steps/s, share
   of the measured peak and aten operations per step, for generator draws (eager, and replayed
   in the graph: what GRAPH=1 evidence runs), counter draws and counter draws with the graph,
   at issue 46's target cells: K = 1, 2, 32, 512 at the cpu size
   (fp32) and K = 1, 8, 128 at the paper size (fp32, then TF32), with the reference beside it
   (--ref; default ../shared/tools/ref_stack.py, which a lent machine does not have: carry a
   copy) and the peers' one-GPT-2-per-process loop (--peer, benchmarks/peer_loop.py; the lent
   machines have transformers): members per GPU-hour, ours over the peer's (issue 46: >= 10x
   at the paper size); JSON in --out (stack.json, stack_paper.json).
4. With --compile or `--parts 4` (about 3 more minutes: a compile per cell, each shape its
   own, for static shapes: icl_core/common/compiled.py): a stack's loss compiled
   (train.compile) against the same stack eager, counter draws, fp32, at issue 46's two
   fused-kernel targets (cpu size K = 512, paper size K = 128) and K = 1, 8; JSON in --out.
Every part prints its own lines; a failing part says why and the next one runs.

Back here, the steps of part 3 refit the GPU rate model the planner costs GPU steps by (one set
of constants per path: generator, counter or graph; fp32 or tf32), and check it against
what the window ran (icl.commands.cost):

    icl cost --add <files_at>/stack.json <files_at>/stack_paper.json \\
        [<files_at>/compile_*.json] --write --check evidence/reduced
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from icl_core.spec.config import resolve_member  # noqa: E402
from icl_core.training.cuda_graph import StepGraph  # noqa: E402
from icl_core.training.stacked import StackedRun  # noqa: E402
from icl_core.training.train import MemberRun  # noqa: E402


def member(seed: int, device: str, task: dict | None = None, **train) -> dict:
    return {"task": task or {"name": "linear_regression", "dim": 5, "n_points": 20},
            "model": {"name": "transformer", "depth": 4, "width": 64, "heads": 4},
            "train": {"lr": 1e-3, "batch_size": 64, "steps": 10**6, "draws": "counter",
                      "cuda_graph": True, "grad_clip": 1.0, "warmup_steps": 5, **train},
            "eval": {"n_prompts": 1, "baselines": []}, "seed": seed, "dtype": "float32",
            "device": device}


def stack(device: str, k: int, task: dict | None = None, **train) -> StackedRun:
    return StackedRun([MemberRun(resolve_member(member(s, device, task, **train)))
                       for s in range(k)])


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def held_eager(run: StackedRun) -> StackedRun:
    run.graph = StepGraph(run)
    run.graph.why_eager = "held eager for the comparison"
    return run


def ms_per_step(run, device: str, steps: int, start: int = 5) -> float:
    """After `start` steps (a graph is captured by then), the next `steps` timed (a stack or
    a lone member)."""
    run.train_until(start)
    sync(device)
    t0 = time.perf_counter()
    run.train_until(start + steps)
    sync(device)
    return (time.perf_counter() - t0) / steps * 1e3


def graph_against_eager(device: str, steps: int) -> None:
    graphed, eager = stack(device, 8), held_eager(stack(device, 8))
    timings = {name: ms_per_step(run, device, steps)
               for name, run in (("graph", graphed), ("eager", eager))}
    worst = max(float(((p - q).abs() / q.abs().clamp_min(1e-6)).max().detach())
                for p, q in zip(graphed.params.values(), eager.params.values(), strict=True))
    print(f"K = 8, {5 + steps} steps: captured {graphed.graph.graph is not None} "
          f"({graphed.graph.why_eager or 'replayed'}); largest relative weight difference "
          f"graph vs eager {worst:.2e}; ms/step graph {timings['graph']:.2f}, eager "
          f"{timings['eager']:.2f} (x{timings['eager'] / timings['graph']:.2f})")
    curriculum = stack(device, 2, {"name": "relu_teacher", "dim": 4, "n_points": 6, "depth": 2,
                                   "hidden": 8, "curriculum_dims_start": 2,
                                   "curriculum_points_start": 3, "curriculum_every": 4})
    curriculum.train_until(6)
    print(f"relu_teacher (a curriculum): captured {curriculum.graph.graph is not None} "
          f"({curriculum.graph.why_eager})")
    for graph in (False, True):
        timings, skipped = {}, {}
        for name, train in (("plain", {}), ("skip", {"skip_grad_norm": 10.0})):
            run = stack(device, 8, **train)
            timings[name] = ms_per_step(run if graph else held_eager(run), device, steps)
            skipped[name] = sum(r.skipped_steps for r in run.runs)
        print(f"K = 8, graph {graph}: ms/step without skip_grad_norm {timings['plain']:.2f}, "
              f"with it (limit 10: {skipped['skip']} of {8 * (5 + steps)} member-steps "
              f"skipped) {timings['skip']:.2f} (x{timings['skip'] / timings['plain']:.2f})")


def lbfgs_alone_against_stacked(device: str, quick: bool) -> None:
    """L-BFGS (preconditioned_gd's reduced LSA member: history 600, 4 iterations a step, a
    fixed batch): torch's LBFGS alone (a host read per stored pair) against a stack of 3
    (icl_core/training/stacked_lbfgs.py), ms/step over two windows of steps as the history
    fills; the slope per pair and walk is what icl_core.planning.cost's LBFGS_PAIR_S costs."""
    raw = {"task": {"name": "linear_regression", "dim": 5, "n_points": 10, "layout": "fixed_n",
                    "spectrum": [1.0, 1.0, 0.5, 0.25, 1.0], "w_law": "inverse"},
           "model": {"name": "lsa", "layers": 3, "form": "sparse", "init_std": 1e-4},
           "train": {"optimizer": "lbfgs", "lr": 0.1, "lbfgs_history": 600, "lbfgs_max_iter": 4,
                     "batch_size": 200 if quick else 20_000, "steps": 10**6},
           "eval": {"n_prompts": 1, "baselines": []}, "dtype": "float32", "device": device}
    windows = ((2, 4), (6, 8)) if quick else ((5, 10), (25, 30))
    iters = raw["train"]["lbfgs_max_iter"]
    for k in (1, 3):
        runs = [MemberRun(resolve_member({**raw, "seed": s, "task_seed": s})) for s in range(k)]
        trainer = runs[0] if k == 1 else StackedRun(runs)
        cells = []
        for start, end in windows:
            ms = ms_per_step(trainer, device, end - start, start)
            cells.append((ms, iters * (start + end) / 2))  # pairs held, about: one an iteration
        (ms0, pairs0), (ms1, pairs1) = cells
        per_pair = (ms1 - ms0) / (pairs1 - pairs0) / (2 * iters) * 1e3
        print(f"L-BFGS {'alone (torch)' if k == 1 else f'stack of {k}'}: ms/step "
              f"{ms0:.1f} at ~{pairs0:.0f} pairs, {ms1:.1f} at ~{pairs1:.0f}; "
              f"{per_pair:.1f} us per pair and walk")


def together_against_apart(device: str, steps: int) -> None:
    """Stores in temporary folders: --out keeps a few shallow files (a lent machine returns
    those)."""
    from icl_core.running.trial import TrialSpec, run_trial

    for graph in (False, True):
        members = []
        for depth in (1, 2, 4, 8):
            for seed in range(3):
                m = member(seed, device)
                m["model"] = {**m["model"], "depth": depth}
                m["train"] = {**m["train"], "steps": steps, "report_every": steps // 3,
                              "checkpoint_every": steps, "cuda_graph": graph}
                members.append(resolve_member(m).to_dict())
        walls = {}
        for together in (False, True):
            store = Path(tempfile.mkdtemp(prefix=f"together_{graph}_{together}_"))
            t0 = time.perf_counter()
            statuses = run_trial(TrialSpec("gpu_stacks", "together", str(store), members,
                                           stack="always", interleave=together))
            walls[together] = time.perf_counter() - t0
            assert set(statuses.values()) == {"ok"}, statuses
            shutil.rmtree(store, ignore_errors=True)
        print(f"4 stacks x 3 seeds, {steps} steps, graph {graph}: one after another "
              f"{walls[False]:.1f} s, at once {walls[True]:.1f} s "
              f"(x{walls[False] / walls[True]:.2f})")


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # run_capped's passes end with us
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="/tmp/gpu_stacks")
    parser.add_argument("--quick", action="store_true", help="small K, few steps (a dry run)")
    parser.add_argument("--compile", action="store_true",
                        help="part 4 too: compiled stacks against eager (~3 min more)")
    parser.add_argument("--ref", default=None,
                        help="part 3's reference script (stack_scaling.py --ref): on a lent "
                             "machine, a copy carried inside the checkout (../shared stays here)")
    parser.add_argument("--parts", default="1,1b,2,3",
                        help="which parts to run, of 1, 1b, 2, 3, 4 (default 1,1b,2,3; "
                             "--compile adds 4): a later window can skip what an earlier one "
                             "measured")
    args = parser.parse_args(argv)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if not parts or parts - {"1", "1b", "2", "3", "4"}:
        parser.error(f"--parts: {args.parts!r}; valid choices: 1, 1b, 2, 3, 4 "
                     "(--compile adds 4)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"== machine: {name}, torch {torch.__version__}")
    for part, title, run in (
            ("1", "1. a stack's step as a CUDA graph against the same step eagerly",
             lambda: graph_against_eager(args.device, 5 if args.quick else 50)),
            ("1b", "1b. L-BFGS alone against a stack of L-BFGS members",
             lambda: lbfgs_alone_against_stacked(args.device, args.quick)),
            ("2", "2. a study's stacks in one process: one after another, then at once",
             lambda: together_against_apart(args.device, 30 if args.quick else 300))):
        if part not in parts:
            continue
        print(f"== {title}")
        try:
            run()
        except Exception:  # noqa: BLE001  (the next part runs)
            traceback.print_exc()
    if "3" in parts:
        stack_scaling(args, out)
    if args.compile or "4" in parts:
        compiled_stacks(args, out)
    return 0


def run_capped(cmd: list[str], limit: float) -> bool:
    """Run `cmd` in its own process group; past `limit` seconds, or when this script is ended
    (gpu_window.sh's `timeout`: SIGTERM, made an exit in `main`), the whole group is killed
    (the reference stack_scaling.py starts too), so nothing outlives its pass. False on the
    limit."""
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        proc.wait(timeout=limit)
        return True
    except subprocess.TimeoutExpired:
        return False
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def stack_scaling(args, out: Path) -> None:
    print("== 3. stack scaling: generator, counter, graph; fp32 (and TF32 at the paper size); "
          "the reference beside")
    # Issue 46's target cells, each size in its own process and JSON (written after every pass,
    # so a cut-off run keeps what it finished): the cpu size at K = 1, 2, 32 (host work: ops at
    # K = 2 against 32) and 512, fp32 only (host-bound: TF32 moves nothing); the paper size at
    # K = 1, 8 and 128, fp32 then TF32 (K = 8: a stacked step at a second depth that is not
    # compute-bound, so `icl cost --add` can fit the counter and graph paths' stacked terms).
    passes = [("cpu", "1,2" if args.quick else "1,2,32,512", False, 45, 150)]
    if not args.quick:
        passes.append(("paper", "1,8,128", args.device == "cuda", 90, 330))
    for size, ks, tf32, budget, limit in passes:
        extra = ["--budget-s", str(budget), "--peer"] + (["--tf32"] if tf32 else [])
        extra += ["--steps", "3", "--ref", "none"] if args.quick else \
            ["--ref", args.ref] if args.ref else []
        scaling_pass(args, "stack scaling", size, ks, "generator,graph-generator,counter,graph",
                     out / ("stack.json" if size == "cpu" else f"stack_{size}.json"), limit,
                     extra)


def compiled_stacks(args, out: Path) -> None:
    print("== 4. a stack's loss compiled (train.compile) against eager, counter draws, fp32")
    # K = 1, 8 and the target at two depths: enough kinds of steps to fit the path
    cells = [("cpu", "1,2")] if args.quick else [("cpu", "1,8,512"), ("paper", "1,8,128")]
    for size, ks in cells:
        scaling_pass(args, "compiled stacks", size, ks, "counter,compile",
                     out / f"compile_{size}.json", 200,
                     ["--ref", "none", *(["--steps", "3"] if args.quick else ["--budget-s", "150"])])


def scaling_pass(args, what: str, size: str, ks: str, draws: str, json_path: Path, limit: int,
                 extra: list[str]) -> None:
    """One benchmarks/stack_scaling.py process at one model size, capped at `limit` s."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "stack_scaling.py"), "--device",
           args.device, "--draws", draws, "--sizes", size, "--ks", ks, "--json", str(json_path),
           *extra]
    if not run_capped(cmd, limit):
        print(f"{what}, {size} size: past its {limit} s; the cells done are above and in its JSON")


if __name__ == "__main__":
    raise SystemExit(main())
