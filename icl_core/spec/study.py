"""Declarative studies: a Study is a base config, a grid and presets (a Sweep, icl.sweep,
holds the studies of one sweep file).

    STUDY = Study(
        name="least_squares",
        figure="depth",                    # analysis figure it regenerates
        base={"task": {...}, "model": {...}, "train": {...}, "eval": {...}},
        grid={"model.depth": [1, 2, 4, 8], "seed": [0, 1, 2]},
        presets={"smoke": Preset(...), "cpu": Preset(...), "gpu": Preset(...),
                 "paper": Preset(...)},
    )
    SWEEP = Sweep("depth_scaling", [STUDY])
    if __name__ == "__main__":
        SWEEP.main()

Every study has the four presets of REQUIRED_PRESETS: smoke (seconds: tests, CI), cpu (minutes
on a 2-core laptop), gpu (one H100-class GPU, <= 20 min a study by the planner's estimate,
icl_core.planning.resources.gpu_seconds) and paper (the paper's own settings). A study whose cpu
preset cannot reach the learned regime may add `reduced`: the smallest change of scale (d, prompt
length, teacher, model, steps) at which every compared model learns on a 2-core machine in <= 2
hours; every verdict drawn from it names that scale.
A preset's `overrides` (dotted keys) change the base config and its `grid` replaces axes of
the study grid. Planning expands the grid, applies CLI `--set` overrides, and validates
every member config before anything is launched.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from icl_core.spec.config import (
    NON_SEMANTIC,
    ConfigError,
    MemberConfig,
    coerce,
    resolve_member,
    set_path,
    type_hints,
    unknown,
)

PRESETS = ("smoke", "cpu", "reduced", "gpu", "paper")  # every name --preset takes
REQUIRED_PRESETS = ("smoke", "cpu", "gpu", "paper")  # every study has these; reduced is optional
MAX_SEEDS = 1000  # --num-samples of a grid: seeds 0..K-1 at every grid point
MAX_MEMBERS = 100_000  # members of one study's grid (the paper presets: ~2,200 in all files)


@dataclass
class Preset:
    overrides: dict[str, Any] = field(default_factory=dict)  # dotted key -> value
    grid: dict[str, list] = field(default_factory=dict)  # dotted key -> values (replaces axes)
    num_samples: int | None = None  # searches: trials per search (grids use the seed axis)
    space: dict[str, tuple] = field(default_factory=dict)  # searches: replaces entries of the
    # search space (e.g. a warmup range within this preset's train.steps)


@dataclass
class Study:
    name: str
    base: dict
    grid: dict[str, list]
    presets: dict[str, Preset]
    figure: str | None = None  # name in analysis.figures.registry.FIGURES
    figure_args: dict = field(default_factory=dict)  # keyword arguments of that figure
    doc: str = ""  # the figure it regenerates, shown by --help and --dry-run
    cpus_per_trial: int = 1
    # what the study measures depends on float32 arithmetic (Liu et al.: errors down to 1e-6):
    # its members train at train.precision=fp32 only, never tf32 or bf16
    measures_precision: bool = False

    def __post_init__(self):
        check_preset_names(f"study {self.name!r}", self.presets)

    def members(
        self, preset: str, sets: dict[str, str] | None = None, num_samples: int | None = None,
        sweeps: dict[str, str] | None = None,
    ) -> list[MemberConfig]:
        """Every member config of this study under a preset, validated."""
        base, grid = self.base_and_grid(preset, sets, num_samples, sweeps)
        members = expand(base, grid)
        faster = sorted({m.train.precision for m in members} - {"fp32"})
        if self.measures_precision and faster:
            raise ConfigError(f"train.precision: study {self.name!r} measures precision (its "
                              f"errors depend on float32 arithmetic); {', '.join(faster)} is "
                              "not allowed here; valid choices: fp32")
        return members

    def base_and_grid(self, preset, sets=None, num_samples=None, sweeps=None) -> tuple[dict, dict]:
        """The preset's base config and grid, with CLI overrides applied (not yet expanded)."""
        base, grid = apply_preset(self.base, self.grid, self.presets, preset, sets, sweeps)
        if num_samples is not None and "seed" in (sweeps or {}):
            raise ConfigError("--sweep seed: conflicts with --num-samples (both make the seed "
                              "axis); give one")
        if num_samples is not None:
            if num_samples < 1:
                raise ConfigError(f"--num-samples: must be >= 1, got {num_samples}")
            if num_samples > MAX_SEEDS:
                raise ConfigError(f"--num-samples: a grid takes at most {MAX_SEEDS} seeds per "
                                  f"point, got {num_samples}")
            grid = seed_axis(grid, num_samples, held=set(sets or ()))
        size = math.prod(len(v) if isinstance(v, (list, tuple)) else 1 for v in grid.values())
        if size > MAX_MEMBERS:
            raise ConfigError(f"grid: {size:,} members (at most {MAX_MEMBERS:,} per study); "
                              "shrink an axis or --num-samples")
        return base, grid


def _zipped_axis(grid: dict, key: str) -> tuple | None:
    """The zipped axis (a tuple of keys) of `grid` that holds `key`, or None."""
    return next((k for k in grid if isinstance(k, tuple) and key in k), None)


def seed_axis(grid: dict, n: int, held: set = frozenset()) -> dict:
    """`grid` with seeds 0..n-1 per setting in place of its own (--num-samples on a grid,
    --seeds of `icl plan` and run_without_ray): a plain seed axis is replaced; a seed zipped
    with other keys is extended where each other key follows the seed one for one (Ahn et
    al.'s (seed, task_seed) = (s, s): a new task per seed) or holds one value (`held`: keys
    a --set gave, e.g. task_seed=7: one task), else refused."""
    zipped = _zipped_axis(grid, "seed")
    if zipped is None:
        return {**grid, "seed": list(range(n))}
    tuples, at = [tuple(t) for t in grid[zipped]], zipped.index("seed")
    follows = [i == at or (zipped[i] not in held and all(t[i] == t[at] for t in tuples))
               for i in range(len(zipped))]
    one = [len({repr(t[i]) for t in tuples}) == 1 for i in range(len(zipped))]
    if not all(f or o for f, o in zip(follows, one, strict=True)):
        others = ", ".join(k for k in zipped if k != "seed")
        raise ConfigError(f"seeds per setting (--num-samples, --seeds): this study's seed goes "
                          f"with {others} (the zipped axis ({', '.join(zipped)}) = {tuples}), "
                          "neither one for one nor at one value; give each member's seeds "
                          "with --set seed=S (and its partners) instead")
    extended = [tuple(s if follows[i] else tuples[0][i] for i in range(len(zipped)))
                for s in range(n)]
    return {k: extended if k == zipped else v for k, v in grid.items()}


def check_preset_names(label: str, presets: dict) -> None:
    """A study's presets: every required one, no name outside PRESETS."""
    missing = [p for p in REQUIRED_PRESETS if p not in presets]
    if missing:
        raise ValueError(f"{label} lacks presets {missing}")
    extra = sorted(set(presets) - set(PRESETS))
    if extra:
        raise ValueError(f"{label}: unknown presets {extra} (valid: {', '.join(PRESETS)})")


def apply_preset(base, grid, presets, preset, sets=None, sweeps=None) -> tuple[dict, dict]:
    """Base config and grid of a preset, then the CLI's `--set` overrides: an override of a
    grid axis collapses it (within a zipped axis, it replaces that component); then its
    `--sweep` axes (key -> "V1,V2,..." or "LO..HI:log:N"), each adding or replacing an axis.
    A value is parsed as `--set` parses it, so a member a declared axis already had keeps its
    config and hash."""
    if preset not in presets:
        raise unknown("--preset", "", preset, presets)
    chosen = presets[preset]
    base = copy.deepcopy(base)
    for key, value in chosen.overrides.items():
        set_path(base, key, value)
    grid = {**grid, **chosen.grid}
    for key, text in (sets or {}).items():
        value = parse_override(base, key, text)
        zipped = _zipped_axis(grid, key)
        if key in grid:
            grid[key] = [value]
        elif zipped is not None:
            i = zipped.index(key)
            grid[zipped] = list(dict.fromkeys(t[:i] + (value,) + t[i + 1:] for t in grid[zipped]))
        else:
            set_path(base, key, value)
    for key, text in (sweeps or {}).items():
        if key in (sets or {}):
            raise ConfigError(f"--sweep {key}: also given to --set; give a key to one of them "
                              "(--set: one value, --sweep: an axis)")
        values = parse_axis(base, key, text)
        refuse_non_semantic(f"--sweep {key}", key, values)
        zipped = _zipped_axis(grid, key)
        if zipped is not None:
            raise ConfigError(f"--sweep {key}: part of the zipped grid axis ({', '.join(zipped)}), "
                              "whose values go together; --set one value of it instead")
        grid[key] = values
    return base, grid


def expand(base: dict, grid: dict) -> list[MemberConfig]:
    """The cartesian product of the grid's axes over `base`, validated and deduplicated.

    An axis is a dotted key with a list of values, or a tuple of keys with a list of tuples
    (zipped axes, e.g. ("train.steps", "train.step_size"): [(1000, 10), (10000, 100)]).
    """
    for key, values in grid.items():
        name = ",".join(key) if isinstance(key, tuple) else key
        if not isinstance(values, (list, tuple)) or len(values) == 0:
            raise ConfigError(f"grid.{name}: must be a non-empty list, got {values!r}")
        if isinstance(key, tuple) and any(
            not isinstance(v, (list, tuple)) or len(v) != len(key) for v in values
        ):
            raise ConfigError(f"grid.{name}: each value must be a tuple of {len(key)} values")
        refuse_non_semantic(f"grid.{name}", key, values)
    keys = list(grid)
    out, seen = [], set()
    for combo in itertools.product(*(grid[k] for k in keys)):
        raw = copy.deepcopy(base)
        for key, value in zip(keys, combo, strict=True):
            if isinstance(key, tuple):
                for sub, v in zip(key, value, strict=True):
                    set_path(raw, sub, v)
            else:
                set_path(raw, key, value)
        member = resolve_member(raw)
        if member.hash not in seen:
            seen.add(member.hash)
            out.append(member)
    return out


def refuse_non_semantic(label: str, key: str | tuple, values: list) -> None:
    """An axis whose values differ only in fields that do not change what a member computes
    (NON_SEMANTIC: left out of the hash, as `device` is) would make those values one member,
    and the grid would keep the first silently: refused, by name. A zipped axis may carry such
    a field beside one that tells its members apart (checkpoints spaced with the steps)."""
    keys = key if isinstance(key, tuple) else (key,)
    rows = [tuple(v) if isinstance(key, tuple) else (v,) for v in values]
    loose = [i for i, k in enumerate(keys) if k in NON_SEMANTIC]
    kept = {repr([r[i] for i in range(len(keys)) if i not in loose]) for r in rows}
    distinct = list(dict.fromkeys(repr(r if isinstance(key, tuple) else r[0]) for r in rows))
    if loose and len(kept) < len(distinct):
        field = keys[loose[0]]
        raise ConfigError(
            f"{label}: {field} does not change what a member computes (it is left out of the "
            f"member's hash, as {', '.join(k for k in NON_SEMANTIC if k != field)} are), so "
            f"values {', '.join(distinct)} that differ only there would be one member run "
            f"once; give it one value (--set {field}=VALUE), or compare them with a benchmark "
            "(docs/performance.md)")


def parse_override(base: dict, key: str, text: str, flag: str = "--set") -> Any:
    """Parse a `--set key=value` string against the declared type of `key`."""
    parts = key.split(".")
    name = text if len(parts) == 2 and parts[1] == "name" else None
    return coerce(text, field_type(base, key, flag, name), f"{flag} {key}", from_cli=True)


def field_type(base: dict, key: str, flag: str = "--set", name: str | None = None) -> Any:
    """The declared type of the dotted `key` (a task's or model's field: of `base`'s task or
    model, or of `name`'s); an unknown key is a ConfigError naming the valid fields."""
    from icl_core.models import MODELS
    from icl_core.tasks import TASKS

    parts = key.split(".")
    hints = type_hints(MemberConfig)
    if parts[0] not in hints:
        raise unknown(f"{flag} {key}", "field", parts[0], sorted(hints), "valid fields", False)
    if len(parts) == 1:
        if parts[0] in ("task", "model", "train", "eval"):
            raise ConfigError(f"{flag} {key}: name a field, e.g. {key}.<field>")
        return hints[parts[0]]
    section, what = parts[0], "field"
    if section in ("task", "model"):
        registry = TASKS if section == "task" else MODELS
        name = name if name is not None else base.get(section, {}).get("name")
        cls = registry.config_cls(name, f"{section}.name")
        what = f"field of {section} {name!r}"
    else:
        cls = hints[section] if section in ("train", "eval") else None
    if cls is None or len(parts) != 2:
        raise ConfigError(f"{flag} {key}: unknown field")
    names = [f.name for f in dataclasses.fields(cls)]  # not the class-level flags (ClassVar)
    if parts[1] not in names:
        raise unknown(f"{flag} {key}", what, parts[1], names, "valid fields", False)
    return type_hints(cls)[parts[1]]


# ----------------------------------------------------------------------------- --sweep axes

SPACINGS = ("log", "lin")  # LO..HI:log:N (geometric), LO..HI:lin:N (evenly spaced)
RANGE = re.compile(r"(?P<lo>[^:]+?)\.\.(?P<hi>[^:]+):(?P<spacing>[^:]*):(?P<n>[^:]*)")
RANGE_FORM = "LO..HI:log:N or LO..HI:lin:N (e.g. 1e3..1e5:log:5)"


def parse_axis(base: dict, key: str, text: str) -> list:
    """The values of a `--sweep KEY=TEXT` axis: "V1,V2,..." (each parsed as --set parses it; a
    JSON list or mapping is one value) or a range LO..HI:log:N / LO..HI:lin:N of N values
    (rounded to integers for an integer field, deduplicated)."""
    annotation = field_type(base, key, "--sweep")  # an unknown key first, naming valid ones
    path = f"--sweep {key}"
    items = split_values(text)
    if not any(items):
        raise ConfigError(f"{path}: no values; expected V1,V2,... or a range {RANGE_FORM}")
    if len(items) == 1 and ".." in items[0]:
        return range_values(items[0], annotation, path)
    if "" in items:
        raise ConfigError(f"{path}: an empty value in {text!r}; expected V1,V2,...")
    return list(dict.fromkeys(parse_override(base, key, item, "--sweep") for item in items))


def split_values(text: str) -> list[str]:
    """`text` split at the commas outside JSON brackets ("[1,2],[3]" is two values), stripped."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char in "[{") - (char in "]}")
        if char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    return [item.strip() for item in [*items, text[start:]]]


def range_values(text: str, annotation: Any, path: str) -> list:
    """LO..HI:spacing:N as N numbers from LO to HI (both kept exactly), of the field's type."""
    match = RANGE.fullmatch(text)
    try:
        lo, hi, n = float(match["lo"]), float(match["hi"]), int(match["n"])
    except (TypeError, ValueError):  # no match (None["lo"]) or a bound / N that is no number
        raise ConfigError(f"{path}: malformed range {text!r}; expected {RANGE_FORM}") from None
    if match["spacing"] not in SPACINGS:
        raise unknown(path, "spacing", match["spacing"], SPACINGS)
    if not 2 <= n <= MAX_MEMBERS:
        raise ConfigError(f"{path}: a range needs N >= 2 values (at most {MAX_MEMBERS:,}), "
                          f"got {n}")
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ConfigError(f"{path}: a range goes from a finite LO up to a larger HI, got {text!r}")
    if match["spacing"] == "log" and lo <= 0:
        raise ConfigError(f"{path}: a :log range needs positive bounds, got {text!r}")
    kind = number_kind(annotation)
    if kind is None:
        raise ConfigError(f"{path}: a range needs a numeric field; give its values as V1,V2,...")
    if match["spacing"] == "log":
        step = (math.log(hi) - math.log(lo)) / (n - 1)
        inner = [math.exp(math.log(lo) + i * step) for i in range(1, n - 1)]
    else:
        inner = [lo + i * (hi - lo) / (n - 1) for i in range(1, n - 1)]
    values = [lo, *(float(f"{v:.12g}") for v in inner), hi]  # 1e-3, not 0.0009999999999999998
    if kind is int:
        values = [round(v) for v in values]
    return list(dict.fromkeys(coerce(v, annotation, path) for v in values))


def number_kind(annotation: Any) -> type | None:
    """float or int when the annotation takes that number (`int | None`: int), else None."""
    args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) or \
        typing.get_origin(annotation) is typing.Union else (annotation,)
    return float if float in args else int if int in args else None
