"""Performance ratios of the sweep stack, each measured side by side in one run.

    python benchmarks/perf.py                      # everything, full settings (see below)
    python benchmarks/perf.py --quick              # a smoke run of all four parts (~2 min, 2 cores)
    python benchmarks/perf.py --parts a --device cuda --repeats 7

Every number is the median over `--repeats` repeats (default 5; `--quick`: 3 for part a, 1
for parts b-d), and within a repeat the two sides run one after the other (interleaved, the
order alternating between repeats), so machine drift hits both. Torch CPU threads are pinned
to `--threads` (default 1) on both sides of part a and to 1 (a trial's share: one CPU) in
parts b-d. The table is printed at the end and written, with the settings, the package
versions and every repeat, to benchmarks/out/perf-<timestamp>.json (the sweeps' own output
goes to perf-<timestamp>.log beside it; `--verbose` shows it live). Temporary stores go to
benchmarks/out/perf-<timestamp>-tmp/, removed at the end unless `--keep`.

(a) Train-step throughput, ours vs Hugging Face GPT-2 configured identically. The same
    model shape (depth x width x heads at the `cpu` size 4 x 64 x 4 and the paper size
    12 x 256 x 8, MLP 4 x width, pre-LN, learned positions), the same task (in-context linear
    regression, D = 5, 41 tokens: the all-prefix layout with N = 20, `--layout fixed_n` gives
    N = 40), batch 64, float32, Adam with the same lr / betas / eps, the same masked MSE loss.
    Ours is the real hot path: `icl_core.training.train.MemberRun(member).train_until(k)` (batches
    drawn on the device, losses kept there, one host read per call). The peer is a
    peer-style loop (benchmarks/peer_loop.py): Linear read-in -> `transformers.GPT2Model` called with
    `inputs_embeds` (dropout 0, no cache) -> Linear read-out; each step draws the batch from
    the same task sampler on the CPU and moves it to the device, then forward, loss,
    zero_grad, backward, Adam step and `loss.item()` (every step, as peer trainers log).
    Two peers: GPT-2's default activation `gelu_new` (how peers run it) and `relu` (our
    MLP's function class). GPT-2's default token embedding (50257 rows) stays, as in peer
    code; fed `inputs_embeds` it gets no gradient and Adam skips it. Reported: tokens/s of
    each and ours / peer (the median of the per-repeat ratios). Target: >= 1.3x at the `cpu`
    size (the paper size is reported, no target). Needs `pip install transformers` (not a
    project dependency).

(b) Packing. `--configs-b` (16) configs of ~`--config-seconds` (1 s) of training each (one
    small least-squares transformer from sweeps/bases.py LIU_LS + CPU_LS, depth 2, with
    16 seeds; steps calibrated on this machine before timing, or `--config-steps`; the final
    evaluation uses `--eval-prompts` (100) test prompts with the OLS and GD baselines, about
    0.35 s on this VM, so a member costs ~1.4 s in all) run through
    our sweep path, `Sweep.main([... --pack K])` on Ray Tune (a fresh store each time, no
    figures), packed (`--pack-b`, default `auto`, what a sweep uses: here 2 trials of 8 on 2
    CPUs) vs one trial per config (`--pack 1`).
    The whole Sweep.main call is timed: planning, Tune, trials, rows written, statuses read.
    Reported: configs/hour of each and packed / separate. Target: >= 2x on CPU, >= 4x on GPU.
    Ray: `ray.init(num_cpus=--num-cpus (os.cpu_count()))`, reused by the CLI.

(c) Overhead of the sweep path. `--configs-c` (200) configs as in (b) through Sweep.main
    with `--pack-c` (default `auto`: one slot, so one trial of 200) members per trial on a Ray
    started with num_cpus=1, vs the same
    training in a plain Python loop in this process (per member: MemberRun, train_until(steps),
    the same final `evaluate(..., True, eval_prompts(member))`, rows kept in a list), both on
    one core (torch threads 1). Reported: overhead = sweep wall / loop wall - 1.
    Target: <= 15%.

(d) Planning, dispatch and store cost per config as the grid grows (`--sizes-d`
    10, 100, 1000): no-op members (train.steps = 0, a 1-layer width-8 transformer, 8 test
    prompts, no baselines), `--pack-d` (50) members per trial, Ray with --num-cpus. Timed
    apart: (1) planning, `Study.members` + `icl_core.planning.resources.plan_trials`; (2) the whole
    `Sweep.main` run (dispatch + trials + store); (3) reading the statuses back
    (`Store.member_status`). Reported: seconds per config at each size and, per phase,
    per-config(largest) / per-config(smallest). Target: flat per config (this script calls
    a ratio <= 1.5 flat; fixed costs make it fall below 1 for the sweep phase).

Ray is started in this process (address="local": never a running cluster) and shut down
between parts whose CPU counts differ; the parts run in the order a, b, d, c (b and d share
one Ray), the table lists them a-d. Measured on the 2-core VM at full settings: a 220 s,
b 300 s, d 440 s, c ~9 minutes per repeat (200 configs x ~1.4 s x 2 sides), so the default
5 repeats take about an hour; `--quick` about 2 minutes (part a at the cpu size only; add
`--sizes cpu,paper` for both, +30 s). `--parts c --repeats 1` is the cheap way to one
overhead number at full size.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "sweeps"))  # the shared bases, as sweep files import them

from bases import CPU_LS, LIU_LS  # noqa: E402
from peer_loop import Peer, transformers_version  # noqa: E402  (benchmarks/: the peers' loop)

from icl_core import PRESETS, Preset, Study, Sweep  # noqa: E402
from icl_core.planning.resources import plan_trials  # noqa: E402
from icl_core.spec.config import MemberConfig, resolve_member, set_path  # noqa: E402
from icl_core.storage.store import Store  # noqa: E402
from icl_core.training.evaluate import eval_prompts, evaluate  # noqa: E402
from icl_core.training.train import MemberRun  # noqa: E402

SIZES = {"cpu": (4, 64, 4), "paper": (12, 256, 8)}  # depth, width, heads
PRESET = "cpu"  # the benchmark studies have identical presets; the CLI needs one named

# Defaults: full run, and what --quick changes (a flag given on the command line wins).
FULL = {"repeats": 5, "sizes": "cpu,paper", "warmup": None, "steps_cpu": None,
        "steps_paper": None, "configs_b": 16, "pack_b": "auto", "config_seconds": 1.0,
        "configs_c": 200, "pack_c": "auto", "sizes_d": "10,100,1000", "pack_d": 50}
QUICK = {"repeats": None, "sizes": "cpu", "warmup": 1, "steps_cpu": 10, "steps_paper": 1,
         "configs_b": 6, "pack_b": "auto", "config_seconds": 0.25, "configs_c": 16, "pack_c": "auto",
         "sizes_d": "10,100", "pack_d": 50}
# steps per repeat of part a when not given: (cpu size, paper size, warm-up) per device type
STEPS_A = {"cpu": (30, 5, 3), "cuda": (200, 100, 20)}


def say(text: str) -> None:
    print(text, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median(values: list[float]) -> float:
    return float(statistics.median(values))


# ------------------------------------------------------------------ (a) train-step throughput


def step_member(size: str, args) -> MemberConfig:
    """Our member at a model size: the least-squares task with a 41-token prompt."""
    depth, width, heads = SIZES[size]
    n_points = 20 if args.layout == "all_prefix" else 40  # 2N + 1 or N + 1 = 41 tokens
    return resolve_member({
        "task": {"name": "linear_regression", "dim": 5, "n_points": n_points,
                 "layout": args.layout},
        "model": {"name": "transformer", "depth": depth, "width": width, "heads": heads,
                  "mlp_ratio": 4, "layer_norm": True},
        "train": {"optimizer": "adam", "lr": args.lr, "batch_size": args.batch,
                  "steps": 10**9},
        "eval": {"n_prompts": 1},
        "seed": 0, "dtype": "float32", "device": args.device,
    })


class Ours:
    name = "ours"

    def __init__(self, member: MemberConfig):
        self.run = MemberRun(member)
        self.device = self.run.device

    def steps(self, n: int) -> float:
        loss = self.run.train_until(self.run.step + n)
        sync(self.device)
        return loss


def part_a(args) -> dict:
    version = transformers_version()
    if version is None:
        raise SystemExit("part a needs Hugging Face transformers: pip install transformers")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    default_steps = STEPS_A["cuda" if device.type == "cuda" else "cpu"]
    warmup = args.warmup if args.warmup is not None else default_steps[2]
    repeats = args.repeats or 3
    out = {"transformers": version, "threads": args.threads,
           "device": str(device), "layout": args.layout, "batch": args.batch, "sizes": {}}
    for size in args.sizes.split(","):
        member = step_member(size, args)
        steps = {"cpu": args.steps_cpu, "paper": args.steps_paper}[size] or \
            default_steps[0 if size == "cpu" else 1]
        runners = [Ours(member), Peer(member, "gelu_new", device), Peer(member, "relu", device)]
        tokens_per_step = args.batch * runners[1].task.seq_len
        say(f"[a] {size} size {SIZES[size]} (depth, width, heads), {tokens_per_step // args.batch}"
            f" tokens x batch {args.batch}, {device}, {args.threads} thread(s): warm-up "
            f"{warmup} steps, then {repeats} repeats x {steps} steps per side")
        for runner in runners:
            runner.steps(warmup)
        tps: dict[str, list[float]] = {r.name: [] for r in runners}
        losses: dict[str, float] = {}
        for rep in range(repeats):
            k = rep % len(runners)
            for runner in runners[k:] + runners[:k]:  # rotate the order between repeats
                t0 = time.perf_counter()
                losses[runner.name] = runner.steps(steps)
                tps[runner.name].append(steps * tokens_per_step / (time.perf_counter() - t0))
            say(f"[a] {size} repeat {rep + 1}/{repeats}: "
                + ", ".join(f"{name} {v[-1]:,.0f} tok/s" for name, v in tps.items()))
        ratios = {peer.name: [o / p for o, p in zip(tps["ours"], tps[peer.name], strict=True)]
                  for peer in runners[1:]}
        out["sizes"][size] = {
            "shape": dict(zip(("depth", "width", "heads"), SIZES[size], strict=True)),
            "steps_per_repeat": steps, "warmup": warmup, "tokens_per_step": tokens_per_step,
            "tokens_per_s": tps, "median_tokens_per_s": {n: median(v) for n, v in tps.items()},
            "ratio_ours_over": {n: median(v) for n, v in ratios.items()},
            "ratio_repeats": ratios, "last_loss": losses,
            "peer_attn_implementation": runners[1].attn, "member": member.to_dict(),
        }
        del runners
    return out


# ------------------------------------------------------------ shared: the sweep path on Ray


def small_base(args, steps: int) -> dict:
    """The ~1 s config of parts b and c: LIU_LS with the CPU_LS overrides, depth 2."""
    base = copy.deepcopy(LIU_LS)
    for key, value in CPU_LS.items():
        set_path(base, key, value)
    for key, value in {"model.depth": 2, "train.steps": steps,
                       "eval.n_prompts": args.eval_prompts, "device": args.device}.items():
        set_path(base, key, value)
    return base


def noop_base(args) -> dict:
    return {"task": {"name": "linear_regression", "dim": 2, "n_points": 4},
            "model": {"name": "transformer", "width": 8, "depth": 1, "heads": 1},
            "train": {"steps": 0, "batch_size": 8},
            "eval": {"n_prompts": 8}, "device": args.device}


def make_sweep(name: str, base: dict, n_configs: int) -> tuple[Sweep, Study]:
    study = Study(name="grid", base=base, grid={"seed": list(range(n_configs))},
                  presets={p: Preset() for p in PRESETS}, doc=f"benchmarks/perf.py {name}")
    return Sweep(name, [study]), study


def calibrate(args) -> dict:
    """Training steps of ~`--config-seconds` for the small config, on one thread."""
    torch.set_num_threads(1)
    member = resolve_member(small_base(args, 10**9))
    run = MemberRun(member)
    run.train_until(5)
    sync(run.device)
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < max(0.5, min(2.0, args.config_seconds)):
        run.train_until(run.step + 10)
        n += 10
    per_step = (time.perf_counter() - t0) / n
    steps = args.config_steps or max(1, round(args.config_seconds / per_step))
    t0 = time.perf_counter()
    evaluate(run.model, member, run.device, run.dtype, run.step, True, eval_prompts(member))
    eval_s = time.perf_counter() - t0
    say(f"[calibrate] small config ({member.model.depth} x {member.model.width}, batch "
        f"{member.train.batch_size}, {run.device}, 1 thread): {per_step * 1e3:.2f} ms/step -> "
        f"{steps} steps ~ {steps * per_step:.2f} s of training; final evaluation "
        f"({member.eval.n_prompts} prompts, baselines {list(member.eval.baselines)}): "
        f"{eval_s:.2f} s")
    return {"ms_per_step": per_step * 1e3, "steps": steps, "train_s": steps * per_step,
            "eval_s": eval_s, "member": member.to_dict()}


class RayScope:
    """One local Ray at a time, re-started when a part needs another CPU count."""

    def __init__(self, verbose: bool):
        self.cpus, self.verbose = None, verbose

    def need(self, cpus: int) -> None:
        import ray

        if ray.is_initialized() and self.cpus == cpus:
            return
        self.close()
        t0 = time.perf_counter()
        ray.init(address="local", num_cpus=cpus, include_dashboard=False,
                 log_to_driver=self.verbose)
        self.cpus = cpus
        say(f"[ray] started with num_cpus={cpus} ({time.perf_counter() - t0:.1f} s, not timed)")

    def close(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        self.cpus = None


class SweepRunner:
    """Sweep.main on a fresh store under the run's temporary folder, timed."""

    def __init__(self, tmp: Path, log, verbose: bool):
        self.tmp, self.log, self.verbose, self.count = tmp, log, verbose, 0

    def fresh(self, label: str) -> str:
        self.count += 1
        path = self.tmp / f"{self.count:03d}-{label}"
        path.mkdir(parents=True)
        return str(path)

    def run(self, sweep: Sweep, study: Study, storage: str, pack: int) -> float:
        argv = ["--preset", PRESET, "--study", study.name, "--storage", storage,
                "--no-figures", "--pack", str(pack)]
        buf = io.StringIO()
        capture = contextlib.nullcontext() if self.verbose else contextlib.ExitStack()
        if not self.verbose:
            capture.enter_context(contextlib.redirect_stdout(buf))
            capture.enter_context(contextlib.redirect_stderr(buf))
        t0 = time.perf_counter()
        with capture:
            code = sweep.main(argv)
        seconds = time.perf_counter() - t0
        self.log.write(f"$ Sweep({sweep.name!r}).main({argv}) -> {code} in {seconds:.2f} s\n")
        self.log.write(buf.getvalue())
        self.log.flush()
        if code != 0:
            sys.stdout.write(buf.getvalue()[-4000:])
            raise RuntimeError(f"Sweep.main({argv}) exited {code}")
        return seconds


def check_rows(storage: str, sweep: Sweep, study: Study, members: list) -> None:
    done = Store(storage).finished(sweep.name, study.name)
    missing = [m.hash for m in members if m.hash not in done]
    if missing:
        raise RuntimeError(f"{len(missing)} configs without rows in {storage}")


# ------------------------------------------------------------------------ (b) packing


def part_b(args, calib: dict, ray_scope: RayScope, runner: SweepRunner) -> dict:
    ray_scope.need(args.num_cpus)
    sweep, study = make_sweep("perf_b", small_base(args, calib["steps"]), args.configs_b)
    members = study.members(PRESET)
    repeats = args.repeats or 1
    say(f"[b] {len(members)} configs x {calib['steps']} steps: packed (--pack {args.pack_b}) vs "
        f"separate (--pack 1), {repeats} repeat(s), Ray num_cpus={args.num_cpus}")
    walls: dict[str, list[float]] = {"packed": [], "separate": []}
    sides = [("packed", args.pack_b), ("separate", 1)]
    for rep in range(repeats):
        for label, pack in sides if rep % 2 == 0 else sides[::-1]:
            storage = runner.fresh(f"b-{label}")
            walls[label].append(runner.run(sweep, study, storage, pack))
            check_rows(storage, sweep, study, members)
        say(f"[b] repeat {rep + 1}/{repeats}: packed {walls['packed'][-1]:.1f} s, separate "
            f"{walls['separate'][-1]:.1f} s")
    n = len(members)
    ratios = [s / p for p, s in zip(walls["packed"], walls["separate"], strict=True)]
    return {"configs": n, "steps": calib["steps"], "pack": args.pack_b,
            "num_cpus": args.num_cpus, "wall_s": walls,
            "configs_per_hour": {k: 3600 * n / median(v) for k, v in walls.items()},
            "ratio_packed_over_separate": median(ratios), "ratio_repeats": ratios}


# ------------------------------------------------------------------------ (c) overhead


def plain_loop(members: list) -> tuple[float, list]:
    """The same training and final evaluation as a trial, in one Python loop."""
    torch.set_num_threads(1)
    results = []
    t0 = time.perf_counter()
    for member in members:
        run = MemberRun(member)
        run.train_until(member.train.steps)
        results.append(evaluate(run.model, member, run.device, run.dtype, run.step, True,
                                eval_prompts(member)))
    sync(torch.device(members[0].device if members[0].device != "auto" else "cpu"))
    return time.perf_counter() - t0, results


def part_c(args, calib: dict, ray_scope: RayScope, runner: SweepRunner) -> dict:
    ray_scope.need(1)
    sweep, study = make_sweep("perf_c", small_base(args, calib["steps"]), args.configs_c)
    members = study.members(PRESET)
    repeats = args.repeats or 1
    say(f"[c] {len(members)} configs x {calib['steps']} steps: Sweep.main --pack {args.pack_c} "
        f"(Ray num_cpus=1) vs a plain loop (1 thread), {repeats} repeat(s)")
    walls: dict[str, list[float]] = {"sweep": [], "loop": []}
    for rep in range(repeats):
        for side in ("sweep", "loop") if rep % 2 == 0 else ("loop", "sweep"):
            if side == "sweep":
                storage = runner.fresh("c-sweep")
                walls["sweep"].append(runner.run(sweep, study, storage, args.pack_c))
                check_rows(storage, sweep, study, members)
            else:
                seconds, results = plain_loop(members)
                assert len(results) == len(members)
                walls["loop"].append(seconds)
        say(f"[c] repeat {rep + 1}/{repeats}: sweep {walls['sweep'][-1]:.1f} s, loop "
            f"{walls['loop'][-1]:.1f} s ({walls['sweep'][-1] / walls['loop'][-1] - 1:+.1%})")
    overheads = [s / lo - 1 for s, lo in zip(walls["sweep"], walls["loop"], strict=True)]
    return {"configs": len(members), "steps": calib["steps"], "pack": args.pack_c,
            "wall_s": walls, "median_wall_s": {k: median(v) for k, v in walls.items()},
            "overhead": median(overheads), "overhead_repeats": overheads}


# ------------------------------------------------------------ (d) planning / dispatch / store


def part_d(args, ray_scope: RayScope, runner: SweepRunner) -> dict:
    from icl_core.running.trial_pool import cluster_gpus

    ray_scope.need(args.num_cpus)
    sizes = [int(s) for s in args.sizes_d.split(",")]
    repeats = args.repeats or 1
    say(f"[d] no-op members, grids of {sizes} configs, --pack {args.pack_d}, {repeats} "
        f"repeat(s), Ray num_cpus={args.num_cpus}")
    phases = ("plan", "sweep", "status")
    secs = {n: {p: [] for p in phases} for n in sizes}
    for rep in range(repeats):
        for n in sizes if rep % 2 == 0 else sizes[::-1]:
            sweep, study = make_sweep("perf_d", noop_base(args), n)
            t0 = time.perf_counter()
            members = study.members(PRESET)
            trials = plan_trials(members, cluster_gpus(), study.cpus_per_trial, args.pack_d)
            secs[n]["plan"].append(time.perf_counter() - t0)
            storage = runner.fresh(f"d-{n}")
            secs[n]["sweep"].append(runner.run(sweep, study, storage, args.pack_d))
            t0 = time.perf_counter()
            statuses = Store(storage).member_status(sweep.name, study.name,
                                                    [m.hash for m in members])
            secs[n]["status"].append(time.perf_counter() - t0)
            bad = [s for s, _ in statuses.values() if s != "ok"]
            if bad:
                raise RuntimeError(f"[d] {len(bad)} of {n} members not ok: {bad[:3]}")
            say(f"[d] repeat {rep + 1}/{repeats}, {n} configs ({len(trials)} trials): plan "
                f"{secs[n]['plan'][-1]:.3f} s, sweep {secs[n]['sweep'][-1]:.1f} s, statuses "
                f"{secs[n]['status'][-1]:.3f} s")
    per_config = {n: {p: median(secs[n][p]) / n for p in phases} for n in sizes}
    small, large = min(sizes), max(sizes)
    return {"sizes": sizes, "pack": args.pack_d, "seconds": secs, "member": noop_base(args),
            "per_config_s": {str(n): v for n, v in per_config.items()},
            "ratio_largest_over_smallest": {
                p: per_config[large][p] / per_config[small][p] for p in phases}}


# ------------------------------------------------------------------------------ the table


def table_rows(results: dict, device_type: str) -> list[dict]:
    rows = []
    if "a" in results:
        for size, r in results["a"]["sizes"].items():
            ours = r["median_tokens_per_s"]["ours"]
            for peer, ratio in r["ratio_ours_over"].items():
                target = 1.3 if size == "cpu" else None
                rows.append({"part": "a", "what": f"{size} {r['shape']['depth']}x"
                             f"{r['shape']['width']}x{r['shape']['heads']} ours vs {peer}",
                             "ours": f"{ours:,.0f} tok/s",
                             "other": f"{r['median_tokens_per_s'][peer]:,.0f} tok/s",
                             "ratio": f"{ratio:.2f}x", "target": ">= 1.3x" if target else "-",
                             "ok": None if target is None else ratio >= target})
    if "b" in results:
        r = results["b"]
        target = 4.0 if device_type == "cuda" else 2.0
        rows.append({"part": "b", "what": f"{r['configs']} configs: --pack {r['pack']} vs 1",
                     "ours": f"{r['configs_per_hour']['packed']:,.0f} cfg/h",
                     "other": f"{r['configs_per_hour']['separate']:,.0f} cfg/h",
                     "ratio": f"{r['ratio_packed_over_separate']:.2f}x",
                     "target": f">= {target:g}x", "ok": r["ratio_packed_over_separate"] >= target})
    if "c" in results:
        r = results["c"]
        rows.append({"part": "c", "what": f"{r['configs']} configs: sweep (--pack {r['pack']}) "
                     "vs loop", "ours": f"{r['median_wall_s']['sweep']:.1f} s",
                     "other": f"{r['median_wall_s']['loop']:.1f} s",
                     "ratio": f"{r['overhead']:+.1%}", "target": "<= +15%",
                     "ok": r["overhead"] <= 0.15})
    if "d" in results:
        r = results["d"]
        small, large = min(r["sizes"]), max(r["sizes"])
        for phase, label in (("plan", "planning"), ("sweep", "Sweep.main"),
                             ("status", "member_status")):
            per = " | ".join(f"{n}: {r['per_config_s'][str(n)][phase] * 1e3:.2f}"
                             for n in r["sizes"])
            ratio = r["ratio_largest_over_smallest"][phase]
            rows.append({"part": "d", "what": f"{label} ms/config ({per})",
                         "ours": f"{r['per_config_s'][str(large)][phase] * 1e3:.2f} ms",
                         "other": f"{r['per_config_s'][str(small)][phase] * 1e3:.2f} ms",
                         "ratio": f"{ratio:.2f}x", "target": "<= 1.5x (flat)",
                         "ok": ratio <= 1.5})
    return rows


def print_table(rows: list[dict]) -> None:
    head = {"part": "part", "what": "measure", "ours": "ours", "other": "reference",
            "ratio": "ratio", "target": "target", "ok": "met"}
    cols = list(head)
    cells = [head] + [{**r, "ok": "-" if r["ok"] is None else ("yes" if r["ok"] else "NO")}
                      for r in rows]
    widths = {c: max(len(str(cell[c])) for cell in cells) for c in cols}
    for i, cell in enumerate(cells):
        say("  ".join(str(cell[c]).ljust(widths[c]) if c in ("part", "what", "target", "ok")
                      else str(cell[c]).rjust(widths[c]) for c in cols).rstrip())
        if i == 0:
            say("  ".join("-" * widths[c] for c in cols))


# ---------------------------------------------------------------------------------- main


def pack_value(text: str) -> int | str:
    return text if text == "auto" else int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--parts", default="a,b,c,d", help="which parts, comma-separated (default a,b,c,d)")
    add("--quick", action="store_true", help="smoke settings for every part (~2 min)")
    add("--repeats", type=int, default=None,
        help="interleaved repeats per part (default 5; --quick: 3 for a, 1 for b-d)")
    add("--threads", type=int, default=1, help="torch CPU threads in part a, both sides (1)")
    add("--device", default=None, help="cuda if available, else cpu")
    add("--out", default=str(ROOT / "benchmarks" / "out"), help="output folder")
    add("--keep", action="store_true", help="keep the temporary stores")
    add("--verbose", action="store_true", help="show the sweeps' own output and Ray's logs")
    g = parser.add_argument_group("(a) train-step throughput")
    g.add_argument("--sizes", default=None, help="cpu,paper (default both; --quick cpu)")
    g.add_argument("--layout", default="all_prefix", choices=["all_prefix", "fixed_n"],
                   help="task layout with 41 tokens: all_prefix N=20 | fixed_n N=40")
    g.add_argument("--batch", type=int, default=64)
    g.add_argument("--lr", type=float, default=1e-3)
    g.add_argument("--steps-cpu", type=int, default=None,
                   help="steps per repeat at the cpu size (CPU 30, GPU 200; --quick 10)")
    g.add_argument("--steps-paper", type=int, default=None,
                   help="steps per repeat at the paper size (CPU 5, GPU 100; --quick 1)")
    g.add_argument("--warmup", type=int, default=None,
                   help="warm-up steps per side (CPU 3, GPU 20; --quick 1)")
    g = parser.add_argument_group("(b, c) the ~1 s configs")
    g.add_argument("--config-seconds", type=float, default=None,
                   help="training seconds per config, calibrated (1.0; --quick 0.25)")
    g.add_argument("--config-steps", type=int, default=None,
                   help="training steps per config (overrides the calibrated count)")
    g.add_argument("--eval-prompts", type=int, default=100,
                   help="test prompts of the final evaluation (100; baselines OLS + GD)")
    g.add_argument("--num-cpus", type=int, default=os.cpu_count(),
                   help=f"Ray CPUs for parts b and d (default os.cpu_count() = {os.cpu_count()})")
    g.add_argument("--configs-b", type=int, default=None, help="configs in part b (16; --quick 6)")
    g.add_argument("--pack-b", type=pack_value, default=None,
                   help="packed members/trial, or auto (default: what a sweep uses)")
    g.add_argument("--configs-c", type=int, default=None,
                   help="configs in part c (200; --quick 16)")
    g.add_argument("--pack-c", type=pack_value, default=None,
                   help="members/trial in c, or auto (default: what a sweep uses)")
    g = parser.add_argument_group("(d) planning, dispatch and store")
    g.add_argument("--sizes-d", default=None, help="grid sizes (10,100,1000; --quick 10,100)")
    g.add_argument("--pack-d", type=int, default=None, help="members per trial (50)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for key, value in FULL.items():
        if getattr(args, key, None) is None:
            quick = QUICK.get(key, value) if args.quick else value
            setattr(args, key, quick)
    # args.repeats is None only under --quick without --repeats: part a then takes 3, b-d 1
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set("abcd"))
    if unknown:
        raise SystemExit(f"--parts: unknown {unknown}; valid choices: a, b, c, d")
    if args.repeats is not None and args.repeats < 1:
        raise SystemExit("--repeats: must be >= 1")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    tmp = out / f"perf-{stamp}-tmp"
    log_path = out / f"perf-{stamp}.log"
    sweeps_run = bool(set(parts) & set("bcd"))
    say(f"perf: parts {','.join(parts)}{' (quick)' if args.quick else ''}, device "
        f"{args.device}, {os.cpu_count()} CPU(s)"
        + (f"; the sweeps' own output -> {log_path}" if sweeps_run else ""))
    results: dict = {}
    started = time.perf_counter()
    ray_scope = RayScope(args.verbose)
    try:
        with open(log_path, "w") if sweeps_run else io.StringIO() as log:
            runner = SweepRunner(tmp, log, args.verbose)
            calib = None
            for part in [p for p in "abdc" if p in parts]:  # b and d share one Ray
                t0 = time.perf_counter()
                if part == "a":
                    results["a"] = part_a(args)
                elif part == "d":
                    results["d"] = part_d(args, ray_scope, runner)
                else:
                    calib = calib or calibrate(args)
                    results["calibration"] = calib
                    fn = part_b if part == "b" else part_c
                    results[part] = fn(args, calib, ray_scope, runner)
                say(f"[{part}] done in {time.perf_counter() - t0:.0f} s")
    finally:
        ray_scope.close()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    import ray

    device_type = torch.device(args.device).type
    rows = table_rows(results, device_type)
    say(f"\nperf ({args.device}, {os.cpu_count()} CPUs, total "
        f"{time.perf_counter() - started:.0f} s):")
    print_table(rows)
    say("(ours / reference: medians of each side; ratio: the median of the per-repeat ratios "
        "of the interleaved pairs, so it can differ from ours / reference)")
    summary = {"timestamp": stamp, "args": vars(args), "python": platform.python_version(),
               "torch": torch.__version__, "ray": ray.__version__,
               "machine": platform.machine(), "cpus": os.cpu_count(),
               "device_name": (torch.cuda.get_device_name() if device_type == "cuda"
                               else platform.processor() or "cpu"),
               "table": rows, "results": results}
    path = out / f"perf-{stamp}.json"
    path.write_text(json.dumps(summary, indent=2, default=str))
    say(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
