"""The orchestrator at thousands: a real sweep of thousands of tiny members through Ray Tune,
timed side by side against the same members in a plain loop without Ray.

    python benchmarks/tune_scale.py                  # 5,000 members (~12 min a side on 2 cores)
    python benchmarks/tune_scale.py --members 200    # a quick look
    python benchmarks/tune_scale.py --members 300 --baseline /path/to/older/checkout  # before/after

Both sides train the same members with the same member code (`icl_core.running.trial.run_trial`):
`depth_scaling/explicit_gradient` under `--preset smoke` as it is (20 training steps of a
width-8 transformer, 100 test prompts, the GD baseline: ~0.09 CPU-s a member) with
`--num-samples members / 5` (its smoke grid has five points), each side into a fresh store.

- Tune: the sweep's own command, `python -m sweeps.depth_scaling ... --no-figures --yes`
  (Ray started by the run, claims, `--pack auto` planning, Tune, the progress line, the
  study's report), 1 CPU per trial on this machine's CPUs (2 here: two trials at once).
- Loop: `--workers` (default 2, the same parallelism) processes, each calling `run_trial`
  on one member at a time over its share of the members (no Ray, no claims, no planning).

Measured per side: wall time from launch to exit, and CPU-seconds of the whole process tree
(a cgroup the side's first process starts in, so Ray's raylet, GCS, dashboard agent and
trial workers are all counted, see `CpuMeter`). On a machine other work shares, wall time follows
that work; CPU-seconds are what the orchestrator itself costs. The Tune run's phases are
read from the timestamps of its own output lines. Afterwards both stores must hold every
member, finished. Prints a table; no assertion on time (the target, <= 1.10x, is reported).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SWEEP, STUDY, PRESET, POINTS = "depth_scaling", "explicit_gradient", "smoke", 5
TARGET = 1.10


def members(num_samples: int, sets: list[str]):
    from icl.catalog import load_sweep
    from icl_core.running.plans import parse_sets

    return load_sweep(SWEEP).study(STUDY).members(PRESET, parse_sets(sets),
                                                  num_samples=num_samples)


def loop_worker(storage: str, num_samples: int, index: int, workers: int,
                sets: list[str]) -> None:
    """One loop process: run_trial on every `workers`-th member, one member at a time."""
    from icl_core.running.trial import TrialSpec, run_trial
    from icl_core.storage.provenance import driver_provenance

    provenance = driver_provenance()
    for m in members(num_samples, sets)[index::workers]:
        run_trial(TrialSpec(SWEEP, STUDY, storage, [m.to_dict()], provenance=provenance,
                            hashes=[m.hash]))


class CpuMeter:
    """CPU-seconds of a process tree, Ray's processes included: a cpuacct cgroup (v1) or a
    cgroup v2 folder the tree starts in, exact even for processes Ray's raylet reaps or
    auto-reaps; where neither can be made, /proc sampled every 0.2 s (a process's last 0.2 s
    may be missed)."""

    def __init__(self, name: str):
        self.path, self.samples = None, {}
        for root, usage in (("/sys/fs/cgroup/cpuacct", "cpuacct.usage"),
                            ("/sys/fs/cgroup", "cpu.stat")):
            if not os.path.exists(f"{root}/{usage if root.endswith('acct') else 'cgroup.controllers'}"):
                continue
            try:
                os.makedirs(f"{root}/{name}")
            except OSError:
                continue
            self.path, self.usage = f"{root}/{name}", usage
            break

    def enter(self) -> None:
        """preexec_fn of the tree's first process: into the cgroup."""
        if self.path:
            with open(f"{self.path}/cgroup.procs", "w") as f:
                f.write(str(os.getpid()))

    @property
    def how(self) -> str:
        return "cgroup" if self.path else "/proc sampling"

    def sample(self, root_pids: list[int]) -> None:
        if self.path:
            return
        tick, stats = os.sysconf("SC_CLK_TCK"), {}
        for d in filter(str.isdigit, os.listdir("/proc")):
            try:
                fields = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(d)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
        tree, todo = set(), list(root_pids)
        while todo:
            pid = todo.pop()
            tree.add(pid)
            todo += [p for p, (ppid, _) in stats.items() if ppid == pid and p not in tree]
        self.samples.update((p, stats[p][1]) for p in tree if p in stats)

    def seconds(self) -> float:
        if not self.path:
            return sum(self.samples.values())
        end = time.time() + 60
        while open(f"{self.path}/cgroup.procs").read().strip() and time.time() < end:
            time.sleep(0.2)  # Ray's processes still exiting
        text = open(f"{self.path}/{self.usage}").read()
        used = int(text) / 1e9 if self.usage == "cpuacct.usage" else \
            int(text.split("usage_usec")[1].split()[0]) / 1e6
        with contextlib.suppress(OSError):
            os.rmdir(self.path)
        return used


def timed(procs_of, log, name: str) -> tuple[float, float, list[tuple[float, str]], str]:
    """(wall s, CPU-s of the process tree, [(t, stdout line)], how CPU was measured) of the
    processes `procs_of(preexec_fn)` starts."""
    meter = CpuMeter(f"tune_scale-{os.getpid()}-{name}")
    t0 = time.time()
    procs = procs_of(meter.enter)
    lines = []
    if procs[0].stdout is not None:  # a piped process's output, timestamped
        for line in procs[0].stdout:
            lines.append((time.time() - t0, line.rstrip()))
            log.write(f"[{lines[-1][0]:7.1f}s] {line}")
            log.flush()
            meter.sample([p.pid for p in procs])
    while any(p.poll() is None for p in procs):
        meter.sample([p.pid for p in procs])
        time.sleep(0.2)
    wall = time.time() - t0
    for p in procs:
        if p.returncode != 0:
            raise SystemExit(f"a process ended with exit status {p.returncode}; see {log.name}")
    return wall, meter.seconds(), lines, meter.how


def phase(lines, marker: str) -> float | None:
    return next((t for t, line in lines if marker in line), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=5000,
                        help=f"a multiple of {POINTS}, at most {POINTS * 1000}; default 5000")
    parser.add_argument("--workers", type=int, default=2, help="loop processes (default 2)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a member config override for both sides (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the two stores")
    parser.add_argument("--baseline", metavar="CHECKOUT",
                        help="also run the Tune side from this checkout (e.g. a worktree of "
                        "an older commit): a before/after in one run, against the same loop")
    parser.add_argument("--loop-worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop_worker:
        storage, n, i, w, sets = args.loop_worker
        loop_worker(storage, int(n), int(i), int(w), json.loads(sets))
        return 0
    num_samples = max(1, args.members // POINTS)
    expected = {m.hash for m in members(num_samples, args.set)}
    tmp = Path(tempfile.mkdtemp(prefix="tune_scale-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "token"}
    log = open(tmp / "runs.log", "w")  # noqa: SIM115
    print(f"{len(expected)} members of {SWEEP}/{STUDY} [{PRESET}] {' '.join(args.set)}; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}; log {log.name}",
          flush=True)

    def tune_procs_of(root: Path, store: str):
        def tune_procs(preexec):
            cmd = [sys.executable, "-m", f"sweeps.{SWEEP}", "--preset", PRESET, "--study", STUDY,
                   "--num-samples", str(num_samples), "--storage", str(tmp / store),
                   *(a for s in args.set for a in ("--set", s)),
                   "--no-figures", "--yes"]
            return [subprocess.Popen(cmd, cwd=root, env={**env, "PYTHONPATH": str(root)},
                                     stdout=subprocess.PIPE, preexec_fn=preexec,
                                     stderr=subprocess.STDOUT, text=True)]
        return tune_procs

    def loop_procs(preexec):
        return [subprocess.Popen([sys.executable, __file__, "--loop-worker", str(tmp / "loop"),
                                  str(num_samples), str(i), str(args.workers),
                                  json.dumps(args.set)], cwd=ROOT,
                                 env=env, stdout=log, stderr=subprocess.STDOUT,
                                 preexec_fn=preexec)
                for i in range(args.workers)]

    log.write("== loop\n")
    log.flush()
    loop_wall, loop_cpu, _, how = timed(loop_procs, log, "loop")
    print(f"loop: {loop_wall:.1f} s wall, {loop_cpu:.1f} CPU-s", flush=True)
    base = None
    if args.baseline:
        log.write(f"== tune, baseline {args.baseline}\n")
        base = timed(tune_procs_of(Path(args.baseline).resolve(), "base"), log, "base")
        print(f"tune (baseline {args.baseline}): {base[0]:.1f} s wall, {base[1]:.1f} CPU-s",
              flush=True)
    log.write("== tune\n")
    tune_wall, tune_cpu, lines, how = timed(tune_procs_of(ROOT, "tune"), log, "tune")
    print(f"tune: {tune_wall:.1f} s wall, {tune_cpu:.1f} CPU-s", flush=True)
    log.close()

    from icl_core.storage.store import Store

    for side in ("loop", "tune") + (("base",) if base else ()):
        done = Store(str(tmp / side)).finished(SWEEP, STUDY)
        if done != expected:
            raise SystemExit(f"{side}: {len(done & expected)} of {len(expected)} members "
                             f"finished; see {tmp / 'runs.log'}")
    start = phase(lines, "studies in one pool")  # Tune starts
    end = phase(lines, "] finished: ")  # the study's report
    trials = next((line.split("] ", 1)[1].split(" trials")[0] for _, line in lines
                   if "studies in one pool" in line), "?")
    print(f"\n{len(expected)} members, both stores complete; Tune: {trials} trials "
          f"(--pack auto); load average now {os.getloadavg()[0]:.1f}")
    print(f"| side | wall s | CPU-s ({how}) | members/s (wall) |")
    print("|---|---|---|---|")
    sides = [(f"plain loop, {args.workers} processes", loop_wall, loop_cpu)]
    if base:
        sides.append((f"Ray Tune sweep, baseline {args.baseline}", base[0], base[1]))
    sides.append(("Ray Tune sweep", tune_wall, tune_cpu))
    for name, wall, cpu in sides:
        print(f"| {name} | {wall:.1f} | {cpu:.1f} | {len(expected) / wall:.1f} |")
    if base:
        print(f"| baseline / loop | {base[0] / loop_wall:.3f}x | {base[1] / loop_cpu:.3f}x | |")
    print(f"| Tune / loop | {tune_wall / loop_wall:.3f}x | {tune_cpu / loop_cpu:.3f}x | |")
    if start is not None and end is not None:
        print(f"Tune run phases: start-up, planning and claims {start:.1f} s; Tune "
              f"{end - start:.1f} s; report and exit {tune_wall - end:.1f} s")
    for _, line in lines:
        if line.startswith("cost model:"):
            print(f"Tune run's planning: {line}")
    print(f"target <= {TARGET:.2f}x: wall {'met' if tune_wall / loop_wall <= TARGET else 'NOT met'}"
          f", CPU-s {'met' if tune_cpu / loop_cpu <= TARGET else 'NOT met'}")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"stores kept in {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
