"""Every sweep file in `sweeps/`, loaded by name; and one plan over all of them.

    python -m icl_core.catalog --preset paper      # every study of every file, no Ray started
    python -m icl_core.catalog --preset gpu        # ... with each study's H100 estimate
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from icl_core.sweep import PRESETS, Sweep

SWEEPS_DIR = Path(__file__).resolve().parent.parent / "sweeps"


def sweep_names() -> list[str]:
    """Files in sweeps/ that define a module-level SWEEP (helpers such as bases.py do not)."""
    return sorted(
        p.stem for p in SWEEPS_DIR.glob("*.py")
        if not p.stem.startswith("_") and "\nSWEEP = " in p.read_text()
    )


def load_sweep(name: str) -> Sweep:
    path = SWEEPS_DIR / f"{name}.py"
    if not path.exists():
        raise KeyError(f"no sweep file {path}; valid choices: {', '.join(sweep_names())}")
    if str(SWEEPS_DIR) not in sys.path:
        sys.path.insert(0, str(SWEEPS_DIR))  # sweep files import their shared bases
    module_name = f"icl_sweeps_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    sweep = getattr(sys.modules[module_name], "SWEEP", None)
    if sweep is None:
        raise KeyError(f"{path} defines no SWEEP; valid choices: {', '.join(sweep_names())}")
    if sweep.name != name:  # rows are stored under SWEEP.name, looked up by file name
        raise KeyError(f"{path}: SWEEP.name is {sweep.name!r}; it must be the file name {name!r}")
    return sweep


def main(argv: list[str] | None = None) -> int:
    from icl_core.cli import build_parser, gpu_time, make_plans, print_plan
    from icl_core.config import ConfigError

    parser = argparse.ArgumentParser(description="Plan every sweep file (a dry run of all).")
    parser.add_argument("--preset", default="paper", help=f"one of {', '.join(PRESETS)}")
    parser.add_argument("--plan-gpus", default="0", help="plan for a cluster with N GPUs")
    args = parser.parse_args(argv)
    total, seconds = 0, 0.0
    for name in sweep_names():
        sweep = load_sweep(name)
        sweep_args = build_parser(sweep).parse_args(
            ["--preset", args.preset, "--dry-run", "--plan-gpus", args.plan_gpus])
        try:
            plans = make_plans(sweep, sweep_args)
        except ConfigError as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            return 2
        seconds += print_plan(sweep, plans, sweep_args)
        total += sum(plan.trials for plan in plans)
    print(f"all sweep files [{args.preset}]: {total} configs (grid members and search trials), "
          f"{gpu_time(seconds)} on one H100-class GPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
