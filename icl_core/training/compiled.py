"""train.compile: a member's model, or a stack's vmapped loss, compiled for its own shapes.

torch.compile keeps what it compiled on the function's code object, and a code object holds
at most `torch._dynamo.config.recompile_limit` (8) variants: past that, dynamo runs the
function eagerly, with one warning. Every member's model shares its class's `forward` and every
stack shares `StackedRun._vmapped`, so a trial worker (reused by later trials) that trained a
few shapes ran every later one eagerly: 4 lone shapes, each a training and an evaluation
variant, measured on this CPU. And a second stack of another size was compiled for symbolic
sizes (dynamo's automatic dynamic shapes, which it remembers by the code's file, line and name).

Here each *shape* gets a code object of its own (`own_code`: the function's code, copied once
per key: every weight's name, shape, dtype and device, and the training batch's shape), so
members and stacks of one shape share their compiled variants (a member's training step and its
evaluation calls) and no shape pushes another past the limit; and a compile is for static
shapes (`dynamic=False`), whatever was compiled before it in the process.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable

import torch

_CODES: dict[tuple, types.CodeType] = {}  # (the function's code, the shape key) -> own copy


def shape_key(weights: Iterable[tuple[str, torch.Tensor]], batch: tuple) -> tuple:
    """The shapes a compiled function is specialised on: a model's or a stack's weights (each
    one's name, shape, dtype and device) and its training batch (`batch`: a shape, or a batch
    size)."""
    return (*((name, tuple(w.shape), w.dtype, str(w.device)) for name, w in weights),
            ("batch", tuple(batch)))


def own_code(fn: types.FunctionType, key: tuple) -> types.CodeType:
    """`fn`'s code object for `key`: one copy per (code, key), made at the first call."""
    return _CODES.setdefault((fn.__code__, key), fn.__code__.replace())


def compiled(fn: types.FunctionType, key: tuple) -> Callable:
    """torch.compile(fn) for static shapes, with the dynamo cache of `key`'s code object."""
    own = types.FunctionType(own_code(fn, key), fn.__globals__, fn.__name__, fn.__defaults__,
                             fn.__closure__)
    own.__kwdefaults__ = fn.__kwdefaults__
    return torch.compile(own, dynamic=False)


def compile_model(model: torch.nn.Module, batch_size: int) -> None:
    """nn.Module.compile() with the cache of the model's shape and training batch size: calls of
    `model` (training and evaluation) run compiled; its state_dict's keys (checkpoints) are
    unchanged."""
    call = model._call_impl

    def calls(*args, **kwargs):
        return call(*args, **kwargs)

    # what nn.Module.compile sets, and nn.Module.__call__ reads (dropped by copy and pickle)
    model._compiled_call_impl = compiled(calls, shape_key(model.named_parameters(), (batch_size,)))
