"""Task registry: every data-generating task, by short name."""

from icl_core.common.registry import Registry
from icl_core.tasks.base import Batch, RegressionProblem, Task, masked_mse
from icl_core.tasks.linear_regression import LinearRegression, LinearRegressionConfig
from icl_core.tasks.ls_features import LSFeatures, LSFeaturesConfig
from icl_core.tasks.primitives import Primitives, PrimitivesConfig
from icl_core.tasks.qstr import SparseRetrieval, SparseRetrievalConfig
from icl_core.tasks.relu_teacher import ReLUTeacher, ReLUTeacherConfig
from icl_core.tasks.representation import (
    CoTMLP,
    CoTMLPConfig,
    RepAR,
    RepARConfig,
    RepRegression,
    RepRegressionConfig,
)

TASKS = Registry("task")
TASKS.register("linear_regression", LinearRegressionConfig)(LinearRegression)
TASKS.register("ls_features", LSFeaturesConfig)(LSFeatures)
TASKS.register("primitives", PrimitivesConfig)(Primitives)
TASKS.register("relu_teacher", ReLUTeacherConfig)(ReLUTeacher)
TASKS.register("qstr", SparseRetrievalConfig)(SparseRetrieval)
# AlgoFormer paper: regression / AR(q) with representation, chain-of-thought with MLPs
TASKS.register("rep_regression", RepRegressionConfig)(RepRegression)
TASKS.register("rep_ar", RepARConfig)(RepAR)
TASKS.register("cot_mlp", CoTMLPConfig)(CoTMLP)


def build_task(cfg, task_seed: int, device, dtype) -> Task:
    """Instantiate a resolved task config on a device and dtype."""
    return TASKS.build(cfg, task_seed=task_seed, device=device, dtype=dtype)


__all__ = ["TASKS", "Batch", "RegressionProblem", "Task", "build_task", "masked_mse"]
