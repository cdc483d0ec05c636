"""Soak: a 300-trial smoke sweep on an embedded local Ray while trial workers are SIGKILLed at
random; prints trials finished, kills, Tune restarts, rows lost and rows duplicated.

    python benchmarks/soak.py [--trials 300] [--kill-every 15] [--cpus 2] [--seed 0]
    python benchmarks/soak.py --storage-faults 10    # also: the rows folder read-only at times

Each trial trains one tiny float64 member (checkpoints every 10 of its 60 steps). A killer
thread SIGKILLs one running trial worker of this Ray session every `--kill-every` seconds
(+-50%, seeded); Tune restarts it from its last checkpoint (FailureConfig: 2 restarts a
trial). Then the same sweep is planned again: anything Tune gave up on is run in a second
pass (a re-run only runs configs without rows), the way a user resumes. "Lost" counts configs
without a row file after that pass; "duplicated" counts configs with more than one row file
or a repeated (metric, statistic, step, position, predictor) row. Both must be 0. A script,
not a test (minutes); data go to a temporary folder under benchmarks/out/.

`--storage-faults S`: a second thread makes the study's rows folder immutable (`chattr +i`,
a real filesystem fault: every row write there fails with EPERM) for 1-4 s (seeded) every ~S
seconds, so some members exhaust their write retries and are recorded failed
(icl_core/storage/member_store.py); the re-run trains them. Needs root and chattr; refused otherwise.
"""

from __future__ import annotations

import argparse
import glob
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from icl_core.running.ray_launch import run_tune  # noqa: E402
from icl_core.running.trial import TrialSpec  # noqa: E402
from icl_core.spec.config import resolve_member  # noqa: E402
from icl_core.storage.store import Store  # noqa: E402
from tests.faults import kill, raylet_pid, trial_workers  # noqa: E402  (test-only tooling)

ROW_KEYS = ["metric", "statistic", "step", "position", "predictor", "infer_iter", "test_dist"]


def members(n: int) -> list:
    out = []
    for seed in range(n):
        out.append(resolve_member({
            "task": {"name": "linear_regression", "dim": 2, "n_points": 4},
            "model": {"name": "transformer", "width": 8, "depth": 1 + seed % 2, "heads": 1},
            "train": {"steps": 60, "batch_size": 8, "report_every": 10, "checkpoint_every": 10},
            "eval": {"n_prompts": 50}, "seed": seed, "dtype": "float64", "device": "cpu",
        }))
    return out


def killer(raylet: int, every: float, stop: threading.Event, rng: random.Random, kills: list):
    while not stop.wait(every * rng.uniform(0.5, 1.5)):
        pids = trial_workers(raylet)
        if pids:
            pid = rng.choice(pids)
            if kill(pid):
                kills.append(pid)


def freezer(folder: Path, every: float, stop: threading.Event, rng: random.Random,
            windows: list) -> None:
    """The rows folder immutable for 1-4 s every ~`every` seconds (`windows`: their lengths)."""
    import subprocess

    while not stop.wait(every * rng.uniform(0.5, 1.5)):
        folder.mkdir(parents=True, exist_ok=True)
        length = rng.uniform(1.0, 4.0)
        subprocess.run(["chattr", "+i", str(folder)], check=True)
        try:
            stop.wait(length)
        finally:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        windows.append(length)


def storage_failures(storage: str) -> int:
    """Members recorded failed by a storage fault (their reason names the write)."""
    files = glob.glob(f"{storage}/soak/st/failed/*.parquet")
    return sum(1 for f in files if "storage fault" in str(pl.read_parquet(f)["reason"][0]))


def audit(storage: str, hashes: set[str]) -> tuple[int, int, int]:
    """(finished configs, lost configs, duplicated configs) from the row files (member
    files, and compacted files: icl_core.storage.compaction)."""
    files = glob.glob(f"{storage}/soak/st/rows/*.parquet")
    by_hash: dict[str, int] = {}
    duplicated = 0
    for path in files:
        h = Path(path).stem
        by_hash[h] = by_hash.get(h, 0) + 1
        rows = pl.read_parquet(path).select(ROW_KEYS)
        duplicated += int(rows.is_duplicated().any())
    seen: set[str] = set()  # readers take a hash from its oldest compacted file, only
    for path in sorted(glob.glob(f"{storage}/soak/st/compacted/*.parquet")):
        for (h,), rows in pl.read_parquet(path).group_by("config_hash"):
            if h not in seen:
                seen.add(h)
                by_hash[h] = 1  # a member file beside it is a killed compaction's leftover
                duplicated += int(rows.select(ROW_KEYS).is_duplicated().any())
    duplicated += sum(1 for n in by_hash.values() if n > 1)
    finished = len(hashes & set(by_hash))
    return finished, len(hashes) - finished, duplicated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--kill-every", type=float, default=15.0, help="seconds between kills")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--storage-faults", type=float, default=None, metavar="S",
                        help="make the rows folder immutable for 1-4 s every ~S seconds")
    args = parser.parse_args(argv)
    import os
    import shutil

    if args.storage_faults and (os.geteuid() != 0 or not shutil.which("chattr")):
        print("--storage-faults needs root and chattr", file=sys.stderr)
        return 2

    import ray

    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    root = tempfile.mkdtemp(prefix="soak-", dir=out)
    storage = f"{root}/store"
    ms = members(args.trials)
    hashes = {m.hash for m in ms}
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    raylet = raylet_pid()
    t0 = time.time()
    stop, kills = threading.Event(), []
    thread = threading.Thread(target=killer, args=(raylet, args.kill_every, stop,
                                                   random.Random(args.seed), kills), daemon=True)
    thread.start()
    windows: list = []
    frozen = None
    if args.storage_faults:
        frozen = threading.Thread(target=freezer, args=(
            Path(storage) / "soak" / "st" / "rows", args.storage_faults, stop,
            random.Random(args.seed + 1), windows), daemon=True)
        frozen.start()
    specs = [TrialSpec("soak", "st", storage, [m.to_dict()]) for m in ms]
    first = run_tune(specs, "soak", f"{root}/tune", None)
    stop.set()
    thread.join()
    if frozen is not None:
        frozen.join()
    finished, lost, dup = audit(storage, hashes)
    faults = (f"{len(windows)} read-only windows ({sum(windows):.0f} s), "
              f"{storage_failures(storage)} members recorded failed by a storage fault, "
              if args.storage_faults else "")
    print(f"pass 1 (kills on): {finished}/{len(hashes)} configs finished, {len(kills)} workers "
          f"killed, {faults}{first.restarts} Tune restarts from a checkpoint, {first.failed} "
          f"trials given up, {lost} without rows, {dup} duplicated; {time.time() - t0:.0f} s",
          flush=True)
    done = Store(storage).finished("soak", "st")
    rest = [s for s, m in zip(specs, ms, strict=True) if m.hash not in done]
    if rest:  # what a user does after a crash: run the same sweep again
        run_tune(rest, "soak-rerun", f"{root}/tune", None)
    finished, lost, dup = audit(storage, hashes)
    print(f"after the re-run of {len(rest)} trial(s): {finished}/{len(hashes)} configs "
          f"finished, rows lost {lost}, rows duplicated {dup}; total {time.time() - t0:.0f} s "
          f"({root})", flush=True)
    ray.shutdown()
    return 0 if lost == 0 and dup == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
