"""L-BFGS for a stack: torch.optim.LBFGS (no line search) run for K members at once.

Ahn et al.'s studies train with L-BFGS on one fixed batch (history 600, 4 iterations a
step). torch's LBFGS keeps one member's history as Python lists, reads a scalar on the host
per stored pair (it passes a 0-dim tensor as `alpha`) and breaks out of its iterations on
host-side tests, so a lone member on a GPU is bound by those reads (about 2 x 600 a walk,
icl_core/planning/cost.py), and its members could not stack.

`StackedLBFGS.step(closure)` is torch's algorithm, iteration for iteration, for K members
whose weights are stacked on a leading axis (icl_core.training.stacked.StackedRun):

- each member's state is its own, on the device: its direction `d`, step `t`, `H_diag`, the
  previous gradient and loss, its iteration and evaluation counts, and its history as a ring
  of `history_size` (s, y, 1/ys) slots with its own length and write position, so a member
  whose curvature test (ys > 1e-10) fails, or whose iterations break early, keeps its own
  history as it would alone;
- every test torch makes on the host (the curvature test, the gradient and change
  tolerances, gtd > -tolerance_change) is made per member on the device and masks that
  member's updates: a member that would have broken out of its iterations keeps its weights
  and state for the rest of the step while the others go on. The host reads one bit twice an
  iteration (whether any member still iterates: before the two-loop recursion and before the
  closure, so a stack whose members have all broken out skips both), not one a stored pair;
- the two-loop recursion walks each member's pairs newest first as torch does, all members
  at once ((K, P) operations, a pair's dot a batched product: about 4 launches a pair for
  both walks and no read, where torch alone makes 8 and 2 reads), the pairs a member does
  not hold weighted 0. It gathers the pairs in age order once an iteration, with 1/ys folded
  into the dots' side (4 copies of the history: icl_core/planning/memory.py counts them);
- the closure computes under the caller's precision (train.precision: bf16 autocast, TF32),
  the optimizer's own arithmetic in the weights' dtype, as torch's `dot`s are alone;
- a member whose loss is not finite (diverged: the driver records it) stops iterating, so
  it does not hold the others in their iterations.

Its sums run in another order than torch's dots, so a member stacked agrees with it alone
to rounding (a test checks float64 to rtol 1e-9 over steps where the ring wraps and members
break early at different iterations). `member_state(k)` / `load_members(states)` convert to
and from torch's own LBFGS state dict, so a stacked checkpoint resumes alone with torch's
optimizer, and a lone one joins a stack.
"""

from __future__ import annotations

import contextlib

import torch

from icl_core.common.device import tf32_flags


@contextlib.contextmanager
def _arithmetic(device_type: str, autocast: bool, dtype: torch.dtype, tf32: tuple):
    """Autocast on `device_type` (at `dtype`) and the TF32 flags (matmul, cudnn) as given,
    restored after."""
    with tf32_flags(tf32), torch.autocast(device_type=device_type, dtype=dtype,
                                          enabled=autocast):
        yield


class StackedLBFGS(torch.optim.Optimizer):
    """torch.optim.LBFGS without a line search, for stacked (K, ...) parameters."""

    def __init__(self, params, lr: float, history_size: int, max_iter: int,
                 max_eval: int | None = None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9):
        max_eval = max_eval if max_eval is not None else max_iter * 5 // 4
        super().__init__(params, {"lr": lr, "max_iter": max_iter, "max_eval": max_eval,
                                  "tolerance_grad": tolerance_grad,
                                  "tolerance_change": tolerance_change,
                                  "history_size": history_size})
        self._params = self.param_groups[0]["params"]
        first = self._params[0]
        self.K = first.shape[0]
        self.P = sum(p[0].numel() for p in self._params)
        self.dtype, self.device = first.dtype, first.device
        self.lanes = torch.arange(self.K, device=self.device)  # a member's row, to index by
        self.reset()

    def reset(self) -> None:
        """Every member before its first step (torch: an empty state)."""
        K, P, H = self.K, self.P, self.param_groups[0]["history_size"]
        z = {"device": self.device, "dtype": self.dtype}
        count = {"device": self.device, "dtype": torch.long}
        self.s = {
            "n_iter": torch.zeros(K, **count), "func_evals": torch.zeros(K, **count),
            "d": torch.zeros(K, P, **z), "t": torch.zeros(K, **z),
            "H_diag": torch.ones(K, **z), "prev_flat_grad": torch.zeros(K, P, **z),
            "prev_loss": torch.zeros(K, device=self.device, dtype=torch.float64),
            # the history, a ring per member: slot `head` is written next, `held` are in use
            "stps": torch.zeros(K, H, P, **z), "dirs": torch.zeros(K, H, P, **z),
            "ro": torch.zeros(K, H, **z),
            "held": torch.zeros(K, **count), "head": torch.zeros(K, **count),
        }
        self.longest = 0  # on the host: no member holds more pairs (a bound, never read back)

    # -- the step -----------------------------------------------------------------------
    def _flat_grad(self) -> torch.Tensor:
        return torch.cat([p.grad.reshape(self.K, -1) if p.grad is not None else
                          p.new_zeros(self.K, p[0].numel()) for p in self._params], 1)

    @torch.no_grad()
    def _add(self, step: torch.Tensor) -> None:
        """Each member's weights plus its (P,) row of `step`."""
        start = 0
        for p in self._params:
            n = p[0].numel()
            p.add_(step[:, start:start + n].view(p.shape))
            start += n

    def step(self, closure):  # type: ignore[override]
        """One step for every member: `closure` zeroes the gradients, computes the members'
        losses (K,), backpropagates their sum and returns the losses; the losses at the step's
        start (K,), as torch returns a member's. The closure runs under the caller's precision
        (train.precision: bf16 autocast, TF32); the optimizer's own arithmetic in the weights'
        dtype, as torch's `dot`s alone are (a batched product would follow autocast or TF32)."""
        dev = self.device.type
        caller = (torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev),
                  (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))

        def evaluate():
            with _arithmetic(dev, *caller):
                return closure()

        with _arithmetic(dev, False, caller[1], (False, False)):
            return self._step(evaluate)

    def _step(self, closure):
        group = self.param_groups[0]
        lr, max_iter, max_eval = float(group["lr"]), group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        H, s = group["history_size"], self.s
        closure = torch.enable_grad()(closure)

        orig_loss = closure().detach()
        loss = orig_loss.to(torch.float64)
        s["func_evals"] += 1
        g = self._flat_grad()
        # torch returns at once where the gradient is within tolerance; a member whose loss is
        # not finite has diverged (recorded so by the driver): it no longer holds the others
        running = ~(g.abs().amax(1) <= tol_grad) & torch.isfinite(orig_loss)
        step = None  # the last iteration's d * t, the pair's s of the next
        with torch.no_grad():
            for n in range(1, max_iter + 1):
                if not bool(running.any()):  # a host read: every member has broken out
                    break
                s["n_iter"] += running
                first = running & (s["n_iter"] == 1)
                self._direction(g, running, first, H, step)
                s["prev_flat_grad"] = torch.where(running[:, None], g, s["prev_flat_grad"])
                s["prev_loss"] = torch.where(running, loss, s["prev_loss"])
                if n == 1:  # a member's first iteration ever is a step's first
                    inv = 1.0 / g.abs().sum(1)
                    t = torch.where(first, torch.where(inv < 1.0, inv, 1.0) * lr, lr)
                else:
                    t = lr
                s["t"] = torch.where(running, t, s["t"])
                gtd = torch.bmm(g.unsqueeze(1), s["d"].unsqueeze(2)).view(self.K)
                running = running & ~(gtd > -tol_change)
                if not bool(running.any()):  # the second read: none to update, none to evaluate
                    break
                step = s["d"] * s["t"][:, None]
                self._add(torch.where(running[:, None], step, 0.0))
                if n == max_iter:
                    break
                new_loss = closure().detach().to(torch.float64)
                g = torch.where(running[:, None], self._flat_grad(), g)
                loss = torch.where(running, new_loss, loss)
                s["func_evals"] += running
                if 1 + n >= max_eval:
                    break
                running = running & ~(g.abs().amax(1) <= tol_grad) \
                    & ~(step.abs().amax(1) <= tol_change) \
                    & ~((loss - s["prev_loss"]).abs() < tol_change)
        return orig_loss

    def _direction(self, g, running, first, H: int, stp: torch.Tensor | None) -> None:
        """The members' new directions where `running`: at a member's first iteration -g
        (its history emptied, H_diag 1), else the pair (s, y) of the last iteration joins its
        history where ys > 1e-10 and the two-loop recursion over its pairs gives d."""
        s = self.s
        y = g - s["prev_flat_grad"]
        if stp is None:  # else the last iteration's step d * t, both unchanged since
            stp = s["d"] * s["t"][:, None]
        lanes = self.lanes
        ys = torch.bmm(y.unsqueeze(1), stp.unsqueeze(2)).view(self.K)
        push = running & ~first & (ys > 1e-10)
        at = s["head"]
        for name, new in (("stps", stp), ("dirs", y)):
            s[name][lanes, at] = torch.where(push[:, None], new, s[name][lanes, at])
        s["ro"][lanes, at] = torch.where(push, 1.0 / ys, s["ro"][lanes, at])
        s["head"] = torch.where(push, (at + 1) % H, at)
        s["held"] = torch.where(first, 0, torch.clamp(s["held"] + push, max=H))
        yy = torch.bmm(y.unsqueeze(1), y.unsqueeze(2)).view(self.K)
        s["H_diag"] = torch.where(first, 1.0, torch.where(push, ys / yy, s["H_diag"]))
        self.longest = min(self.longest + 1, H)
        # the pairs newest first: age a at slot head - 1 - a; those a member lacks weigh 0
        ages = torch.arange(self.longest, device=self.device)
        slots = (s["head"][:, None] - 1 - ages) % H  # (K, longest)
        held = ages[None, :] < s["held"][:, None]
        ro = torch.where(held, s["ro"].gather(1, slots), 0.0)[:, :, None]
        stps, dirs = s["stps"][lanes[:, None], slots], s["dirs"][lanes[:, None], slots]
        # each pair as (K, 1, P) rows, 1/ys folded into the dots' side: a pair's dot is one
        # bmm (the second walk's al - dot one baddbmm) against the (K, P, 1) column view of q
        # or r, its axpy one addcmul_ on the (K, 1, P) row view (in place: both views see it)
        K, P = self.K, self.P
        stps_r, dirs_r = stps.unsqueeze(2).unbind(1), dirs.unsqueeze(2).unbind(1)
        stps_ro, dirs_ro = (stps * ro).unsqueeze(2).unbind(1), (dirs * ro).unsqueeze(2).unbind(1)
        q, al = g.neg(), []
        column, row = q.view(K, P, 1), q.view(K, 1, P)
        for a in range(self.longest):
            al.append(torch.bmm(stps_ro[a], column))
            row.addcmul_(dirs_r[a], al[a], value=-1)
        r = q * s["H_diag"][:, None]
        column, row = r.view(K, P, 1), r.view(K, 1, P)
        for a in reversed(range(self.longest)):
            row.addcmul_(stps_r[a], torch.baddbmm(al[a], dirs_ro[a], column, alpha=-1))
        s["d"] = torch.where(running[:, None], torch.where(first[:, None], g.neg(), r), s["d"])

    # -- torch's own state, per member ----------------------------------------------------
    def member_state(self, k: int) -> dict:
        """Member k's "state" as torch.optim.LBFGS.state_dict() holds it alone."""
        s, group = self.s, self.param_groups[0]
        n_iter, evals = int(s["n_iter"][k]), int(s["func_evals"][k])
        if not evals:
            return {}
        state: dict = {"func_evals": evals, "n_iter": n_iter}
        if n_iter:
            H, held, head = group["history_size"], int(s["held"][k]), int(s["head"][k])
            order = [(head - held + i) % H for i in range(held)]  # oldest first
            state.update({
                "d": s["d"][k].clone(), "t": s["t"][k].clone(),
                "old_dirs": [s["dirs"][k, i].clone() for i in order],
                "old_stps": [s["stps"][k, i].clone() for i in order],
                "ro": [s["ro"][k, i].clone() for i in order],
                "H_diag": s["H_diag"][k].clone(),
                "prev_flat_grad": s["prev_flat_grad"][k].clone(),
                "prev_loss": float(s["prev_loss"][k]),
                "al": [None] * H,
            })
        return {0: state}

    def load_members(self, states: list[dict]) -> None:
        """The members' own torch LBFGS states (state_dict()["state"]), stacked (a member
        with no state yet starts as torch's does)."""
        self.reset()
        s, H = self.s, self.param_groups[0]["history_size"]
        for k, whole in enumerate(states):
            state = whole.get(0, {})
            s["func_evals"][k] = state.get("func_evals", 0)
            s["n_iter"][k] = state.get("n_iter", 0)
            if not state.get("n_iter"):
                continue
            for key in ("d", "prev_flat_grad"):
                s[key][k] = state[key]
            for key in ("t", "H_diag", "prev_loss"):  # torch's Python floats are doubles
                s[key][k] = torch.as_tensor(state[key], dtype=torch.float64)
            held = len(state["old_dirs"])
            if held > H:
                raise ValueError(f"member {k}: {held} L-BFGS pairs, history_size {H}")
            for i in range(held):
                s["dirs"][k, i] = state["old_dirs"][i]
                s["stps"][k, i] = state["old_stps"][i]
                s["ro"][k, i] = state["ro"][i]
            s["held"][k], s["head"][k] = held, held % H
        self.longest = int(s["held"].max())
