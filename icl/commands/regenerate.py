"""`icl regenerate`: a sweep's figures and fit reports from its stored rows.

    icl regenerate depth_scaling [--study S] [--storage results] [--out figures]
    icl regenerate --all
    icl regenerate depth_scaling --from-sweeps    # studies read from sweeps/, not the store

What regeneration needs of each study (its figure and figure arguments, grid axes, the plan of
each preset) comes from the study's manifest beside the rows (analysis.regenerate). A store
written before manifests existed, or rows written without a sweep run: `--from-sweeps` reads the
studies from the sweep files instead (icl.catalog.study_manifests), and `--all` then visits every
file in sweeps/. Output per study: <out>/<sweep>/<study>/<figure>.png|.pdf, fits.parquet and
fits.md. Exit status 2 when there are no results (the message names the command producing them).
"""

from __future__ import annotations

import argparse
import os
import sys

from analysis.reading.store import MissingArtifact, MissingResults, locate
from analysis.regenerate import regenerate, stored_sweeps


def main(argv: list[str] | None = None, prog: str = "icl regenerate") -> int:
    from icl.catalog import study_manifests, sweep_names

    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", nargs="?", help="a sweep in the store (with --from-sweeps: "
                        "a file in sweeps/)")
    parser.add_argument("--all", action="store_true", help="every sweep with results (with "
                        "--from-sweeps: every file in sweeps/)")
    parser.add_argument("--study", help="one study (default: every study of the sweep)")
    parser.add_argument("--storage", default=os.environ.get("ICL_STORAGE", "results"),
                        help="row store path or URI (default: $ICL_STORAGE, else results)")
    parser.add_argument("--out", default="figures", help="figure folder (default: figures)")
    parser.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (1000)")
    parser.add_argument("--preset", help="count the trials this preset's plan expects")
    parser.add_argument("--scale", help="the scale the rows are at, shown in every figure's "
                        "title (e.g. 'reduced: d = 4, inputs N(0, I)')")
    parser.add_argument("--from-sweeps", action="store_true",
                        help="read the studies from the sweep files, not the store's manifests")
    args = parser.parse_args(argv)
    if bool(args.sweep) == args.all:
        parser.error("name one sweep or pass --all")
    lookup = study_manifests if args.from_sweeps else None
    names = [args.sweep] if not args.all else sweep_names() if args.from_sweeps else \
        stored_sweeps(args.storage)
    if not names:
        print(f"no results under {locate(args.storage).redacted}", file=sys.stderr)
        return 2
    if args.study and args.sweep in sweep_names():  # a study its file does not declare
        from icl.catalog import load_sweep
        from icl_core.common.validation import unknown

        studies = [s.name for s in load_sweep(args.sweep).studies]
        if args.study not in studies:
            print(f"error: {unknown('--study', '', args.study, studies)}", file=sys.stderr)
            return 2
    done, missing, undrawn = 0, [], 0
    for name in names:
        try:
            done += len(regenerate(name, args.study, args.storage, args.out, args.n_boot,
                                   args.preset, lookup, args.scale))
        except MissingResults as exc:
            missing.append((name, str(exc)))
        except MissingArtifact as exc:  # the study asked for, or every one of the sweep
            if args.study:  # (without --study each was said as it was skipped)
                print(f"error: {exc}", file=sys.stderr)
                return 2
            undrawn += 1
        except ValueError as exc:  # unknown sweep, study or figure (ConfigError included)
            print(f"error: {exc}", file=sys.stderr)
            return 2
    for name, message in missing:
        print(f"[{name}] skipped: no results" if done else message, file=sys.stderr)
    return 2 if (missing or undrawn) and not done else 0
