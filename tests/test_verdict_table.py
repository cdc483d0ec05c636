"""The verdict table is the engine's output on the committed evidence (a hand edit of
docs/VERDICTS.md or of REPRODUCTION's generated table fails here); the evidence fits its
budget; a claim re-declared after its evidence decided it shows its earlier verdict."""

from __future__ import annotations

import json

import polars as pl

from analysis.claims import CLAIMS
from analysis.claims.declare import Cell, Claim, Source
from analysis.claims.engine import Decision
from analysis.claims.evidence import (
    BUDGET_MB,
    EVIDENCE,
    committed,
    compact,
    load,
    provenance,
    size_mb,
)
from analysis.verdicts import _verdict, decide_all, read_ledger, updated_ledger
from icl.commands.verdicts import main
from icl_core.storage.store import ROW_SCHEMA


def test_committed_tables_equal_the_engines_output(capsys):
    assert main(["--check"]) == 0, capsys.readouterr().err


def test_every_committed_member_is_one_of_its_presets_members_today():
    """Pre-registration: the evidence was run at its preset's settings, and those settings are
    still the preset's. A preset changed after its evidence was committed (its steps, its
    task) leaves rows of members it no longer has, which the engine would go on reading; its
    evidence must be re-run (or the change reverted)."""
    from icl.commands.evidence import members_at

    checked = 0
    for path in sorted(EVIDENCE.glob("*/*/*/rows/rows.parquet")):
        preset, sweep, study = path.parts[-5:-2]
        rows = pl.read_parquet(path, columns=["config_hash", "seed"])
        members = members_at(sweep, study, preset)
        if members is None:  # a search's rows, or a sweep outside the catalog: nothing to match
            continue
        ours = members(int(rows["seed"].max()) + 1)  # a preset that no longer builds raises
        assert ours is not None, f"evidence/{preset}/{sweep}/{study}: no plan for its seeds"
        stray = set(rows["config_hash"].unique().to_list()) - set(ours)
        assert not stray, (f"evidence/{preset}/{sweep}/{study}: {len(stray)} committed members "
                           f"are not the preset's today (was the preset changed?)")
        checked += 1
    assert checked >= 30  # every committed grid study (33 on 2026-11-28)


def test_evidence_fits_its_budget_and_names_no_machine():
    assert size_mb() <= BUDGET_MB
    for prov in EVIDENCE.rglob("provenance.json"):
        text = prov.read_text()
        assert "/work/" not in text and "/home/" not in text and "/root/" not in text, prov


def test_every_claim_is_decided_or_says_why():
    main(["--json"])  # the engine runs on every claim without raising
    for c in CLAIMS:
        assert c.paper and c.figure and (c.source or c.parts or c.kind == "exact"), c.id


def test_the_claims_of_one_preset_are_decided_alone_to_their_ledger_verdicts():
    """decide_all(preset=...) (what `icl plan --gpu-minutes` reads): exactly the claims with
    rows at that preset, not the ones computed without rows, each to its ledger verdict."""
    ledger = read_ledger()["claims"]
    decisions = decide_all(preset="reduced")
    expected = {c.id for c in CLAIMS if any(s.preset == "reduced" for s in c.sources())}
    assert expected and {d.claim.id for d in decisions} == expected
    assert any(c.kind == "exact" for c in CLAIMS if c.id not in expected)
    for d in decisions:
        assert d.outcome == ledger[d.claim.id]["outcome"], d.claim.id


def test_a_claim_redeclared_after_evidence_shows_its_earlier_verdict():
    src = Source("s", "st", "cpu")
    old = Claim(id="x", paper="P", figure="F", quote="", source=src, kind="gap", factor=100,
                cells=(Cell("a"), Cell("b")))
    new = Claim(**{**old.__dict__, "factor": 10})
    ledger = updated_ledger([Decision(old, "not reproduced")], {"claims": {}})
    assert _verdict(Decision(old, "not reproduced"), ledger) == "**not reproduced**"
    shown = _verdict(Decision(new, "reproduced"), ledger)
    assert shown == "**reproduced** (re-declared; earlier: not reproduced)"
    again = updated_ledger([Decision(new, "reproduced")], ledger)  # written, still shown
    assert again["claims"]["x"]["earlier"] == [{"hash": old.hash(), "outcome": "not reproduced"}]
    assert _verdict(Decision(new, "reproduced"), again) == shown
    pending = updated_ledger([Decision(old, "evidence pending")], {"claims": {}})
    assert _verdict(Decision(new, "reproduced"), pending) == "**reproduced**"  # nothing judged


def test_compact_keeps_the_rows_claims_read_and_drops_machine_columns(tmp_path):
    store = tmp_path / "store"
    rows_dir = store / "sw" / "st" / "rows"
    rows_dir.mkdir(parents=True)
    fixed = pl.from_arrow(ROW_SCHEMA.empty_table())
    frame = pl.concat([fixed, pl.DataFrame({
        "sweep": ["sw"] * 2, "study": ["st"] * 2, "config_hash": ["c0", "c1"], "seed": [0, 1],
        "status": ["ok", "ok"], "step": [10, 10], "metric": ["mse"] * 2, "value": [0.1, 0.2],
        "statistic": ["median"] * 2, "predictor": ["model"] * 2, "hostname": ["laptop"] * 2,
        "config_json": ["{}"] * 2, "code_version": ["abc"] * 2, "device": ["cpu"] * 2,
        "wall_time_s": [1.5, 2.5]})], how="diagonal_relaxed")
    frame.write_parquet(rows_dir / "part.parquet")
    out = compact(str(store), "cpu", "sw", "st", root=tmp_path / "evidence")
    got = load("cpu", "sw", "st", root=tmp_path / "evidence")
    assert got is not None and got.height == 2 and "hostname" not in got.columns
    assert got["value"].to_list() == [0.1, 0.2]
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["commit"] == "abc" and prov["seeds"] == [0, 1] and prov["members"] == 2
    assert prov["member_wall_time_s"] == 4.0 and prov["device"] == "cpu"
    assert load("cpu", "sw", "other", root=tmp_path / "evidence") is None
    assert "members_by_device" not in prov  # one device: said once


def test_provenance_names_every_device_a_study_ran_on():
    """A study finished on another machine (a GPU window, then a CPU) says so, per member."""
    rows = pl.DataFrame({"config_hash": ["a", "b", "c", "c"], "predictor": ["model"] * 4,
                         "seed": [0, 1, 0, 0], "status": ["ok"] * 4,
                         "device_type": ["cuda", "cuda", "cpu", "cpu"],
                         "device_name": ["NVIDIA H100", "NVIDIA H100", "cpu", "cpu"]})
    prov = provenance(rows, "reduced", "abc")
    assert prov["device"] == "cpu+cuda" and prov["device_name"] == "NVIDIA H100+cpu"
    assert prov["members_by_device"] == {"NVIDIA H100": 2, "cpu": 1}


def test_pending_lists_the_command_of_every_study_without_evidence(capsys):
    main(["--pending"])
    lines = capsys.readouterr().out.splitlines()
    missing = {s for c in CLAIMS for s in c.sources() if not committed(s.preset, s.sweep, s.study)}
    partial = {s for d in decide_all() for p in (d.parts or (d,)) for s in p.claim.sources()
               if "not in the committed rows" in p.reason}  # a study run in part
    if not missing | partial:  # every claimed study has its evidence: one line says so
        assert lines == ["- none"]
    else:
        assert len(lines) == len(missing | partial)
        assert all(line.startswith("- `icl catalog --run") for line in lines)
    assert Source("sw", "st", "reduced").command() == (
        "icl catalog --run --preset reduced --only sw/st --storage results --resume && "
        "icl evidence --from results --preset reduced sw/st")  # the one `icl`'s commands
    assert committed("reduced", "algoformer", "vs_newton")  # evidence in this tree
    assert not any("--only algoformer/vs_newton " in line and "reduced" in line
                   for line in lines)
    # a mistyped --evidence: refused in one line (every claim read "evidence pending" before)
    assert main(["--evidence", "evidnce"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --evidence: no folder at evidnce") and err.count("\n") == 1
