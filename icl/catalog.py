"""Every sweep file in `sweeps/`, loaded by name; one plan over all of them; study manifests.

    icl catalog --preset paper --plan-gpus 64     # plan every file, no Ray
    icl catalog --run --preset cpu --only depth_scaling/least_squares width_scaling
                                                   # run them as one pool of trials

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

from icl.sweep import Sweep
from icl_core.spec.study import PRESETS

PACKAGE = "sweeps"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / PACKAGE  # <root>/sweeps/
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


def adaptive_names() -> list[str]:
    """The modules of the sweeps folder that define a module-level ADAPTIVE list (adaptive
    studies: icl.adaptive)."""
    return [name for name in _modules() if isinstance(getattr(_import(name), "ADAPTIVE", None),
                                                      list)]


def load_adaptive(name: str) -> list:
    """The ADAPTIVE list of the sweep file `name` (checked against adaptive_names first)."""
    names = adaptive_names()
    if name not in names:
        raise KeyError(f"{name!r} is not the name of a sweep file of adaptive studies in "
                       f"{SWEEPS_DIR}; valid choices: {', '.join(names)}")
    return _import(name).ADAPTIVE


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
    from icl_core.running.study_report import study_manifest

    try:
        sweep = load_sweep(name)
    except KeyError as exc:
        raise ValueError(f"sweep: {exc.args[0]}") from None
    presets = (preset,) if preset else ()
    return [study_manifest(sweep, study, presets) for study in sweep.studies]


def selected(only: list[str] | None) -> list[tuple[str, str | None]]:
    """(sweep name, study or None) pairs of `--only sweep[/study] ...` (None: every file); an
    unknown file is a KeyError, an unknown study a ConfigError, each naming the valid choices."""
    if not only:
        return [(name, None) for name in sweep_names()]
    from icl_core.common.validation import unknown

    out = []
    for item in only:
        name, _, study = item.partition("/")
        names = [s.name for s in load_sweep(name).studies]  # an unknown file fails here (KeyError)
        if study and study not in names:
            raise unknown("--only", f"study of {name}", study, names)
        out.append((name, study or None))
    return out


def main(argv: list[str] | None = None, prog: str = "icl catalog") -> int:
    """Plan (default) or run (--run) every sweep file, or those of --only, as one pool.
    --dry-run plans, with or without --run: it never trains."""
    from icl.cli import add_log_args, logging_of

    parser = argparse.ArgumentParser(
        prog=prog, description="Plan every sweep file (a dry run of all), or run them as one "
        "pool (--run). Every other option is the sweep files' own (e.g. --storage, --dry-run, "
        "--plan-gpus N, --pack, --stack: `python sweeps/depth_scaling.py --help`), handed to "
        "each of them.")
    parser.add_argument("--preset", default="paper",
                        help=f"one of {', '.join(PRESETS)} (default: paper)")
    parser.add_argument("--only", nargs="+", metavar="SWEEP[/STUDY]",
                        help="these files or studies only (default: every file)")
    parser.add_argument("--run", action="store_true",
                        help="run the selected studies as one pool of trials on Ray Tune")
    add_log_args(parser)
    args, rest = parser.parse_known_args(argv)
    with logging_of(args):
        return _main(args, rest)


def _main(args, rest: list[str]) -> int:
    from icl.api import Options, preflight
    from icl.cli import build_parser
    from icl.figures import figure_drawer
    from icl.plan_cost import PlanCost, check_size, planned_cluster, print_plan
    from icl_core.running.plans import run_plans
    from icl_core.spec.config import ConfigError, unknown

    try:
        if args.preset not in PRESETS:
            raise unknown("--preset", "", args.preset, PRESETS)
        if "--json" in rest:
            raise ConfigError("--json: the catalog prints text; a sweep file's plan or run as "
                              "JSON: `icl plan <sweep> --json`, `icl run <sweep> --json`")
        chosen = selected(args.only)
        files, store = [], None
        for name, study in chosen:
            sweep = load_sweep(name)
            if study is None and not any(args.preset in s.presets for s in sweep.studies):
                continue  # an optional preset (reduced): only the files that have it
            flags = ["--preset", args.preset] + (["--study", study] if study else []) + rest
            if not args.run:
                flags.append("--dry-run")
            sweep_args = Options.of(build_parser(sweep).parse_args(flags))
            plans, store = preflight(sweep, sweep_args)  # the sweep files' own checks
            files.append((sweep, plans, sweep_args))
        if not files:
            raise ConfigError(f"--preset: no selected study has a {args.preset!r} preset")
    except (KeyError, ConfigError) as exc:
        print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    if args.run and not any(sweep_args.dry_run for _, _, sweep_args in files):
        run_args = files[0][2]
        try:
            check_size([p for _, plans, _ in files for p in plans], run_args)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        try:
            return run_plans([(s, plans) for s, plans, _ in files], store, run_args.launch(),
                             label=f"{len(files)} sweep file(s) [{args.preset}]",
                             draw=figure_drawer(run_args.figures,
                                                run_args.no_figures)).exit_status
        except ConfigError as exc:  # a storage the cluster's nodes cannot share
            print(f"error: {exc}", file=sys.stderr)
            return 2
    total = PlanCost(*planned_cluster(files[0][2]))
    for sweep, plans, sweep_args in files:
        total.merge(print_plan(sweep, plans, sweep_args))
    print(f"all sweep files [{args.preset}]: {total.configs} configs (grid members and search "
          f"trials); {total.summary()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
