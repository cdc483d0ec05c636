"""A training member's evaluations: at its report boundaries (the intermediate evaluation, its
stop rule, the artifacts due) and when it ends (the final evaluation, or why there is none).
A failure here is the member's alone: icl_core.running.trial records it and the stack goes on."""

from __future__ import annotations

import math

from icl_core.training.evaluate import evaluate
from icl_core.training.train import STALL_STEPS, MemberRun


def after_report(member, run: MemberRun, prompts) -> None:
    """At a report boundary of a training member: the intermediate evaluation (and its stop
    rule) and the artifacts due at this step."""
    cfg = member.train
    if member.eval.every and run.step % member.eval.every == 0 and run.step < cfg.steps:
        rows = evaluate(run.model, member, run.device, run.dtype, run.step, False, prompts)
        limit = member.eval.stop_below
        if limit is not None and headline_mse(rows, "mean") <= limit:
            run.stopped_at = run.step  # target reached: the final evaluation is here
        else:
            run.rows += rows
    if cfg.artifact_every and (run.step % cfg.artifact_every == 0 or run.stopped_at is not None):
        run.record_artifacts()


def needs_model(member, run: MemberRun, checkpoint: bool) -> bool:
    """Whether `after_report` or a checkpoint at this step reads the member's weights."""
    cfg = member.train
    return checkpoint or bool(member.eval.every and run.step % member.eval.every == 0) \
        or bool(cfg.artifact_every and run.step % cfg.artifact_every == 0)


def final_rows(member, run: MemberRun, prompts) -> tuple[str, str | None]:
    """The final evaluation of a member that ended training; (status, reason)."""
    if run.diverged_at is not None and run.stalled:
        return "diverged", (f"stalled: every step from step {run.diverged_at} on skipped "
                            f"(gradient norm > skip_grad_norm {member.train.skip_grad_norm:g} "
                            f"for {STALL_STEPS} steps in a row)")
    if run.diverged_at is not None:
        return "diverged", f"non-finite training loss at step {run.diverged_at}"
    run.rows += evaluate(run.model, member, run.device, run.dtype, run.step, True, prompts)
    return "ok", None


def headline_mse(rows: list[dict], statistic: str = "median") -> float:
    """The model's MSE (`statistic` over test prompts) at the last evaluation in `rows`, on
    the first evaluation point (test_dist), at its last position (the query); NaN if none."""
    model = [r for r in rows if r.get("metric") == "mse" and r.get("predictor") == "model"
             and r.get("statistic") == statistic and r.get("infer_iter") is None
             and r.get("loop_iter") is None]
    if not model:
        return math.nan
    last = max(r["step"] for r in model)
    model = [r for r in model if r["step"] == last]
    return [r["value"] for r in model if r["test_dist"] == model[0]["test_dist"]][-1]
