"""The `icl` console command (pyproject [project.scripts]): the sweep files by name.

    icl run <sweep> [options]      = python sweeps/<sweep>.py [options] (the same options)
    icl plan <sweep> [options]     = icl run <sweep> --dry-run [options]
    icl plan --gpu-minutes M [--preset reduced] [--only SWEEP[/STUDY] ...] [--seeds N] [--all]
             [--graph] [--call-minutes C]
                                   the studies one GPU runs in an M-minute window (undecided
                                   verdicts' first) and the one command that runs them there
                                   (a command per call of at most C minutes)
    icl list [studies|sweeps|models|tasks] [--json]
    icl config <sweep> --study S [--preset P] [--set KEY=VALUE ...] [--sweep KEY=V1,V2 ...]
                                   each field of the study's member config: its value under
                                   the preset (or the grid's values), type, default and doc
    icl regenerate <sweep>|--all [--from-sweeps] [options]
                                   a sweep's figures and fit reports from its stored rows
    icl backtest [--storage S] [--sweep W] [--study S] [--synthetic]
                                   hold out each study's largest x, forecast it, score it
    icl verdicts [--write|--check|--json|--pending]
                                   every declared claim decided on the committed evidence
                                   (offline, no training)
    icl levels <sweep> --study S [--preset P] [--set KEY=VALUE ...] [--metric M]
             [--statistic S] [--position K]
                                   a setting's trivial levels, floor and bar, untrained
                                   (seconds)
    icl claims <sweep> [--study S] [--storage P] [--release [--yes]] [--json]
                                   the claims (leases) on the sweep's configs: holder, age,
                                   expiry; --release removes them (a dead driver's) after a y/N
    icl compact <sweep> [--study S] [--storage P]
                                   merge finished members' row files (icl_core.storage.compaction)
    icl adaptive <sweep> [options] = python sweeps/<sweep>.py [options], a file of adaptive
                                   studies (rounds of trials chosen where a law is uncertain)
    icl catalog [--run] [--only SWEEP[/STUDY] ...] [options]
                                   plan (or run, as one pool) every sweep file's studies
                                   (icl.catalog)
    icl evidence --from STORE --preset P [--merge] [--any-members] [--scale S]
             [--evidence DIR] SWEEP/STUDY ...
                                   commit studies' rows as evidence (evidence/<preset>/): the
                                   preset's members; --merge keeps the committed members the
                                   store lacks
    icl forecast seal|score|design|replay [options]
                                   seal a scaling-law forecast, or score it on new rows;
                                   where a study stands on an adaptive goal; an adaptive
                                   design replayed on a measured grid
    icl scoreboard --storage S ... every store back-tested and every sealed forecast
                                   scored: docs/FORECASTS.md
    icl cost [--add JSON ...] [--check DIR ...] [--write] [--rates JSON]
                                   the GPU rate model the planner costs unmeasured GPU steps
                                   by: its fit to measured steps, a refit, and the plan against
                                   the CUDA stacks a run left
    icl --version                  the installed version

`--json` prints one JSON document on stdout for scripts (jq): on list and claims, and on a
sweep's plan and run (the sweep files' own --json: the plan, or the run's summary when it ends);
on verdicts, one JSON object per claim, a line each (JSON lines: `jq -s` reads them as one).
It only finds things and hands them on: the sweep files' command line is icl.cli.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import inspect
import json
import os
import re
import sys
import typing

from icl_core.common.validation import ConfigError

USAGE = __doc__.split("\n\n")[1]  # every command, `icl --version` the last
FIELD = re.compile(r"^\s+(\w+)\s*:[^#]*?(?:#\s*(.*))?$")  # `name: type = default  # doc`
ABOVE = re.compile(r"^\s+#\s?(.*)$")  # a comment line above a field (its doc if none after)
ELSEWHERE = {  # command -> "module:function(argv) -> exit status", imported when run
    "regenerate": "icl.commands.regenerate:main", "verdicts": "icl.commands.verdicts:main",
    "evidence": "icl.commands.evidence:main", "backtest": "icl.commands.backtests:backtest",
    "scoreboard": "icl.commands.backtests:scoreboard", "forecast": "icl.commands.forecasts:main",
    "levels": "icl.levels:main", "catalog": "icl.catalog:main", "cost": "icl.commands.cost:main"}


def main(argv: list[str] | None = None) -> int:
    from icl_core.common.log import ensure_console, warning_lines

    ensure_console()  # its lines (a store's coverage, warnings) on the console
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        with warning_lines():  # Python warnings too, one line each
            return _dispatch(argv)
    except BrokenPipeError:  # `icl list studies | head`: the reader has all it wants
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0 if argv else 2


def _dispatch(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(f"usage:\n{USAGE}", flush=True)
        return 0 if argv else 2
    if argv[0] in ("--version", "version"):
        from icl_core import __version__

        print(f"icl-sweeps {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    commands = {"run": run, "plan": plan, "list": list_things, "config": config,
                "claims": claims, "compact": compact, "adaptive": adaptive, **ELSEWHERE}
    if command not in commands:
        from icl_core.common.validation import unknown

        print(f"error: {unknown('icl', 'command', command, commands)}", file=sys.stderr)
        return 2
    if rest[:1] in (["-h"], ["--help"]) and command in SWEEP_FIRST:
        print(command_help(command), flush=True)
        return 0
    try:
        if command in ELSEWHERE:  # a command whose parser lives in its own module
            module, function = ELSEWHERE[command].split(":")
            return getattr(importlib.import_module(module), function)(rest)
        return commands[command](rest)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


# commands whose parser is the sweep's (or comes after the sweep): their --help alone is here
SWEEP_FIRST = ("run", "plan", "list", "config", "levels", "claims", "adaptive")


def command_help(command: str) -> str:
    """`icl <command> --help` before a sweep is named (SWEEP_FIRST): its lines of the usage
    above; a command on a sweep (or adaptive) file takes that file's options."""
    lines, keep = [], False
    for line in USAGE.splitlines():
        if line.startswith("    icl "):
            keep = line.split()[1] == command
        if keep:
            lines.append(line)
    if command in ("run", "plan", "adaptive"):
        lines.append(f"\nthe sweep file's options: icl {command} <sweep> --help "
                     "(= python sweeps/<sweep>.py --help)")
    return "usage:\n" + "\n".join(lines)


def _sweep(rest: list[str], command: str):
    from icl.catalog import load_sweep, sweep_names
    from icl_core.common.validation import unknown

    if not rest or rest[0].startswith("-"):
        raise ConfigError(f"icl {command}: name a sweep; valid choices: "
                          f"{', '.join(sweep_names())}")
    names = sweep_names()
    if rest[0] not in names:
        raise unknown(f"icl {command}", "sweep", rest[0], names)
    return load_sweep(rest[0])


def run(rest: list[str]) -> int:
    sweep = _sweep(rest, "run")
    return sweep.main(rest[1:])


def plan(rest: list[str]) -> int:
    if "--gpu-minutes" in rest and rest[0].startswith("-"):
        from icl.commands.gpu_window import main as window  # a window on one GPU, every file

        return window(rest)
    sweep = _sweep(rest, "plan")
    extra = [] if "--dry-run" in rest else ["--dry-run"]
    return sweep.main(rest[1:] + extra)


def adaptive(rest: list[str]) -> int:
    from icl.adaptive import main as adaptive_main
    from icl.catalog import adaptive_names, load_adaptive
    from icl_core.common.validation import unknown

    names = adaptive_names()
    if not rest or rest[0].startswith("-"):
        raise ConfigError(f"icl adaptive: name a sweep file of adaptive studies; valid choices: "
                          f"{', '.join(names)}")
    if rest[0] not in names:
        raise unknown("icl adaptive", "sweep", rest[0], names)
    return adaptive_main(rest[0], load_adaptive(rest[0]), rest[1:])


def compact(rest: list[str]) -> int:
    """Merge each study's finished member row files into one compacted file; one line per
    study saying what was merged."""
    from icl.api import default_storage
    from icl_core.common.validation import unknown
    from icl_core.storage.compaction import compact as compact_study
    from icl_core.storage.compaction import studies
    from icl_core.storage.store import Store

    parser = argparse.ArgumentParser(prog="icl compact", description=compact.__doc__)
    parser.add_argument("sweep", help="a sweep in the store")
    parser.add_argument("--study", help="one study (default: every study of the sweep)")
    parser.add_argument("--storage", help="row store path or URI (default: $ICL_STORAGE, "
                        "else ./results)")
    args = parser.parse_args(rest)
    store = Store(args.storage or default_storage())
    stored = sorted(studies(store, ""))
    if args.sweep not in stored:
        raise unknown(f"icl compact (sweeps under {store.redacted})", "sweep", args.sweep, stored)
    names = studies(store, args.sweep)
    if args.study and args.study not in names:
        raise unknown(f"icl compact ({args.sweep} under {store.redacted})", "study", args.study,
                      names)
    for name in [args.study] if args.study else names:
        print(compact_study(store, args.sweep, name).line(), flush=True)
    return 0


def list_things(rest: list[str]) -> int:
    from icl.catalog import load_sweep, sweep_names
    from icl_core.common.validation import unknown
    from icl_core.models import MODELS
    from icl_core.spec.search import Search
    from icl_core.tasks import TASKS

    as_json = "--json" in rest
    rest = [r for r in rest if r != "--json"]
    what = rest[0] if rest else "studies"
    kinds = ("studies", "sweeps", "models", "tasks")
    if what not in kinds or len(rest) > 1:
        raise unknown("icl list", "", what, kinds)
    found: list[dict] = []
    if what in ("models", "tasks"):
        registry = MODELS if what == "models" else TASKS
        for name in registry.names():
            cls, builder = registry.config_cls(name, what), registry.builder(name)
            found.append({"name": name,
                          "summary": _summary(cls, builder, sys.modules[builder.__module__])})
    else:
        for name in sweep_names():
            sweep = load_sweep(name)
            if what == "sweeps":
                found.append({"sweep": name, "studies": [s.name for s in sweep.studies]})
                continue
            found += [{"sweep": name, "study": study.name,
                       "kind": "search" if isinstance(study, Search) else "grid",
                       "doc": study.doc} for study in sweep.studies]
    if as_json:
        print(json.dumps(found, indent=1))
        return 0
    for item in found:
        if "name" in item:
            print(f"{item['name']}: {item['summary']}")
        elif "studies" in item:
            print(f"{item['sweep']}: {', '.join(item['studies'])}")
        else:
            print(f"{item['sweep']}/{item['study']} ({item['kind']}): {item['doc']}")
    return 0


def _summary(*objs) -> str:
    """The first paragraph (up to ~110 characters) of the first own docstring among `objs` (classes, then their
    module): not an inherited one, nor a dataclass's generated signature."""
    for obj in objs:
        doc = inspect.cleandoc(obj.__dict__.get("__doc__") or "") if isinstance(obj, type) \
            else inspect.cleandoc(getattr(obj, "__doc__", None) or "")
        if doc and not doc.startswith(f"{getattr(obj, '__name__', '')}("):
            text = " ".join(doc.split("\n\n")[0].split())
            return text if len(text) <= 110 else text[:110].rsplit(" ", 1)[0] + " ..."
    return ""


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """A dataclass's field docs, by field name: the comment after the field
    (`name: type = default  # doc`), else the comment lines just above it."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            lines = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        above: list[str] = []
        for line in lines:
            comment, field = ABOVE.match(line), FIELD.match(line)
            if comment:
                above.append(comment.group(1).strip())
            elif field and "(" not in line.split(":")[0]:
                doc = (field.group(2) or " ".join(above)).strip()
                if doc:
                    docs[field.group(1)] = doc
                above = []
            else:
                above = []
    return docs


def _type_name(annotation) -> str:
    text = str(annotation) if typing.get_origin(annotation) else getattr(
        annotation, "__name__", str(annotation))
    return text.replace("typing.", "")


def config_fields(member) -> list[tuple[str, object, str, object, str]]:
    """(dotted name, value, type, default, doc) of every field of a resolved member config."""
    from icl_core.spec.config import MemberConfig, type_hints

    out = []
    sections = {"task": member.task, "model": member.model, "train": member.train,
                "eval": member.eval}
    for name, section in sections.items():
        hints = type_hints(type(section))
        docs = field_docs(type(section))
        defaults = type(section)()
        for f in dataclasses.fields(section):
            out.append((f"{name}.{f.name}", getattr(section, f.name), _type_name(hints[f.name]),
                        getattr(defaults, f.name), docs.get(f.name, "")))
    hints, docs = type_hints(MemberConfig), field_docs(MemberConfig)
    for f in dataclasses.fields(MemberConfig):
        if f.name not in sections:
            out.append((f.name, getattr(member, f.name), _type_name(hints[f.name]), f.default,
                        docs.get(f.name, "")))
    return out


def config(rest: list[str]) -> int:
    """The resolved member config of a study under a preset: each field's value (the grid's
    values for an axis), type, default and doc; a field off its default is marked *."""
    from icl_core.running.plans import parse_sets, parse_sweeps
    from icl_core.spec.search import Search
    from icl_core.spec.study import PRESETS, apply_preset

    sweep = _sweep(rest, "config")
    parser = argparse.ArgumentParser(prog=f"icl config {sweep.name}")
    parser.add_argument("--study", required=len(sweep.studies) > 1,
                        help=f"one of {', '.join(s.name for s in sweep.studies)}")
    parser.add_argument("--preset", default="cpu", help=f"one of {', '.join(PRESETS)}")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2,...")
    args = parser.parse_args(rest[1:])
    study = sweep.study(args.study) if args.study else sweep.studies[0]
    sets, sweeps = parse_sets(args.set), parse_sweeps(args.sweep)
    search = isinstance(study, Search)
    if search and sweeps:
        raise ConfigError("--sweep: a search's space is searched, not swept; use --set")
    if search:
        study = study.for_preset(args.preset)  # the preset's space
    members = (study.points(args.preset, sets) if search
               else study.members(args.preset, sets, sweeps=sweeps))
    _base, grid = apply_preset(study.base, study.grid, study.presets, args.preset, sets, sweeps)
    axes = {}  # dotted key -> the grid's values (a zipped axis gives each key its column)
    for key, values in grid.items():
        for i, name in enumerate(key if isinstance(key, tuple) else (key,)):
            axes[name] = [v[i] for v in values] if isinstance(key, tuple) else list(values)
    print(f"{sweep.name}/{study.name} [{args.preset}]: {len(members)} member configs"
          + ("; searched: " + "; ".join(f"{k} {v}" for k, v in study.space.items())
             if search else ""))
    for key, values in grid.items():
        print(f"  grid {key}: {values}")
    rows = config_fields(members[0])
    width = max(len(r[0]) for r in rows)
    for name, value, type_name, default, doc in rows:
        shown = f"grid {list(dict.fromkeys(axes[name]))}" if name in axes else repr(value)
        mark = "*" if name not in axes and value != default else " "
        print(f"{mark} {name:<{width}}  {shown}  [{type_name}, default {default!r}]"
              + (f"  {doc}" if doc else ""))
    return 0


def claims(rest: list[str]) -> int:
    """List the claims on a sweep's configs; `--release` removes them after a y/N (`--yes`
    skips it; without a terminal to ask on and no --yes: exit 2, nothing removed)."""
    import time

    from icl.api import default_storage
    from icl.preflight import open_store
    from icl_core.common.validation import unknown
    from icl_core.storage import claims as leases

    sweep = _sweep(rest, "claims")
    names = [s.name for s in sweep.studies]
    parser = argparse.ArgumentParser(prog=f"icl claims {sweep.name}")
    parser.add_argument("--study", action="append", default=[],
                        help=f"one of {', '.join(names)} (default: all)")
    parser.add_argument("--storage", help="default $ICL_STORAGE, else ./results")
    parser.add_argument("--release", action="store_true", help="remove the listed claims")
    parser.add_argument("--yes", action="store_true", help="--release without asking")
    parser.add_argument("--json", action="store_true",
                        help="the claims as one JSON document (not with --release)")
    args = parser.parse_args(rest[1:])
    if args.json and args.release:
        raise ConfigError("icl claims: --json lists only; run --release without it")
    for name in args.study:
        if name not in names:
            raise unknown(f"icl claims {sweep.name} --study", "study", name, names)
    store = open_store(args.storage or default_storage())
    if "://" in store.uri and not args.json:
        print(f"icl claims lists local and shared-filesystem stores only; on {store.redacted} "
              f"a claim is an object, <sweep>/<study>/claims/<config hash>.claim (a search's: "
              f"<sweep>/<search>/claims/optuna.journal.claim): it expires 10 min after its "
              f"driver stops refreshing it, or delete it to free it now")
        return 0
    found = [] if "://" in store.uri else leases.listed(store, sweep.name, args.study or names)
    now = time.time()
    if args.json:
        print(json.dumps([{"study": c.study, "config_hash": c.config_hash, "host": c.claim["host"],
                           "pid": c.claim["pid"], "age_s": round(c.age_s, 1),
                           "expires_in_s": round(c.claim["expires"] - now, 1), "live": c.live}
                          for c in found], indent=1))
        return 0
    n_live = sum(1 for c in found if c.live)
    print(f"{sweep.name}: {len(found)} claim{'s' if len(found) != 1 else ''} in {store.redacted} "
          f"({n_live} live, {len(found) - n_live} expired or of a gone driver)")
    for c in found:
        print(c.line(now))
    if not args.release or not found:
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            print(f"error: icl claims --release: stdin is not a terminal to confirm on; add "
                  f"--yes to remove these {len(found)} claims", file=sys.stderr)
            return 2
        answer = input(f"remove these {len(found)} claims ({n_live} live: a running driver "
                       "loses them, and another run may train its configs again)? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return 0
    print(f"removed {leases.remove(found)} claims")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
