"""Every sweep file in `sweeps/`, loaded by name; one plan over all of them; study manifests.

    python -m icl_core.catalog --preset paper      # every study of every file, no Ray started
    python -m icl_core.catalog --preset gpu        # ... with each study's H100 estimate

Sweep files are the modules of the `sweeps` package (`sweeps.<name>`), imported with importlib;
a module is a sweep file when it defines a module-level SWEEP (helpers such as bases.py do
not). The package is imported like any other (the project root on sys.path, or the project
installed), else from its folder. SWEEPS_DIR set to another folder (e.g. a temporary one)
loads that folder's files by file location instead.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import zlib
from pathlib import Path

from icl_core.study import PRESETS
from icl_core.sweep import Sweep

PACKAGE = "sweeps"
PACKAGE_DIR = Path(__file__).resolve().parent.parent / PACKAGE
SWEEPS_DIR = PACKAGE_DIR  # the folder of sweep files


def _package() -> None:
    """Import the `sweeps` package: from sys.path or the installed project, else (the project
    root not on sys.path, an install that predates the package) from its folder by file
    location. Another package of that name is refused, never used."""
    if PACKAGE not in sys.modules and importlib.util.find_spec(PACKAGE) is None:
        spec = importlib.util.spec_from_file_location(
            PACKAGE, PACKAGE_DIR / "__init__.py", submodule_search_locations=[str(PACKAGE_DIR)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE] = module
        spec.loader.exec_module(module)
    found = [Path(p).resolve() for p in importlib.import_module(PACKAGE).__path__]
    if PACKAGE_DIR not in found:
        raise ImportError(f"the package {PACKAGE!r} imported from {found} is not this project's "
                          f"{PACKAGE_DIR}")


def _import(name: str):
    """The module of SWEEPS_DIR/<name>.py: `sweeps.<name>`, or for another folder, a module
    loaded by file location (named after the folder, so two folders never collide)."""
    if SWEEPS_DIR.resolve() == PACKAGE_DIR:
        _package()
        return importlib.import_module(f"{PACKAGE}.{name}")
    folder = zlib.crc32(str(SWEEPS_DIR.resolve()).encode())
    module_name = f"_icl_sweeps_{folder:08x}_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, SWEEPS_DIR / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
    return sys.modules[module_name]


def _modules() -> list[str]:
    return sorted(p.stem for p in SWEEPS_DIR.glob("*.py") if not p.stem.startswith("_"))


def sweep_names() -> list[str]:
    """The modules of the sweeps folder that define a module-level SWEEP."""
    return [name for name in _modules() if isinstance(getattr(_import(name), "SWEEP", None), Sweep)]


def load_sweep(name: str) -> Sweep:
    """The SWEEP of a sweep file named `name`: a name among the folder's modules (checked
    against its file list before anything is imported: a path is refused, never run)."""
    if not isinstance(name, str) or not name.isidentifier() or name not in _modules():
        raise KeyError(f"{name!r} is not the name of a sweep file in {SWEEPS_DIR} (a name, "
                       f"not a path); valid choices: {', '.join(sweep_names())}")
    path = SWEEPS_DIR / f"{name}.py"
    sweep = getattr(_import(name), "SWEEP", None)
    if not isinstance(sweep, Sweep):
        raise KeyError(f"{path} defines no SWEEP; valid choices: {', '.join(sweep_names())}")
    if sweep.name != name:  # rows are stored under SWEEP.name, looked up by file name
        raise KeyError(f"{path}: SWEEP.name is {sweep.name!r}; it must be the file name {name!r}")
    return sweep


def study_manifests(name: str, preset: str | None = None) -> list[dict]:
    """The manifests of a sweep file's studies, built from the file (expected plans: `preset`
    only): the fallback of analysis.regenerate for stores without manifests."""
    from icl_core.orchestrate import study_manifest

    try:
        sweep = load_sweep(name)
    except KeyError as exc:
        raise ValueError(f"sweep: {exc.args[0]}") from None
    presets = (preset,) if preset else ()
    return [study_manifest(sweep, study, presets) for study in sweep.studies]


def main(argv: list[str] | None = None) -> int:
    from icl_core.cli import build_parser, gpu_time, print_plan
    from icl_core.config import ConfigError
    from icl_core.orchestrate import make_plans

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
