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


def test_a_weight_space_figure_is_not_drawn_from_rows_only_and_the_rest_go_on(tmp_path, capsys,
                                                                               caplog):
    """evidence/ keeps rows, not the members' recorded arrays: the LSA figure (A, B over
    training) asked of it is refused in one line naming the array (exit 2, no traceback);
    regenerating the whole sweep skips that figure with a warning and draws the others."""
    cpu = str(EVIDENCE / "cpu")
    argv = ["--storage", cpu, "--out", str(tmp_path), "--n-boot", "20"]
    assert regenerate(["preconditioned_gd", "--study", "fig1_sparse", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no 'A' artifact of member ") and err.count("\n") == 1
    assert "preconditioned_gd/fig1_sparse/artifacts/" in err and "Traceback" not in err
    assert regenerate(["preconditioned_gd", *argv]) == 0
    skipped = [r.message for r in caplog.records if "figure skipped" in r.message]
    assert skipped and all("lsa_convergence figure skipped: no 'A' artifact" in m
                           for m in skipped), skipped
    drawn = {p.parent.name for p in (tmp_path / "preconditioned_gd").rglob("*.png")}
    assert drawn and "fig1_sparse" not in drawn, drawn


def test_a_study_its_file_does_not_declare_is_refused_and_tunes_folder_is_no_study(
        tmp_path, capsys, caplog):
    """`--study` misspelled: exit 2 with the file's studies and the near one (it printed how to
    produce rows for it, a command that fails); a sweep folder's tune/ (Ray Tune's state of a
    run of the file alone) is not a study without a manifest."""
    import shutil

    argv = ["--storage", str(EVIDENCE / "cpu"), "--out", str(tmp_path / "f"), "--n-boot", "20"]
    assert regenerate(["depth_scaling", "--study", "constructoin", *argv]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'construction'?" in err and err.count("\n") == 1
    store = tmp_path / "store" / "depth_scaling"
    shutil.copytree(EVIDENCE / "cpu" / "depth_scaling" / "construction", store / "construction")
    (store / "tune" / "search-x").mkdir(parents=True)
    assert regenerate(["depth_scaling", "--storage", str(tmp_path / "store"), "--out",
                       str(tmp_path / "f"), "--n-boot", "20"]) == 0
    assert not [r.message for r in caplog.records if "tune" in r.message], caplog.text


def test_a_read_of_the_evidence_counts_its_members_not_its_files():
    """evidence/ holds a study's members in one rows.parquet, not named by a hash: a read
    counts the members in it and names as missing only the planned members it lacks (it
    counted one trial read and every planned member missing)."""
    from analysis.reading.store import read_rows

    for found in sorted(EVIDENCE.glob("*/*/*/study.json")):
        preset, sweep, study = found.parts[-4:-1]
        expected = json.loads(found.read_text())["expected"][preset]
        rows, coverage = read_rows(str(EVIDENCE / preset), sweep, study, expected)
        held = set(rows["config_hash"].unique())
        assert coverage.read == {"rows": len(held), "failed": 0}, (sweep, study)
        assert coverage.missing == sorted(set(expected) - held), (sweep, study)
