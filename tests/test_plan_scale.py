"""benchmarks/plan_scale.py: planning timed side by side with another checkout."""

from __future__ import annotations

import re

import plan_scale  # benchmarks/ is on the path (conftest)
import pytest
from conftest import ROOT


def test_a_baseline_that_is_not_a_checkout_is_refused_by_name(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        plan_scale.main(["--baseline", str(tmp_path)])
    assert exit_.value.code == 2
    assert f"--baseline {tmp_path}: not a checkout of this project (no icl_core/)" in \
        capsys.readouterr().err


@pytest.mark.slow  # two fresh processes (~10 s): `pytest -m slow`
def test_both_sides_plan_the_same_members_and_the_ratio_is_printed(capsys):
    assert plan_scale.main(["--baseline", str(ROOT), "--repeats", "1", "--", "--preset",
                            "smoke", "--study", "least_squares", "--dry-run"]) == 0
    out = capsys.readouterr().out
    totals = re.findall(r"^\[1/1\] .*?: [\d.]+ s \((total: .*)\)$", out, re.M)
    assert len(totals) == 2 and totals[0] == totals[1] and "1 studies" in totals[0], out
    assert re.search(r"baseline / this tree: [\d.]+x", out), out
