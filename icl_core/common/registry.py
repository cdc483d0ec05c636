"""Components picked by short name: one registry per kind (task, model, mixer, ...).

Each entry pairs a typed config dataclass with a builder, so a name is validated, and its
fields type-checked, before anything is dispatched to a worker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from icl_core.common.validation import ConfigError, build_dataclass, to_plain, unknown


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, tuple[type, Callable]] = {}

    def register(self, name: str, config_cls: type) -> Callable:
        """Decorator: `@TASKS.register("linear_regression", LinearRegressionConfig)`."""

        def wrap(builder: Callable) -> Callable:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._entries[name] = (config_cls, builder)
            return builder

        return wrap

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def config_cls(self, name: Any, path: str) -> type:
        if name not in self._entries:
            raise unknown(path, self.kind, name, self.names())
        return self._entries[name][0]

    def resolve(self, raw: Any, path: str, from_cli: bool = False):
        """A section mapping with a "name" key -> that entry's validated config dataclass."""
        if dataclasses_like(raw):
            raw = to_plain(raw)
        if not isinstance(raw, dict) or "name" not in raw:
            raise ConfigError(
                f"{path}.name: missing; valid choices: {', '.join(self.names())}"
            )
        cls = self.config_cls(raw["name"], f"{path}.name")
        return build_dataclass(cls, raw, path, from_cli)

    def builder(self, name: str) -> Callable:
        """The class (or function) registered under `name`."""
        return self._entries[name][1]

    def build(self, config, **context):
        """Instantiate the component for a resolved config."""
        return self._entries[config.name][1](config, **context)


def dataclasses_like(obj: Any) -> bool:
    import dataclasses

    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)
