"""Which members train as one stack (icl_core.training.stacked): the grouping rules, read by
the planner (icl_core.planning) and a trial alike, without the stacked trainer's imports.

`stack_key` says which members may share a stack: online Adam/AdamW training (with counter
draws, one task seed: one task draws the stack's batches) or L-BFGS on each member's own
fixed batch, not epoch training, on a model whose class does not opt out (`stackable =
False`, e.g. `nn.GRU`, which vmap cannot batch). Members whose tasks differ only in a field
that never changes a batch's shapes (`SHAPE_FREE_TASK_FIELDS`: the label noise) stack too,
with generator draws. `shape_key` says which share what train.compile compiled (members and
stacks of one shape: icl_core.common.compiled).
"""

from __future__ import annotations

import json

from icl_core.common.device import resolve_device
from icl_core.common.memo import per_config
from icl_core.spec.config import MemberConfig, to_plain

STACK_MODES = ("auto", "always", "never")  # auto: stack on CUDA devices only
# task fields that change a batch's values, never its shapes: with generator draws each member
# draws from its own task, so members that differ only in these (and their seeds) stack
SHAPE_FREE_TASK_FIELDS = frozenset({"noise_std"})


@per_config
def stack_key(member: MemberConfig) -> str | None:
    """Members with equal keys can be trained as one stack; None: this one trains alone."""
    from icl_core.models import MODELS

    cfg = member.train
    if cfg.dataset_size:
        return None
    if not MODELS.builder(member.model.name).stackable:
        return None
    plain = to_plain(member)
    # the evaluation points set the model's positions (eval_max_len): equal grids, equal shapes
    plain["eval_grid"] = plain["eval"]["grid"]
    # counter draws: one task draws the stack's batches, so its members share the task (and
    # its seed); generator draws: each member's own task, of the same shapes
    fields = ("model", "train", "task", "dtype", "device", "eval_grid") + \
        (("task_seed",) if cfg.draws == "counter" else ())
    if cfg.draws != "counter":
        plain["task"] = _shaped(plain["task"])
    return json.dumps({k: plain[k] for k in fields}, sort_keys=True)


def _shaped(task: dict) -> dict:
    """A task's plain config without the fields that change no batch's shapes."""
    return {k: v for k, v in task.items() if k not in SHAPE_FREE_TASK_FIELDS}


def shape_key(member: MemberConfig, weights, batch: tuple) -> tuple:
    """What a compiled model or stacked loss is specialised on (train.compile; one dynamo
    cache a key, icl_core.common.compiled): `member`'s model config (heads and causality
    change no weight's shape) and task config (its sequence length and widths; not the fields
    that change no shape), a model's or a stack's weights ((name, tensor) pairs: each one's
    name, shape, dtype and device), and the training batch (`batch`: its shape, or its
    size)."""
    plain = to_plain(member)
    return (json.dumps([plain["model"], _shaped(plain["task"])], sort_keys=True),
            *((name, tuple(w.shape), w.dtype, str(w.device)) for name, w in weights),
            ("batch", tuple(batch)))


def check_stack_mode(mode: str) -> None:
    if mode not in STACK_MODES:
        raise ValueError(f"stack mode {mode!r}; valid choices: {', '.join(STACK_MODES)}")


def trial_stack_mode(mode: str, gpu_share: float) -> str:
    """What `mode` means for a trial planned with `gpu_share` of a GPU: always or never."""
    return "always" if mode == "always" or (mode == "auto" and gpu_share > 0) else "never"


def stack_groups(members: list[MemberConfig], mode: str, steps: list[int] | None = None
                 ) -> list[list[int]]:
    """Indices of `members` grouped into stacks (groups of one train alone), in order; `auto`
    stacks members whose device resolves to CUDA. `steps`: the step each resumes at, where a
    checkpoint holds some at others' (e.g. a member a storage fault sent back to 0): a stack
    trains at one step, so members at different steps stack apart."""
    check_stack_mode(mode)
    groups: dict[tuple, list[int]] = {}
    out: list[list[int]] = []
    for i, member in enumerate(members):
        key = None if mode == "never" else stack_key(member)
        if key is None or (mode == "auto" and resolve_device(member.device).type != "cuda"):
            out.append([i])
            continue
        key = (key, steps[i] if steps else 0)
        if key not in groups:
            groups[key] = []
            out.append(groups[key])
        groups[key].append(i)
    return out
