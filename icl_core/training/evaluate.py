"""One evaluator: the model (and reference baselines) on an evaluation grid.

Reference predictors on the same prompts, at the final evaluation: the classical baselines
named in `eval.baselines` (OLS, GD, ...) and, for every task, the trivial predictors of
`icl_core.training.trivial` (zero, prompt_mean, ridge, no_retrieval: what a non-learner reaches) and,
for a task with `floor_predictor`, its floor (`icl_core.algorithms.floor`: the best predictor that knows
the task's law, predictor "floor"; not a trivial predictor).

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

from icl_core.algorithms.baselines import Tuned
from icl_core.algorithms.floor import FLOOR
from icl_core.algorithms.registry import BASELINES
from icl_core.common.device import derive_seed, full_float32, generator
from icl_core.models.base import LoopOutputs
from icl_core.spec.config import MemberConfig
from icl_core.tasks import build_task
from icl_core.tasks.base import (
    HasArtifactMetrics,
    HasBaselineErrors,
    HasFloor,
    HasPredictionMetrics,
    Iterates,
)
from icl_core.training import trivial

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


def error_rows(err_PxM, positions, task, test_dist, step, predictor, infer_iter=None,
               metric="mse", loop_iter=None):
    """Rows of per-prompt errors (P, M) at M positions (None: pooled over all tokens)."""
    rows = []
    for stat, values in summarize(err_PxM).items():
        for j, position in enumerate(positions):
            rows.append({
                "metric": metric, "statistic": stat, "value": float(values[j]),
                "position": position, "prompt_len": int(task.prompt_len),
                "test_dist": test_dist, "infer_iter": infer_iter, "predictor": predictor,
                "step": step, "loop_iter": loop_iter,
            })
    return rows


def position_errors(sq_PxMxO: torch.Tensor, task, tokens) -> tuple[torch.Tensor, list]:
    """Per-prompt errors (P, M') and their positions: the mean over outputs per token, and
    over the tokens that share a position (e.g. the chain steps of one chain-of-thought
    example); a task with `pool_tokens` gets one error over all tokens (position None)."""
    if task.pool_tokens:
        return sq_PxMxO.mean((1, 2)).unsqueeze(1), [None]
    err = sq_PxMxO.mean(-1)
    positions = token_positions(task, tokens)
    unique = sorted(set(positions))
    if len(unique) == len(positions):
        return err, positions
    index = torch.tensor([unique.index(p) for p in positions])
    summed = torch.zeros(err.shape[0], len(unique), dtype=err.dtype).index_add_(1, index, err)
    counts = torch.bincount(index, minlength=len(unique)).to(err.dtype)
    return summed / counts, unique


def token_positions(task, tokens) -> list[int]:
    return [int(task.positions[token]) for token in tokens]


def eval_prompts(member: MemberConfig) -> list[tuple[str, object, object]]:
    """(test_dist, task, batch) per evaluation point: `n_prompts` prompts drawn on the CPU in
    float64 from `eval.seed`, so every trial, device and dtype sees the very same prompts."""
    cpu = torch.device("cpu")
    out = []
    for index, (test_dist, task) in enumerate(eval_tasks(member, cpu, torch.float64)):
        gen = generator(cpu, derive_seed(member.eval.seed, "eval", index))
        out.append((test_dist, task, task.sample(member.eval.n_prompts, gen)))
    return out


def predictor(model, device, dtype, chunk: int):
    """(P, T, I) float64 CPU prompts -> (P, T, O) float64 CPU outputs, `chunk` prompts a pass
    (chunks bound memory only), the model reading them in its own dtype on its device."""

    def predict(inputs):
        outs = [model(inputs[i:i + chunk].to(device=device, dtype=dtype))
                for i in range(0, inputs.shape[0], chunk)]
        return torch.cat(outs).to(device="cpu", dtype=torch.float64)

    return predict


@torch.no_grad()
def evaluate(model, member: MemberConfig, device, dtype, step: int, baselines: bool,
             prompts: list | None = None) -> list[dict]:
    """Rows for the model at `step` on every evaluation point (plus baselines if asked).

    The model reads the prompts cast to its own dtype; errors are computed in float64.
    `prompts` (from `eval_prompts(member)`) lets repeated evaluations skip redrawing them.
    A task with `pool_tokens` gets one error per prompt over all its supervised tokens and
    outputs (position null); a task with `iterate` (iterative inference) also gets "w_mse"
    rows per inference iteration in `eval.infer_steps`; a task with `prediction_metrics`
    adds its own rows computed from all predictions at once (e.g. R² pooled over prompts);
    a model with `loop_outputs` (the looped models) also gets rows per loop count in its
    `eval_loop_iters()` (the `loop_iter` column), from one pass of its loops. With `baselines`
    (the final evaluation) the classical baselines of `eval.baselines` and, always, the trivial
    predictors (`trivial_rows`) and the task's floor (`floor_rows`) are measured on the same
    prompts.
    """
    with full_float32(torch.device(device)):  # cuDNN's TF32 is on by default: a conv rounds
        return _evaluate(model, member, device, dtype, step, baselines, prompts)


def _evaluate(model, member: MemberConfig, device, dtype, step: int, baselines: bool,
              prompts: list | None) -> list[dict]:
    cfg = member.eval
    was_training = model.training
    model.eval()
    predict = predictor(model, device, dtype, cfg.chunk)
    rows = []
    for test_dist, task, batch in prompts if prompts is not None else eval_prompts(member):
        rows += prediction_rows("model", predict, task, batch, cfg, test_dist, step)
        if isinstance(model, LoopOutputs):  # looped models: every loop count
            tokens = torch.nonzero(task.mask).flatten().tolist()
            for t, out in loop_predictions(model, batch.inputs, device, dtype, cfg.chunk).items():
                sq = (out - batch.targets)[:, tokens].pow(2)
                rows += error_rows(*position_errors(sq, task, tokens), task, test_dist, step,
                                   "model", loop_iter=t)
        if baselines:
            if isinstance(task, HasArtifactMetrics) and hasattr(model, "artifacts"):
                arrays = {k: v.detach().cpu() for k, v in model.artifacts().items()}
                rows += task_rows(task.artifact_metrics(arrays), task, test_dist, step, "model")
            rows += baseline_rows(task, batch, cfg, test_dist, step)
            rows += trivial_rows(task, batch, cfg, test_dist, step)
            rows += floor_rows(task, batch, cfg, test_dist, step)
    model.train(was_training)
    return rows


def prediction_rows(name: str, predict, task, batch, cfg, test_dist, step) -> list[dict]:
    """The rows of one predictor (the model or a trivial predictor): `predict` maps (P, T, I)
    float64 CPU prompts to (P, T, O) float64 CPU outputs. Per-prompt MSE per position (pooled
    for `pool_tokens`), "w_mse" per inference iteration for a task with `iterate`, and the
    task's `prediction_metrics` rows."""
    tokens = torch.nonzero(task.mask).flatten().tolist()
    pred = predict(batch.inputs)  # (P, T, O) float64
    sq = (pred - batch.targets)[:, tokens].pow(2)  # (P, M, O)
    rows = error_rows(*position_errors(sq, task, tokens), task, test_dist, step, name)
    if isinstance(task, Iterates) and cfg.infer_steps:
        for it, err in task.iterate(predict, batch, cfg.infer_steps, cfg.infer_lr).items():
            rows += error_rows(err.unsqueeze(1), token_positions(task, tokens), task,
                               test_dist, step, name, infer_iter=it, metric="w_mse")
    if isinstance(task, HasPredictionMetrics):
        rows += task_rows(task.prediction_metrics(pred, batch), task, test_dist, step, name)
    return rows


def trivial_rows(task, batch, cfg, test_dist, step) -> list[dict]:
    """Rows of the trivial predictors (`icl_core.training.trivial`: zero, prompt_mean, ridge,
    no_retrieval, those that apply to the task) on the very prompts the model saw, measured
    exactly like the model's rows; computed whenever baselines are, whatever eval.baselines."""
    rows = []
    for name, predict in trivial.predictors(task).items():
        rows += prediction_rows(name, predict, task, batch, cfg, test_dist, step)
    return rows


def floor_rows(task, batch, cfg, test_dist, step) -> list[dict]:
    """Rows of the task's floor (`icl_core.algorithms.floor`, predictor "floor") on the very prompts the
    model saw, measured like the trivial predictors; [] for a task without one."""
    fn = task.floor_predictor() if isinstance(task, HasFloor) else None
    return [] if fn is None else prediction_rows(FLOOR, fn, task, batch, cfg, test_dist, step)


def loop_predictions(model, inputs, device, dtype, chunk: int) -> dict[int, torch.Tensor]:
    """{loop count t: (P, T, O) float64 CPU outputs after t iterations} for every t in the
    model's `eval_loop_iters()`, from one pass of its loops per chunk of prompts."""
    loops = model.eval_loop_iters()
    parts: dict[int, list] = {t: [] for t in loops}
    for i in range(0, inputs.shape[0], chunk):
        outs = model.loop_outputs(inputs[i:i + chunk].to(device=device, dtype=dtype), loops)
        for t, out in outs.items():
            parts[t].append(out.to(device="cpu", dtype=torch.float64))
    return {t: torch.cat(p) for t, p in parts.items()}


def task_rows(items: list[dict], task, test_dist, step, predictor) -> list[dict]:
    """Rows a task computes itself (metric, statistic, value, position[, infer_iter]), e.g.
    R² pooled over prompts: the evaluator adds the shared columns."""
    return [{"prompt_len": int(task.prompt_len), "test_dist": test_dist, "infer_iter": None,
             "predictor": predictor, "step": step, **item} for item in items]


def baseline_rows(task, batch, cfg, test_dist, step) -> list[dict]:
    """OLS / GD on the very prompts the model saw, computed in float32 and in float64.

    "ols_float32" solves the problem in float32 arithmetic; its error against the float64
    target is measured in float64, exactly like the model's. A task with `baseline_errors`
    says itself what its baselines measure (e.g. the error of w rather than of a prediction).
    """
    rows = []
    own = task.baseline_errors if isinstance(task, HasBaselineErrors) else None
    positions = token_positions(task, torch.nonzero(task.mask).flatten().tolist())
    problems = task.regression_problems(batch) if own is None and cfg.baselines else []
    for name in cfg.baselines:
        for precision in (torch.float32, torch.float64):
            label = f"{name}_{str(precision).removeprefix('torch.')}"
            if own is not None:
                for item in own(batch, name, precision, cfg):
                    if isinstance(item, dict):  # a finished row (e.g. R² per position)
                        rows += task_rows([item], task, test_dist, step, label)
                        continue
                    metric, it, err = item
                    rows += error_rows(err.unsqueeze(1), positions[-1:], task, test_dist, step,
                                       label, infer_iter=it, metric=metric)
                continue
            per_iter: dict = {}  # infer_iter -> [(P,) errors per problem]
            fn = BASELINES[name]
            extra = (tuned_steps(task, fn, name, cfg, precision),) if isinstance(fn, Tuned) else ()
            if getattr(fn, "uses_task", False):
                extra = (task,)
            for p in problems:
                cast = cast_problem(p, precision)
                target = batch.targets[:, p.token].mean(-1)  # (P,) float64
                for it, pred in fn(cast, cfg, *extra).items():
                    per_iter.setdefault(it, []).append((pred.double() - target).pow(2))
            for it, errs in per_iter.items():
                err = torch.stack(errs, dim=1)  # (P, M)
                pos = token_positions(task, [p.token for p in problems])
                rows += error_rows(err, pos, task, test_dist, step, label, infer_iter=it)
    return rows


def cast_problem(p, precision):
    return dataclasses.replace(p, X=p.X.to(precision), y=p.y.to(precision),
                               x_query=p.x_query.to(precision))


def tuned_steps(task, fn, name, cfg, precision) -> dict:
    """A tuned baseline's step size per problem token, by its grid search on
    `eval.tune_prompts` held-out prompts of the same task (drawn from eval.seed, apart from
    the test prompts)."""
    gen = generator(torch.device("cpu"), derive_seed(cfg.seed, "tune", name))
    held = task.sample(cfg.tune_prompts, gen)
    problems = [cast_problem(p, precision) for p in task.regression_problems(held)]
    targets = [held.targets[:, p.token].mean(-1) for p in problems]
    return fn.tune(problems, targets, cfg)
