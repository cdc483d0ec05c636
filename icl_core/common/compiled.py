"""torch.compile for one shape: a member's model or a stack's vmapped loss (train.compile).

torch.compile keeps what it compiled on the function's code object, and a code object holds
at most `torch._dynamo.config.recompile_limit` (8) variants: past that, dynamo runs the
function eagerly, with one warning. Every member's model shares its class's `forward` and every
stack shares `StackedRun._vmapped`, so a trial worker (reused by later trials) that trained a
few shapes ran every later one eagerly: 4 lone shapes, each a training and an evaluation
variant, measured on this CPU. And a second stack of another size was compiled for symbolic
sizes (dynamo's automatic dynamic shapes, which it remembers by the code's file, line and name).

Here each *shape* gets a code object of its own (`own_code`: the function's code, copied once
per key; the caller's key, icl_core.training.stack_rules.shape_key: the member's model and task
configs, the weights, the training batch), so members of one shape share their compiled
variants (a member's training step and its evaluation calls: one evaluation shape for every
member of the sweep files' reduced and gpu presets), stacks of one shape theirs, and no shape
pushes another past the limit; and a compile is for static shapes (`dynamic=False`), whatever
was compiled before it in the process. The copies live as long as the process, as dynamo's
cache on the shared code did, one per shape.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable

import torch

_CODES: dict[tuple, types.CodeType] = {}  # (the function's code, the shape key) -> own copy


def own_code(fn: types.FunctionType, key: tuple) -> types.CodeType:
    """`fn`'s code object for `key`: one copy per (code, key), made at the first call."""
    if (fn.__code__, key) not in _CODES:
        _CODES[fn.__code__, key] = fn.__code__.replace()
    return _CODES[fn.__code__, key]


def compile_function(fn: types.FunctionType, key: tuple) -> Callable:
    """torch.compile(fn) for static shapes, with the dynamo cache of `key`'s code object."""
    own = types.FunctionType(own_code(fn, key), fn.__globals__, fn.__name__, fn.__defaults__,
                             fn.__closure__)
    own.__kwdefaults__, own.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    return torch.compile(own, dynamic=False)


def compile_model(model: torch.nn.Module, key: tuple) -> None:
    """nn.Module.compile() with the cache of `key`'s code object: calls of `model` (training
    and evaluation) run compiled; its state_dict's keys (checkpoints) are unchanged. The
    compiled call reaches the model by a weak reference (nn.Module.compile's bound method made
    a reference cycle: a dropped member's weights and optimizer state waited for Python's
    cyclic collection); dynamo guards on what it reads there, not on the model's identity, so
    members of one shape share the variants."""
    model_ref = weakref.ref(model)

    def calls(*args, **kwargs):
        return model_ref()._call_impl(*args, **kwargs)

    # what nn.Module.compile sets, and nn.Module.__call__ reads (dropped by copy and pickle)
    model._compiled_call_impl = compile_function(calls, key)
