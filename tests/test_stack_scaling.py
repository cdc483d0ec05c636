"""benchmarks/stack_scaling.py: one run on the CPU (K = 1, 2 at the cpu size, two timed
steps), as a separate process, its JSON checked against what the columns claim to be."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from icl_core.spec.config import resolve_member

pytestmark = pytest.mark.slow  # a benchmark script's own check (~25 s): `pytest -m slow`

ROOT = Path(__file__).resolve().parent.parent
REF = ROOT.parent / "shared" / "tools" / "ref_stack.py"  # absent from a clean clone (CI)
KS = (1, 2)


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("stack") / "stack.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "stack_scaling.py"), "--device", "cpu",
         "--ks", ",".join(map(str, KS)), "--sizes", "cpu", "--steps", "2", "--warmup", "1",
         "--draws", "generator,graph", "--peer", "--json", str(out)],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "member-steps/s" in done.stdout  # the table was printed
    return json.loads(out.read_text())


def test_one_row_per_cell_and_consistent_rates(result):
    rows = result["ours"]
    assert sorted((r["size"], r["k"], r["draws"]) for r in rows) == \
        [("cpu", k, d) for k in KS for d in ("generator", "graph")]
    tokens, batch = result["task"]["tokens"], result["task"]["batch"]
    for r in rows:
        assert r["status"] == "ok" and r["precision"] == "fp32", r
        assert r["ms_per_step"] > 0
        seconds = r["ms_per_step"] / 1e3
        assert r["member_steps_per_s"] == pytest.approx(r["k"] / seconds, rel=0.01)
        # the project's FLOP count: 6 x params x tokens x batch per member-step
        flops = 6 * r["params"] * tokens * batch * r["k"] / seconds
        assert r["tflops"] * 1e12 == pytest.approx(flops, rel=0.01)
        assert r["of_peak"] == pytest.approx(flops / result["peak_flops"]["fp32"], rel=0.01)
        assert 0 < r["launches"] < r["ops_per_step"]  # views launch nothing
        assert r["finite_losses"] == r["k"]  # every member trained
        member = resolve_member(r["member"])  # what `icl cost --add` fits the step to
        assert (member.model.depth, member.model.width, member.model.heads) == (4, 64, 4)
    assert "tf32" not in result["peak_flops"]  # no TF32 pass on a CPU


def test_the_reference_ran_beside_ours(result):
    if not REF.is_file():
        assert result["reference"] == [] and "not found" in result["reference_note"]
        pytest.skip(f"{REF} absent (a clean clone)")
    refs = {(r["size"], r["k"]): r for r in result["reference"]}
    assert sorted(refs) == [("cpu", k) for k in KS]
    for r in refs.values():
        assert r["status"] == "ok" and r["ms_per_step"] > 0, r
        assert r["of_our_peak"] > 0


def test_the_peer_loop_ran_beside_ours(result):
    """--peer: the peers' one-model loop at each size, and members per device-hour, ours (the
    best cell) over it."""
    if result["transformers"] is None:
        assert result["peer"] == [] and "no transformers" in result["peer_note"]
        pytest.skip("transformers is not installed")
    (peer,) = result["peer"]
    assert peer["status"] == "ok" and peer["size"] == "cpu" and peer["precision"] == "fp32"
    assert peer["member_steps_per_s"] == pytest.approx(1e3 / peer["ms_per_step"], rel=1e-9)
    best = max(result["ours"], key=lambda r: r["member_steps_per_s"])
    (ratio,) = result["per_gpu_hour"]
    assert (ratio["k"], ratio["draws"]) == (best["k"], best["draws"])
    assert ratio["ratio"] == pytest.approx(
        best["member_steps_per_s"] / peer["member_steps_per_s"], rel=1e-9)
