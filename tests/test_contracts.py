"""Plug-in contracts (icl_core/tasks/base.py, icl_core/models/base.py): every registered task and
model satisfies its contract, capabilities are detected by isinstance, and a new task and model
plug in with their own code and a registry line only (docs/developing.md "Adding a model or a task")."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from icl_core.models import MODELS, build_model, count_params, num_params
from icl_core.models.base import (
    CountsParams,
    HasArtifacts,
    HasTrainingLoss,
    LoopOutputs,
    LoopsBlock,
    Model,
    ModelBase,
    ModelConfig,
)
from icl_core.spec.config import MemberConfig, resolve_member
from icl_core.tasks import TASKS, build_task
from icl_core.tasks.base import (
    Batch,
    HasBaselineErrors,
    HasContextProblems,
    HasPredictionMetrics,
    HasRegressionProblems,
    HasTrivialPredictors,
    Iterates,
    SamplesTrainingBatches,
    Task,
    TaskBase,
    TaskConfig,
)
from icl_core.training.evaluate import evaluate
from icl_core.training.flops import step_flops
from icl_core.training.stack_rules import stack_key
from icl_core.training.train import MemberRun

CPU = torch.device("cpu")
# a small valid task for every model, and a model for every task (what the sweeps pair)
TASK_FOR = {"attention_mlp": {"name": "qstr"}, "mha_mlp": {"name": "qstr"},
            "ffn": {"name": "qstr"}, "bigru": {"name": "qstr"},
            "lsa": {"name": "linear_regression", "layout": "all_prefix"},
            "baseconv_gd": {"name": "ls_features", "dim": 3, "n_points": 6}}
MODEL_FOR = {"qstr": {"name": "ffn", "hidden": 8}, "ls_features": {"name": "transformer",
             "width": 16, "depth": 1}}
SMALL = {"transformer": {"width": 16, "depth": 1}, "looped": {"width": 16, "loops": 2,
         "window": 1}, "algoformer": {"width": 16, "loops": 2, "window": 1}}


def member_for(task: dict, model: dict) -> MemberConfig:
    train = {"steps": 0} if not MODELS.config_cls(model["name"], "model").trainable else {}
    return resolve_member({"task": task, "model": model, "train": train, "dtype": "float64"})


@pytest.mark.parametrize("name", TASKS.names())
def test_every_registered_task_satisfies_the_task_contract(name):
    cfg_cls, task_cls = TASKS.config_cls(name, "task"), TASKS.builder(name)
    assert issubclass(cfg_cls, TaskConfig) and issubclass(task_cls, TaskBase)
    assert isinstance(task_cls.causal, bool) and isinstance(task_cls.pool_tokens, bool)
    member = member_for({"name": name}, MODEL_FOR.get(name, {"name": "transformer",
                                                             "width": 16, "depth": 1}))
    assert isinstance(member.task, TaskConfig)
    task = build_task(member.task, 0, CPU, torch.float64)
    assert isinstance(task, Task)
    batch = task.sample(3, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == (3, task.seq_len, task.d_in)
    assert batch.targets.shape == (3, task.seq_len, task.d_out)
    assert task.mask.shape == task.positions.shape == (task.seq_len,)


@pytest.mark.parametrize("name", MODELS.names())
def test_every_registered_model_satisfies_the_model_contract(name):
    cfg_cls, model_cls = MODELS.config_cls(name, "model"), MODELS.builder(name)
    assert issubclass(cfg_cls, ModelConfig) and issubclass(model_cls, ModelBase)
    for flag in ("causal_ok", "whole_prompt", "trainable"):
        assert isinstance(getattr(cfg_cls, flag), bool)
    assert isinstance(model_cls.stackable, bool)
    member = member_for(TASK_FOR.get(name, {"name": "linear_regression"}),
                        {"name": name, **SMALL.get(name, {})})
    assert isinstance(member.model, ModelConfig)
    task = build_task(member.task, 0, CPU, torch.float64)
    model = build_model(member.model, d_in=task.d_in, d_out=task.d_out, max_len=task.seq_len,
                        causal=task.causal, device=CPU, dtype=torch.float64)
    assert isinstance(model, Model)
    x = task.sample(2, torch.Generator().manual_seed(0)).inputs
    assert model(x).shape == (2, task.seq_len, task.d_out)
    assert count_params(member.model, d_in=task.d_in, d_out=task.d_out, max_len=task.seq_len,
                        causal=task.causal) == num_params(model)


def test_capabilities_are_detected_by_isinstance():
    looped = member_for({"name": "linear_regression"}, {"name": "looped", **SMALL["looped"]})
    plain = member_for({"name": "linear_regression"}, {"name": "transformer", **SMALL["transformer"]})
    lsa = member_for({"name": "linear_regression", "layout": "all_prefix"}, {"name": "lsa"})
    built = {m.model.name: build_model(m.model, d_in=5, d_out=1, max_len=41, causal=True,
                                       device=CPU, dtype=torch.float64)
             for m in (looped, plain)}
    built["lsa"] = build_model(lsa.model, d_in=6, d_out=1, max_len=41, causal=True, device=CPU,
                               dtype=torch.float64)
    assert isinstance(built["looped"], LoopOutputs) and isinstance(built["looped"], HasTrainingLoss)
    assert not isinstance(built["transformer"], LoopOutputs | HasTrainingLoss | HasArtifacts)
    assert isinstance(built["lsa"], HasArtifacts) and not isinstance(built["lsa"], CountsParams)
    assert isinstance(built["transformer"], CountsParams)
    assert isinstance(looped.model, LoopsBlock) and not isinstance(plain.model, LoopsBlock)

    def task(cfg):
        return build_task(resolve_member({"task": cfg, "model": {"name": "ffn"}
                                          if cfg["name"] == "qstr" else {"name": "transformer"}}
                                         ).task, 0, CPU, torch.float64)

    lr, relu, feats, qstr = (task({"name": "linear_regression"}), task({"name": "relu_teacher"}),
                             task({"name": "ls_features"}), task({"name": "qstr"}))
    assert isinstance(lr, HasRegressionProblems) and isinstance(lr, HasContextProblems)
    assert not isinstance(lr, SamplesTrainingBatches | Iterates | HasBaselineErrors)
    assert isinstance(relu, SamplesTrainingBatches) and isinstance(relu, HasPredictionMetrics)
    assert isinstance(feats, Iterates) and isinstance(feats, HasBaselineErrors)
    assert isinstance(qstr, HasTrivialPredictors) and qstr.pool_tokens and not lr.pool_tokens


# ---------------------------------------------------------------- a new task and model plug in


@dataclass(frozen=True)
class SumConfig(TaskConfig):
    name: str = "test_sum"
    dim: int = 3
    n_points: int = 4


class SumTask(TaskBase):
    """y_t = sum of x_t's coordinates at every token: the contract and nothing else."""

    causal = True

    def __init__(self, cfg: SumConfig, task_seed: int, device, dtype):
        self.d_in, self.d_out, self.seq_len, self.prompt_len = cfg.dim, 1, cfg.n_points, 0
        self.device, self.dtype = device, dtype
        self.mask = torch.ones(cfg.n_points, dtype=torch.bool, device=device)
        self.positions = torch.zeros(cfg.n_points, dtype=torch.long)

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        x = torch.randn(batch_size, self.seq_len, self.d_in, generator=generator,
                        device=generator.device, dtype=torch.float64).to(self.device, self.dtype)
        return Batch(x, x.sum(-1, keepdim=True), self.mask)


@dataclass(frozen=True)
class TokenLinearConfig(ModelConfig):
    name: str = "test_token_linear"


class TokenLinear(ModelBase):
    def __init__(self, cfg: TokenLinearConfig, d_in: int, d_out: int, max_len: int, causal: bool):
        super().__init__()
        self.read = nn.Linear(d_in, d_out)

    def forward(self, x_BxTxI: torch.Tensor) -> torch.Tensor:
        return self.read(x_BxTxI)


@pytest.fixture
def registered():
    TASKS.register("test_sum", SumConfig)(SumTask)
    MODELS.register("test_token_linear", TokenLinearConfig)(TokenLinear)
    try:
        yield
    finally:
        del TASKS._entries["test_sum"], MODELS._entries["test_token_linear"]


def test_a_new_task_and_model_need_only_their_code_and_a_registry_line(registered):
    member = resolve_member({"task": {"name": "test_sum"}, "model": {"name": "test_token_linear"},
                             "train": {"steps": 4, "report_every": 2}, "dtype": "float64",
                             "eval": {"n_prompts": 8}})
    assert len(member.hash) == 16 and stack_key(member) is not None
    assert step_flops(member) == 6.0 * (3 + 1) * 4 * member.train.batch_size
    run = MemberRun(member)
    run.train_until(4)
    rows = evaluate(run.model, member, run.device, run.dtype, 4, baselines=True)
    predictors = {r["predictor"] for r in rows}
    assert predictors == {"model", "zero"}  # no capabilities: no baselines beyond the trivial
    assert all(r["metric"] == "mse" for r in rows)
    assert dataclasses.asdict(member.model) == {"name": "test_token_linear"}
