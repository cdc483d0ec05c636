"""The committed reduced figures come back from the committed evidence, offline, without
training: every study under evidence/reduced/ regenerates the figure docs/figures/reduced/
holds for it (`icl regenerate <sweep> --study S --storage evidence/reduced`)."""

from __future__ import annotations

import json

import pytest

from analysis.claims.evidence import EVIDENCE
from icl.commands.regenerate import main as regenerate

DOCS = EVIDENCE.parent / "docs" / "figures" / "reduced"
STUDIES = sorted((p.parent.parent.name, p.parent.name) for p in
                 (EVIDENCE / "reduced").glob("*/*/study.json"))


@pytest.mark.parametrize(("sweep", "study"), STUDIES or [pytest.param("-", "-", marks=pytest.mark.skip(
    reason="no reduced evidence committed"))])
def test_a_reduced_study_redraws_its_committed_figure(tmp_path, sweep, study):
    figure = json.loads((EVIDENCE / "reduced" / sweep / study / "study.json").read_text())["figure"]
    assert regenerate([sweep, "--study", study, "--storage", str(EVIDENCE / "reduced"),
                       "--out", str(tmp_path), "--n-boot", "50"]) == 0
    drawn = {p.name for p in tmp_path.rglob(f"{figure}*.png")}
    assert drawn, f"{sweep}/{study}: no {figure}*.png drawn from the evidence"
    committed = {p.name.removeprefix(f"{study}__") for p in DOCS.glob(f"{study}__{figure}*.png")}
    assert committed <= drawn, f"committed but not redrawn: {sorted(committed - drawn)}"
