"""One evaluator: the model (and reference baselines) on an evaluation grid.

The evaluation grid (`EvalConfig.grid`) is declared apart from the training grid: each point
overrides task fields (longer prompts, other test distributions) without retraining. Every
point is evaluated on the same `n_prompts` test prompts for all trials (drawn from
`eval.seed`), and gives tidy rows with fixed columns:

    metric, value, statistic (mean | median | q25 | q75 over prompts), position, prompt_len,
    test_dist, loop_iter, infer_iter, predictor, step
"""

from __future__ import annotations

import dataclasses

import torch

from icl_core.baselines import BASELINES
from icl_core.config import MemberConfig
from icl_core.device import derive_seed, generator
from icl_core.tasks import build_task

STATISTICS = ("mean", "median", "q25", "q75")


def eval_tasks(member: MemberConfig, device, dtype) -> list[tuple[str, object]]:
    """(test_dist label, task) for every evaluation point, sharing the member's task seed."""
    out = []
    for point in member.eval.grid:
        overrides = {k: v for k, v in point.items() if k != "test_dist"}
        cfg = dataclasses.replace(member.task, **overrides)
        out.append((point.get("test_dist", "train"), build_task(cfg, member.task_seed, device, dtype)))
    return out


def eval_max_len(member: MemberConfig) -> int:
    """Positions the model needs: the longest sequence over training and evaluation tasks."""
    train = build_task(member.task, member.task_seed, torch.device("cpu"), torch.float32)
    lens = [t.seq_len for _, t in eval_tasks(member, torch.device("cpu"), torch.float32)]
    return max([train.seq_len, *lens])


def summarize(err_PxM: torch.Tensor) -> dict[str, torch.Tensor]:
    """Statistics over prompts (dim 0) of per-prompt errors: each (M,)."""
    err = err_PxM.double()
    q = torch.quantile(err, torch.tensor([0.25, 0.5, 0.75], dtype=err.dtype), dim=0)
    return {"mean": err.mean(0), "median": q[1], "q25": q[0], "q75": q[2]}


def error_rows(err_PxM, tokens, task, test_dist, step, predictor, infer_iter=None):
    rows = []
    for stat, values in summarize(err_PxM).items():
        for j, token in enumerate(tokens):
            rows.append({
                "metric": "mse", "statistic": stat, "value": float(values[j]),
                "position": int(task.positions[token]), "prompt_len": int(task.prompt_len),
                "test_dist": test_dist, "infer_iter": infer_iter, "predictor": predictor,
                "step": step,
            })
    return rows


def eval_prompts(member: MemberConfig) -> list[tuple[str, object, object]]:
    """(test_dist, task, batch) per evaluation point: `n_prompts` prompts drawn on the CPU in
    float64 from `eval.seed`, so every trial, device and dtype sees the very same prompts."""
    cpu = torch.device("cpu")
    out = []
    for index, (test_dist, task) in enumerate(eval_tasks(member, cpu, torch.float64)):
        gen = generator(cpu, derive_seed(member.eval.seed, "eval", index))
        out.append((test_dist, task, task.sample(member.eval.n_prompts, gen)))
    return out


@torch.no_grad()
def evaluate(model, member: MemberConfig, device, dtype, step: int, baselines: bool,
             prompts: list | None = None) -> list[dict]:
    """Rows for the model at `step` on every evaluation point (plus baselines if asked).

    The model reads the prompts cast to its own dtype; errors are computed in float64.
    `prompts` (from `eval_prompts(member)`) lets repeated evaluations skip redrawing them.
    """
    cfg = member.eval
    was_training = model.training
    model.eval()
    rows = []
    for test_dist, task, batch in prompts if prompts is not None else eval_prompts(member):
        tokens = torch.nonzero(task.mask).flatten().tolist()
        errs = []
        for start in range(0, cfg.n_prompts, cfg.chunk):  # chunks bound memory only
            inputs = batch.inputs[start:start + cfg.chunk].to(device=device, dtype=dtype)
            pred = model(inputs).to(device="cpu", dtype=torch.float64)
            target = batch.targets[start:start + cfg.chunk]
            errs.append((pred - target)[:, tokens].pow(2).mean(-1))  # (P, M)
        rows += error_rows(torch.cat(errs), tokens, task, test_dist, step, "model")
        if baselines:
            rows += baseline_rows(task, batch, cfg, test_dist, step)
    model.train(was_training)
    return rows


def baseline_rows(task, batch, cfg, test_dist, step) -> list[dict]:
    """OLS / GD on the very prompts the model saw, computed in float32 and in float64.

    "ols_float32" solves the problem in float32 arithmetic; its error against the float64
    target is measured in float64, exactly like the model's.
    """
    rows = []
    problems = task.regression_problems(batch)
    tokens = [p.token for p in problems]
    for name in cfg.baselines:
        for precision in (torch.float32, torch.float64):
            label = f"{name}_{str(precision).removeprefix('torch.')}"
            per_iter: dict = {}  # infer_iter -> [(P,) errors per problem]
            for p in problems:
                cast = dataclasses.replace(
                    p, X=p.X.to(precision), y=p.y.to(precision), x_query=p.x_query.to(precision)
                )
                target = batch.targets[:, p.token].mean(-1)  # (P,) float64
                for it, pred in BASELINES[name](cast, cfg).items():
                    per_iter.setdefault(it, []).append((pred.double() - target).pow(2))
            for it, errs in per_iter.items():
                err = torch.stack(errs, dim=1)  # (P, M)
                rows += error_rows(err, tokens, task, test_dist, step, label, infer_iter=it)
    return rows
