"""`icl verdicts`: every declared claim decided by the one engine on the committed evidence,
offline, without training (analysis.verdicts).

    icl verdicts              # print the table
    icl verdicts --write      # write docs/VERDICTS.md, the table in docs/REPRODUCTION.md and
                              # the ledger (evidence/verdicts.json)
    icl verdicts --check      # exit 1 if the committed docs differ from the engine's output
    icl verdicts --json       # one JSON object per claim
    icl verdicts --pending    # the commands that produce the evidence still missing
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from analysis.claims.evidence import EVIDENCE
from analysis.verdicts import (
    decide_all,
    glance,
    pending_commands,
    read_ledger,
    record,
    stale_docs,
    write_docs,
)


def main(argv: list[str] | None = None, prog: str = "icl verdicts") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true",
                      help="write docs/VERDICTS.md, REPRODUCTION's table and the ledger")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 if the committed tables differ from the engine's output")
    mode.add_argument("--json", action="store_true", help="one JSON object per claim")
    mode.add_argument("--pending", action="store_true",
                      help="the commands that produce the evidence still missing")
    parser.add_argument("--evidence", type=Path, default=None,
                        help=f"the evidence folder (default: {EVIDENCE})")
    args = parser.parse_args(argv)
    if args.evidence is not None and not args.evidence.is_dir():
        print(f"error: --evidence: no folder at {args.evidence} (a folder of evidence/<preset>/ "
              f"studies, as {EVIDENCE} is)", file=sys.stderr)
        return 2
    decisions = decide_all(args.evidence)
    ledger = read_ledger(args.evidence)
    if args.json:
        for d in decisions:
            print(json.dumps(record(d)))
    elif args.pending:
        print("\n".join(pending_commands(decisions)))
    elif args.check:
        stale = stale_docs(decisions, ledger, args.evidence)
        if stale:
            print("error: out of date with the engine's output on the committed evidence: "
                  f"{', '.join(stale)}; run `icl verdicts --write`", file=sys.stderr)
            return 1
        print(f"verdict tables match the engine ({len(decisions)} claims)")
    elif args.write:
        print(write_docs(decisions, ledger, args.evidence))
    else:
        print(glance(decisions, ledger, args.evidence))
    return 0
