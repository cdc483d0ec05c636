"""Stack scaling: K seeds of one small ICL transformer trained as one stack, beside a reference.

    python benchmarks/stack_scaling.py                         # CUDA if present, else CPU
    python benchmarks/stack_scaling.py --ks 1,2 --sizes cpu --steps 3      # CPU, ~15 s
    python benchmarks/stack_scaling.py --device cuda --tf32 --json $OUT/stack.json
    python benchmarks/stack_scaling.py --device cpu --ks 1,8,32 --draws generator,counter --ref none

Ours is the project's own trainer: a lone `MemberRun` at K = 1, and at K > 1 a `StackedRun`
of K `MemberRun`s that differ only in their seed, grouped by `stack_groups` as a trial groups
them (icl_core/running/trial.py). The task is least-squares ICL (D = 5, N = 20, the default
`fixed_n` layout: 21 tokens, batch 64), float32; the model sizes are `cpu` (depth 4 x width 64
x heads 4) and `paper` (12 x 256 x 8), built as benchmarks/perf.py builds them. Per
(size, K, precision) cell: `--warmup` steps, one step counted (the aten operations one
`take_step` dispatches, seen by a TorchDispatchMode; not timed), then `--steps` steps timed
through the project's training driver (`train_until`: one host read per call), the device
synchronised before and after.

Columns: ms/step (one stacked step, all K members), member-steps/s (K / seconds per step),
TFLOP/s (K x the project's 6 x params x tokens count, icl_core/training/flops.py, per step
time), of peak (that over the matmul peak measured now, icl_core/training/throughput.py, at
the same precision), ops/step (the counted step's aten operations; issue 46's target: as many
at K = 32 as at K = 2; a graph's step: its replay), launches (those of its operations that are
not views, each at least one kernel on a GPU: what a launch-bound small step pays for; a
graph's: its body's, counted eagerly once before the capture, what each replay runs);
`draws` is how the batches are drawn (train.draws: `generator`, one draw per member and call,
the task's batch code once for the stack; `counter`, one call per stack,
icl_core/tasks/draws.py), each scheme in `--draws` a row per cell; then the reference's
ms/step and member-steps/s, its share of *our*
measured peak (its own 6 x params x tokens count; its share of its own peak is in the JSON)
and ours / ref in ms per step (< 1: ours is faster). Precision: fp32 with TF32 off, and with
`--tf32` a second pass with TF32 allowed (torch.backends.cuda.matmul / cudnn .allow_tf32); on
a CPU there is no TF32 (n/a). Torch CPU threads: `--threads` (1) on both sides.

The reference (`--ref`, default ../shared/tools/ref_stack.py beside the repository; its code
stays outside the project and is only run) runs as a separate process with the same device,
sizes, K, steps and budget (TF32 through its TF32 environment variable), after ours, at each
precision; its table is parsed and shown beside ours with ours / ref in ms per step.
`--budget-s` bounds each pass (ours or the reference, at one precision): cells that would
start after it are skipped; so are ours whose memory estimate (icl_core/planning/memory.py)
exceeds the device's free memory (the paper size at K = 512 on an 80 GB GPU). Needs torch only (no Ray, polars or Optuna), so it runs on a bare
GPU machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from peer_loop import time_peer, transformers_version  # noqa: E402  (benchmarks/)

from icl_core.common.device import precision_scope, resolve_device  # noqa: E402
from icl_core.planning.gpu_rates import REVISIONS  # noqa: E402
from icl_core.planning.memory import host_memory, human, member_memory  # noqa: E402
from icl_core.spec.config import MemberConfig, resolve_member, to_plain  # noqa: E402
from icl_core.tasks.draws import DRAWS  # noqa: E402
from icl_core.training.flops import step_flops, step_shape  # noqa: E402
from icl_core.training.stack_rules import stack_groups  # noqa: E402
from icl_core.training.stacked import StackedRun  # noqa: E402
from icl_core.training.throughput import _measure  # noqa: E402
from icl_core.training.train import MemberRun  # noqa: E402

SIZES = {"cpu": (4, 64, 4), "paper": (12, 256, 8)}  # depth, width, heads (as benchmarks/perf.py)
DIM, N_POINTS, BATCH = 5, 20, 64  # the least-squares task, batch 64
DEFAULTS = {  # per device type: K values, sizes, warm-up steps
    "cuda": ("1,8,32,128,512", "cpu,paper", 5),
    "cpu": ("1,2,8", "cpu", 2),
}
DEFAULT_REF = ROOT.parent / "shared" / "tools" / "ref_stack.py"


def say(text: str = "") -> None:
    print(text, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------ ours


def member(size: str, seed: int, device: str, draws: str = "generator",
           precision: str = "fp32") -> MemberConfig:
    """One member at a model size: least-squares ICL, D = 5, N = 20, Adam, batch 64. `draws`:
    a train.draws scheme, "graph" (counter draws, the step a CUDA graph: train.cuda_graph),
    "graph-generator" (the members' generators replayed in the graph: what an evidence window
    runs with GRAPH=1) or "compile" (counter draws, train.compile: a stack's vmapped loss
    compiled). `precision` is
    the member's train.precision: the trainer sets TF32 itself from it (an fp32 member turns
    TF32 off whatever the caller allowed), so a TF32 pass needs TF32 members."""
    depth, width, heads = SIZES[size]
    return resolve_member({
        "task": {"name": "linear_regression", "dim": DIM, "n_points": N_POINTS},
        "model": {"name": "transformer", "depth": depth, "width": width, "heads": heads,
                  "mlp_ratio": 4, "layer_norm": True},
        "train": {"optimizer": "adam", "lr": 1e-3, "batch_size": BATCH, "steps": 10**9,
                  "draws": "counter" if draws in ("graph", "compile") else
                  "generator" if draws == "graph-generator" else draws,
                  "cuda_graph": draws.startswith("graph"), "compile": draws == "compile",
                  "precision": precision},
        "eval": {"n_prompts": 1},
        "seed": seed, "dtype": "float32", "device": device,
    })


def trainer_for(members: list[MemberConfig]):
    """The trainer a trial builds for these members: a lone MemberRun or one StackedRun."""
    groups = stack_groups(members, "always")
    if len(groups) != 1:
        raise RuntimeError(f"the {len(members)} members did not form one stack: {groups}")
    runs = [MemberRun(m) for m in members]
    return runs[0] if len(runs) == 1 and not members[0].train.cuda_graph else StackedRun(runs)


# operations that allocate or read a scalar without a kernel of their own
NO_KERNEL = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
             "is_same_size", "_local_scalar_dense", "lift_fresh", "_unsafe_view"}


class OpCount(TorchDispatchMode):
    """Counts the aten operations dispatched while active (autograd's backward included);
    `launches`: those that are not views (nor a bare allocation), each at least one kernel on
    a GPU, which is what a CUDA graph records and a replay runs."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.launches = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        self.ops[name] += 1
        self.launches += not func.is_view and name.removeprefix("aten.") not in NO_KERNEL
        return func(*args, **(kwargs or {}))


def count_ops(trainer, device: torch.device) -> OpCount:
    """The aten operations of one `take_step` (a step the timing does not include)."""
    trainer.train_mode()
    sync(device)
    with OpCount() as counter:
        trainer.take_step(trainer.step)
        sync(device)
    return counter


def body_launches(trainer, device: torch.device) -> int | None:
    """A graph's launches (train.cuda_graph): one eager static step's, counted before the
    capture (after a first step made the optimizer's state); None for another trainer. That
    step trains (the members take one step more than `trainer.step` says: a benchmark's
    numbers, not a study's)."""
    if not getattr(trainer, "static", False):
        return None
    trainer.train_mode()
    sync(device)
    with OpCount() as counter:
        trainer.static_step(torch.tensor(trainer.step, device=device))
        sync(device)
    return counter.launches


def memory_refusal(size: str, k: int, device: str) -> str | None:
    """Why a cell is not tried: the project's memory estimate of the stack (icl_core/planning/
    memory.py) above the device's free memory (a CPU: its RAM); None where it may fit."""
    need = member_memory(member(size, 0, device), stack=k).total
    free, what = (torch.cuda.mem_get_info()[0], "free") if device == "cuda" else \
        (host_memory(), "RAM")
    return f"skipped (memory: {human(need)} > {human(free)} {what})" if need > free else None


def time_cell(size: str, k: int, device: str, warmup: int, steps: int, peak: float,
              draws: str = "generator", precision: str = "fp32") -> dict:
    members = [member(size, seed, device, draws, precision) for seed in range(k)]
    t0 = time.perf_counter()
    trainer = trainer_for(members)
    dev = trainer.device
    trainer.train_until(1)  # Adam's state (a graph's first warm-up step)
    recorded = body_launches(trainer, dev)  # a graph's body, before its capture
    trainer.train_until(max(warmup, 1))  # allocator, kernels (a graph: captured)
    sync(dev)
    setup_s = time.perf_counter() - t0
    counted = count_ops(trainer, dev)
    ops = counted.ops
    start = trainer.step
    sync(dev)
    t0 = time.perf_counter()
    losses = trainer.train_until(start + steps)
    sync(dev)
    seconds = (time.perf_counter() - t0) / steps
    flops = k * step_flops(members[0]) / seconds
    losses = losses if isinstance(losses, list) else [losses]
    return {"params": int(step_shape(members[0]).params), "ms_per_step": 1e3 * seconds,
            "member_steps_per_s": k / seconds, "tflops": flops / 1e12,
            "of_peak": flops / peak if peak else None, "ops_per_step": sum(ops.values()),
            "launches": counted.launches if recorded is None else recorded,
            "top_ops": dict(ops.most_common(8)), "setup_s": setup_s,
            "finite_losses": sum(1 for v in losses if v == v and abs(v) != float("inf"))}


def ours(sizes: list[str], ks: list[int], device: str, warmup: int, steps: int,
         precision: str, peak: float, budget_s: float,
         draws: tuple[str, ...] = ("generator",)) -> list[dict]:
    """One pass over the (size, K, draws) cells at one precision; cells past the budget
    skipped."""
    rows, start = [], time.perf_counter()
    for size, k, scheme in ((s, k, d) for s in sizes for k in ks for d in draws):
        row = {"side": "ours", "size": size, "k": k, "precision": precision, "draws": scheme,
               "member": to_plain(member(size, 0, device, scheme, precision))}  # `icl cost --add`
        cell = f"  ours {precision} {size} K={k} {scheme}"
        if time.perf_counter() - start > budget_s:
            rows.append({**row, "status": "skipped (budget)"})
            say(f"{cell}: skipped (budget {budget_s:g} s)")
            continue
        if refusal := memory_refusal(size, k, device):
            rows.append({**row, "status": refusal})
            say(f"{cell}: {refusal}")
            continue
        try:
            row |= {"status": "ok",
                    **time_cell(size, k, device, warmup, steps, peak, scheme, precision)}
            say(f"{cell}: {row['ms_per_step']:.2f} ms/step, "
                f"{row['ops_per_step']} ops/step ({row['setup_s']:.1f} s setup)")
        except Exception as exc:  # noqa: BLE001 - a cell's failure is a row (e.g. OOM)
            row["status"] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
            say(f"{cell}: {row['status']}")
        rows.append(row)
        gc.collect()
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
    return rows


def peer_pass(sizes: list[str], device: str, warmup: int, steps: int, precision: str
              ) -> list[dict]:
    """The peers' loop (benchmarks/peer_loop.py) at each size, at one precision (the caller's
    TF32 switch holds): a failure is its row."""
    rows = []
    for size in sizes:
        row = {"side": "peer", "size": size, "precision": precision}
        try:
            row |= {"status": "ok", **time_peer(member(size, 0, device, "generator", precision),
                                                torch.device(device), warmup, steps)}
            say(f"  peer {precision} {size}: {row['ms_per_step']:.2f} ms/step "
                f"({row['member_steps_per_s']:,.1f} member-steps/s)")
        except Exception as exc:  # noqa: BLE001 - a cell's failure is a row
            row["status"] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
            say(f"  peer {precision} {size}: {row['status']}")
        rows.append(row)
    return rows


def per_gpu_hour(rows: list[dict], peers: list[dict]) -> list[dict]:
    """Members trained per GPU-hour, ours over the peer loop's, per size and precision: our
    best cell's member-steps/s (any K and draws) over the peer's (one model a process: one
    member-step a step), the same steps a member either way."""
    out = []
    for peer in (p for p in peers if p["status"] == "ok"):
        cells = [r for r in rows if r["status"] == "ok" and r["size"] == peer["size"]
                 and r["precision"] == peer["precision"]]
        if cells:
            best = max(cells, key=lambda r: r["member_steps_per_s"])
            out.append({"size": peer["size"], "precision": peer["precision"], "k": best["k"],
                        "draws": best.get("draws"),
                        "ratio": best["member_steps_per_s"] / peer["member_steps_per_s"]})
    return out


# ------------------------------------------------------------------------ reference

ROW = re.compile(r"^(\S+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%\s*$")
NOT_RUN = re.compile(r"^(\S+)\s+(\d+)\s+((?:skipped|failed).*)$")
PEAK = re.compile(r"peak\s+([\d.]+)\s+TFLOP/s")


def parse_reference(stdout: str, precision: str) -> tuple[float | None, list[dict]]:
    """(the reference's own measured peak in FLOP/s, its rows) from its printed table."""
    peak, rows = None, []
    for line in stdout.splitlines():
        if (m := PEAK.search(line)) and peak is None:
            peak = float(m.group(1)) * 1e12
        elif m := ROW.match(line.strip()):
            size, k, params, ms, msps, tflops, share = m.groups()
            rows.append({"side": "ref", "size": size, "k": int(k), "precision": precision,
                         "status": "ok", "params": int(params), "ms_per_step": float(ms),
                         "member_steps_per_s": float(msps), "tflops": float(tflops),
                         "of_peak": float(share) / 100})
        elif m := NOT_RUN.match(line.strip()):
            size, k, status = m.groups()
            rows.append({"side": "ref", "size": size, "k": int(k), "precision": precision,
                         "status": status})
    return peak, rows


def reference(path: Path, device: str, sizes: list[str], ks: list[int], steps: int,
              budget_s: float, tf32: bool, graph: int, threads: int) -> dict:
    """Run the reference as its own process (the same python) and parse its table."""
    precision = "tf32" if tf32 else "fp32"
    cmd = [sys.executable, str(path), "--device", device, "--ks", ",".join(map(str, ks)),
           "--sizes", ",".join(sizes), "--steps", str(steps), "--budget-s", str(budget_s),
           "--graph", str(graph)]
    env = {k: v for k, v in os.environ.items() if k != "TF32"}
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)  # torch's thread count
    if tf32:
        env["TF32"] = "1"
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env,
                              timeout=2 * budget_s + 300)
        stdout, rc, err = done.stdout, done.returncode, done.stderr
    except subprocess.TimeoutExpired as exc:
        stdout, rc, err = exc.stdout or "", None, "timed out"
        stdout = stdout.decode() if isinstance(stdout, bytes) else stdout
    peak, rows = parse_reference(stdout, precision)
    return {"precision": precision, "command": cmd, "returncode": rc, "peak": peak,
            "rows": rows, "wall_s": time.perf_counter() - t0, "stdout": stdout,
            "stderr_tail": (err or "")[-2000:]}


# ---------------------------------------------------------------------------- table


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[dict], refs: dict) -> list[list[str]]:
    head = ["size", "K", "prec", "draws", "params", "ms/step", "member-steps/s", "TFLOP/s", "of peak",
            "ops/step", "launches", "ref ms/step", "ref m-steps/s", "ref of peak", "ours/ref"]
    out = [head]
    for r in rows:
        ref = refs.get((r["size"], r["k"], r["precision"]))
        ok = r["status"] == "ok"
        cells = [r["size"], str(r["k"]), r["precision"], r.get("draws", "generator")]
        if ok:
            cells += [f"{r['params']:,}", f"{r['ms_per_step']:.2f}",
                      f"{r['member_steps_per_s']:,.1f}", f"{r['tflops']:.3f}",
                      fmt(r["of_peak"], ".2%"), f"{r['ops_per_step']:,}",
                      f"{r['launches']:,}"]
        else:
            cells += [r["status"][:40]] + [""] * 6
        if ref is None:
            cells += ["-", "-", "-", "-"]
        elif ref["status"] != "ok":
            cells += [ref["status"][:40], "", "", "-"]
        else:
            ratio = f"{r['ms_per_step'] / ref['ms_per_step']:.2f}x" if ok else "-"
            cells += [f"{ref['ms_per_step']:.2f}", f"{ref['member_steps_per_s']:,.1f}",
                      fmt(ref.get("of_our_peak"), ".2%"), ratio]
        out.append(cells)
    return out


def print_table(cells: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    left = {0, 2, 3}
    for j, row in enumerate(cells):
        say("  ".join(c.ljust(w) if i in left else c.rjust(w)
                      for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip())
        if j == 0:
            say("  ".join("-" * w for w in widths))


# ----------------------------------------------------------------------------- main


def int_list(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--device", default="auto", choices=["auto", "cpu", "cuda"])
    add("--ks", type=int_list, default=None,
        help="stack sizes K (default 1,8,32,128,512 on CUDA, 1,2,8 on CPU)")
    add("--sizes", default=None, help="model sizes: cpu,paper (default both on CUDA, cpu on CPU)")
    add("--steps", type=int, default=20, help="timed steps per cell (20)")
    add("--warmup", type=int, default=None, help="warm-up steps per cell (CUDA 5, CPU 2)")
    add("--threads", type=int, default=1,
        help="torch CPU threads, both sides (1: a trial's share, as benchmarks/perf.py)")
    add("--tf32", action="store_true", help="a second pass with TF32 allowed (CUDA only)")
    add("--budget-s", type=float, default=120.0,
        help="seconds per pass (ours or the reference, one precision); later cells skipped")
    add("--ref", default=None,
        help=f"the reference script (default {DEFAULT_REF} where it exists); 'none': skip it")
    add("--ref-graph", type=int, default=1, choices=[0, 1],
        help="the reference's --graph: its whole step in one CUDA graph (1, CUDA only) or eager")
    add("--draws", default="generator",
        help="train.draws schemes, a row each per cell: generator, counter, graph (counter "
        "draws and the step a CUDA graph, train.cuda_graph; eager on a CPU), graph-generator "
        "(the members' generators replayed in the graph), compile (counter draws, "
        "train.compile: pays a compile per cell, ~30 s) (default generator)")
    add("--peer", action="store_true",
        help="also time the peers' loop (benchmarks/peer_loop.py: one GPT-2 per process, needs "
        "transformers) per size and precision, and print members per GPU-hour, ours / peer")
    add("--json", default=None, help="write the rows, settings and the reference's output here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    device = resolve_device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here")
    kind = "cuda" if device.type == "cuda" else "cpu"
    ks = args.ks or int_list(DEFAULTS[kind][0])
    sizes = [s.strip() for s in (args.sizes or DEFAULTS[kind][1]).split(",") if s.strip()]
    unknown = sorted(set(sizes) - set(SIZES))
    if unknown:
        raise SystemExit(f"--sizes: unknown {unknown}; valid choices: {', '.join(SIZES)}")
    if args.steps < 1:
        raise SystemExit("--steps: must be >= 1")
    warmup = DEFAULTS[kind][2] if args.warmup is None else args.warmup
    draws = tuple(d.strip() for d in args.draws.split(",") if d.strip())
    if not draws or set(draws) - {*DRAWS, "graph", "graph-generator", "compile"}:
        raise SystemExit(f"--draws: {args.draws!r}; valid choices: {', '.join(DRAWS)}, graph, "
                         "graph-generator, compile")
    torch.set_num_threads(args.threads)
    precisions = ["fp32"] + (["tf32"] if args.tf32 and kind == "cuda" else [])
    ref_path = None if args.ref == "none" else Path(args.ref) if args.ref else DEFAULT_REF
    ref_note = None
    if ref_path is None:
        ref_note = "reference: not run (--ref none)"
    elif not ref_path.is_file():
        ref_note = f"reference: {ref_path} not found; ours alone"
        ref_path = None

    name = torch.cuda.get_device_name(device) if kind == "cuda" else \
        (platform.processor() or platform.machine() or "cpu")
    peaks = {}
    for precision in precisions:
        with precision_scope(precision, device):  # the trainer's own TF32 switch
            peaks[precision] = _measure(device, torch.float32)
    tokens = step_shape(member(sizes[0], 0, kind)).seq  # tokens per prompt
    say(f"stack scaling on {kind}: {name}; torch {torch.__version__}, float32, "
        f"{torch.get_num_threads()} CPU thread(s), {os.cpu_count()} CPU(s)")
    say("measured matmul peak: " + ", ".join(f"{p} {v / 1e12:.3g} TFLOP/s"
                                              for p, v in peaks.items())
        + ("" if kind == "cuda" else "; TF32: n/a on a CPU")
        + ("" if kind != "cuda" or args.tf32 else "; TF32 off (--tf32 adds a TF32 pass)"))
    say(f"task: least squares D={DIM}, N={N_POINTS}, {tokens} tokens, batch {BATCH}; sizes "
        + ", ".join(f"{s} {'x'.join(map(str, SIZES[s]))}" for s in sizes)
        + f"; K {','.join(map(str, ks))}; {warmup} warm-up + {args.steps} timed steps; budget "
        f"{args.budget_s:g} s per pass")
    say(ref_note or f"reference: {ref_path} (separate process, --graph {args.ref_graph}"
        + (")" if kind == "cuda" else ": eager on a CPU)"))

    rows, ref_runs, peers = [], [], []
    peer_note = None
    if args.peer and transformers_version() is None:
        peer_note = "peer: not run (no transformers here: pip install transformers)"
        say(peer_note)
    started = time.perf_counter()

    def write_json() -> None:  # after every pass: a run cut off keeps the passes it finished
        if not args.json:
            return
        out = {"device": kind, "device_name": name, "torch": torch.__version__,
               "python": platform.python_version(), "dtype": "float32",
               "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
               "task": {"dim": DIM, "n_points": N_POINTS, "tokens": tokens, "batch": BATCH},
               "sizes": {s: SIZES[s] for s in sizes}, "ks": ks, "draws": draws, "steps": args.steps,
               "warmup": warmup, "budget_s": args.budget_s, "peak_flops": peaks,
               "ours": rows, "reference": [r for run in ref_runs for r in run["rows"]],
               "reference_runs": ref_runs, "reference_note": ref_note,
               "reference_path": str(ref_path) if ref_path else None,
               "peer": peers, "peer_note": peer_note, "transformers": transformers_version(),
               "per_gpu_hour": per_gpu_hour(rows, peers),
               "revisions": REVISIONS}  # the paths' code revisions timed (`icl cost --add`)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))

    for precision in precisions:
        with precision_scope(precision, device):
            rows += ours(sizes, ks, kind, warmup, args.steps, precision, peaks[precision],
                         args.budget_s, draws)
            if args.peer and peer_note is None:
                peers += peer_pass(sizes, kind, warmup, args.steps, precision)
        write_json()
        if ref_path is not None:
            say(f"  reference {precision} ...")
            run = reference(ref_path, kind, sizes, ks, args.steps, args.budget_s,
                            precision == "tf32", args.ref_graph, args.threads)
            ref_runs.append(run)
            write_json()
            if run["returncode"] != 0 or not run["rows"]:
                say(f"  reference {precision}: exit {run['returncode']}, {len(run['rows'])} "
                    f"rows; stderr: {run['stderr_tail'][-300:]}")
    refs = {(r["size"], r["k"], r["precision"]): r for run in ref_runs for r in run["rows"]}
    for row in rows:  # the reference's share of *our* measured peak: one denominator
        ref = refs.get((row["size"], row["k"], row["precision"]))
        if ref and ref["status"] == "ok" and row["status"] == "ok" and row["of_peak"]:
            ref["of_our_peak"] = (row["of_peak"] * row["ms_per_step"] / ref["ms_per_step"]
                                  * ref["params"] / row["params"])

    say(f"\nstack scaling ({kind}, {name}; total {time.perf_counter() - started:.0f} s):")
    print_table(table(rows, refs))
    if ref_runs:
        say("ref of peak: the reference's FLOP count (6 x its params x tokens) over our "
            "measured peak; ours/ref: ms per step, < 1 is ours faster")
    for run in ref_runs:
        if run["peak"] is not None:
            say(f"reference {run['precision']}: its own measured peak "
                f"{run['peak'] / 1e12:.3g} TFLOP/s (JSON of_peak is of that)")
    if ref_note:
        say(ref_note)
    for r in per_gpu_hour(rows, peers):  # issue 46: >= 10x at the paper size
        say(f"members per {'GPU' if kind == 'cuda' else 'CPU'}-hour, ours / the peer loop: "
            f"{r['ratio']:.1f}x at the {r['size']} "
            f"size, {r['precision']} (ours: K = {r['k']}, {r['draws']})")
    if peer_note:
        say(peer_note)
    write_json()
    if args.json:
        say(f"wrote {args.json}")
    failed = [r for r in rows if r["status"].startswith("failed")]
    return 1 if failed and len(failed) == len(rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
