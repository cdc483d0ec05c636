"""The exit status of a grid study (docs/store.md "Exit status"): 1 when a member failed or is missing
or when every member diverged; claimed-by-another-driver configs are not failures."""

from __future__ import annotations

from icl import catalog
from icl_core.running.study_report import report_statuses
from icl_core.storage.store import Store


def status_of(tmp_path, statuses) -> int:
    sweep = catalog.load_sweep("depth_scaling")
    outcome = report_statuses("sw/st", statuses, sweep, sweep.study("least_squares"),
                              Store(str(tmp_path)))  # draw None: no figure
    assert outcome.label == "sw/st" and sum(outcome.counts.values()) == len(statuses)
    assert outcome.figures == []
    return outcome.exit_status


def test_a_study_of_nothing_but_diverged_members_exits_1(tmp_path, capsys):
    diverged = ("diverged", "non-finite training loss at step 3")
    assert status_of(tmp_path, {"a": diverged, "b": diverged}) == 1
    assert "every member diverged" in capsys.readouterr().err
    assert status_of(tmp_path, {"a": diverged, "b": ("ok", None)}) == 0
    assert status_of(tmp_path, {"a": ("failed", "x"), "b": ("ok", None)}) == 1
    assert status_of(tmp_path, {"a": ("claimed", "by another driver (h:1)"),
                                "b": ("ok", None)}) == 0
    assert "1 claimed" in capsys.readouterr().out
