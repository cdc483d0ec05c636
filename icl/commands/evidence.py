"""`icl evidence`: commit studies' rows as evidence (compacted, with provenance), from the store a
run wrote, into evidence/<preset>/ (analysis.claims.evidence).

    icl evidence --from results --preset reduced algoformer/loops [SWEEP/STUDY ...]
    icl evidence --merge --from /tmp/window_store --preset reduced algoformer/loops

Only the study's members at --preset are committed (the store's others are left out and
counted; a store of none of them is refused, every study checked before any rows move);
--any-members takes them all. A study without rows in the store is a warning.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from analysis.claims.evidence import BUDGET_MB, EVIDENCE, check, compact, size_mb
from analysis.reading.store import MissingResults
from icl_core.common.validation import ConfigError


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
    parser.add_argument("--any-members", action="store_true",
                        help="commit the store's members whatever their configs (a --set run's "
                        "rows, taken as the preset's at your word); default: only the study's "
                        "members at --preset")
    args = parser.parse_args(argv)
    studies = []
    for item in args.studies:
        sweep, _, study = item.partition("/")
        if not study:
            parser.error(f"{item!r}: name a study as SWEEP/STUDY")
        members = None if args.any_members else members_at(sweep, study, args.preset)
        try:  # every study checked before any rows move
            check(args.storage, args.preset, sweep, study, members, args.evidence, args.merge)
        except MissingResults:
            pass  # said below, and skipped
        studies.append((item, sweep, study, members))
    committed = 0
    for item, sweep, study, members in studies:
        try:
            out = compact(args.storage, args.preset, sweep, study, args.evidence, args.scale,
                          merge=args.merge, members=members)
        except MissingResults:  # a window cut off before the study's first member finished
            print(f"warning: {item}: no rows in {args.storage}; its evidence is left as it was",
                  file=sys.stderr)
            continue
        committed += 1
        prov = json.loads((out / "provenance.json").read_text())
        left = prov.get("left_out", {})
        print(f"{item}: {prov['members']} members, {prov['rows']} rows, seeds {prov['seeds']} "
              f"-> {out}" + "".join(f"; left out: {n} {LEFT_OUT[why]}" for why, n in left.items()))
    if not committed:
        print(f"error: none of the {len(studies)} studies has rows in {args.storage}",
              file=sys.stderr)
        return 2
    total = size_mb(args.evidence)
    print(f"evidence: {total:.2f} MB in all (budget {BUDGET_MB:g} MB)")
    return 1 if total > BUDGET_MB else 0


LEFT_OUT = {"not_at_preset": "members of the store not at this preset (another preset's or a "
            "--set run's rows)",
            "failed_where_committed": "members that failed in the store and are committed "
            "finished (the committed rows kept)"}


def members_at(sweep: str, study: str, preset: str):
    """n -> the config hashes of the study's grid members at `preset` with seeds 0..n-1 (None
    past what a grid plans); the study and its preset checked now, before any rows move. None
    for a sweep that is not one of the catalog's files (a store's own sweep) or a search (its
    members are the sampler's): their rows are taken as they are."""
    from icl.catalog import load_sweep
    from icl_core.spec.study import MAX_SEEDS, Study

    try:
        studies = load_sweep(sweep).studies
    except KeyError:
        return None
    found = [s for s in studies if s.name == study]
    if not found:
        raise ConfigError(f"{sweep}/{study}: not a study of {sweep}; valid choices: "
                          f"{', '.join(s.name for s in studies)}")
    if preset not in found[0].presets:
        raise ConfigError(f"--preset: {sweep}/{study} has no {preset!r} preset (it has: "
                          f"{', '.join(found[0].presets)})")
    if not isinstance(found[0], Study):
        return None

    def hashes(n: int) -> set[str] | None:
        if n > MAX_SEEDS:  # more seeds than a grid plans: no plan to check the rows against
            return None
        try:
            return {m.hash for m in found[0].members(preset, None, num_samples=n)}
        except ConfigError as exc:  # said, not skipped: the rows would go in unchecked
            raise ConfigError(f"{sweep}/{study}: its {preset!r} members for seeds 0..{n - 1} "
                              f"cannot be planned to check the store's rows against ({exc}); "
                              "--any-members takes the rows as they are") from exc

    return hashes
