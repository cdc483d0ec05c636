"""AlgoFormer paper: the looped transformer and AlgoFormer (loops by hand, the window loss
without gradients through the first T - ΔT loops, pre / post layers), the three tasks with
representation (fixed Φ*, bounded AR(q), the CoT chain), Newton–Schulz against least
squares, the tuned baselines, and the sweep's smoke members drawn into all four figures."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from icl_core.algorithms.baselines import gd, grid_search, newton_alpha, newton_schulz, ols
from icl_core.models import build_model
from icl_core.spec.config import ConfigError, resolve_member
from icl_core.tasks import build_task
from icl_core.training.evaluate import evaluate
from icl_core.training.train import MemberRun

CPU, F64 = torch.device("cpu"), torch.float64


def looped_model(name="algoformer", loops=4, window=2, layers=1, **extra):
    cfg = resolve_member({"task": {"name": "rep_regression", "dim": 3, "n_points": 4},
                          "model": {"name": name, "width": 8, "heads": 2, "loops": loops,
                                    "window": window, "layers": layers, **extra}}).model
    torch.manual_seed(0)
    return build_model(cfg, d_in=3, d_out=2, max_len=12, causal=True, device=CPU, dtype=F64)


def task_of(name, **fields):
    cfg = resolve_member({"task": {"name": name, **fields},
                          "model": {"name": "transformer"}}).task
    return build_task(cfg, task_seed=0, device=CPU, dtype=F64)


@pytest.mark.parametrize("name", ["looped", "algoformer"])
def test_forward_equals_the_tied_block_applied_by_hand(name):
    model = looped_model(name, loops=5, layers=2)
    x = torch.randn(3, 9, 3, dtype=F64)
    pos = torch.arange(9)

    def body(b, h):  # one GPT-2 body: positions, blocks, final LayerNorm
        h = h + b.wpe(pos)
        for block in b.blocks:
            h = block(h)
        return b.ln_f(h)

    e = model.read_in(x)
    if name == "algoformer":
        e = body(model.pre, e)
    z = torch.zeros_like(e)
    by_hand = {}
    for t in range(1, 8):
        z = body(model.loop, z + e)  # input injection; the same weights every iteration
        by_hand[t] = model.read_out(body(model.post, z) if name == "algoformer" else z)
    torch.testing.assert_close(model(x), by_hand[5], rtol=0, atol=1e-12)
    outs = model.loop_outputs(x, [1, 3, 7])
    for t in (1, 3, 7):
        torch.testing.assert_close(outs[t], by_hand[t], rtol=0, atol=1e-12)


def test_algoformer_has_L_layers_in_pre_loop_and_post():
    for L in (1, 3):
        algo, loop = looped_model("algoformer", layers=L), looped_model("looped", layers=L)
        assert len(algo.pre.blocks) == len(algo.loop.blocks) == len(algo.post.blocks) == L
        assert isinstance(loop.pre, torch.nn.Identity) and isinstance(loop.post, torch.nn.Identity)
        assert len(loop.loop.blocks) == L
        body = sum(p.numel() for p in algo.loop.parameters()) - algo.loop.wpe.weight.numel()
        assert algo.num_params() == loop.num_params() + 2 * body  # the loop counts once


def test_looped_model_is_causal():
    model = looped_model(loops=3)
    x = torch.randn(2, 9, 3, dtype=F64, requires_grad=True)
    out = model(x)
    for t in range(9):
        (grad,) = torch.autograd.grad(out[:, t].sum(), x, retain_graph=True)
        assert torch.all(grad[:, t + 1:] == 0) and grad[:, :t + 1].abs().sum() > 0


def window_batch():
    task = task_of("rep_regression", dim=3, n_points=4)
    return task.sample(8, torch.Generator().manual_seed(1))


def grads(model, loss):
    model.zero_grad()
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.loop.parameters()])


def test_window_loss_has_no_gradient_through_the_first_loops():
    from icl_core.tasks import masked_mse

    batch = window_batch()
    model = looped_model(loops=5, window=2)
    loss = model.training_loss(batch, step=0)
    g = grads(model, loss)

    def manual(detach: bool):
        e = model.embed(batch.inputs)
        z = model.iterate(e, torch.zeros_like(e), 3)  # T0 = 5 - 2 loops
        z = z.detach() if detach else z
        parts = []
        for _ in range(2):
            z = model.iterate(e, z, 1)
            parts.append(masked_mse(model.readout(z), batch))
        return torch.stack(parts).mean()

    detached = manual(detach=True)
    torch.testing.assert_close(loss, detached, rtol=0, atol=1e-12)  # the Eq. 6 value
    torch.testing.assert_close(g, grads(model, manual(detach=True)), rtol=0, atol=1e-12)
    through = grads(model, manual(detach=False))
    assert (g - through).abs().max() > 1e-6  # gradients through T0 loops would differ
    # with ΔT = T every loop is in the loss and the gradient goes through all of them
    full = looped_model(loops=5, window=5)
    assert full.training_loss(batch, 0).requires_grad


def test_loop_curriculum_and_trainer_hook():
    model = looped_model(loops=6, window=3, curriculum_start=2, curriculum_every=10)
    assert [model.train_loops(s) for s in (0, 9, 10, 25, 1000)] == [2, 2, 3, 4, 6]
    assert looped_model(loops=6, window=3).train_loops(0) == 6
    member = resolve_member({
        "task": {"name": "rep_regression", "dim": 3, "n_points": 4},
        "model": {"name": "looped", "width": 8, "heads": 2, "loops": 3, "window": 2},
        "train": {"steps": 4, "batch_size": 4, "report_every": 2, "checkpoint_every": 2},
        "eval": {"n_prompts": 8}, "dtype": "float64"})
    run = MemberRun(member)
    batch = window_batch()
    torch.testing.assert_close(run.loss(batch, 0), run.model.training_loss(batch, 0))
    a, b = MemberRun(member), MemberRun(member)
    assert a.train_until(4) == b.train_until(4)  # deterministic by seed


def test_evaluator_reports_every_loop_count():
    member = resolve_member({
        "task": {"name": "rep_regression", "dim": 3, "n_points": 4},
        "model": {"name": "algoformer", "width": 8, "heads": 2, "loops": 2, "window": 1,
                  "eval_loop_iters": [1, 2, 9]},
        "eval": {"n_prompts": 16}, "dtype": "float64"})
    run = MemberRun(member)
    rows = evaluate(run.model, member, run.device, run.dtype, 0, False)
    loops = {r["loop_iter"] for r in rows}
    assert loops == {None, 1, 2, 9}
    head = {(r["position"], r["statistic"]): r["value"] for r in rows if r["loop_iter"] is None}
    at_T = {(r["position"], r["statistic"]): r["value"] for r in rows if r["loop_iter"] == 2}
    assert head == at_T  # the headline rows are the model after its training T loops


def test_representation_is_fixed_by_the_task_seed():
    cfg = resolve_member({"task": {"name": "rep_regression", "dim": 4, "n_points": 6},
                          "model": {"name": "transformer"}}).task
    a, b, c = (build_task(cfg, s, CPU, F64) for s in (0, 0, 1))
    assert all(torch.equal(u, v) for u, v in zip(a.phi, b.phi, strict=True))
    assert not torch.equal(a.phi[0], c.phi[0])
    batch = a.sample(4000, torch.Generator().manual_seed(2))
    xs, ys, A = batch.extras["xs"], batch.extras["ys"], batch.extras["A"]
    h = xs
    for W in a.phi[:-1]:
        h = F.leaky_relu(h @ W.T, 0.01)
    torch.testing.assert_close(ys, torch.einsum("bnd,bd->bn", h @ a.phi[-1].T, A), rtol=0,
                               atol=1e-12)
    assert len(a.phi) == 3 and abs(float(ys.pow(2).mean()) - 1) < 0.1  # Var(y) = 1
    torch.testing.assert_close(batch.targets[:, 0::2, 0], ys)
    torch.testing.assert_close(batch.inputs[:, 1::2, 0], ys[:, :6])


def test_ar_with_representation_stays_bounded_over_200_steps():
    task = task_of("rep_ar", dim=4, q=3, n_points=6, noise_std=0.5)
    gen = torch.Generator().manual_seed(3)
    P, d = 500, 4
    A = torch.randn(P, d, d, dtype=F64, generator=gen) / d ** 0.5
    xs = task.rollout(A, torch.randn(P, 3, d, dtype=F64, generator=gen), 200, gen)
    noiseless = task_of("rep_ar", dim=4, q=3, n_points=6, noise_std=0.0)
    clean = noiseless.rollout(A, xs[:, :3], 200, gen)
    bound = d ** 0.5 * torch.linalg.matrix_norm(A, 2)  # (P,): |x_{t+1}| <= √d |A|₂ (+ noise)
    assert torch.all(clean[:, 3:].norm(dim=-1) <= bound[:, None] + 1e-9)
    assert torch.isfinite(xs).all() and xs.norm(dim=-1).max() < 20
    late = clean[:, -50:].pow(2).mean()
    assert 0.5 < float(late) < 2  # neither blows up nor dies out: E|x|²/d = 1
    batch = task.sample(8, gen)  # layout: token i predicts the next value once q are seen
    assert task.positions.tolist() == [-1, -1, 0, 1, 2, 3, 4, 5, 6]
    torch.testing.assert_close(batch.targets[:, 2:], batch.extras["xs"][:, 3:])


def test_cot_chain_and_per_example_positions():
    task = task_of("cot_mlp", dim=3, layers=3, n_points=2)
    batch = task.sample(5, torch.Generator().manual_seed(4))
    chain = batch.inputs.reshape(5, 3, 4, 3)  # (B, examples, L + 1 tokens, d)
    for layer in range(3):
        W = batch.extras[f"mlp_{layer}"]  # resampled per prompt
        expected = F.leaky_relu(chain[:, :, layer] @ W.transpose(-1, -2), 0.01)
        torch.testing.assert_close(chain[:, :, layer + 1], expected, rtol=0, atol=1e-12)
    assert not torch.equal(batch.extras["mlp_0"][0], batch.extras["mlp_0"][1])
    assert task.positions.tolist() == [0, 0, 0, -1, 1, 1, 1, -1, 2, 2, 2, -1]
    targets = batch.targets.reshape(5, 3, 4, 3)
    torch.testing.assert_close(targets[:, :, :3], chain[:, :, 1:])
    member = resolve_member({"task": {"name": "cot_mlp", "dim": 3, "layers": 3, "n_points": 2},
                             "model": {"name": "transformer", "width": 8, "depth": 1},
                             "eval": {"n_prompts": 8}})
    run = MemberRun(member)
    rows = evaluate(run.model, member, run.device, run.dtype, 0, False)
    assert sorted({r["position"] for r in rows}) == [0, 1, 2]  # chain steps averaged


def test_newton_schulz_converges_to_least_squares():
    gen = torch.Generator().manual_seed(5)
    X = torch.randn(6, 40, 5, dtype=F64, generator=gen)
    y = torch.randn(6, 40, dtype=F64, generator=gen)
    w = newton_schulz(X, y, newton_alpha(X, 0.9), [0, 1, 30])
    torch.testing.assert_close(w[30], ols(X, y), rtol=0, atol=1e-10)
    gaps = [float((w[k] - ols(X, y)).norm()) for k in (0, 1)]
    assert gaps[1] < gaps[0]
    # quadratic: the residual of M_k H is (I - αH²)^(2^k); 7 steps beat 6 by far
    w6, w7 = (newton_schulz(X, y, newton_alpha(X, 0.9), [k])[k] for k in (6, 7))
    e6, e7 = (float((w_ - ols(X, y)).norm()) for w_ in (w6, w7))
    assert e7 < e6 ** 1.5 or e7 < 1e-12
    # beyond the bound 2/λ_max² it diverges
    bad = newton_schulz(X, y, newton_alpha(X, 1.5), [30])[30]
    assert not torch.isfinite(bad).all() or bad.norm() > 1e6
    assert torch.equal(newton_schulz(X[:, :0], y[:, :0], 1.0, [3])[3], torch.zeros(6, 5,
                                                                                 dtype=F64))


def test_tuned_baselines_reuse_gd_and_pick_from_the_grid():
    from icl_core.algorithms.registry import BASELINES
    from icl_core.tasks.base import RegressionProblem

    gen = torch.Generator().manual_seed(6)
    X = torch.randn(32, 10, 3, dtype=F64, generator=gen)
    w = torch.randn(32, 3, dtype=F64, generator=gen)
    y = torch.einsum("bnd,bd->bn", X, w)
    xq = torch.randn(32, 3, dtype=F64, generator=gen)
    p = RegressionProblem(X, y, xq, token=4)
    eval_cfg = resolve_member({"task": {"name": "linear_regression"},
                               "model": {"name": "transformer"},
                               "eval": {"gd_steps": [0, 5, 20]}}).eval
    target = (xq * w).sum(-1)
    best = grid_search("gd_tuned", [p], [target], (1e-3, 0.3, 5.0), [20])
    assert best == {4: 0.3}  # too small is slow, too large diverges
    preds = BASELINES["gd_tuned"](p, eval_cfg, {4: 0.3})
    ref = gd(X, y, 0.3, [0, 5, 20])
    for t in (0, 5, 20):
        torch.testing.assert_close(preds[t], (ref[t] * xq).sum(-1), rtol=0, atol=0)
    newton = BASELINES["newton"](p, eval_cfg, {4: 0.5})
    assert float((newton[20] - target).abs().max()) < 1e-10  # noiseless, N > d: exact


@pytest.mark.parametrize("model, message", [
    ({"name": "looped", "loops": 4, "window": 5}, "model.window: ΔT must be <= loops (T=4)"),
    ({"name": "algoformer", "width": 10, "heads": 4}, "model.heads: must divide width=10"),
    ({"name": "algoformer", "eval_loop_iters": [0, 3]}, "model.eval_loop_iters: every loop"),
    ({"name": "looped", "mixer": "nope"}, "model.mixer: unknown 'nope'; valid choices:"),
])
def test_bad_looped_configs_name_the_field(model, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_member({"task": {"name": "rep_regression"}, "model": model})


def test_bad_task_and_baseline_configs_name_the_field():
    for raw, message in [
        ({"task": {"name": "rep_ar", "q": 0}}, "task.q: must be >= 1"),
        ({"task": {"name": "cot_mlp", "slope": 1.5}}, "task.slope: must be in [0, 1)"),
        ({"task": {"name": "linear_regression"}, "eval": {"newton_alpha_grid": [0.5, -1]}},
         "eval.newton_alpha_grid: must hold step sizes > 0"),
        ({"task": {"name": "linear_regression"}, "eval": {"baselines": ["newtn"]}},
         "valid choices: gd, gd_tuned, lsa_optimal, newton, ols, teacher_net"),
    ]:
        with pytest.raises(ConfigError) as info:
            resolve_member({"model": {"name": "transformer"}, **raw})
        assert message in str(info.value)


def test_smoke_members_draw_every_figure(tmp_path):
    """The sweep file's smoke members, trained for real (no Ray), and its four figures."""
    import polars as pl

    from analysis.figures.registry import FIGURES
    from analysis.reading.store import read_rows
    from icl import catalog
    from icl_core.running.trial import TrialSpec, run_trial

    sweep = catalog.load_sweep("algoformer")
    total = 0
    for study in sweep.studies:
        members = [m.to_dict() for m in study.members("smoke")]
        total += len(members)
        run_trial(TrialSpec("algoformer", study.name, str(tmp_path), members))
        rows, _ = read_rows(str(tmp_path), "algoformer", study.name)
        assert set(rows["status"]) == {"ok"}
        summary = FIGURES[study.figure](rows, tmp_path / "fig" / study.name, name=study.figure)
        assert summary["paths"] and all(p.exists() for p in summary["paths"])
    assert total <= 6
    newton = read_rows(str(tmp_path), "algoformer", "vs_newton")[0]
    preds = set(newton["predictor"].to_list())
    assert {"gd_tuned_float64", "newton_float64", "ols_float64", "model"} <= preds
    loops = newton.filter(pl.col("loop_iter").is_not_null())["loop_iter"].unique().to_list()
    assert sorted(loops) == [1, 2, 4]


def test_reduced_presets_plan_three_seeds_at_the_reduced_task(tmp_path, capsys):
    """Every AlgoFormer study has a `reduced` preset (issue #35): members at d = 3, N = 10 (the
    setting `icl levels` found the most room at), 3 seeds per cell, and `--dry-run` plans them."""
    from icl import catalog

    sweep = catalog.load_sweep("algoformer")
    for study in sweep.studies:
        members = [m.to_dict() for m in study.members("reduced")]
        assert {(m["task"]["dim"], m["task"]["n_points"]) for m in members} == {(3, 10)}
        assert sorted({m["seed"] for m in members}) == [0, 1, 2]
        cells = {repr({k: v for k, v in m.items() if k != "seed"}) for m in members}
        assert len(members) == 3 * len(cells)
    assert sweep.main(["--preset", "reduced", "--storage", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert all(f"{s} [reduced]" in out for s in ("examples", "loops", "layers_heads", "vs_newton"))
