"""The first hour: every input a sweep cannot run is refused before Ray starts, with one line
on stderr and exit status 2, and nothing written; every sweep command the docs show plans.

Runs the sweep files' own `main(argv)` in this process (no mocks): Ray must stay as it was
(not initialised by the refusal), and the storage and figures folders must stay unwritten.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from pathlib import Path

import pytest

from icl.catalog import load_sweep

ROOT = Path(__file__).resolve().parent.parent
CYRILLIC_A = "\u0430"  # looks like the Latin a


def _cases():
    d = ["--dry-run"]
    return [
        # planning never builds a task's tensors; a model torch cannot size is one line
        (d + ["--study", "features_depth", "--set", "task.dim=1e9"],
         "model: 'transformer' cannot be built for tokens of width 1000000003000000001"),
        (d + ["--storage", "foo://bucket/icl"],
         "--storage: unsupported URI scheme 'foo://'; use a local path or one of file://, s3://"),
        (["--address", "127.0.0.1:1"],  # a real run: the probe answers before ray.init
         "--address: no Ray cluster answers at 127.0.0.1:1 within 5 s"),
        (["--address", "nonsense"], "--address: expected HOST:PORT"),
        (d + ["--set", "train.lr=inf"], "--set train.lr: must be a finite number, got inf"),
        (d + ["--set", "train.lr=nan"], "--set train.lr: must be a finite number, got nan"),
        (d + ["--set", "seed=1e30"],
         "--set seed: 1e30 is out of range; integers must lie in [-2**63, 2**63)"),
        (d + ["--set", "train.steps=1e30"], "--set train.steps: 1e30 is out of range"),
        (d + ["--set", "eval.gd_steps=[__import__('os').system('touch pwned')]"],
         "--set eval.gd_steps: expected a list such as [1, 10] in JSON"),
        (d + ["--set", "eval.gd_steps=[1, 2"], "--set eval.gd_steps: expected a list"),
        (d + ["--set", "eval.gd_steps=[1.5]"], "--set eval.gd_steps[0]: expected an integer"),
        (d + ["--set", 'eval.grid=[{"n_points": }]'], "--set eval.grid: expected a list"),
        (d + ["--plan-gpus", "-2"], "--plan-gpus: must be a number of GPUs >= 0, got -2"),
        (d + ["--plan-gpus", "nan"], "--plan-gpus: must be a number of GPUs >= 0"),
        (d + ["--trial-minutes", "-1"], "--trial-minutes: must be a number of minutes > 0, got -1"),
        (d + ["--seed", "3"], "--seed: seeds an Optuna search's sampler, and no chosen study is "
         "a search; a grid's seeds are --num-samples K"),
        (d + ["--set", "seed=1", "--set", "seed=2"],
         "--set seed: given twice ('1' and '2'); give each key once"),
        # the README's own example, without --study: the study whose model lacks it is named
        (d + ["--set", "model.width=128", "--set", "model.layer_norm=false"],
         "--set model.width: unknown field of model 'baseconv_gd'; valid fields: name, steps, "
         "lr (study 'construction'; --study picks studies)"),
        (d + ["--study", "least_squares", "--set", f"model.name=tr{CYRILLIC_A}nsformer"],
         "model.name: unknown model 'tr\\u0430nsformer' (non-ASCII characters); "
         "did you mean 'transformer'? valid choices: "),
        (d + ["--study", "least_squares", "--set", f"model.mixer={CYRILLIC_A}ttention"],
         "model.mixer: unknown '\\u0430ttention' (non-ASCII characters); did you mean "
         "'attention'? valid choices: "),
        (d + ["--study", "least_squares", "--set", "dtype=float33"],
         "dtype: 'float33' is not valid; did you mean 'float32'? valid choices: "),
        (d + ["--study", "least_squares", "--set", "model.wdth=3"],
         "--set model.wdth: unknown field of model 'transformer'; did you mean 'width'? "
         "valid fields: name, width, depth,"),
        (d + ["--study", "least_squars"], "--study: unknown 'least_squars'; did you mean "
         "'least_squares'? valid choices: least_squares, "),
        (d + ["--preset", "smok"], "--preset: unknown 'smok'; did you mean 'smoke'?"),
        (d + ["--study", "least_squares", "--set", "task.layout=fixed_m"],
         "--set task.layout: 'fixed_m' is not valid; did you mean 'fixed_n'? valid choices: "),
        (d + ["--num-samples", "20000"],
         "--num-samples: a grid takes at most 1000 seeds per point, got 20000"),
        (["--figures", "{tmp}/a_file/figures"],
         "--figures: cannot write to '{tmp}/a_file/figures' ({tmp}/a_file is not a folder)"),
        # the sweep's own folder in the store is a file: refused before Ray (it failed after)
        (["--storage", "{tmp}/s"], "--storage: cannot write to '{tmp}/s' ("),
    ]


@pytest.mark.parametrize("argv, message", _cases(), ids=lambda v: " ".join(v)[:60]
                         if isinstance(v, list) else None)
def test_bad_input_is_one_line_and_exit_2_before_ray(tmp_path, capsys, argv, message):
    import ray

    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "depth_scaling").write_text("not a folder")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    message = message.replace("{tmp}", str(tmp_path))
    figures = tmp_path / "figs"
    base = ["--preset", "smoke", "--storage", str(tmp_path / "r"), "--figures", str(figures)]
    was_running = ray.is_initialized()
    start = time.monotonic()
    assert load_sweep("depth_scaling").main(base + argv) == 2
    elapsed = time.monotonic() - start
    out, err = capsys.readouterr()
    err = err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert message in err, err
    assert "Traceback" not in out + err
    assert ray.is_initialized() == was_running  # Ray was neither started nor joined
    assert not (tmp_path / "r").exists()  # the storage's write probe comes after every check
    assert not figures.exists() and not (tmp_path / "pwned").exists()
    assert elapsed < 60, f"refusing took {elapsed:.0f} s"


@pytest.mark.parametrize("runner", ["catalog", "adaptive"])
def test_the_catalog_and_adaptive_files_run_the_same_checks(tmp_path, capsys, runner):
    """`python -m icl.catalog --run` and an adaptive sweep file refuse what the sweep
    files refuse, the same way: one line, exit 2, before Ray, nothing written."""
    import ray

    from icl import catalog
    from icl.adaptive import main as adaptive_main
    from sweeps.adaptive_depth import ADAPTIVE

    def run(argv):
        if runner == "catalog":
            return catalog.main(["--run", "--preset", "smoke", "--only",
                                 "depth_scaling/least_squares", *argv])
        return adaptive_main("adaptive_depth", ADAPTIVE, ["--preset", "smoke", *argv])

    was_running = ray.is_initialized()
    for argv, message in [
            (["--storage", "foo://bucket/icl"], "--storage: unsupported URI scheme 'foo://'"),
            (["--storage", str(tmp_path / "r"), "--address", "127.0.0.1:1"],
             "--address: no Ray cluster answers at 127.0.0.1:1 within 5 s")]:
        assert run(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err and message in err, err
    assert ray.is_initialized() == was_running
    assert not (tmp_path / "r").exists()


def test_catalog_run_with_dry_run_plans_and_trains_nothing(tmp_path, capsys):
    """`--run ... --dry-run` prints the plan and exits 0, as --dry-run does everywhere; it once
    started the pool (the flag went to the sweep files' parser only)."""
    import ray

    from icl import catalog

    was_running = ray.is_initialized()
    argv = ["--run", "--preset", "smoke", "--only", "depth_scaling/least_squares",
            "--storage", str(tmp_path / "r"), "--dry-run"]
    assert catalog.main(argv) == 0
    out = capsys.readouterr().out
    assert "all sweep files [smoke]:" in out and "depth_scaling/least_squares [smoke]" in out
    assert ray.is_initialized() == was_running
    assert not any((tmp_path / "r").rglob("*.parquet"))


def test_search_options_are_checked_before_ray(tmp_path, capsys):
    import ray

    was_running = ray.is_initialized()
    sweep = load_sweep("hpo_lr")
    argv = ["--preset", "smoke", "--storage", str(tmp_path), "--dry-run"]
    assert sweep.main(argv + ["--num-samples", "20000"]) == 2
    assert "--num-samples: a search takes at most 10000 trials, got 20000" in capsys.readouterr().err
    assert sweep.main(argv + ["--seed", "3"]) == 0  # a search takes a sampler seed
    assert ray.is_initialized() == was_running


def test_planning_never_allocates_the_task(capsys):
    """`--set task.dim=1e9`: the planner sizes the model and its memory from shapes (a 1e9 x
    1e9 torch.eye would be 8e18 bytes) and refuses the member in one line, its estimate
    against this machine's memory (icl_core.planning.memory; tests/test_memory.py)."""
    sweep = load_sweep("depth_scaling")
    argv = ["--preset", "smoke", "--study", "least_squares", "--dry-run"]
    assert sweep.main(argv + ["--set", "task.dim=1e9"]) == 2
    err = capsys.readouterr().err
    assert "task buffers 8 EB" in err and len(err.strip().splitlines()) == 1


def test_every_task_config_knows_its_built_shape():
    """The planner reads (d_in, d_out, seq_len) from the task config (KnowsShape): for every
    task of every sweep file at every preset, it equals the built task's."""
    import torch

    from icl.catalog import sweep_names
    from icl_core.spec.search import Search
    from icl_core.spec.study import PRESETS
    from icl_core.tasks import build_task
    from icl_core.tasks.base import KnowsShape

    seen = set()
    for name in sweep_names():
        for study in load_sweep(name).studies:
            for preset in [p for p in PRESETS if p in study.presets]:
                members = (study.for_preset(preset).points(preset)
                           if isinstance(study, Search) else study.members(preset))
                for member in members:
                    key = (repr(member.task), member.task_seed)
                    if key in seen:
                        continue
                    seen.add(key)
                    assert isinstance(member.task, KnowsShape), member.task.name
                    task = build_task(member.task, member.task_seed, torch.device("cpu"),
                                      torch.float32)
                    assert member.task.shape() == (task.d_in, task.d_out, task.seq_len), key
                    # the tensors it draws have that shape (the built task takes its widths
                    # and length from shape(): what it samples is the check)
                    batch = task.sample(2, torch.Generator().manual_seed(0))
                    d_in, d_out, seq_len = member.task.shape()
                    assert tuple(batch.inputs.shape) == (2, seq_len, d_in), key
                    assert tuple(batch.targets.shape) == (2, seq_len, d_out), key
                    assert tuple(batch.mask.shape) == (seq_len,), key
    assert len(seen) > 50


def doc_commands() -> list[tuple[str, list[str]]]:
    """Every `python sweeps/<file>.py ...` command in the README and the docs/ pages,
    as (file, argv); shell loop variables ($s) and what follows ; # or a backtick dropped;
    commands on a remote storage (s3://...) left out (they need the bucket).
    Adaptive sweep files (no SWEEP: their own main, tests/test_adaptive.py) are not here."""
    from icl.catalog import sweep_names

    sweeps, out = set(sweep_names()), []
    for doc in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        for match in re.finditer(r"python sweeps/(\w+)\.py([^\n`#;|)]*)", doc.read_text()):
            words = shlex.split(match.group(2))
            argv = []
            for word in words:
                if "$" in word:
                    argv.pop()  # the flag the loop variable belongs to
                elif not word.startswith("[") and word != "...":
                    argv.append(word)
            remote = any("://" in word for word in argv)  # a bucket: needs the network
            if match.group(1) in sweeps and "--help" not in argv and not remote \
                    and (match.group(1), argv) not in out:
                out.append((match.group(1), argv))
    return out


def test_the_docs_show_commands_to_check():
    names = {name for name, _ in doc_commands()}
    assert {"depth_scaling", "preconditioned_gd", "deep_optimizers", "algoformer"} <= names


@pytest.mark.parametrize("name, argv", doc_commands(), ids=lambda v: v if isinstance(v, str)
                         else " ".join(v))
def test_every_documented_sweep_command_plans(tmp_path, capsys, name, argv):
    """As written, with --dry-run added: it plans (exit 0) and writes nothing. A paper preset
    (a cluster's, `ray job submit`) is planned for 8 GPUs: its largest members need more
    memory than a small machine has (icl_core.planning.memory refuses them there)."""
    cluster = ["--plan-gpus", "8"] if "paper" in argv else []
    assert load_sweep(name).main(argv + ["--dry-run", *cluster]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    if "--json" in argv:  # the plan as one JSON document, nothing else
        assert json.loads(out)["total"]["trials"] == sum(s["trials"] for s in
                                                         json.loads(out)["studies"])
    else:
        assert "total: " in out


def test_the_readme_set_example_plans_per_study(capsys):
    sweep = load_sweep("depth_scaling")
    argv = ["--preset", "smoke", "--dry-run", "--study", "least_squares",
            "--set", "model.width=128", "--set", "model.layer_norm=false"]
    assert sweep.main(argv) == 0
    assert "--study least_squares --set model.width=128 --set model.layer_norm=false" in (
        ROOT / "docs" / "usage.md").read_text()


def test_token_auth_cluster_without_the_token_mode_is_one_line(ray_session, tmp_path, capsys,
                                                                monkeypatch):
    """The session's Ray uses token authentication (Ray's default for a local cluster): joining
    it by address without RAY_AUTH_MODE=token is refused before ray.init, in one line."""
    import ray

    gcs = ray.get_runtime_context().gcs_address
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    argv = ["--preset", "smoke", "--study", "least_squares", "--storage", str(tmp_path / "r"),
            "--address", gcs, "--no-figures"]
    start = time.monotonic()
    assert load_sweep("depth_scaling").main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: --address: the Ray cluster at {gcs} uses token authentication; "
                   "run this with RAY_AUTH_MODE=token (and its token in ~/.ray/auth_token or "
                   "RAY_AUTH_TOKEN: `ray get-auth-token`)")
    assert time.monotonic() - start < 10
    assert not (tmp_path / "r" / "depth_scaling").exists()


def test_the_reduced_preset_is_optional(tmp_path, capsys):
    """`--preset reduced` plans only the studies that declare it; a study or file without one
    is an error naming those that have it; the catalog skips files without one."""
    from icl import catalog
    from icl_core.spec.study import Preset, Study

    argv = ["--preset", "reduced", "--storage", str(tmp_path), "--dry-run"]
    assert load_sweep("preconditioned_gd").main(argv) == 0
    out = capsys.readouterr().out
    assert all(f"{s} [reduced]" in out for s in ("lsa_layers", "lsa_context", "lsa_dim"))
    assert "fig1_sparse" not in out
    assert load_sweep("preconditioned_gd").main(argv + ["--study", "fig1_sparse"]) == 2
    assert ("--preset: study 'fig1_sparse' has no 'reduced' preset (studies with one: "
            "lsa_layers, lsa_context, lsa_dim)") in capsys.readouterr().err
    assert load_sweep("width_scaling").main(argv) == 2
    assert "no study of width_scaling has one" in capsys.readouterr().err
    assert catalog.main(["--preset", "reduced", "--storage", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "preconditioned_gd/lsa_layers [reduced]" in out and "width_scaling" not in out
    assert catalog.main(["--preset", "reducd"]) == 2
    assert "did you mean 'reduced'?" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"unknown presets \['tiny'\]"):
        Study("s", base={}, grid={}, presets={p: Preset() for p in
                                              ("smoke", "cpu", "gpu", "paper", "tiny")})
    assert not any(tmp_path.iterdir())


def test_trial_minutes_is_checked_for_a_file_of_searches_only_too(tmp_path, capsys):
    """--trial-minutes is a launch option, checked as the plan is made: a dry run of a file
    whose studies are all searches (no grid trial to pack) refuses it all the same."""
    argv = ["--preset", "smoke", "--storage", str(tmp_path / "r"), "--dry-run",
            "--trial-minutes", "0"]
    assert load_sweep("hpo_lr").main(argv) == 2
    assert capsys.readouterr().err.strip() == \
        "error: --trial-minutes: must be a number of minutes > 0, got 0"
