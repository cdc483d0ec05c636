"""`icl evidence`: commit studies' rows as evidence (compacted, with provenance), from the store a
run wrote, into evidence/<preset>/ (analysis.claims.evidence).

    icl evidence --from results --preset reduced algoformer/loops [SWEEP/STUDY ...]
    icl evidence --merge --from /tmp/window_store --preset reduced algoformer/loops
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from analysis.claims.evidence import BUDGET_MB, EVIDENCE, compact, size_mb
from analysis.reading.store import MissingResults


def main(argv: list[str] | None = None, prog: str = "icl evidence") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("studies", nargs="+", metavar="SWEEP/STUDY")
    parser.add_argument("--from", dest="storage", required=True, help="the store the run wrote")
    parser.add_argument("--preset", required=True, help="the preset the store was run at")
    parser.add_argument("--evidence", type=Path, default=None, help=f"default: {EVIDENCE}")
    parser.add_argument("--scale", help="the scale the rows are at, shown in every figure's title")
    parser.add_argument("--merge", action="store_true",
                        help="keep the members already in evidence that the store lacks (a "
                        "GPU window that ran new seeds only); default: the store's rows replace "
                        "the study's evidence")
    args = parser.parse_args(argv)
    for item in args.studies:
        sweep, _, study = item.partition("/")
        if not study:
            parser.error(f"{item!r}: name a study as SWEEP/STUDY")
        try:
            out = compact(args.storage, args.preset, sweep, study, args.evidence, args.scale,
                          merge=args.merge)
        except MissingResults as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        prov = json.loads((out / "provenance.json").read_text())
        print(f"{item}: {prov['members']} members, {prov['rows']} rows, seeds {prov['seeds']} "
              f"-> {out}")
    total = size_mb(args.evidence)
    print(f"evidence: {total:.2f} MB in all (budget {BUDGET_MB:g} MB)")
    return 1 if total > BUDGET_MB else 0
