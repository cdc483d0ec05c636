"""L-BFGS for a stack (icl_core.training.stacked_lbfgs): each member steps as torch's LBFGS
steps it alone (float64, rtol 1e-9), through the ring of its history, the curvature test and
the early breaks each member takes at its own iteration; its state converts to and from
torch's, so a stacked member resumes alone and a lone one joins a stack; a stack's step
reads the host twice an iteration, not once a stored pair."""

from __future__ import annotations

import pytest
import torch

from icl_core.training.stacked_lbfgs import StackedLBFGS

P, K = 6, 4
SETTINGS = {"lr": 0.7, "history_size": 3, "max_iter": 4}  # 0.7: no float32 holds it


def quadratics() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """K convex quadratics 0.5 wᵀAw - bᵀw of different conditioning (so their members
    converge, and break out of their iterations, at different steps), and starting points."""
    gen = torch.Generator().manual_seed(0)
    A, b = [], []
    for k in range(K):
        q, _ = torch.linalg.qr(torch.randn(P, P, generator=gen, dtype=torch.float64))
        eig = torch.logspace(0, 0.5 + 0.5 * k, P, dtype=torch.float64)
        A.append(q @ torch.diag(eig) @ q.T)
        b.append(torch.randn(P, generator=gen, dtype=torch.float64))
    return torch.stack(A), torch.stack(b), torch.randn(K, P, generator=gen, dtype=torch.float64)


def loss_of(A, b, w) -> torch.Tensor:
    """(K,) or () losses of weights (K, P) or (P,)."""
    return 0.5 * torch.einsum("...p,...pq,...q->...", w, A, w) - (b * w).sum(-1)


def lone_run(A, b, w0, steps: int, state: dict | None = None,
             settings: dict = SETTINGS) -> tuple[list, torch.Tensor, dict]:
    """torch's LBFGS on one quadratic: the loss it returns each step, the weights, its state."""
    w = w0.clone().requires_grad_()
    opt = torch.optim.LBFGS([w], **settings)
    if state is not None:
        opt.load_state_dict({"state": state, "param_groups": opt.state_dict()["param_groups"]})

    def closure():
        opt.zero_grad()
        loss = loss_of(A, b, w)
        loss.backward()
        return loss

    losses = [float(opt.step(closure).detach()) for _ in range(steps)]
    return losses, w.detach(), opt.state_dict()["state"]


def stacked_run(A, b, w0, steps: int, states: list | None = None, settings: dict = SETTINGS):
    w = w0.clone().requires_grad_()
    opt = StackedLBFGS([w], **settings)
    if states is not None:
        opt.load_members(states)

    def closure():
        opt.zero_grad()
        losses = loss_of(A, b, w)
        losses.sum().backward()
        return losses

    losses = [opt.step(closure).tolist() for _ in range(steps)]
    return losses, w.detach(), opt


def test_each_member_steps_as_torchs_lbfgs_alone():
    A, b, w0 = quadratics()
    steps = 12
    stacked, w, opt = stacked_run(A, b, w0, steps)
    alone = [lone_run(A[k], b[k], w0[k], steps) for k in range(K)]
    for k, (losses, wk, state) in enumerate(alone):
        torch.testing.assert_close(torch.tensor([s[k] for s in stacked]),
                                   torch.tensor(losses), rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(w[k], wk, rtol=1e-9, atol=1e-12)
        assert int(opt.s["n_iter"][k]) == state[0]["n_iter"]
        assert int(opt.s["func_evals"][k]) == state[0]["func_evals"]
        assert int(opt.s["held"][k]) == len(state[0]["old_dirs"])
    # what the comparison went through: members broke out early, at different iterations;
    # the rings wrapped (history 3)
    iterations = opt.s["n_iter"].tolist()
    assert len(set(iterations)) > 1 and max(iterations) < 4 * steps
    assert int(opt.s["held"].max()) == SETTINGS["history_size"]


@pytest.mark.parametrize("max_iter, max_eval, history", [(1, None, 1), (2, 2, 5), (7, None, 2),
                                                         (7, 3, 5)])
def test_other_settings_step_as_torchs_too(max_iter, max_eval, history):
    """Iterations a step, evaluations allowed (torch's max_eval: 5/4 of max_iter by default)
    and history sizes the sweeps do not use, with tolerances that break members out early:
    counts exactly torch's, values to rounding."""
    settings = {"lr": 0.7, "history_size": history, "max_iter": max_iter, "max_eval": max_eval,
                "tolerance_change": 1e-4, "tolerance_grad": 1e-3}
    A, b, w0 = quadratics()
    stacked, w, opt = stacked_run(A, b, w0, 10, settings=settings)
    for k in range(K):
        losses, wk, state = lone_run(A[k], b[k], w0[k], 10, settings=settings)
        torch.testing.assert_close(torch.tensor([s[k] for s in stacked]), torch.tensor(losses),
                                   rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(w[k], wk, rtol=1e-9, atol=1e-12)
        assert (int(opt.s["n_iter"][k]), int(opt.s["func_evals"][k]), int(opt.s["held"][k])) \
            == (state[0]["n_iter"], state[0]["func_evals"], len(state[0]["old_dirs"]))


def test_a_stacked_member_resumes_alone_and_a_lone_one_joins_a_stack():
    A, b, w0 = quadratics()
    whole = [lone_run(A[k], b[k], w0[k], 8) for k in range(K)]
    _, w, opt = stacked_run(A, b, w0, 3)
    for k in range(K):  # stacked for 3 steps, then alone with torch's optimizer
        losses, wk, _ = lone_run(A[k], b[k], w[k], 5, opt.member_state(k))
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(whole[k][0][3:]),
                                   rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(wk, whole[k][1], rtol=1e-9, atol=1e-12)
    # alone for 3 steps (member 0 not started: no state), then stacked
    first = [lone_run(A[k], b[k], w0[k], 3) if k else ([], w0[0], {}) for k in range(K)]
    losses, w, _ = stacked_run(A, b, torch.stack([f[1] for f in first]), 5,
                               [f[2] for f in first])
    for k in range(1, K):
        torch.testing.assert_close(torch.tensor([s[k] for s in losses]),
                                   torch.tensor(whole[k][0][3:]), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(w[0], lone_run(A[0], b[0], w0[0], 5)[1], rtol=1e-9, atol=1e-12)


def test_a_member_at_its_optimum_stays_while_the_others_step():
    """torch returns at once where the gradient is within tolerance_grad: that member's
    weights and counts stay, bit for bit."""
    A, b, w0 = quadratics()
    w0[2] = torch.linalg.solve(A[2], b[2])
    assert (A[2] @ w0[2] - b[2]).abs().max() <= 1e-7  # torch's tolerance_grad
    _, w, opt = stacked_run(A, b, w0, 3)
    assert torch.equal(w[2], w0[2]) and int(opt.s["n_iter"][2]) == 0
    assert int(opt.s["func_evals"][2]) == 3 and opt.member_state(2) == {
        0: {"func_evals": 3, "n_iter": 0}}
    assert all(int(opt.s["n_iter"][k]) > 0 for k in (0, 1, 3))
    # where no member iterates, no two-loop recursion is walked (the host read before it)
    _, _, opt = stacked_run(A, b, torch.linalg.solve(A, b), 3)
    assert opt.longest == 0 and opt.s["n_iter"].tolist() == [0] * K


def test_a_stacks_step_reads_the_host_twice_an_iteration_whatever_its_history():
    """torch's LBFGS reads a scalar per stored pair; the stack's step dispatches the same
    number of operations for 2 members as for 16, and no `item` past two reads an iteration."""
    from torch.profiler import ProfilerActivity, profile

    def counts(k: int) -> tuple[int, int]:
        gen = torch.Generator().manual_seed(1)
        A = torch.eye(P, dtype=torch.float64).expand(k, P, P) * torch.linspace(1, 9, P)
        b = torch.randn(k, P, generator=gen, dtype=torch.float64)
        w = torch.randn(k, P, generator=gen, dtype=torch.float64).requires_grad_()
        opt = StackedLBFGS([w], lr=0.05, history_size=20, max_iter=4)

        def closure():
            opt.zero_grad()
            losses = loss_of(A, b, w)
            losses.sum().backward()
            return losses

        for _ in range(4):  # the history filled past a few pairs
            opt.step(closure)
        assert int(opt.s["held"].min()) >= 8
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            opt.step(closure)
        names = [e.name for e in prof.events() if e.name.startswith("aten::")]
        return len(names), names.count("aten::item")

    two, sixteen = counts(2), counts(16)
    assert two == sixteen
    assert two[1] <= 2 * SETTINGS["max_iter"]


def test_the_optimizers_own_arithmetic_ignores_the_callers_autocast():
    """Under bf16 autocast (train.precision) the closure computes as the caller asks; the
    optimizer's dots stay in the weights' dtype, as torch's `dot`s alone do: a loss made of
    elementwise operations (which autocast leaves alone) steps bit for bit as without it."""
    gen = torch.Generator().manual_seed(2)
    scale = torch.rand(K, P, generator=gen) + 0.1
    target = torch.randn(K, P, generator=gen)
    start = torch.randn(K, P, generator=gen)

    def run(autocast: bool) -> tuple[torch.Tensor, torch.Tensor]:
        w = start.clone().requires_grad_()
        opt = StackedLBFGS([w], **{**SETTINGS, "lr": 0.1})

        def closure():
            opt.zero_grad()
            losses = (scale * (w - target) ** 2).sum(1)
            losses.sum().backward()
            return losses

        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            for _ in range(4):
                opt.step(closure)
        return w.detach(), opt.s["ro"]

    (w, ro), (w_cast, ro_cast) = run(False), run(True)
    assert torch.equal(w, w_cast) and torch.equal(ro, ro_cast)


def test_a_diverged_member_does_not_keep_the_others_iterating():
    """A member whose loss is not finite (the driver records it as diverged) no longer holds
    the stack in its iterations: once the others have converged (they break out early, as
    alone), a step evaluates the closure as often as the finite member that iterates most."""
    A, b, w0 = quadratics()
    w0[1] = float("nan")
    w = w0.clone().requires_grad_()
    opt = StackedLBFGS([w], **SETTINGS)
    calls = []

    def closure():
        calls.append(1)
        opt.zero_grad()
        losses = loss_of(A, b, w)
        losses.sum().backward()
        return losses

    for _ in range(40):  # the finite members converge (their breaks at once, as alone)
        opt.step(closure)
    calls.clear()
    before = opt.s["func_evals"].clone()
    losses = opt.step(closure)
    evals = (opt.s["func_evals"] - before).tolist()
    assert torch.isnan(losses[1]) and torch.isfinite(losses[[0, 2, 3]]).all()
    assert evals[1] == 1 and int(opt.s["n_iter"][1]) == 0
    assert len(calls) == max(evals) < SETTINGS["max_iter"]
