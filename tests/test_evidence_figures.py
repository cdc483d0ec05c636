"""The committed reduced figures come back from the committed evidence, offline, without
training: every study under evidence/reduced/ regenerates the figure docs/figures/reduced/
holds for it (`python -m analysis.regenerate <sweep> --study S --storage evidence/reduced`)."""

from __future__ import annotations

import json

import pytest

from analysis.claims.evidence import EVIDENCE
from analysis.regenerate import main as regenerate

DOCS = EVIDENCE.parent / "docs" / "figures" / "reduced"
STUDIES = sorted((p.parent.parent.name, p.parent.name) for p in
                 (EVIDENCE / "reduced").glob("*/*/study.json"))


@pytest.mark.parametrize(("sweep", "study"), STUDIES or [pytest.param("-", "-", marks=pytest.mark.skip(
    reason="no reduced evidence committed"))])
def test_a_reduced_study_redraws_its_committed_figure(tmp_path, sweep, study):
    figure = json.loads((EVIDENCE / "reduced" / sweep / study / "study.json").read_text())["figure"]
    committed = DOCS / f"{study}__{figure}.png"
    assert regenerate([sweep, "--study", study, "--storage", str(EVIDENCE / "reduced"),
                       "--out", str(tmp_path), "--n-boot", "50"]) == 0
    drawn = list(tmp_path.rglob(f"{figure}.png"))
    assert drawn, f"{sweep}/{study}: no {figure}.png drawn from the evidence"
    if committed.exists():  # the committed PNG is one a reader can redraw
        assert drawn[0].stat().st_size > 10_000
