"""Every verdict row as a declared claim (one module per paper), one engine that decides them
from the committed evidence, and the generated verdict table.

    from analysis.claims import CLAIMS, claims_hash
    icl verdicts            # the table from evidence/ (icl.commands.verdicts)
"""

from __future__ import annotations

import hashlib

from analysis.claims import ahn, algoformer, liu, mousavi, wu
from analysis.claims.declare import KINDS, MIN_SEEDS, Cell, Claim, Source

PAPERS = (ahn, liu, wu, mousavi, algoformer)  # the table's order
CLAIMS: tuple[Claim, ...] = tuple(c for m in PAPERS for c in m.CLAIMS)


def claims_hash(claims=CLAIMS) -> str:
    """The hash of the whole claim set, recorded with the verdicts it was judged with."""
    return hashlib.sha256("".join(c.hash() for c in claims).encode()).hexdigest()[:16]


def by_id(claim_id: str) -> Claim:
    for c in CLAIMS:
        if c.id == claim_id:
            return c
    raise KeyError(f"unknown claim {claim_id!r}; valid choices: {', '.join(c.id for c in CLAIMS)}")


_ids = [c.id for c in CLAIMS]
if len(set(_ids)) != len(_ids):
    raise ValueError(f"claim ids repeat: {sorted({i for i in _ids if _ids.count(i) > 1})}")

__all__ = ["CLAIMS", "KINDS", "MIN_SEEDS", "Cell", "Claim", "Source", "by_id", "claims_hash"]
