"""A search declaration: an Optuna search over a space around a base config, per grid point
(`Search`); run by icl_core.running.search (Ray Tune with Optuna, or plain Optuna)."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from icl_core.spec.config import ConfigError, MemberConfig, resolve_member, set_path
from icl_core.spec.study import (
    Preset,
    apply_preset,
    check_preset_names,
    expand,
    parse_override,
    refuse_non_semantic,
)

KINDS = ("loguniform", "uniform", "int", "choice")


@dataclass
class Search:
    name: str
    base: dict
    space: dict[str, tuple]
    presets: dict[str, Preset]
    grid: dict[str, list] = field(default_factory=dict)  # one search per point
    metric: str = "loss"  # reported by every trial: mean training loss since the last report
    mode: str = "min"
    reduction_factor: int = 3  # ASHA
    doc: str = ""
    figure: str | None = None
    figure_args: dict = field(default_factory=dict)  # keyword arguments of that figure
    cpus_per_trial: int = 1
    preset: str | None = None  # the preset it runs under, set by for_preset (a study attribute)

    def __post_init__(self):
        check_preset_names(f"search {self.name!r}", self.presets)

    def for_preset(self, preset: str) -> Search:
        """This search under `preset`: the preset named, its space entries (Preset.space) in
        place."""
        chosen = self.presets.get(preset)
        if chosen is None or not chosen.space:
            return dataclasses.replace(self, preset=preset)
        unknown = sorted(set(chosen.space) - set(self.space))
        if unknown:
            raise ConfigError(f"presets.{preset}.space.{unknown[0]}: not in the search space; "
                              f"searched: {', '.join(self.space)}")
        return dataclasses.replace(self, space={**self.space, **chosen.space}, preset=preset)

    def points(self, preset: str, sets: dict[str, str] | None = None) -> list[MemberConfig]:
        """The base member of each search (one per grid point), validated with the space."""
        for key in sets or {}:
            if key in self.space:
                raise ConfigError(f"--set {key}: is searched over; remove it from the space")
        base, grid = apply_preset(self.base, self.grid, self.presets, preset, sets)
        points = expand(base, grid) if grid else [resolve_member(base)]
        for point in points:
            self.check_space(point)
        return points

    def num_samples(self, preset: str, override: int | None = None) -> int:
        n = override if override is not None else self.presets[preset].num_samples
        if n is None or n < 1:
            raise ConfigError(f"--num-samples: must be >= 1 for a search, got {n}")
        return n

    def check_space(self, point: MemberConfig) -> None:
        """Every searched key exists, is well-typed, and its extremes give valid configs."""
        raw = point.to_dict()
        for key, spec in self.space.items():
            if not isinstance(spec, tuple) or not spec or spec[0] not in KINDS:
                raise ConfigError(f"space.{key}: expected (kind, ...) with kind in {', '.join(KINDS)}")
            kind = spec[0]
            values = list(spec[1]) if kind == "choice" else [spec[1], spec[2]]
            if kind != "choice" and not spec[1] < spec[2]:
                raise ConfigError(f"space.{key}: low must be < high, got {spec[1:]}")
            if kind == "loguniform" and spec[1] <= 0:
                raise ConfigError(f"space.{key}: loguniform needs low > 0")
            refuse_non_semantic(f"space.{key}", key, values)
            for value in values:
                trial = copy.deepcopy(raw)
                parse_override(trial, key, str(value))  # the key exists and the type fits
                set_path(trial, key, value)
                resolve_member(trial)

    def suggest(self, trial) -> dict[str, Any]:
        """Sample the space with a plain Optuna trial (standalone mode)."""
        out = {}
        for key, spec in self.space.items():
            kind = spec[0]
            if kind == "loguniform":
                out[key] = trial.suggest_float(key, spec[1], spec[2], log=True)
            elif kind == "uniform":
                out[key] = trial.suggest_float(key, spec[1], spec[2])
            elif kind == "int":
                out[key] = trial.suggest_int(key, spec[1], spec[2])
            else:
                out[key] = trial.suggest_categorical(key, list(spec[1]))
        return out
