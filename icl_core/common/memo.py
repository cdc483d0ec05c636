"""A function of a frozen config, computed once per config object."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def per_config(fn: Callable[[object], T]) -> Callable[[object], T]:
    """`fn(config)` computed once per config object and kept in its `__dict__`, as
    functools.cached_property keeps `MemberConfig.hash`: for a frozen config's derived keys
    (its step shape, its stacking and cost keys), which a plan asks of each of thousands of
    members several times. A copy or a pickle carries the value, equal for equal fields; a
    `dataclasses.replace` starts afresh."""
    name = f"_per_config_{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def cached(config):
        try:
            return config.__dict__[name]
        except KeyError:
            value = config.__dict__[name] = fn(config)
            return value

    return cached
