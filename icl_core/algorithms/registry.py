"""The classical baselines by the name `eval.baselines` gives (icl_core.training.evaluate runs
them on the model's own test prompts). Apart from icl_core.algorithms.baselines so that the
closed forms' baseline (lsa_optimal) can join without an import circle."""

from __future__ import annotations

from collections.abc import Callable

from icl_core.algorithms.baselines import gd_baseline, ols_baseline, teacher_net_baseline, tuned
from icl_core.algorithms.closed_forms import lsa_optimal_baseline

# lsa_optimal (Ahn et al.): fn(problem, eval_cfg, task), a task with a covariance `sigma`
# name -> fn(problem, eval_cfg) -> {infer_iter (None if not iterative): predictions (B,)}
# (teacher_net: computed by the relu_teacher task's own `baseline_errors`)
# gd_tuned / newton (AlgoFormer Fig 5): step size per prefix chosen by grid search on held-out
# prompts (fn.tune), then fn(problem, eval_cfg, tuned) at every iteration in eval.gd_steps
BASELINES: dict[str, Callable] = {"ols": ols_baseline, "gd": gd_baseline,
                                  "teacher_net": teacher_net_baseline,
                                  "gd_tuned": tuned("gd_tuned"), "newton": tuned("newton"),
                                  "lsa_optimal": lsa_optimal_baseline}
