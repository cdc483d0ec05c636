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


@torch.no_grad()
def evaluate(model, member: MemberConfig, device, dtype, step: int, baselines: bool) -> list[dict]:
    """Rows for the model at `step` on every evaluation point (plus baselines if asked)."""
    cfg = member.eval
    was_training = model.training
    model.eval()
    rows = []
    # Test prompts are drawn in float64 whatever the model's dtype, so float64 baselines are
    # exact to float64 precision; the model reads them cast to its own dtype.
    for index, (test_dist, task) in enumerate(eval_tasks(member, device, torch.float64)):
        gen = generator(device, derive_seed(cfg.seed, "eval", index))
        tokens = torch.nonzero(task.mask).flatten().tolist()
        errs, batches = [], []
        for start in range(0, cfg.n_prompts, cfg.chunk):
            batch = task.sample(min(cfg.chunk, cfg.n_prompts - start), gen)
            pred = model(batch.inputs.to(dtype)).to(torch.float64)
            errs.append((pred - batch.targets)[:, tokens].pow(2).mean(-1))  # (P, M)
            batches.append(batch)
        rows += error_rows(torch.cat(errs), tokens, task, test_dist, step, "model")
        if baselines:
            rows += baseline_rows(task, batches, cfg, test_dist, step)
    model.train(was_training)
    return rows


def baseline_rows(task, batches, cfg, test_dist, step) -> list[dict]:
    """OLS / GD on the very prompts the model saw, in float32 and float64."""
    rows = []
    for name in cfg.baselines:
        for precision in (torch.float32, torch.float64):
            per_iter: dict = {}
            for batch in batches:
                problems = task.regression_problems(batch)
                for j, p in enumerate(problems):
                    cast = dataclasses.replace(
                        p, X=p.X.to(precision), y=p.y.to(precision), x_query=p.x_query.to(precision)
                    )
                    target = batch.targets[:, p.token].to(precision).mean(-1)
                    for it, pred in BASELINES[name](cast, cfg).items():
                        per_iter.setdefault(it, {}).setdefault(j, []).append((pred - target).pow(2))
            tokens = [p.token for p in problems]
            label = f"{name}_{str(precision).removeprefix('torch.')}"
            for it, by_token in per_iter.items():
                err = torch.stack([torch.cat(by_token[j]) for j in range(len(tokens))], dim=1)
                rows += error_rows(err, tokens, task, test_dist, step, label, infer_iter=it)
    return rows
