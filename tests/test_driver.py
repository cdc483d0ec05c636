"""The one training driver (icl_core.training.train.train_until) and the one run path of a trial: a
stack writes the artifacts a lone member writes (the final step's too); the trial's result
carries each member's last training loss, the value its rows hold."""

from __future__ import annotations

import copy

import numpy as np
import polars as pl
from conftest import tiny_member

from icl import catalog
from icl_core.running.trial import TrialSpec, run_trial_results
from icl_core.spec.config import resolve_member
from icl_core.storage.artifacts import load_artifact


def lsa_pair() -> list[dict]:
    """Two seeds of a stackable member whose model records artifacts (LSA, Adam)."""
    member = catalog.load_sweep("preconditioned_gd").study("fig1_sparse").members("smoke")[0]
    raw = member.to_dict()
    raw.update(dtype="float64", device="cpu")
    raw["train"].update(optimizer="adam", lr=1e-3)
    out = []
    for seed in (0, 1):
        one = copy.deepcopy(raw)
        one["seed"] = seed
        out.append(resolve_member(one).to_dict())
    return out


def test_a_stack_records_the_artifacts_a_lone_member_records(tmp_path):
    members = lsa_pair()
    assert resolve_member(members[0]).train.steps % resolve_member(members[0]).train.artifact_every == 0
    for stack in ("always", "never"):
        results = run_trial_results(TrialSpec("s", "t", str(tmp_path / stack), members, stack=stack))
        assert {r.status for r in results.values()} == {"ok"}
    for member in members:
        h = resolve_member(member).hash
        steps_s, values_s = load_artifact(str(tmp_path / "always"), "s", "t", h, "A")
        steps_a, values_a = load_artifact(str(tmp_path / "never"), "s", "t", h, "A")
        assert list(steps_s) == list(steps_a) and steps_s[-1] == resolve_member(member).train.steps
        np.testing.assert_allclose(values_s, values_a, rtol=1e-10, atol=1e-300)


def test_trial_result_carries_the_last_training_loss_of_its_rows(tmp_path):
    member = resolve_member(tiny_member())
    spec = TrialSpec("s", "t", str(tmp_path), [member.to_dict()])
    result = run_trial_results(spec)[member.hash]
    rows = pl.read_parquet(tmp_path / "s" / "t" / "rows" / f"{member.hash}.parquet")
    last = rows.filter(pl.col("metric") == "train_loss").sort("step")["value"][-1]
    assert result.status == "ok" and result.final_loss == last
    again = run_trial_results(spec)[member.hash]  # finished earlier: its rows hold the loss
    assert again.status == "ok" and again.final_loss is None
