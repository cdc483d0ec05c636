"""The one command line every sweep file shares (`python sweeps/<axis>.py --help`)."""

from __future__ import annotations

import argparse
import os
import sys

from icl_core.config import ConfigError
from icl_core.sweep import PRESETS, Sweep

DEFAULT_STORAGE = "results"
JOB_STORAGE = "~/icl_results"  # under `ray job submit` the cwd is a temporary copy


def default_storage() -> str:
    from icl_core.launch import in_ray_job

    env = os.environ.get("ICL_STORAGE")
    if env:
        return env
    return JOB_STORAGE if in_ray_job() else DEFAULT_STORAGE


def build_parser(sweep: Sweep) -> argparse.ArgumentParser:
    studies = "\n".join(f"  {s.name}: {s.doc}" for s in sweep.studies)
    parser = argparse.ArgumentParser(
        prog=f"sweeps/{sweep.name}.py",
        description=f"Sweep {sweep.name!r}. Studies:\n{studies}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--preset", default="cpu", help=f"one of {', '.join(PRESETS)} (default: cpu)")
    parser.add_argument("--study", help="run one study (default: all studies of this file)")
    parser.add_argument(
        "--storage",
        help="where rows go: a path or URI (s3://, gs://); default $ICL_STORAGE, else ./results "
        f"({JOB_STORAGE} under ray job submit)",
    )
    parser.add_argument("--address", help="Ray cluster address (default: embedded local Ray)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    parser.add_argument("--max-concurrent", type=int, default=None, help="max trials at once")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override a config field, e.g. --set model.width=128 (repeatable)",
    )
    parser.add_argument("--figures", default="figures", help="figure output folder (default: figures)")
    parser.add_argument("--no-figures", action="store_true", help="skip figure regeneration")
    return parser


def parse_sets(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set {pair!r}: expected KEY=VALUE")
        key, value = pair.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def main(sweep: Sweep, argv: list[str] | None = None) -> int:
    from icl_core.store import Store

    args = build_parser(sweep).parse_args(argv)
    try:
        sets = parse_sets(args.set)
        studies = [sweep.study(args.study)] if args.study else list(sweep.studies)
        plans = [(study, study.members(args.preset, sets)) for study in studies]
        storage = args.storage or default_storage()
        store = Store(storage)
        if not args.dry_run:
            try:
                store.check_writable()
            except OSError as exc:
                raise ConfigError(f"--storage: cannot write to {store.uri!r} ({exc})") from None
        if args.max_concurrent is not None and args.max_concurrent < 1:
            raise ConfigError("--max-concurrent: must be >= 1")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if args.dry_run:
        total = 0
        for study, members in plans:
            cpus = study.cpus_per_trial
            print(f"{sweep.name}/{study.name} [{args.preset}]: {len(members)} trials x 1 member, "
                  f"{cpus} CPU per trial -- {study.doc}")
            total += len(members)
        print(f"total: {total} trials")
        return 0

    from icl_core.launch import init_ray
    from icl_core.provenance import driver_provenance

    started = init_ray(args.address)
    print(f"storage: {store.uri}", flush=True)
    provenance = driver_provenance()
    exit_code = 0
    try:
        for study, members in plans:
            exit_code |= run_study(sweep, study, members, store, provenance, args)
    finally:
        if started:
            import ray

            ray.shutdown()
    return exit_code


def run_study(sweep, study, members, store, provenance, args) -> int:
    from icl_core.launch import run_tune
    from icl_core.trial import TrialSpec

    label = f"{sweep.name}/{study.name}"
    done = store.finished(sweep.name, study.name)
    todo = [m for m in members if m.hash not in done]
    print(f"[{label}] {len(members)} configs, {len(members) - len(todo)} already finished, "
          f"running {len(todo)}", flush=True)
    if todo:
        specs = [
            TrialSpec(sweep.name, study.name, store.uri, [m.to_dict()],
                      threads=study.cpus_per_trial, provenance=provenance)
            for m in todo
        ]
        tune_dir = f"{store.uri}/{sweep.name}/{study.name}/tune"
        run_tune(specs, label, tune_dir, {"cpu": study.cpus_per_trial}, args.max_concurrent)
    statuses = store.member_status(sweep.name, study.name, [m.hash for m in members])
    counts = {s: sum(1 for v in statuses.values() if v[0] == s) for s in ("ok", "diverged", "failed", "missing")}
    print(f"[{label}] finished: " + ", ".join(f"{n} {s}" for s, n in counts.items()), flush=True)
    for h, (status, reason) in statuses.items():
        if status in ("failed", "diverged", "missing"):
            print(f"[{label}]   {status} {h}: {reason}", flush=True)
    if study.figure and not args.no_figures and counts["ok"]:
        from analysis.regenerate import regenerate

        regenerate(sweep.name, study.name, storage=store.uri, out=args.figures)
    return 1 if counts["failed"] or counts["missing"] else 0
