"""`icl cost`: the GPU rate model (icl_core.planning.gpu_rates), its fit, and the plan against
what ran on a GPU.

    icl cost                               the committed constants per path and how well they
                                           fit their measured steps (in sample, leave-one-out)
    icl cost --add stack.json [...]        add steps measured on a GPU by benchmarks/
                                           stack_scaling.py or paper_step.py --json, and
                                           refit (shown; --write keeps it)
    icl cost --check evidence/reduced      every finished CUDA stack under these folders
                                           (stores or evidence): its planned step and stack
                                           seconds against the measured ones; in a store,
                                           each study's seconds too
    icl cost --write                       write the refit into icl_core/planning/gpu_rates.json

The check plans as an unmeasured GPU would (the rate model alone, no learned rows). Its rows
ran however the run had them share the GPU (several processes queue each other's kernels),
so it measures the plan a window is given, not the model's fit alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from icl_core.planning import gpu_rates
from icl_core.spec.config import ConfigError


def main(argv: list[str] | None = None, prog: str = "icl cost") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--add", nargs="+", type=Path, default=[], metavar="JSON",
                        help="benchmarks/stack_scaling.py or paper_step.py --json, measured on a GPU")
    parser.add_argument("--check", nargs="+", type=Path, default=[], metavar="DIR",
                        help="stores or evidence folders whose CUDA stacks to plan against")
    parser.add_argument("--write", action="store_true",
                        help="write the refit constants and steps into the rate file")
    parser.add_argument("--rates", type=Path, default=None,
                        help=f"the rate file (default: the committed {gpu_rates.RATES_FILE})")
    args = parser.parse_args(argv)
    path = args.rates or gpu_rates.RATES_FILE
    if not path.exists():
        raise ConfigError(f"--rates: no such file {path}")
    loaded = gpu_rates.load(path)
    added = [p for f in args.add for p in _points(f)]
    if added:
        print(f"added {len(added)} measured steps from {len(args.add)} file(s)")
    rate_file = dataclasses.replace(loaded, points=loaded.points + added)  # a copy: the
    rates = rate_file.refit()  # loaded one stays what the file holds
    changed = rates != rate_file.rates
    current = rate_file.current_points()
    print(f"GPU rate model [{rate_file.device_name}], {len(rate_file.points)} measured steps"
          f"{' (refit)' if changed else ''}:")
    for name, r in rates.items():
        points = [p for p in current if gpu_rates.path_of(p.member) == name]
        print(f"  {name}: {r.describe()}")
        print(f"    fit: {gpu_rates.summary(gpu_rates.relative_errors(r, points))}; "
              f"leave-one-out: {gpu_rates.summary(gpu_rates.leave_one_out(points))}")
    stale = len(rate_file.points) - len(current)
    if stale:
        print(f"  {stale} steps timed on an earlier revision of their path (gpu_rates.REVISIONS: "
              "its kernels changed since) are kept as a record, not fitted")
    unfitted = sorted({gpu_rates.path_of(p.member) for p in current} - set(rates))
    for name in unfitted:
        print(f"  {name}: its steps do not tell the terms apart (lone and stacked steps at two "
              f"depths and two stack sizes or more are needed); costed as {gpu_rates.BASE_PATH}")
    rate_file.rates = rates
    if args.write:
        gpu_rates.save(rate_file, path)
        print(f"wrote {path}")
    elif changed:
        print(f"(not written: --write keeps it in {path})")
    within = [check(folder, rate_file) for folder in args.check]
    return 0 if all(within) else 1


def _points(path: Path) -> list[gpu_rates.Measured]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--add: cannot read {path}: {exc}") from exc
    source = (f"{path.name}: {data.get('source', 'benchmarks/stack_scaling.py')} on "
              f"{data.get('device_name', '?')}, torch {data.get('torch', '?')}")
    points = gpu_rates.stack_scaling_points(data, source)
    if not points:
        raise ConfigError(f"--add: {path} holds no measured cell (status ok)")
    return points


def check(folder: Path, rate_file: gpu_rates.RateFile) -> bool:
    """Planned (by `rate_file`'s constants alone, no learned rows) against measured for every
    finished CUDA stack under `folder`: per study, the step and the stack's seconds (its
    longest member's wall), and where the rows keep finished_at (a store's; evidence drops it)
    the study's seconds from first start to last end against its stacks side by side on their
    GPU shares. Whether all are within 25% (the stacks', and the studies' where known); a
    folder without rows or without a finished CUDA stack is a ConfigError."""
    import polars as pl

    from analysis.reading.store import MissingResults, read_rows
    from icl_core.planning.cost import CostModel, device_label
    from icl_core.planning.resources import one_gpu_seconds
    from icl_core.storage.store import COMPACTED

    model = CostModel(device_label("cuda", 1, "unmeasured"), 1, rate_file=rate_file)
    # a study's folder holds rows/ (and a compacted store's compacted/); read as a store
    studies = sorted({d.parent for name in ("rows", COMPACTED) for d in folder.glob(f"**/{name}")
                      if d.is_dir() and any(d.glob("*.parquet"))})
    if not studies:
        raise ConfigError(f"--check: no rows under {folder} (a store or an evidence folder)")
    step_errors, wall_errors, span_errors = [], [], []
    print(f"\nplanned / measured on {folder} (the rate model alone, fitted on "
          f"{rate_file.device_name}):")
    for where in studies:
        study = str(where.relative_to(folder)) if where != folder else where.name
        try:
            rows, _ = read_rows(str(where.parent.parent), where.parent.name, where.name)
        except MissingResults as exc:
            print(f"  {study}: skipped, its rows are unreadable ({str(exc).splitlines()[0]})")
            continue
        # what finished (ok, diverged, pruned): a failed member's record (failed/, written
        # again at each re-run) would stretch the study's span past its stacks
        rows = rows.filter(pl.col("status") != "failed")
        stacks = gpu_rates.stacks_of_rows(rows, study)
        if not stacks:
            continue
        print(f"  {study}:")
        for measured, wall, _ in stacks:
            m, k = measured.member, measured.stack
            planned = model.step_seconds(m, k)[0]
            step_errors.append(planned / measured.step_s - 1)
            line = (f"    K={k} {_shape(m)}: step {1e3 * measured.step_s:.1f} ms, planned "
                    f"{1e3 * planned:.1f} ({100 * step_errors[-1]:+.0f}%)")
            if wall:
                planned_wall = model.unit_seconds([m] * k)
                wall_errors.append(planned_wall / wall - 1)
                line += (f"; stack {wall:.0f} s, planned {planned_wall:.0f} "
                         f"({100 * wall_errors[-1]:+.0f}%)")
            print(line)
        span = gpu_rates.study_span(rows)
        if span:  # a store's rows: the study's stacks side by side on their GPU shares
            planned_span = one_gpu_seconds([[m.member] * m.stack for m, _, _ in stacks], model)
            span_errors.append(planned_span / span - 1)
            print(f"    the study: {span:.0f} s from first start to last end, planned "
                  f"{planned_span:.0f} s with its stacks side by side on GPU shares "
                  f"({100 * span_errors[-1]:+.0f}%)")
    if not step_errors:
        raise ConfigError(f"--check: no finished CUDA stack under {folder} (its rows ran on "
                          "a CPU, or none finished)")
    print(f"  steps: {gpu_rates.summary(step_errors)}")
    if wall_errors:
        print(f"  stacks' seconds: {gpu_rates.summary(wall_errors)}")
    if span_errors:
        print(f"  studies' seconds: {gpu_rates.summary(span_errors)}")
    return all(abs(e) <= gpu_rates.TOLERANCE for e in (wall_errors or step_errors) + span_errors)


def _shape(member) -> str:
    mc = member.model
    size = "x".join(str(v) for v in (getattr(mc, "depth", None), getattr(mc, "width", None),
                                      getattr(mc, "heads", None)) if v is not None)
    return f"{mc.name} {size}, {member.train.steps} steps"

