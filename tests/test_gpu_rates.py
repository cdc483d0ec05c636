"""The GPU rate model (icl_core.planning.gpu_rates) and `icl cost`: the fit recovers the
constants steps were drawn from, the committed file is the fit of its committed steps, rows
rebuild their members, the cost model costs unmeasured GPU steps by it, and `icl cost` adds,
refits, writes and checks against the committed evidence of an H100 window."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import polars as pl
import pytest

from icl.console import main as icl
from icl_core.planning import gpu_rates
from icl_core.planning.cost import CostModel
from icl_core.spec.config import ConfigError, resolve_member, to_plain

ROOT = Path(__file__).resolve().parent.parent
TRUE = gpu_rates.Rates(floor_s=2e-3, layer_pass_s=1e-3, stack_floor_s=5e-3,
                       stack_layer_pass_s=4e-4, member_s=3e-4, s_per_flop=1 / 30e12)


SCALEUP_ROWS = ROOT / "evidence/reduced/deep_optimizers/scaleup/rows/rows.parquet"


def first_window() -> pl.DataFrame:
    """The first H100 window's committed scale-up rows (seeds 0-2, 5 processes side by side),
    apart from seeds a later window or a CPU added."""
    rows = pl.read_parquet(SCALEUP_ROWS)
    return rows.filter((pl.col("device_type") == "cuda") & (pl.col("seed") < 3))


def cuda_stacks(folder: Path) -> int:
    """The finished CUDA stacks in a folder of committed evidence, counted from the rows
    themselves: each stack's members share a trial, a step time and a stack size."""
    stacks = 0
    for path in folder.rglob("rows/rows.parquet"):
        rows = pl.read_parquet(path)
        stacks += rows.filter((pl.col("device_type") == "cuda") & (pl.col("status") == "ok")
                              & pl.col("step_time_s").is_not_null()).select(
            "trial_id", "step_time_s", "stack_size").n_unique()
    return stacks


def base_points(rate_file: gpu_rates.RateFile) -> list[gpu_rates.Measured]:
    """The steps of the path every other falls back on (generator fp32)."""
    return [p for p in rate_file.points if gpu_rates.path_of(p.member) == gpu_rates.BASE_PATH]


def members(draws: str = "generator") -> list:
    from stack_scaling import member

    out = [member(size, 0, "cuda", draws) for size in ("cpu", "paper")]
    base = to_plain(out[0])
    for depth, width in ((1, 32), (2, 128)):
        out.append(resolve_member({**base, "model": {**base["model"], "depth": depth,
                                                     "width": width}}))
    return out


def drawn(rates: gpu_rates.Rates, draws: str = "generator",
          dtype: str = "float32") -> list[gpu_rates.Measured]:
    out = []
    for m in members(draws):
        m = resolve_member({**to_plain(m), "dtype": dtype})
        out += [gpu_rates.Measured(m, k, rates.step_seconds(m, k), "drawn") for k in (1, 2, 8, 64)]
    return out


def test_the_fit_recovers_the_constants_its_steps_were_drawn_from():
    fitted = gpu_rates.fit(drawn(TRUE))
    for term in gpu_rates.TERMS:
        assert getattr(fitted, term) == pytest.approx(getattr(TRUE, term), rel=1e-6), term
    # float64 steps (their FLOPs at the float64 peak) fit to the same constants
    mixed = gpu_rates.fit(drawn(TRUE)[::2] + drawn(TRUE, dtype="float64")[1::2])
    assert mixed.s_per_flop == pytest.approx(TRUE.s_per_flop, rel=1e-6)
    assert max(map(abs, gpu_rates.relative_errors(fitted, drawn(TRUE)))) < 1e-9
    # leave-one-out on consistent steps: every point predicted by the others
    assert max(abs(e) for e in gpu_rates.leave_one_out(drawn(TRUE))) < 1e-6


def test_the_fit_stays_non_negative_and_asks_for_lone_and_stacked_steps():
    points = drawn(TRUE)
    # steps that fall with depth would want a negative layer term: it stops at 0
    flipped = [gpu_rates.Measured(p.member, p.stack, p.step_s * (2.0 if
               p.member.model.depth == 1 else 1.0), "bent") for p in points]
    assert all(c >= 0 for c in gpu_rates.fit(flipped).coefficients())
    with pytest.raises(ConfigError, match=r"lone members \(K = 1\) and of stacks"):
        gpu_rates.fit([p for p in points if p.stack == 1])
    with pytest.raises(ConfigError, match="needs measured steps"):
        gpu_rates.fit([])
    # K = 1 and one stack size at two depths: 4 steps cannot tell 6 terms apart
    few = [p for p in points if p.stack in (1, 64) and p.member.model.depth in (4, 12)]
    with pytest.raises(ConfigError, match=r"tell its 6 terms apart \(rank 4 of 6"):
        gpu_rates.fit(few)


def test_the_committed_rates_are_the_fit_of_the_committed_steps():
    committed = gpu_rates.load()
    assert committed.device_name.startswith("NVIDIA H100")
    refit = committed.refit()
    assert set(refit) == set(committed.rates) and gpu_rates.BASE_PATH in refit
    for path, rates in refit.items():
        for term in gpu_rates.TERMS:
            assert getattr(committed.rates[path], term) == pytest.approx(
                getattr(rates, term), rel=1e-9), (path, term)
    base = base_points(committed)
    errors = gpu_rates.relative_errors(committed.rates[gpu_rates.BASE_PATH], base)
    assert sorted(map(abs, errors))[len(errors) // 2] < 0.15  # its median step within 15%
    assert all(p.source for p in committed.points)  # each says where it was measured


def test_evidence_rows_rebuild_their_members_exactly():
    rows = pl.read_parquet(SCALEUP_ROWS)
    assert "config_json" not in rows.columns  # evidence drops it: the flat columns rebuild it
    firsts = rows.unique("config_hash", keep="first")  # every member, whichever device
    for row in firsts.iter_rows(named=True):
        assert gpu_rates.member_of_row(row).hash == row["config_hash"]
    row = firsts.row(0, named=True)
    with pytest.raises(ConfigError, match="does not rebuild"):
        gpu_rates.member_of_row({**row, "train.lr": 2 * row["train.lr"]})
    stacks = gpu_rates.stacks_of_rows(first_window(), "scaleup")
    assert len(stacks) == 5 and {m.stack for m, _, _ in stacks} == {3}  # 5 stacks of 3 seeds
    assert all(wall > m.step_s * steps for m, wall, steps in stacks)  # training inside its wall


def test_the_cost_model_costs_an_unmeasured_gpu_step_by_the_committed_rates():
    rates = gpu_rates.load().rates[gpu_rates.BASE_PATH]
    model = CostModel("cuda|unmeasured", 1)
    paper = members()[1]
    for k in (1, 8, 128):
        assert model.step_seconds(paper, k) == (rates.step_seconds(paper, k), "flops")
    # float64: the same launches, the FLOPs at the GPU's float64 peak (half float32's)
    wide = resolve_member({**to_plain(paper), "dtype": "float64"})
    flops = gpu_rates.features(paper, 128)[-1] * rates.s_per_flop
    assert rates.step_seconds(wide, 128) - rates.step_seconds(paper, 128) == pytest.approx(
        flops * (gpu_rates.PEAK["float32"] / gpu_rates.PEAK["float64"] - 1))
    # a step as a CUDA graph is costed as the default path until its own steps are measured
    graph = members("graph")[0]
    assert gpu_rates.path_of(graph) == "graph fp32" and gpu_rates.path_of(paper) == \
        gpu_rates.BASE_PATH == "generator fp32"
    assert gpu_rates.load().for_member(graph) == rates


def stack_json(points: list[gpu_rates.Measured], device: str = "cuda",
               revisions: dict | None = gpu_rates.REVISIONS) -> dict:
    """Steps in benchmarks/stack_scaling.py's --json layout (`revisions` None: a file written
    before the benchmark recorded them)."""
    out = {"device": device, "device_name": "NVIDIA H100 80GB HBM3", "torch": "2.11.0",
           "ours": [{"side": "ours", "status": "ok", "k": p.stack, "precision": "fp32",
                     "ms_per_step": 1e3 * p.step_s, "member": to_plain(p.member)}
                    for p in points] + [{"side": "ours", "status": "skipped (budget)"}]}
    return out if revisions is None else {**out, "revisions": revisions}


def test_icl_cost_adds_measured_steps_refits_a_path_and_writes_it(tmp_path, capsys):
    rates_file = tmp_path / "gpu_rates.json"
    committed = gpu_rates.load()  # its base path alone: the graph steps below are all there are
    base = base_points(committed)
    gpu_rates.save(gpu_rates.RateFile(committed.device_name, base,
                                      {gpu_rates.BASE_PATH: committed.rates[gpu_rates.BASE_PATH]},
                                      committed.note), rates_file)
    graph = gpu_rates.Rates(floor_s=2e-4, layer_pass_s=5e-5, stack_floor_s=1e-4,
                            stack_layer_pass_s=0.0, member_s=1e-5, s_per_flop=1 / 40e12)
    measured = tmp_path / "stack.json"
    measured.write_text(json.dumps(stack_json(drawn(graph, "graph"))))
    assert icl(["cost", "--rates", str(rates_file), "--add", str(measured)]) == 0
    out = capsys.readouterr().out
    assert "added 16 measured steps" in out and "graph fp32: 0.2 ms + 0.05 ms/layer" in out
    assert "not written: --write keeps it" in out
    assert "graph fp32" not in json.loads(rates_file.read_text())["rates"]  # not written
    assert icl(["cost", "--rates", str(rates_file), "--add", str(measured), "--write"]) == 0
    assert f"wrote {rates_file}" in capsys.readouterr().out
    written = gpu_rates.load(rates_file)
    assert written.for_member(members("graph")[0]).floor_s == pytest.approx(2e-4, rel=1e-6)
    assert written.rates[gpu_rates.BASE_PATH] == gpu_rates.load().rates[gpu_rates.BASE_PATH]
    # graphs replaying the members' generators (GRAPH=1 evidence) launch fewer kernels than
    # counter graphs: their own path, costed as the base path until measured, then fitted apart
    replayed = members("graph-generator")[0]
    assert gpu_rates.path_of(replayed) == "graph-generator fp32"
    assert written.for_member(replayed) == written.rates[gpu_rates.BASE_PATH]
    faster = dataclasses.replace(graph, floor_s=1e-4)
    (tmp_path / "replayed.json").write_text(json.dumps(stack_json(drawn(faster,
                                                                        "graph-generator"))))
    assert icl(["cost", "--rates", str(rates_file), "--add", str(tmp_path / "replayed.json"),
                "--write"]) == 0
    assert "graph-generator fp32: 0.1 ms +" in capsys.readouterr().out
    written = gpu_rates.load(rates_file)
    assert written.for_member(replayed).floor_s == pytest.approx(1e-4, rel=1e-6)
    assert written.for_member(members("graph")[0]).floor_s == pytest.approx(2e-4, rel=1e-6)
    # steps measured on a CPU, or a file older than the member column, are refused
    (tmp_path / "cpu.json").write_text(json.dumps(stack_json(drawn(graph), device="cpu")))
    assert icl(["cost", "--rates", str(rates_file), "--add", str(tmp_path / "cpu.json")]) == 2
    assert "measured on 'cpu'" in capsys.readouterr().err
    old = stack_json(drawn(graph))
    for row in old["ours"]:
        row.pop("member", None)
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert icl(["cost", "--rates", str(rates_file), "--add", str(tmp_path / "old.json")]) == 2
    assert "re-run the benchmark" in capsys.readouterr().err


def test_steps_of_an_earlier_revision_of_their_path_are_kept_but_not_fitted(tmp_path, capsys):
    """A path whose kernels changed (gpu_rates.REVISIONS) is fitted only to steps timed on its
    current code; the older ones stay in the file as a record."""
    assert gpu_rates.REVISIONS["graph"] >= 2
    rates_file = tmp_path / "gpu_rates.json"
    committed = gpu_rates.load()
    graph = gpu_rates.Rates(floor_s=2e-4, layer_pass_s=5e-5, stack_floor_s=1e-4,
                            stack_layer_pass_s=0.0, member_s=1e-5, s_per_flop=1 / 40e12)
    gpu_rates.save(gpu_rates.RateFile(committed.device_name, base_points(committed),
                                      {gpu_rates.BASE_PATH: committed.rates[gpu_rates.BASE_PATH]},
                                      committed.note), rates_file)
    # a benchmark file from before the revisions were recorded: its steps are revision 1
    before = tmp_path / "before.json"
    before.write_text(json.dumps(stack_json([dataclasses.replace(p, step_s=3 * p.step_s)
                                             for p in drawn(graph, "graph")], revisions=None)))
    assert icl(["cost", "--rates", str(rates_file), "--add", str(before), "--write"]) == 0
    assert "16 steps timed on an earlier revision" in capsys.readouterr().out
    assert "graph fp32" not in gpu_rates.load(rates_file).rates  # 16 old steps: not fitted
    measured = tmp_path / "stack.json"
    measured.write_text(json.dumps(stack_json(drawn(graph, "graph"))))
    assert icl(["cost", "--rates", str(rates_file), "--add", str(measured), "--write"]) == 0
    out = capsys.readouterr().out
    assert "16 steps timed on an earlier revision" in out and "graph fp32: 0.2 ms +" in out
    written = gpu_rates.load(rates_file)
    assert written.for_member(members("graph")[0]).floor_s == pytest.approx(2e-4, rel=1e-6)
    revisions = [p.revision for p in written.points if p.member.train.cuda_graph]
    assert sorted(set(revisions)) == [1, gpu_rates.REVISIONS["graph"]] and len(revisions) == 32


def test_icl_cost_check_plans_the_h100_windows_stacks_within_25_percent_at_five(tmp_path,
                                                                               capsys):
    """The committed evidence of the first H100 windows: deep_optimizers/scaleup ran as 5
    stacks in 5 processes side by side; their steps and walls against the rate model alone
    (within 25%). The AlgoFormer stacks ran among 13 CUDA processes (3.4-4.0x): out."""
    status = icl(["cost", "--check", str(ROOT / "evidence" / "reduced")])
    out = capsys.readouterr().out
    assert status == 1  # some stack is out: the crowded AlgoFormer window
    assert re.search(r"algoformer/layers_heads:\n.*\(-7\d%\)", out)  # the crowded window
    assert out.count("step ") == cuda_stacks(ROOT / "evidence" / "reduced")  # each stack a line
    # the first window's scale-up stacks alone (not seeds a later window or a CPU added)
    window = tmp_path / "deep_optimizers" / "scaleup" / "rows"
    window.mkdir(parents=True)
    first_window().write_parquet(window / "rows.parquet")
    icl(["cost", "--check", str(tmp_path)])
    lines = re.findall(r"step [\d.]+ ms, planned [\d.]+ \(([+-]\d+)%\); stack \d+ s, planned "
                       r"\d+ \(([+-]\d+)%\)", capsys.readouterr().out)
    assert len(lines) == 5
    assert all(abs(int(step)) <= 25 and abs(int(wall)) <= 25 for step, wall in lines)
    assert icl(["cost", "--check", str(ROOT / "docs")]) == 2  # no rows there


def test_icl_cost_checks_by_the_rate_file_it_is_given(tmp_path, capsys):
    """--rates: the check plans by that file's fit (its steps twice as long: its plans too),
    not by the committed one; the committed file and its loaded copy stay as they were."""
    data = json.loads(gpu_rates.RATES_FILE.read_text())
    for point in data["points"]:
        point["step_s"] *= 2
    slower = tmp_path / "slower.json"
    slower.write_text(json.dumps(data))
    scaleup = ROOT / "evidence" / "reduced" / "deep_optimizers"

    def planned(argv):
        assert icl(["cost", *argv, "--check", str(scaleup)]) in (0, 1)
        return [float(x) for x in re.findall(r"ms, planned ([\d.]+) \(", capsys.readouterr().out)]

    base, twice = planned([]), planned(["--rates", str(slower)])
    assert len(base) == len(twice) == cuda_stacks(scaleup) >= 7  # scaleup's 5, transformer_depth's 2
    assert twice == pytest.approx([2 * b for b in base], rel=0.02)  # printed to 0.1 ms
    committed = gpu_rates.load()
    assert committed.rates == gpu_rates.RateFile.from_json(
        json.loads(gpu_rates.RATES_FILE.read_text())).rates


def test_icl_cost_check_plans_a_stores_study_side_by_side(tmp_path, capsys):
    """A store's rows keep finished_at: the study's seconds from its first start to its last
    end against its stacks side by side on their GPU shares. The scale-up window's rows with
    the times it ran at (its five stacks started together, each ended after its wall), one
    file a member as a store writes them, then compacted (`icl compact`: no file left in
    rows/, every row in compacted/), and a failed re-run's record later on (not counted)."""
    import pyarrow as pa

    from icl_core.storage.compaction import compact
    from icl_core.storage.store import ROW_SCHEMA, Store

    rows = first_window()
    start = 1_800_000_000
    rows = rows.with_columns(
        finished_at=pl.from_epoch((start + pl.col("wall_time_s")).cast(pl.Int64), time_unit="s")
        .dt.replace_time_zone("UTC").dt.strftime("%Y-%m-%dT%H:%M:%S%z"))
    store = Store(str(tmp_path / "store"))

    def as_rows(frame: pl.DataFrame) -> pa.Table:  # the store's column types
        table = frame.to_arrow()
        return pa.table({n: table[n].cast(ROW_SCHEMA.field(n).type) if n in ROW_SCHEMA.names
                         else table[n] for n in table.column_names})

    for (config_hash,), member in rows.group_by(["config_hash"]):
        store.write_rows(store.rows_path("deep_optimizers", "scaleup", config_hash),
                         as_rows(member))
    assert compact(store, "deep_optimizers", "scaleup").merged == 5 * 3
    assert not list((tmp_path / "store" / "deep_optimizers" / "scaleup" / "rows").iterdir())
    # a member that failed on the GPU an hour later (failed/): not part of the study's span
    failed = rows.filter(pl.col("config_hash") == rows["config_hash"][0]).with_columns(
        config_hash=pl.lit("f" * 16), status=pl.lit("failed"), reason=pl.lit("OutOfMemory"),
        finished_at=pl.lit("2027-01-15T09:00:00+0000"))
    store.write_rows(store.rows_path("deep_optimizers", "scaleup", "f" * 16, "failed"),
                     as_rows(failed))
    assert gpu_rates.study_span(rows) == pytest.approx(rows["wall_time_s"].max(), abs=1.0)
    assert gpu_rates.study_span(rows.drop("finished_at")) is None  # evidence keeps none
    # a study whose only row file is unreadable is skipped with a line, the others checked
    broken = tmp_path / "store" / "deep_optimizers" / "broken" / "rows"
    broken.mkdir(parents=True)
    (broken / "0123456789abcdef.parquet").write_bytes(b"not parquet")
    status = icl(["cost", "--check", str(tmp_path / "store")])
    out, err = capsys.readouterr()
    errors = [int(e) for e in re.findall(r"\(([+-]\d+)%\)", out.split("planned / measured")[1])]
    assert len(errors) == 5 * 2 + 1  # each stack's step and seconds, and the study's
    assert status == (0 if all(abs(e) <= 25 for e in errors) else 1)  # 1: a plan out of 25%
    assert "warning: skipping unreadable row file" in err  # one line of the command's log
    assert "deep_optimizers/broken: skipped, its rows are unreadable" in out
    span = re.search(r"the study: (\d+) s from first start to last end, planned (\d+) s with "
                     r"its stacks side by side on GPU shares \(([+-]\d+)%\)", out)
    assert span and 170 <= int(span.group(1)) <= 180, out  # the last end, not the failed re-run
    measured, planned, error = map(int, span.groups())
    assert error == pytest.approx(100 * (planned / measured - 1), abs=1)
    # its five stacks side by side on fifth shares (SHARED_SLOWDOWN): planned as the slowest
    # stack's plan alone x 1.25 (+ start-up), not as five stacks one after another
    alone = max(map(int, re.findall(r"stack \d+ s, planned (\d+)", out)))
    assert 1.2 * alone <= planned <= 1.5 * alone, out
    assert "studies' seconds: median |error|" in out


@pytest.mark.slow  # a benchmark script's own check (~10 s): `pytest -m slow`
def test_paper_step_json_is_what_icl_cost_adds(tmp_path, capsys):
    """benchmarks/paper_step.py --json: each timed member's config, precision and ms/step in
    stack_scaling.py's layout; `icl cost --add` reads it (and refuses it as CPU steps)."""
    import subprocess

    out = tmp_path / "steps.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "paper_step.py"), "depth_scaling", "--study",
         "least_squares", "--preset", "smoke", "--steps", "2", "--limit", "2", "--device", "cpu",
         "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text())
    assert data["device"] == "cpu" and "paper_step depth_scaling" in data["source"]
    assert [r["k"] for r in data["ours"]] == [1, 1]
    for row in data["ours"]:
        member = resolve_member(row["member"])
        assert row["precision"] == member.train.precision and row["ms_per_step"] > 0
    assert icl(["cost", "--add", str(out)]) == 2
    assert "measured on 'cpu'" in capsys.readouterr().err


def test_a_tf32_pass_times_members_that_train_in_tf32(tmp_path, capsys):
    """The trainer sets TF32 from the member's train.precision (an fp32 member turns it off
    whatever the caller allowed): stack_scaling.py's TF32 pass of 2026-11-28 timed fp32 members
    (paper size, K = 128: 359 ms under "tf32" against 362 in fp32; the reference 211). A
    pass's cells now time members of its precision, and `icl cost --add` refuses a cell whose
    member trains at another precision than its pass (it fitted the tf32 path to fp32 steps)."""
    import torch
    from stack_scaling import ours

    torch.set_num_threads(1)
    (row,) = ours(["cpu"], [1], "cpu", 0, 1, "tf32", 1e11, 100.0, ("generator",))
    assert row["status"] == "ok" and row["member"]["train"]["precision"] == "tf32"
    tf32 = {"device": "cuda", "ours": [{**row, "ms_per_step": 10.0}]}
    (point,) = gpu_rates.stack_scaling_points(tf32, "t")
    assert gpu_rates.path_of(point.member) == "generator tf32"
    # the first window's file: cells of the TF32 pass whose members trained in fp32
    fp32 = {**row["member"], "train": {**row["member"]["train"], "precision": "fp32"}}
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**tf32, "ours": [{**tf32["ours"][0], "member": fp32}]}))
    assert icl(["cost", "--add", str(old)]) == 2
    assert "whose member trains at train.precision=fp32" in capsys.readouterr().err
