"""The validation primitives every config section uses: coercion against declared types,
dataclass construction with unknown keys refused, `require`, and `ConfigError`.

The bottom layer of the config code: models and tasks declare their config dataclasses with
these (`require` in their `check`), and `icl_core.spec.config` builds the member config on top, so
neither models nor tasks import `icl_core.spec.config` (which imports their registries).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import types
import typing
from typing import Any, Literal, Protocol, runtime_checkable


class ConfigError(ValueError):
    """An invalid sweep input. The message names the field and the valid choices."""


# integers must fit a signed 64-bit integer (torch seeds, Parquet int64 columns)
INT_LIMIT = 2**63


def shown(name: Any) -> str:
    """repr of a name; ascii() where it has non-ASCII characters, so a confusable letter (a
    Cyrillic 'а' in 'trаnsformer') is visible."""
    if isinstance(name, str) and not name.isascii():
        return f"{ascii(name)} (non-ASCII characters)"
    return repr(name)


def did_you_mean(name: Any, choices) -> str:
    """"did you mean 'width'? " by string similarity (difflib), or ""."""
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, [str(c) for c in choices], n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


def invalid(value: Any, choices) -> str:
    """"'fp16' is not valid; did you mean 'bf16'? valid choices: ..." (a value outside a fixed
    set; the field's path goes before it)."""
    choices = list(choices)
    return (f"{shown(value)} is not valid; {did_you_mean(value, choices)}valid choices: "
            f"{', '.join(map(str, choices))}")


def unknown(path: str, what: str, name: Any, choices, label: str = "valid choices",
            show_name: bool = True) -> ConfigError:
    """The one message for an unknown name: what it is, the closest valid name, all of them,
    e.g. "model.name: unknown model 'transfomer'; did you mean 'transformer'? valid choices:
    ..." (a field's name is the end of its path: show_name=False)."""
    choices = list(choices)
    head = " ".join(p for p in ("unknown", what, shown(name) if show_name else "") if p)
    return ConfigError(f"{path}: {head}; {did_you_mean(name, choices)}{label}: "
                       f"{', '.join(map(str, choices))}")


def _cli_json(text: str, path: str, expected: str) -> Any:
    """JSON from the command line (never evaluated as code); a parse error is one line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: expected {expected} in JSON, got {shown(text)} "
                          f"({exc.msg} at character {exc.pos})") from None


# ----------------------------------------------------------------------------- coercion


def _parse_bool(value: str, path: str) -> bool:
    low = value.strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{path}: expected a boolean (true/false), got {value!r}")


def _coerce_union(value: Any, args: tuple, path: str, from_cli: bool) -> Any:
    if value is None or (from_cli and isinstance(value, str) and value.lower() == "none"):
        if type(None) in args:
            return None
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return coerce(value, arg, path, from_cli)
        except ConfigError as exc:
            errors.append(str(exc))
    raise ConfigError(errors[0] if len(errors) == 1 else f"{path}: {value!r} fits none of {args}")


def _coerce_literal(value: Any, args: tuple, path: str, from_cli: bool) -> Any:
    if from_cli and isinstance(value, str):
        for choice in args:
            if str(choice) == value:
                return choice
    if value in args and type(value) in {type(a) for a in args}:
        return value
    raise ConfigError(f"{path}: {invalid(value, args)}")


def _coerce_sequence(value: Any, args: tuple, path: str, from_cli: bool) -> tuple:
    if from_cli and isinstance(value, str):
        text = value.strip()
        value = (_cli_json(text, path, "a list such as [1, 10]") if text.startswith("[")
                 else [v for v in text.split(",") if v])
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{path}: expected a list, got {value!r}")
    item_type = args[0] if args else Any
    return tuple(coerce(v, item_type, f"{path}[{i}]", from_cli) for i, v in enumerate(value))


def _coerce_mapping(value: Any, path: str, from_cli: bool) -> dict:
    if from_cli and isinstance(value, str):
        value = _cli_json(value, path, 'a mapping such as {"n_points": 40}')
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a mapping, got {value!r}")
    return dict(value)


def _coerce_bool(value: Any, path: str, from_cli: bool) -> bool:
    if isinstance(value, bool):
        return value
    if from_cli and isinstance(value, str):
        return _parse_bool(value, path)
    raise ConfigError(f"{path}: expected a boolean, got {value!r}")


def _parse_int(value: Any, from_cli: bool) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if from_cli and isinstance(value, str):
        try:
            return int(value)  # exact, also beyond float precision
        except ValueError:
            pass
        try:
            number = float(value)  # 1e3
        except ValueError:
            return None
        return int(number) if number.is_integer() else None
    return None


def _coerce_int(value: Any, path: str, from_cli: bool) -> int:
    number = _parse_int(value, from_cli)
    if number is None:
        raise ConfigError(f"{path}: expected an integer, got {shown(value)}")
    if not -INT_LIMIT <= number < INT_LIMIT:
        raise ConfigError(f"{path}: {value} is out of range; integers must lie in "
                          "[-2**63, 2**63)")
    return number


def _coerce_float(value: Any, path: str, from_cli: bool) -> float:
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            raise ConfigError(f"{path}: {value} is too large for a float") from None
    elif from_cli and isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
    if number is None:
        raise ConfigError(f"{path}: expected a number, got {shown(value)}")
    if not math.isfinite(number):
        raise ConfigError(f"{path}: must be a finite number, got {value}")
    return number


def _coerce_str(value: Any, path: str, from_cli: bool) -> str:
    if isinstance(value, str):
        return value
    raise ConfigError(f"{path}: expected a string, got {value!r}")


_SCALARS = {bool: _coerce_bool, int: _coerce_int, float: _coerce_float, str: _coerce_str}


def coerce(value: Any, annotation: Any, path: str, from_cli: bool = False) -> Any:
    """Check `value` against a type annotation; strings from the CLI are parsed, not evaluated."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(value, args, path, from_cli)
    if origin is Literal:
        return _coerce_literal(value, args, path, from_cli)
    if origin in (tuple, list):
        return _coerce_sequence(value, args, path, from_cli)
    if annotation is dict or origin is dict:
        return _coerce_mapping(value, path, from_cli)
    if annotation in (bool, int, float, str):
        return _SCALARS[annotation](value, path, from_cli)
    raise TypeError(f"{path}: unsupported annotation {annotation!r}")


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """Resolved field annotations of a dataclass (cached: planning resolves thousands)."""
    return typing.get_type_hints(cls)


@runtime_checkable
class Checked(Protocol):
    """A config section that checks its own values (`check(path)` raises a ConfigError naming
    the field): build_dataclass calls it once the section is built."""

    def check(self, path: str) -> None: ...


def build_dataclass(cls: type, data: dict, path: str, from_cli: bool = False):
    """Construct `cls` from a mapping: unknown keys rejected, values coerced, `check()` run."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping, got {data!r}")
    hints = type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]  # not the class-level flags (ClassVar)
    extra = sorted(set(data) - set(names))
    if extra:
        raise unknown(f"{path}.{extra[0]}", "field", extra[0], names, "valid fields", False)
    kwargs = {k: coerce(v, hints[k], f"{path}.{k}", from_cli) for k, v in data.items()}
    obj = cls(**kwargs)
    if _checked(cls):
        obj.check(path)
    return obj


@functools.cache
def _checked(cls: type) -> bool:
    """Whether cls's instances are Checked, asked once per class (a Protocol's isinstance
    check walks its attributes each time: planning builds thousands of sections)."""
    return issubclass(cls, Checked)


def require(condition: bool, path: str, message: str) -> None:
    """Raise a ConfigError for `path` unless `condition` holds."""
    if not condition:
        raise ConfigError(f"{path}: {message}")


def require_choice(value: Any, choices, path: str) -> None:
    """Raise require's ConfigError with `invalid`'s message unless `value` is one of `choices`
    (the message, a string-similarity search, is built only for a value that fails: planning
    checks every member of a sweep)."""
    if value not in choices:
        raise ConfigError(f"{path}: {invalid(value, choices)}")


PLAIN = (str, int, float, bool, type(None))


def to_plain(obj: Any) -> Any:
    """Dataclasses -> dicts, tuples -> lists: JSON-ready."""
    # most leaves: no dataclass check (a sweep's plan hashes each of its members)
    if isinstance(obj, PLAIN):
        return obj
    if dataclasses.is_dataclass(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj
