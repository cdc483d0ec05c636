"""Typed, validated configs: the one validation layer every sweep input goes through.

A *member config* (one model trained on one task with one seed) is a nested dict:

    {"task": {"name": "linear_regression", "dim": 5, ...},
     "model": {"name": "transformer", "depth": 4, ...},
     "train": {...}, "eval": {...},
     "seed": 0, "task_seed": 0, "dtype": "float32", "device": "auto"}

`resolve_member` turns such a dict (possibly partial) into dataclasses with every default
filled in, coercing values against the declared field types and rejecting unknown keys,
ill-typed values and impossible settings with a `ConfigError` that names the field and,
where there is a closed set, the valid choices. Values are never evaluated as code.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from icl_core.common.device import PRECISIONS
from icl_core.common.validation import (  # re-exported: the names config users have always imported
    ConfigError,
    build_dataclass,
    coerce,
    invalid,  # noqa: F401  (re-exported, no longer used here)
    require,
    require_choice,
    to_plain,
    type_hints,
    unknown,
)
from icl_core.models.base import ChecksInput, ModelConfig
from icl_core.tasks.base import (
    DrawsByCounter,
    HasBaselineErrors,
    HasRegressionProblems,
    KnowsInputWidth,
    TaskConfig,
)
from icl_core.tasks.draws import DRAWS

# ----------------------------------------------------------------------------- sections


@dataclass(frozen=True)
class TrainConfig:
    """Training settings. Defaults follow Liu et al. (App. B.1) unless noted."""

    optimizer: str = "adam"  # name in icl_core.algorithms.optimizers.OPTIMIZERS (adam, adamw, lbfgs)
    lr: float = 1e-3  # peak learning rate
    betas: tuple[float, ...] = (0.9, 0.999)  # Adam betas (torch default)
    eps: float = 1e-8  # Adam eps; the precision-ls code uses 1e-16 (1e-8 can set a floor)
    weight_decay: float = 0.0  # decoupled for adamw, L2 for adam
    steps: int = 1000  # optimizer steps; each sees a fresh batch (lbfgs: one fixed batch)
    batch_size: int = 64  # prompts per step (lbfgs: the size of the fixed batch)
    warmup_steps: int = 0  # linear warmup from 0 to lr
    schedule: Literal["constant", "step"] = "constant"  # "step" = StepLR
    step_size: int = 10_000  # StepLR: decay every step_size steps (paper: 1e4)
    gamma: float = 0.9  # StepLR decay factor (paper: 0.9)
    grad_clip: float | None = None  # max global grad norm (precision-ls code: 100)
    skip_grad_norm: float | None = None  # skip steps with grad norm > this (code: 1e3; 500 in a row: diverged)
    report_every: int = 100  # steps between tune.report calls (train-loss rows)
    checkpoint_every: int = 1000  # steps between checkpoints (a multiple of report_every)
    artifact_every: int = 0  # record model.artifacts() every k steps (0: never)
    lbfgs_history: int = 600  # L-BFGS history size (Ahn et al. repo: 600)
    lbfgs_max_iter: int = 4  # L-BFGS inner iterations per step (repo: 4)
    # finite-dataset (epoch) training: 0 = online, a fresh batch every step; n > 0 = n
    # prompts drawn once from the seed, reshuffled every epoch of ceil(n / batch_size)
    # steps (`steps` = epochs x that); stop_loss ends training after the first epoch whose
    # mean training loss is below it (Mousavi-Hosseini et al. Fig 2: n = 5e4, 0.05)
    dataset_size: int = 0
    stop_loss: float | None = None
    # torch.compile: pays a compile (~30-40 s on a CPU) for faster steps on a GPU; a member
    # alone compiles its model (as nn.Module.compile), a stack its vmapped loss and backward
    # (icl_core.training.stacked), for static shapes, one cache a shape
    # (common/compiled.py: a worker that meets many shapes compiles each). Caveat: with
    # tf32 or bf16 on CUDA, inductor may fuse non-causal attention past 64 tokens into SDPA,
    # whose backward is not deterministic there (models/mixers.py: sdpa_deterministic); fp32,
    # causal attention and shorter prompts keep the same numbers run to run
    compile: bool = False
    # how a float32 member's training steps compute (evaluation is always at `dtype`): fp32;
    # tf32 (CUDA TF32 matmuls); bf16 (bfloat16 autocast). Only where the study declares that
    # precision is not what it measures (Study.measures_precision: never Liu et al.'s studies)
    precision: str = "fp32"
    # how online training batches are drawn (icl_core/tasks/draws.py): "generator", each
    # member's own torch.Generator (a seed stack of one task config and seed: one draw a
    # member, the task's batch code once on the K·B prompts); "counter", a
    # stateless hash of (data seed, step) for all of a stack's members in one call (tasks
    # that draw by counter; different numbers from "generator", the same alone or stacked)
    draws: str = "generator"
    # a stack's training step captured once as a CUDA graph and replayed (one launch a step:
    # icl_core/training/stacked.py); needs Adam/AdamW online training (either draws: each
    # member's CUDA generator is registered with the graph, torch's graph-safe RNG).
    # The graph's body (a step tensor, an lr tensor, gradients written anew) runs eagerly
    # where capture is not possible: on a CPU, or a task or model whose step is not static
    cuda_graph: bool = False

    def check(self, path: str) -> None:
        require_choice(self.draws, DRAWS, f"{path}.draws")
        require_choice(self.precision, PRECISIONS, f"{path}.precision")
        require(self.lr > 0, f"{path}.lr", f"must be > 0, got {self.lr}")
        require(self.steps >= 0, f"{path}.steps", f"must be >= 0, got {self.steps}")
        require(self.batch_size >= 1, f"{path}.batch_size", f"must be >= 1, got {self.batch_size}")
        require(self.eps > 0, f"{path}.eps", f"must be > 0, got {self.eps}")
        require(self.report_every >= 1, f"{path}.report_every",
                f"must be >= 1, got {self.report_every!r}")
        require(
            self.checkpoint_every >= 1 and self.checkpoint_every % self.report_every == 0,
            f"{path}.checkpoint_every",
            f"must be a positive multiple of report_every={self.report_every}",
        )
        require(self.step_size >= 1, f"{path}.step_size", f"must be >= 1, got {self.step_size!r}")
        require(0 < self.gamma <= 1, f"{path}.gamma", f"must be in (0, 1], got {self.gamma!r}")
        require(self.artifact_every >= 0, f"{path}.artifact_every",
                f"must be >= 0, got {self.artifact_every!r}")
        require(0 <= self.warmup_steps <= max(self.steps, 0), f"{path}.warmup_steps",
                f"must be in [0, steps={self.steps}] (a longer warmup never reaches lr), "
                f"got {self.warmup_steps}")
        require(len(self.betas) == 2, f"{path}.betas", "must hold two numbers")
        require(self.dataset_size >= 0, f"{path}.dataset_size",
                f"must be >= 0 (0: online), got {self.dataset_size!r}")
        require(self.stop_loss is None or self.dataset_size > 0, f"{path}.stop_loss",
                "needs epochs: set train.dataset_size > 0")
        from icl_core.algorithms.optimizers import FIXED_BATCH, OPTIMIZERS

        require(not (self.dataset_size and self.optimizer in FIXED_BATCH), f"{path}.dataset_size",
                f"{self.optimizer} trains on one fixed batch; leave dataset_size at 0")
        drawn_once = f"a fixed batch (optimizer={self.optimizer!r})" \
            if self.optimizer in FIXED_BATCH else \
            f"a finite dataset (dataset_size={self.dataset_size})"
        require(self.draws != "counter" or not (self.dataset_size or self.optimizer in FIXED_BATCH),
                f"{path}.draws", f"'counter' draws online batches; {drawn_once} is drawn once "
                "from the generator: use draws='generator'")

        if self.optimizer not in OPTIMIZERS:
            raise unknown(f"{path}.optimizer", "", self.optimizer, sorted(OPTIMIZERS))
        if self.optimizer == "lbfgs":  # torch's L-BFGS has none of these: never silently unused
            for name, what, unset in (("grad_clip", "gradient clipping", None),
                                      ("skip_grad_norm", "step skipping", None),
                                      ("weight_decay", "weight decay", 0.0)):
                require(getattr(self, name) == unset, f"{path}.{name}",
                        f"L-BFGS has no {what}; leave it at {unset} with optimizer='lbfgs'")
        if self.cuda_graph:
            why = (f"needs online Adam/AdamW training, not {self.optimizer!r}"
                   if self.optimizer not in ("adam", "adamw") else
                   "needs online batches, not a finite dataset "
                   f"(dataset_size={self.dataset_size})" if self.dataset_size else
                   "cannot be combined with compile (two ways to one end): choose one"
                   if self.compile else "")
            require(not why, f"{path}.cuda_graph", why)


@dataclass(frozen=True)
class EvalConfig:
    """The evaluation grid, declared apart from the training grid.

    `grid` holds evaluation points; each is a mapping of task-field overrides plus an optional
    "test_dist" label, e.g. {"test_dist": "long", "n_points": 40}. Every point is evaluated on
    `n_prompts` fresh prompts drawn from `seed`, so all trials see the same test prompts.
    """

    n_prompts: int = 1000  # test prompts per evaluation point
    seed: int = 2024  # seed of the test prompts (drawn on the CPU: same for every trial/device)
    every: int = 0  # also evaluate every `every` training steps (0: only at the end)
    grid: tuple[dict, ...] = ({},)  # evaluation points (task overrides + "test_dist")
    baselines: tuple[str, ...] = ()  # reference predictors on the same prompts: ols, gd
    gd_steps: tuple[int, ...] = (1, 10, 100, 1000, 3000)  # GD iterations reported
    gd_lr: float = 0.2  # GD step size; precision-ls: 0.1 with gradient x2/N = 0.2 here
    # gd_tuned / newton baselines (AlgoFormer Fig 5): step sizes tried per prefix, the best
    # at the largest gd_steps on `tune_prompts` held-out prompts (drawn from eval.seed apart
    # from the test prompts) [paper: "comprehensive grid search", grid not given]
    gd_lr_grid: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0,
                                     1.5)
    # Newton–Schulz: α as a fraction of each problem's bound 2 / λ_max(H)²
    newton_alpha_grid: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.99)
    tune_prompts: int = 256
    chunk: int = 500  # prompts per forward pass (memory bound only)
    infer_steps: tuple[int, ...] = ()  # iterative-inference iterations reported ("w_mse")
    infer_lr: float = 0.2  # η of iterative inference w <- w - η model(prompt with w)
    # end training at the first intermediate evaluation (every `every` steps) whose mean
    # test MSE on the first evaluation point is <= this: the curve up to it is recorded
    # (the online sample-complexity protocol: train until the threshold, up to the cap)
    stop_below: float | None = None

    def check(self, path: str) -> None:
        require(self.n_prompts >= 1, f"{path}.n_prompts", f"must be >= 1, got {self.n_prompts!r}")
        require(self.every >= 0, f"{path}.every", f"must be >= 0, got {self.every!r}")
        require(len(self.grid) >= 1, f"{path}.grid", "must hold at least one evaluation point")
        require(self.chunk >= 1, f"{path}.chunk", f"must be >= 1, got {self.chunk!r}")
        require(all(s >= 0 for s in self.gd_steps), f"{path}.gd_steps",
                f"must be >= 0, got {self.gd_steps!r}")
        require(all(s >= 0 for s in self.infer_steps), f"{path}.infer_steps",
                f"must be >= 0, got {self.infer_steps!r}")
        require(self.infer_lr > 0, f"{path}.infer_lr", f"must be > 0, got {self.infer_lr!r}")
        require(self.tune_prompts >= 1, f"{path}.tune_prompts",
                f"must be >= 1, got {self.tune_prompts!r}")
        for name in ("gd_lr_grid", "newton_alpha_grid"):
            grid = getattr(self, name)
            require(len(grid) >= 1 and all(v > 0 for v in grid), f"{path}.{name}",
                    f"must hold step sizes > 0, got {list(grid)}")
        require(self.stop_below is None or self.every > 0, f"{path}.stop_below",
                "needs intermediate evaluations: set eval.every > 0")
        from icl_core.algorithms.registry import BASELINES

        for name in self.baselines:
            if name not in BASELINES:
                raise unknown(f"{path}.baselines", "", name, sorted(BASELINES))
        labels = [point.get("test_dist", "train") for point in self.grid]
        require(len(set(labels)) == len(labels), f"{path}.grid", f"test_dist labels repeat: {labels}")


DTYPES = ("float32", "float64", "bfloat16")


@dataclass(frozen=True)
class MemberConfig:
    """One model trained on one task with one seed: the unit every row is keyed by."""

    task: TaskConfig  # a task config dataclass (icl_core.tasks.TASKS)
    model: ModelConfig  # a model config dataclass (icl_core.models.MODELS)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    seed: int = 0  # training seed: model init and training batches
    task_seed: int = 0  # task seed: fixed task parameters (teachers, codes, indices)
    dtype: str = "float32"  # float32 | float64 | bfloat16, end to end (errors in float64)
    device: str = "auto"  # auto (cuda if available, else cpu) | cpu | cuda | cuda:N

    def to_dict(self) -> dict:
        return to_plain(self)

    @functools.cached_property
    def hash(self) -> str:  # cached: the config is frozen, and a trial asks often
        return config_hash(self.to_dict(), self.defaults())

    def defaults(self) -> dict:
        """Flattened default values of every field of this config's sections."""
        return dict(_defaults(type(self.task), type(self.model)))


@functools.cache
def _defaults(task: type, model: type) -> dict:
    """MemberConfig.defaults for a task and a model class, built once (a plan hashes every
    member); callers get a shallow copy: its values (lists among them) are read-only."""
    sections = {"task": task(), "model": model(), "train": TrainConfig(), "eval": EvalConfig()}
    top = {f.name: f.default for f in dataclasses.fields(MemberConfig)
           if f.default is not dataclasses.MISSING}
    return flatten({**to_plain(sections), **top})


# Fields that do not change what is computed; excluded from the config hash so a sweep
# started on one machine can be extended on another.
# (train.cuda_graph: a replayed step computes the eager step's arithmetic, as another device
# does; its rows are the same member's, so an evidence window can run them captured)
NON_SEMANTIC = ("device", "train.checkpoint_every", "eval.chunk", "train.cuda_graph")
# Fields added with a fix that changed what their default computes: always in the hash (even at
# their default), so rows written before the fix are never taken for finished by a re-run.
ALWAYS_HASHED = ("model.loop_norm",)  # looped models: the per-loop final LayerNorm


def config_hash(plain: dict, defaults: dict | None = None) -> str:
    """A stable 16-hex-digit hash of a resolved member config.

    Non-semantic fields are dropped, and so are fields at their default value (names always
    stay), so adding a field with a default keeps every existing hash: extend-by-hash works
    across versions. The rule that follows: never change a default; add a field instead.
    A fix that changes what existing configs compute adds a field listed in ALWAYS_HASHED.
    """
    defaults = defaults or {}
    flat = {
        k: v for k, v in flatten(plain).items()
        if k not in NON_SEMANTIC
        and (k.endswith(".name") or k in ALWAYS_HASHED or k not in defaults or defaults[k] != v)
    }
    text = json.dumps(flat, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def flatten(d: dict, prefix: str = "") -> dict:
    """{"model": {"depth": 4}} -> {"model.depth": 4}. Lists and eval-grid dicts stay whole."""
    out = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in ("grid",):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def set_path(d: dict, dotted: str, value: Any) -> None:
    """Set d["a"]["b"] = value for dotted "a.b", creating levels as needed."""
    keys = dotted.split(".")
    for key in keys[:-1]:
        d = d.setdefault(key, {})
        if not isinstance(d, dict):
            raise ConfigError(f"{dotted}: {key!r} is not a section")
    d[keys[-1]] = value


def _check_sections(raw: dict) -> None:
    """A mapping of known top-level fields with a task and a model section."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config: expected a mapping, got {raw!r}")
    top = {f.name for f in dataclasses.fields(MemberConfig)}
    extra = sorted(set(raw) - top)
    if extra:
        raise unknown(extra[0], "field", extra[0], sorted(top), "valid fields", False)
    for section in ("task", "model"):
        if section not in raw:
            raise ConfigError(f"{section}: missing; every config needs a {section} section")


def _check_values(member: MemberConfig) -> None:
    """dtype, seeds, device and the evaluation / artifact periods."""
    train, evaluation = member.train, member.eval
    require_choice(member.dtype, DTYPES, "dtype")
    require(train.precision == "fp32" or member.dtype == "float32", "train.precision",
            f"{train.precision!r} speeds up float32 training; dtype {member.dtype!r} computes as "
            "declared: use train.precision=fp32")
    require(member.seed >= 0, "seed", f"must be >= 0, got {member.seed!r}")
    require(member.task_seed >= 0, "task_seed", f"must be >= 0, got {member.task_seed!r}")
    dev = member.device
    require(
        dev in ("auto", "cpu", "cuda", "mps") or dev.startswith("cuda:"),
        "device",
        f"{dev!r} is not valid; valid choices: auto, cpu, cuda, cuda:N, mps",
    )
    for name, every in (("eval.every", evaluation.every), ("train.artifact_every", train.artifact_every)):
        require(
            every % train.report_every == 0,
            name,
            f"must be a multiple of train.report_every={train.report_every} (0: off), got {every}",
        )


def _check_pairing(member: MemberConfig, task_cls: type) -> None:
    """The task, the model, the training and the baselines fit together."""
    task, model, train, evaluation = member.task, member.model, member.train, member.eval
    if evaluation.baselines and not (issubclass(task_cls, HasRegressionProblems)
                                     or issubclass(task_cls, HasBaselineErrors)):
        raise ConfigError(f"eval.baselines: task {task.name!r} has no classical baselines; "
                          "set eval.baselines=[]")
    valid = task_cls.baseline_names  # a task that says which it defines (None: any)
    for name in evaluation.baselines if valid is not None else ():
        require(name in valid, "eval.baselines", f"{name!r} is not defined for task "
                f"{task.name!r}; valid choices: {', '.join(valid)}")
    if "lsa_optimal" in evaluation.baselines:  # needs the task's covariance Σ
        require(task.name == "linear_regression", "eval.baselines",
                f"'lsa_optimal' needs a task with a covariance Σ (linear_regression), "
                f"not {task.name!r}")
    if task_cls.causal and not model.causal_ok:
        raise ConfigError(f"model.name: {model.name!r} reads the whole sequence, but task "
                          f"{task.name!r} needs a causal model")
    if isinstance(model, ChecksInput) and isinstance(task, KnowsInputWidth):
        model.check_input(task.d_in, "model")
    if task.curriculum:
        require(not train.dataset_size and train.optimizer != "lbfgs", "task.curriculum_*",
                "a training curriculum needs online batches; got "
                f"train.dataset_size={train.dataset_size}, train.optimizer={train.optimizer!r}")
    if train.draws == "counter" and not issubclass(task_cls, DrawsByCounter):
        from icl_core.tasks import TASKS

        able = [n for n in TASKS.names() if issubclass(TASKS.builder(n), DrawsByCounter)]
        raise ConfigError(f"train.draws: task {task.name!r} cannot draw by counter; tasks that "
                          f"can: {', '.join(able)} (or use train.draws='generator')")
    if not model.trainable:
        require(train.steps == 0, "train.steps",
                f"model {model.name!r} has no trainable weights; set train.steps=0")


def with_settings(raw: dict, settings: dict) -> MemberConfig:
    """The member `raw` (a member dict, set in place) with dotted settings such as a search's
    sampled {"train.lr": 0.01} applied, resolved (and hashed) again."""
    for dotted, value in settings.items():
        set_path(raw, dotted, value)
    return resolve_member(raw)


def resolve_member(raw: dict, from_cli: bool = False) -> MemberConfig:
    """Validate a (partial) member-config dict and fill every default."""
    from icl_core.models import MODELS
    from icl_core.tasks import TASKS

    _check_sections(raw)
    task = TASKS.resolve(raw["task"], "task", from_cli)
    model = MODELS.resolve(raw["model"], "model", from_cli)
    train = build_dataclass(TrainConfig, raw.get("train", {}), "train", from_cli)
    evaluation = build_dataclass(EvalConfig, raw.get("eval", {}), "eval", from_cli)
    hints = type_hints(MemberConfig)
    scalars = {
        k: coerce(raw[k], hints[k], k, from_cli)
        for k in ("seed", "task_seed", "dtype", "device")
        if k in raw
    }
    member = MemberConfig(task=task, model=model, train=train, eval=evaluation, **scalars)
    _check_values(member)
    _check_pairing(member, TASKS.builder(task.name))
    # Every evaluation point must describe a valid task.
    for i, point in enumerate(evaluation.grid):
        overrides = {k: v for k, v in point.items() if k != "test_dist"}
        TASKS.resolve({**to_plain(task), **overrides}, f"eval.grid[{i}]", from_cli)
    return member


def graph_refusal(member: MemberConfig) -> str | None:
    """Why a member's step cannot be captured as a CUDA graph though its config allows
    train.cuda_graph (it then steps eagerly, said once): its task's training curriculum, or
    its model's own training loss where that reads the step (the model class's
    `training_loss_reads_step(model_cfg)`, e.g. a loop curriculum; True where it does not say),
    read the step on the host. None: it can be captured."""
    from icl_core.models import MODELS
    from icl_core.models.base import HasTrainingLoss
    from icl_core.tasks import TASKS
    from icl_core.tasks.base import SamplesTrainingBatches

    if issubclass(TASKS.builder(member.task.name), SamplesTrainingBatches):
        return "the task's training curriculum reads the step on the host"
    model = MODELS.builder(member.model.name)
    if issubclass(model, HasTrainingLoss) and \
            getattr(model, "training_loss_reads_step", lambda cfg: True)(member.model):
        return "the model's own training loss reads the step on the host"
    return None


def on_graph_path(member: MemberConfig) -> tuple[MemberConfig, str | None]:
    """The member with its step captured as a CUDA graph (train.cuda_graph; its draws as they
    are, so the same member: the same hash and random stream), and None; or the member as it
    is and why its config refuses that (L-BFGS, a finite dataset, train.compile) or its step
    could not be captured (`graph_refusal`). For `icl plan --gpu-minutes --graph` and
    run_without_ray.py --graph."""
    if member.train.cuda_graph:
        return member, graph_refusal(member)
    try:
        graphed = with_settings(member.to_dict(), {"train.cuda_graph": True})
    except ConfigError as exc:
        return member, str(exc)
    why = graph_refusal(graphed)
    return (member, why) if why else (graphed, None)
