"""Planning at ten thousand members, side by side with an older checkout.

    python benchmarks/plan_scale.py                              # this tree alone
    python benchmarks/plan_scale.py --baseline /tmp/base        # beside `git worktree add /tmp/base REV`

Each run is a fresh process that imports the sweep file and times its `--dry-run` (members
expanded, validated, hashed, costed and packed; nothing written): by default
`depth_scaling --preset paper --study ls_mixer_depth --num-samples 501 --plan-gpus 8`, 10,020
members. With `--baseline`, the same call from that checkout (its own sources first on the
path), the two alternated `--repeats` times; prints each side's median and the ratio. Imports
are not timed (the same on both sides).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARGV = ["--preset", "paper", "--study", "ls_mixer_depth", "--num-samples", "501",
        "--plan-gpus", "8", "--dry-run", "--no-figures"]


def child(sweep: str, argv: list[str]) -> None:
    """In the checkout this process was started in: time one dry run, print it as JSON."""
    sys.path.insert(0, os.getcwd())
    from icl.catalog import load_sweep

    main = load_sweep(sweep).main
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = main(argv)
    seconds = time.perf_counter() - start
    plan = out.getvalue()
    print(json.dumps({"seconds": seconds, "code": code,
                      "total": next((ln for ln in plan.splitlines() if ln.startswith("total:")),
                                    "")}))


def timed(tree: Path, sweep: str, argv: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    run = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", "--sweep",
                          sweep, "--", *argv], cwd=tree, env=env, capture_output=True, text=True,
                         timeout=600)
    if run.returncode != 0:
        raise SystemExit(f"plan_scale: the run in {tree} failed:\n{run.stderr[-2000:]}")
    result = json.loads(run.stdout.strip().splitlines()[-1])
    if result["code"] != 0:
        raise SystemExit(f"plan_scale: the dry run in {tree} exited {result['code']}")
    return result


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="an older checkout, timed beside this one")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sweep", default="depth_scaling")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("argv", nargs="*", help=f"the sweep's options (default: {' '.join(ARGV)})")
    opts = parser.parse_args(args)
    argv = opts.argv or ARGV
    if opts.child:
        child(opts.sweep, argv)
        return 0
    if opts.baseline is not None and not (opts.baseline / "icl_core").is_dir():
        parser.error(f"--baseline {opts.baseline}: not a checkout of this project (no icl_core/)")
    sides = {"this tree": ROOT, **({f"baseline {opts.baseline}": opts.baseline}
                                   if opts.baseline else {})}
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    for repeat in range(opts.repeats):
        for name, tree in sides.items():
            result = timed(tree, opts.sweep, argv)
            seconds[name].append(result["seconds"])
            print(f"[{repeat + 1}/{opts.repeats}] {name}: {result['seconds']:.2f} s "
                  f"({result['total'][:90]})", flush=True)
    print(f"\n{opts.sweep} {' '.join(argv)}")
    for name, values in seconds.items():
        print(f"  {name}: median {statistics.median(values):.2f} s "
              f"[{min(values):.2f}-{max(values):.2f}] over {len(values)}")
    if opts.baseline:
        ratio = statistics.median(seconds[f"baseline {opts.baseline}"]) / \
            statistics.median(seconds["this tree"])
        print(f"  baseline / this tree: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
