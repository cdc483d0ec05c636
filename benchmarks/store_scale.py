"""The results store at scale: N members synthesised from a real smoke row file, the resume
check, `read_rows` and `regenerate` timed with their peak RSS, before and after compaction.

    python benchmarks/store_scale.py --members 10000
    python benchmarks/store_scale.py --members 100000 --source /tmp/x   (a smoke store)

1. Source: the smoke run's row files of depth_scaling/least_squares (`--source`: a store that
   holds them; default: `python sweeps/depth_scaling.py --preset smoke --study least_squares
   --no-figures` into <dir>/source, about a minute).
2. Synthesis: each of the N members is a copy of one of those files (cycled) under a new,
   valid, distinct 16-hex config hash: the file is written once uncompressed and its bytes are
   copied with the old hash replaced (config_hash and trial_id columns, their statistics), so
   100,000 files take seconds; the first copy of each is read back and checked.
3. Each operation runs in a fresh subprocess (`python -c ...` / `python -m ...`); its wall time
   and its peak RSS (ru_maxrss of that child, from os.wait4) are reported. A child whose RSS
   passes --max-rss-gb is killed (reported as such), so the shared machine never swaps.
   Operations: the resume check (`Store.finished`), `analysis.reading.store.read_rows` (all columns,
   and the depth figure's columns only), `icl regenerate depth_scaling --study
   least_squares` (it reads the figure's columns); then `icl compact`; then the four again.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
SWEEP, STUDY = "depth_scaling", "least_squares"
REGENERATE = "regenerate depth_scaling --study least_squares"


def smoke_source(dest: Path) -> Path:
    """A smoke store of depth_scaling/least_squares (run once into `dest`)."""
    rows = dest / SWEEP / STUDY / "rows"
    if not list(rows.glob("*.parquet")):
        env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "token")}
        subprocess.run([sys.executable, str(ROOT / "sweeps" / f"{SWEEP}.py"), "--preset",
                        "smoke", "--study", STUDY, "--storage", str(dest), "--no-figures"],
                       check=True, env=env, cwd=ROOT)
    return dest


def synthesise(source: Path, store: Path, n: int, reuse: bool = False) -> float:
    """n member files under store (copies of the source's under new hashes); seconds taken."""
    start = time.perf_counter()
    src = source / SWEEP / STUDY
    templates = sorted((src / "rows").glob("*.parquet"))
    if not templates:
        raise SystemExit(f"--source: no row files under {src / 'rows'}")
    out = store / SWEEP / STUDY / "rows"
    if reuse and out.is_dir() and not (out.parent / "compacted").exists() and \
            sum(1 for _ in out.iterdir()) == n:
        return 0.0  # a store synthesised before, not compacted yet
    if out.parent.exists():
        shutil.rmtree(out.parent)
    out.mkdir(parents=True)
    shutil.copy(src / "study.json", out.parent / "study.json")
    patterns = []
    for path in templates:
        table = pq.read_table(path)
        old = table["config_hash"][0].as_py()
        trial = table["trial_id"][0].as_py()
        tmp = store / "template.parquet"
        pq.write_table(table, tmp, compression="none")
        data = tmp.read_bytes()
        tmp.unlink()
        if len(old) != 16 or len(trial) != 16:
            raise SystemExit(f"{path}: hashes of 16 characters expected")
        patterns.append((data, old.encode(), trial.encode()))
    for i in range(n):
        data, old, trial = patterns[i % len(patterns)]
        new = hashlib.sha256(f"store-scale-{i}".encode()).hexdigest()[:16]
        body = data.replace(old, new.encode()).replace(trial, new.encode())
        (out / f"{new}.parquet").write_bytes(body)
        if i < len(patterns):  # the copy reads back as the new config's
            got = pq.read_table(out / f"{new}.parquet", columns=["config_hash", "trial_id"])
            assert set(got["config_hash"].to_pylist()) == {new} == set(
                got["trial_id"].to_pylist()), "byte copy did not rewrite the hash"
    return time.perf_counter() - start


def timed(argv: list[str], max_rss_gb: float, timeout: float) -> tuple[float, float, str]:
    """(wall s, peak RSS MB, note) of one fresh subprocess."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    killed = []

    def watch():
        limit_kb = max_rss_gb * 1024 * 1024
        while proc.poll() is None:
            try:
                status = Path(f"/proc/{proc.pid}/status").read_text()
                rss = int(next(line.split()[1] for line in status.splitlines()
                               if line.startswith("VmRSS")))
            except (OSError, StopIteration, ValueError):
                rss = 0
            if rss > limit_kb or time.perf_counter() - start > timeout:
                killed.append("RSS limit" if rss > limit_kb else "timeout")
                proc.kill()
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    watcher.join()
    note = f"killed: {killed[0]}" if killed else ("" if proc.returncode == 0 else
                                                   f"rc {proc.returncode}")
    if note and not killed:
        print(output[-2000:], file=sys.stderr)
    last = [line for line in output.splitlines() if line.strip()]
    return wall, usage.ru_maxrss / 1024, note or (last[-1][:90] if last else "")


def operations(store: Path, out: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "resume check (Store.finished)": [py, "-c", (
            "import sys; from icl_core.storage.store import Store; "
            f"print(len(Store({str(store)!r}).finished({SWEEP!r}, {STUDY!r})), 'finished')")],
        "read_rows (all columns)": [py, "-c", (
            "from analysis.reading.store import read_rows; "
            f"rows, c = read_rows({str(store)!r}, {SWEEP!r}, {STUDY!r}); "
            "print(rows.shape, 'rows x columns')")],
        "read_rows (the depth figure's columns)": [py, "-c", (
            "from analysis.reading.store import read_rows; "
            "from analysis.figures.registry import FIGURE_COLUMNS; "
            f"rows, c = read_rows({str(store)!r}, {SWEEP!r}, {STUDY!r}, "
            "columns=FIGURE_COLUMNS['depth']); "
            "print(rows.shape, 'rows x columns')")],
        REGENERATE: [
            py, "-m", "icl", "regenerate", SWEEP, "--study", STUDY, "--storage", str(store),
            "--out", str(out)],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=10_000, help="members to synthesise")
    parser.add_argument("--source", help="a store holding the smoke run of "
                        f"{SWEEP}/{STUDY} (default: run it into <dir>/source)")
    parser.add_argument("--dir", default="/tmp/store_scale", help="work folder")
    parser.add_argument("--max-rss-gb", type=float, default=8.0,
                        help="kill an operation whose RSS passes this (default 8)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per operation")
    parser.add_argument("--after-only", action="store_true",
                        help="skip the operations before compaction")
    parser.add_argument("--keep", action="store_true", help="keep the synthesised store (and "
                        "reuse one left uncompacted by an earlier --keep run)")
    args = parser.parse_args(argv)
    if args.members < 1:
        print("--members: must be >= 1", file=sys.stderr)
        return 2
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    source = Path(args.source) if args.source else smoke_source(work / "source")
    store = work / f"store-{args.members}"
    seconds = synthesise(source, store, args.members, reuse=args.keep)
    size = sum(p.stat().st_size for p in (store / SWEEP / STUDY / "rows").iterdir())
    print(f"synthesised {args.members} members ({size / 1e6:.0f} MB of row files) in "
          f"{seconds:.1f} s under {store}", flush=True)
    ops = operations(store, work / "figures")
    results: dict[tuple[str, str], tuple] = {}
    # the fixed cost (start-up, imports, drawing) against which N's share is seen
    small = timed(operations(source, work / "figures-source")[REGENERATE], args.max_rss_gb,
                  args.timeout)
    print(f"  regenerate of the source store itself (its few members): {small}", flush=True)
    phases = ["member files", "compacted"]
    for phase in phases:
        if phase == "compacted":
            cmd = [sys.executable, "-m", "icl.console", "compact", SWEEP, "--study", STUDY,
                   "--storage", str(store)]
            results["icl compact", phase] = timed(cmd, args.max_rss_gb, args.timeout)
            print(f"  icl compact: {results['icl compact', phase]}", flush=True)
        elif args.after_only:
            continue
        for name, cmd in ops.items():
            results[name, phase] = timed(cmd, args.max_rss_gb, args.timeout)
            print(f"  [{phase}] {name}: {results[name, phase]}", flush=True)
    print(f"\n{args.members:,} members, {os.cpu_count()} CPUs; each operation in a fresh "
          "process (wall s including start-up, peak RSS MB)\n")
    print("| operation | " + " | ".join(phases) + " |")
    print("|---|" + "---|" * len(phases))
    for name in ["icl compact", *ops]:
        cells = []
        for phase in phases:
            r = results.get((name, phase))
            cells.append("—" if r is None else f"{r[0]:.2f} s, {r[1]:.0f} MB"
                         + (f" ({r[2]})" if r[2].startswith(("killed", "rc")) else ""))
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\nregenerate of the source store ({len(list((source / SWEEP / STUDY / 'rows').glob('*.parquet')))} "
          f"member files): {small[0]:.2f} s, {small[1]:.0f} MB (start-up, imports, drawing)")
    if not args.keep:
        shutil.rmtree(store)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
